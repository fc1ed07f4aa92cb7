"""One HDF5 shard of a bindscope dataset: write (atomically) and read.

Layout of a shard (format version 1), N samples and M objects in total::

    attrs: format_version=1, split, first_index, count, run_id (the dataset's config_sha256),
           object_attributes, object_extras (JSON lists: the column order), statistics (JSON)
    images            (N, H, W, 3) uint8, gzip level 1, one chunk per image
    masks             (N, H, W)    uint8, gzip level 1: 0 background, k = object k
    captions          (N,) UTF-8 strings
    specs             (N,) UTF-8 JSON strings (the plan of each sample)
    object_offsets    (N+1,) int64: objects of sample i are rows object_offsets[i]:object_offsets[i+1]
    objects/index, category, category_id, bbox (M, 4) int32, area, size_rank, salient, mention_position
    objects/attributes/<name>  (M,) strings   objects/extras/<name>  (M,) float32
    negative_offsets  (N+1,) int64, and negatives/kind, caption, attribute, objects ("1|2"), original, replacement

The bytes of a shard depend only on its samples: no timestamps are stored, so identical samples give an
identical file (and sha256).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import h5py
import numpy as np

from bindscope.dataset.records import Negative, ObjectRecord, Sample

FORMAT_VERSION = 1
_STR = h5py.string_dtype("utf-8")
_OBJECT_INT_COLUMNS = {"index": np.int16, "category_id": np.int32, "area": np.int32,
                       "size_rank": np.int16, "mention_position": np.int16}
_NEGATIVE_STR_COLUMNS = ("kind", "caption", "attribute", "objects", "original", "replacement")


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _put(group: h5py.Group, name: str, data, dtype=None, **kwargs) -> None:
    # Flushing at once fixes where HDF5 places the data: otherwise placement happens when the dataset object is
    # garbage-collected, which a profiler holding stack frames (e.g. a Dask worker's) can delay, changing the bytes.
    group.create_dataset(name, data=np.asarray(data, dtype=dtype), track_times=False, **kwargs).flush()


def write_shard(path: str | os.PathLike, split: str, first_index: int, samples: list[Sample],
                attribute_names: list[str], extra_names: list[str], statistics: dict | None = None,
                run_id: str = "") -> dict:
    """Write ``samples`` to the shard file ``path`` atomically (temp file, fsync, rename).

    Args:
        path: final file path (``.../shards/<split>-<NNNNN>.h5``); its folder must exist.
        split: split name stored in the shard's attributes.
        first_index: global index of ``samples[0]`` within the split.
        samples: at least one sample; all images share one (H, W) size.
        attribute_names: the object attribute columns (every object must have each key).
        extra_names: the numeric per-object extra columns (missing values are stored as NaN).
        statistics: the generator's additive counts for these samples, kept (as JSON) so a resumed run can
            rebuild the manifest's statistics without regenerating the shard.
        run_id: the dataset's ``config_sha256`` (generator, config and seed), kept so that ``bindscope verify``
            can tell a shard of another run from one of this run.

    Returns:
        ``{"file": "shards/<name>", "first_index", "count", "num_objects", "sha256"}`` for the manifest.

    Raises:
        ValueError: if ``samples`` is empty or images differ in size.
    """
    path = Path(path)
    if not samples:
        raise ValueError("a shard needs at least one sample")
    height, width = samples[0].image.shape[:2]
    if any(s.image.shape != (height, width, 3) or s.mask.shape != (height, width) for s in samples):
        raise ValueError("all images and masks of a shard must share one (H, W) size")
    objects = [o for s in samples for o in s.objects]
    negatives = [n for s in samples for n in s.negatives]
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with h5py.File(tmp, "w", libver="v110", track_order=False) as f:
            f.attrs["format_version"] = FORMAT_VERSION
            f.attrs["split"] = split
            f.attrs["first_index"] = first_index
            f.attrs["count"] = len(samples)
            f.attrs["statistics"] = json.dumps(statistics or {}, sort_keys=True)
            f.attrs["run_id"] = run_id
            f.attrs["object_attributes"] = json.dumps(list(attribute_names))
            f.attrs["object_extras"] = json.dumps(list(extra_names))
            _put(f, "images", np.stack([s.image for s in samples]), np.uint8,
                 chunks=(1, height, width, 3), compression="gzip", compression_opts=1)
            _put(f, "masks", np.stack([s.mask for s in samples]), np.uint8,
                 chunks=(1, height, width), compression="gzip", compression_opts=1)
            _put(f, "captions", [s.caption for s in samples], _STR)
            _put(f, "specs", [json.dumps(s.spec, sort_keys=True) for s in samples], _STR)
            _put(f, "object_offsets", np.cumsum([0] + [len(s.objects) for s in samples]), np.int64)
            g = f.create_group("objects")
            for name, dtype in _OBJECT_INT_COLUMNS.items():
                _put(g, name, [getattr(o, name) for o in objects], dtype)
            _put(g, "category", [o.category for o in objects], _STR)
            _put(g, "bbox", np.array([o.bbox for o in objects], dtype=np.int32).reshape(-1, 4))
            _put(g, "salient", [o.salient for o in objects], bool)
            ga = g.create_group("attributes")
            for name in attribute_names:
                _put(ga, name, [o.attributes[name] for o in objects], _STR)
            ge = g.create_group("extras")
            for name in extra_names:
                _put(ge, name, [o.extras.get(name, np.nan) for o in objects], np.float32)
            _put(f, "negative_offsets", np.cumsum([0] + [len(s.negatives) for s in samples]), np.int64)
            gn = f.create_group("negatives")
            for name in _NEGATIVE_STR_COLUMNS:
                values = ["|".join(map(str, n.objects)) if name == "objects" else getattr(n, name)
                          for n in negatives]
                _put(gn, name, values, _STR)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return {"file": f"shards/{path.name}", "first_index": first_index, "count": len(samples),
            "num_objects": len(objects), "sha256": sha256_file(path)}


def _strings(dataset: h5py.Dataset) -> list[str]:
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in dataset[()]]


class ShardReader:
    """Read one shard. Tables are loaded on open; images and masks are read per sample on demand.

    Raises:
        OSError: the file is not a readable HDF5 file.
        KeyError: an expected HDF5 dataset is missing.
    """

    def __init__(self, path: str | os.PathLike, attribute_names: list[str], extra_names: list[str]):
        self.path = Path(path)
        self._file = h5py.File(self.path, "r")
        f = self._file
        self.count = int(f.attrs["count"])
        self.first_index = int(f.attrs["first_index"])
        self.images = f["images"]
        self.masks = f["masks"]
        self.captions = _strings(f["captions"])
        self._specs = _strings(f["specs"])
        self.object_offsets = f["object_offsets"][()]
        g = f["objects"]
        self._objects = {name: g[name][()] for name in _OBJECT_INT_COLUMNS}
        self._objects["bbox"] = g["bbox"][()]
        self._objects["salient"] = g["salient"][()]
        self._objects["category"] = _strings(g["category"])
        self._attributes = {name: _strings(g["attributes"][name]) for name in attribute_names}
        self._extras = {name: g["extras"][name][()] for name in extra_names}
        self.negative_offsets = f["negative_offsets"][()]
        self._negatives = {name: _strings(f["negatives"][name]) for name in _NEGATIVE_STR_COLUMNS}

    def close(self) -> None:
        self._file.close()

    def objects(self, local: int) -> list[ObjectRecord]:
        """The objects of the shard's ``local``-th sample."""
        c = self._objects
        rows = range(self.object_offsets[local], self.object_offsets[local + 1])
        return [ObjectRecord(
            index=int(c["index"][r]), category=c["category"][r], category_id=int(c["category_id"][r]),
            attributes={n: v[r] for n, v in self._attributes.items()},
            bbox=tuple(int(v) for v in c["bbox"][r]), area=int(c["area"][r]),
            size_rank=int(c["size_rank"][r]), salient=bool(c["salient"][r]),
            mention_position=int(c["mention_position"][r]),
            extras={n: float(v[r]) for n, v in self._extras.items()}) for r in rows]

    def negatives(self, local: int) -> list[Negative]:
        """The negatives of the shard's ``local``-th sample."""
        c = self._negatives
        rows = range(self.negative_offsets[local], self.negative_offsets[local + 1])
        return [Negative(kind=c["kind"][r], caption=c["caption"][r], attribute=c["attribute"][r],
                         objects=tuple(int(x) for x in c["objects"][r].split("|") if x),
                         original=c["original"][r], replacement=c["replacement"][r]) for r in rows]

    def sample(self, local: int) -> Sample:
        """The shard's ``local``-th sample (0 <= local < count)."""
        return Sample(index=self.first_index + local, image=self.images[local], mask=self.masks[local],
                      caption=self.captions[local], objects=self.objects(local),
                      negatives=self.negatives(local), spec=json.loads(self._specs[local]))
