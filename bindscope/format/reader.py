"""Read a bindscope dataset directory as plain Python/numpy objects.

Example::

    ds = Dataset("data/madman")
    test = ds.split("test")
    sample = test[0]            # bindscope.format.records.Sample
    sample.image.shape          # (H, W, 3) uint8
    for shard in test.shards():  # ShardReader objects, in index order (whole-column access)
        shard.captions

    test.read_images([3, 4, 5, 9])  # (4, H, W, 3) uint8: one HDF5 read per run of consecutive samples
    for first, images in test.image_batches(256):  # contiguous (B, H, W, 3) batches, in index order
        ...

    # PyTorch: a map-style torch Dataset of tensors and plain dicts (see bindscope.format.torchdata)
    loader = bindscope.format.torchdata.loader(test.as_torch(), batch_size=256, num_workers=2)

A :class:`Dataset` or :class:`Split` can be pickled (open HDF5 handles are dropped; shards reopen on use).
"""

from __future__ import annotations

import bisect
import os
from pathlib import Path
from typing import Iterator

import numpy as np

from bindscope.errors import DatasetError
from bindscope.format.manifest import load_manifest
from bindscope.format.records import Sample
from bindscope.format.shard import ShardReader, file_key
from bindscope.io.canonical import sha256_file
from bindscope.io.inside import file_inside


ITER_BATCH = 64  # samples read at a time when iterating a split
HOLDINGS = {
    "captions": "samples have captions (a non-empty caption in the split's first shard)",
    "objects": "samples list their objects: category, attributes, mention position (the manifest's object counts)",
    "masks": "objects have instance masks, so visible areas, boxes and size ranks (an object of the split's first "
             "shard has mask pixels; CLEVR and PUG imports have none)",
    "mentions": "captions mention objects (an object of the split's first shard has a mention position)",
    "negatives": "samples store negatives, wrong captions (the split's first shard stores some)",
    "plans": "samples store the plan they were drawn from (the first sample's spec is a non-empty JSON object)",
    "phrases": "samples record their captions with the phrase that mentions each object (the first sample's spec "
               "has captions with phrases: a COCO import)",
    "references": "single-object reference images, one per category (a split named references)",
    "attributes": "captions say object attribute values (the attributes the manifest's config.attributes names)",
}
"""What a dataset can say it holds (:attr:`Dataset.holds`, :attr:`Split.holds`), and how each is found: from the
manifest, or from the records of each split's first shard (a generator writes every shard of a split alike)."""

_HASHED: dict[tuple[int, ...], tuple[int, str]] = {}  # (dev, inode, size, mtime_ns, ctime_ns) -> (pid, sha256)
# file key -> pid of the process whose open checked the file's structure (ShardReader): a forked child (a DataLoader
# worker) reuses that check while the file is unchanged, as it reuses the digest (shard_sha256)
_CHECKED: dict[tuple[int, ...], int] = {}


def shard_sha256(path: Path) -> str:
    """The sha256 of a shard file. A process hashes every file it opens; a forked child (a DataLoader worker)
    reuses the digest its parent computed while the file is unchanged since: same device, inode, size,
    modification and status-change times (any write changes the status-change time, which cannot be set
    back; a replaced file has another inode)."""
    key = file_key(path)
    found = _HASHED.get(key)
    if found is not None and found[0] != os.getpid():
        return found[1]
    digest = sha256_file(path)
    _HASHED[key] = (os.getpid(), digest)
    return digest


def shard_mismatch(reader: ShardReader, entry: dict, split: str, manifest: dict) -> str | None:
    """What in an opened shard contradicts its manifest entry (count, first index, object count) or the
    manifest (split, image size); ``None`` when they agree."""
    attrs = reader.attrs
    if attrs.get("split") not in (None, split):
        return f"attribute split is {attrs.get('split')!r}, the manifest lists it under {split!r}"
    if reader.count != entry["count"]:
        return f"holds {reader.count} samples, the manifest says {entry['count']}"
    if reader.first_index != entry["first_index"]:
        return f"starts at sample {reader.first_index}, the manifest says {entry['first_index']}"
    if reader.num_objects != entry["num_objects"]:
        return f"holds {reader.num_objects} objects, the manifest says {entry['num_objects']}"
    size = list(reader.images.shape[1:3])
    if size != list(manifest["image_size"]):
        return f"images: {size[0]}x{size[1]} pixels, the manifest says {manifest['image_size'][0]}x" \
               f"{manifest['image_size'][1]}"
    return None


class Split:
    """The samples of one split, indexable 0..len-1 and iterable. Shards are opened on first use.

    ``validate`` (default: the dataset's) says how a shard is checked when opened (:class:`ShardReader`).
    ``max_open``: at most this many shards are held open (None: any number); opening one more closes the one used
    least recently, so a reader that visits every shard of a large split holds about ``max_open`` open files and
    their tables (each open HDF5 file takes about 0.6 MB) instead of all of them. A shard closed this way and
    opened again, unchanged since (:func:`~bindscope.format.shard.file_key`), is not hashed and checked again; nor,
    in a forked child (a DataLoader worker), is a shard its parent checked.
    Picklable: open shard handles are not pickled (the copy reopens shards on use).
    """

    def __init__(self, dataset: "Dataset", name: str, validate: bool | None = None, max_open: int | None = None):
        self.dataset = dataset
        self.name = name
        self.validate = dataset.validate if validate is None else validate  # how shards are checked on open
        if max_open is not None and max_open < 1:
            raise ValueError(f"max_open {max_open} is not allowed; use at least 1 (or None: no bound)")
        self.max_open = max_open
        info = dataset.manifest["splits"][name]
        self._entries = info["shards"]
        self._starts = [e["first_index"] for e in self._entries]
        self._readers: dict[int, ShardReader] = {}  # in the order of their last use
        self._checked: dict[int, tuple[int, ...]] = {}  # shard number -> file key of its checked file
        self._len = info["num_samples"]
        self._holds: frozenset[str] | None = None

    def __len__(self) -> int:
        return self._len

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_readers": {}, "_checked": {}, "_holds": None}

    @property
    def num_shards(self) -> int:
        return len(self._entries)

    def shards(self) -> Iterator[ShardReader]:
        """The split's shard readers in index order (each covers samples ``first_index .. first_index+count-1``).

        Raises:
            DatasetError: a shard file is missing or not a readable bindscope shard.
        """
        for number in range(len(self._entries)):
            yield self.shard(number)

    @property
    def holds(self) -> frozenset[str]:
        """What this split's samples hold, of :data:`HOLDINGS` (those found in the manifest and the split's first
        shard; ``references`` and ``attributes`` are the dataset's). Read once.

        Raises:
            DatasetError: the first shard cannot be read (named).
        """
        if self._holds is None:
            found = set(self.dataset.holds_by_manifest)
            if any(entry["num_objects"] for entry in self._entries):
                found.add("objects")
            if self._entries:
                reader = self.shard(0)
                if any(caption.strip() for caption in reader.captions):
                    found.add("captions")
                if reader.num_objects and (reader.object_numbers("mention_position") > 0).any():
                    found.add("mentions")
                if reader.num_objects and (reader.object_numbers("area") > 0).any():
                    found.add("masks")
                if reader.num_negatives:
                    found.add("negatives")
                spec = reader.spec_text(0, check=False)
                if spec.strip() not in ("{}", ""):
                    found.add("plans")
                    captions = reader.spec(0).get("captions") if '"phrases"' in spec else None
                    if isinstance(captions, list) and captions and isinstance(captions[0], dict) \
                            and "phrases" in captions[0]:
                        found.add("phrases")
            self._holds = frozenset(found)
        return self._holds

    def shard_digest(self, number: int) -> str:
        """The sha256 (hex) of the ``number``-th shard file, which the file's bytes were found to match when it was
        opened (it is opened first). Raises DatasetError as :meth:`shard`."""
        self.shard(number)
        return self._entries[number]["sha256"]

    def hash_shards(self) -> None:
        """Hash every shard file of the split that this process has not hashed as it is now (one read of each;
        the files are not opened as HDF5), so that worker processes forked afterwards reuse the digests
        (:func:`shard_sha256`) instead of each reading every file again. Raises DatasetError for a shard path
        outside the dataset folder."""
        for entry in self._entries:
            path = file_inside(self.dataset.path, entry["file"], "shard", DatasetError)
            if path.is_file() and file_key(path) not in _HASHED:  # a missing file is reported where it is opened
                shard_sha256(path)

    def as_torch(self, transform=None, fields=None, max_open_shards: int | None = None):
        """This split as a :class:`torch.utils.data.Dataset` (map-style) of tensors and plain dicts.

        Args:
            transform: optional callable applied to the image as a :class:`PIL.Image.Image` (e.g. a
                torchvision or open_clip preprocess); its result becomes ``item["image"]``.
            fields: the item keys to produce (default: those of the same size in every sample, ``index``,
                ``image``, ``mask``, ``caption``, ``arrays``; the variable-size ``objects``, ``negatives`` and
                ``spec`` on request; see :class:`~bindscope.format.torchdata.TorchSplit`);
                ``("index", "image", "caption")`` skips the masks a loop does not use.
            max_open_shards: shards held open per process (None:
                :data:`~bindscope.format.torchdata.MAX_OPEN_SHARDS`).

        Returns:
            A :class:`bindscope.format.torchdata.TorchSplit` (picklable; each DataLoader worker opens the
            shards itself, at most ``max_open_shards`` at a time). Batch it with
            a plain ``DataLoader(split.as_torch(), batch_size=B)`` (PyTorch's default collate: tensors stacked,
            str and the variable-size fields as lists of B) or with :func:`bindscope.format.torchdata.loader`
            (one HDF5 read per run of consecutive samples, pixels through reused shared memory).
        """
        from bindscope.format.torchdata import MAX_OPEN_SHARDS, TorchSplit

        return TorchSplit(self, transform, fields, max_open_shards or MAX_OPEN_SHARDS)

    @property
    def image_size(self) -> tuple[int, int]:
        """``(H, W)`` of every image of the dataset, pixels."""
        height, width = self.dataset.manifest["image_size"]
        return int(height), int(width)

    def locate(self, index: int) -> tuple[int, int]:
        """``(shard number, local index)`` of sample ``index`` (0 <= index < len). Raises IndexError otherwise."""
        if not 0 <= index < self._len:
            raise IndexError(f"sample {index} out of range for split {self.name!r} of {self._len} samples")
        number = bisect.bisect_right(self._starts, index) - 1
        return number, index - self._starts[number]

    def slices(self, batch_size: int, start: int = 0, stop: int | None = None) -> list[tuple[int, int, int]]:
        """``[(shard number, local start, local stop), ...]``: samples ``start .. stop-1`` in index order as
        contiguous pieces of at most ``batch_size`` samples, none spanning two shards (each one HDF5 read).

        Raises:
            ValueError: ``batch_size`` < 1 or a range outside the split.
        """
        stop = self._len if stop is None else stop
        if batch_size < 1 or not 0 <= start <= stop <= self._len:
            raise ValueError(f"batch_size {batch_size} / range {start}:{stop} not valid for {self._len} samples")
        out = []
        for number, entry in enumerate(self._entries):
            first, count = entry["first_index"], entry["count"]
            lo, hi = max(start, first), min(stop, first + count)
            for a in range(lo, hi, batch_size):
                out.append((number, a - first, min(a + batch_size, hi) - first))
        return out

    def read_images(self, indices) -> np.ndarray:
        """The images of samples ``indices`` (any order, repeats allowed; negative counts from the end) as one
        ``(len(indices), H, W, 3)`` uint8 array in that order. Indices are sorted and grouped into runs of
        consecutive samples of one shard, each read with one HDF5 call.

        Raises:
            IndexError: an index out of range. DatasetError: a missing, changed or unreadable shard.
        """
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        idx = np.where(idx < 0, idx + self._len, idx)
        bad = idx[(idx < 0) | (idx >= self._len)]
        if bad.size:
            raise IndexError(f"sample {int(bad[0])} out of range for split {self.name!r} of {self._len} samples")
        out = np.empty((idx.size, *self.image_size, 3), np.uint8)
        if not idx.size:
            return out
        order = np.argsort(idx, kind="stable")
        ordered = idx[order]
        shard_of = np.searchsorted(np.asarray(self._starts), ordered, side="right") - 1
        cuts = np.flatnonzero((np.diff(ordered) != 1) | (np.diff(shard_of) != 0)) + 1
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), idx.size]):
            number = int(shard_of[lo])
            first = int(ordered[lo]) - self._starts[number]
            positions = order[lo:hi]
            if positions[0] + (hi - lo) - 1 == positions[-1] and np.all(np.diff(positions) == 1):
                p = int(positions[0])  # the run lands in one contiguous block of the output: read into it
                self.shard(number).read_images(first, first + hi - lo, out=out[p:p + hi - lo])
            else:
                out[positions] = self.shard(number).read_images(first, first + hi - lo)
        return out

    def image_batches(self, batch_size: int = 256, workers: int = 0, start: int = 0, stop: int | None = None,
                      check_specs: bool = False) -> Iterator[tuple[int, np.ndarray]]:
        """The images of samples ``start .. stop-1`` in index order, as ``(index of the first, (B, H, W, 3)
        uint8)`` batches of at most ``batch_size`` consecutive samples (:meth:`slices`: one HDF5 read each).

        Args:
            batch_size: samples per batch (>= 1).
            workers: 0 reads here; N > 0 reads (and decompresses) in N worker processes
                (:func:`bindscope.format.torchdata.image_batches`, needs torch), up to 2 batches per worker
                ahead of the consumer, while this process does other work.
            start, stop: the range of samples (default: the whole split).
            check_specs: also parse every spec of each shard read (:meth:`ShardReader.check_specs`), where the
                images are read (in the workers, if any), before its first batch is handed out: a reader that
                uses no spec still refuses a shard whose specs are not JSON.

        Raises:
            ValueError: a bad ``batch_size`` or range. DatasetError: a missing, changed or unreadable shard
            (also when read by a worker, with the same one-line message).
        """
        pieces = self.slices(batch_size, start, stop)
        if workers > 0:
            from bindscope.format.torchdata import image_batches

            yield from image_batches(self, pieces, workers, check_specs)
            return
        for number, lo, hi in pieces:
            reader = self.shard(number)
            if check_specs:
                reader.check_specs()
            yield self._starts[number] + lo, reader.read_images(lo, hi)

    def shard(self, number: int) -> ShardReader:
        """The reader of this split's ``number``-th shard, opened once its bytes match the manifest's sha256
        (one read of the file) and its structure and header match the manifest (and, when the dataset was
        opened with ``validate=True``, every string column and spec: see :class:`ShardReader`).

        Raises:
            DatasetError: the shard file is missing, changed or corrupt, or not a bindscope shard of this
                dataset; the message names the file.
        """
        reader = self._readers.get(number)
        if reader is not None:
            if self.max_open is not None:
                self._readers[number] = self._readers.pop(number)  # now the most recently used
            return reader
        entry = self._entries[number]
        path = file_inside(self.dataset.path, entry["file"], "shard", DatasetError)
        for _ in range(2):
            key = file_key(path)
            own = self._checked.get(number) == key  # checked here and closed by max_open, unchanged since
            if not own and shard_sha256(path) != entry["sha256"]:
                raise DatasetError(f"{path}: sha256 differs from the manifest (changed or corrupt); "
                                   "`bindscope verify` lists the details")
            trusted = own or _CHECKED.get(key, os.getpid()) != os.getpid()  # or by the process this one forked from
            reader = ShardReader(path, self.dataset.attribute_names, self.dataset.extra_names,
                                 validate=self.validate and not own, checked=key if trusted else None)
            if reader.file_key == key:
                break
            reader.close()  # replaced between the look and the open: looked at again
        else:
            raise DatasetError(f"{path}: the file changed while it was being opened; repeat the command")
        problem = None if own else shard_mismatch(reader, entry, self.name, self.dataset.manifest)
        if problem:
            reader.close()
            raise DatasetError(f"{path}: {problem}")
        self._checked[number] = key
        if not trusted:
            _CHECKED[key] = os.getpid()
        self._readers[number] = reader
        if self.max_open is not None and len(self._readers) > self.max_open:
            self._readers.pop(next(iter(self._readers))).close()
        return reader

    def __getitem__(self, index: int) -> Sample:
        number, local = self.locate(index + self._len if index < 0 else index)
        return self.shard(number).sample(local)

    def __iter__(self) -> Iterator[Sample]:
        """The samples in index order, as ``split[i]`` gives them; images, masks and arrays are read
        :data:`ITER_BATCH` at a time and each shard's object and negative tables in one pass."""
        for reader in self.shards():
            objects, negatives = reader.all_objects(), reader.all_negatives()
            for lo in range(0, reader.count, ITER_BATCH):
                hi = min(lo + ITER_BATCH, reader.count)
                images, masks = reader.read_images(lo, hi), reader.read_masks(lo, hi)
                arrays = {name: reader.read_array(name, lo, hi) for name in reader.arrays}
                for j, local in enumerate(range(lo, hi)):
                    yield Sample(index=reader.first_index + local, image=images[j], mask=masks[j],
                                 caption=reader.captions[local], objects=objects[local],
                                 negatives=negatives[local], spec=reader.spec(local),
                                 arrays={name: a[j] for name, a in arrays.items()})

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()
        self._checked.clear()


class Dataset:
    """A finished bindscope dataset directory (see docs/dataset-format.md).

    Args:
        path: the dataset folder.
        validate: how shards are checked when opened (:class:`ShardReader`): True (default) reads and checks
            every string column and spec then; False checks structure and numeric tables, and each string
            column on its first use (for readers that use only some columns, such as the evaluations).

    Attributes:
        path: the folder.
        manifest: the validated manifest dict.
        generator: the name of the generator that made it (the manifest's ``generator.name``); readers ask
            :attr:`holds` what it holds instead of testing this name.
        attribute_names / extra_names: the per-object attribute and numeric extra columns.
        caption_attributes: the attributes whose values the captions say: those of ``attribute_names`` that
            the manifest's ``config.attributes`` names (a list of names, or a mapping from each name to its
            values), in ``attribute_names`` order; ``[]`` when the config names none.
        validate: as given.

    Raises:
        DatasetError: the folder is missing, unfinished, or its manifest is invalid.
    """

    def __init__(self, path: str | os.PathLike, validate: bool = True):
        self.path = Path(path)
        self.validate = validate
        self.manifest = load_manifest(self.path)
        self.generator: str = self.manifest["generator"]["name"]
        self.attribute_names: list[str] = self.manifest["object_attributes"]
        self.extra_names: list[str] = self.manifest["object_extras"]
        said = self.manifest.get("config", {}).get("attributes") or ()
        self.caption_attributes: list[str] = [a for a in self.attribute_names
                                              if isinstance(said, (list, dict)) and a in said]
        self._splits: dict[str, Split] = {}

    @property
    def holds_by_manifest(self) -> frozenset[str]:
        """The :data:`HOLDINGS` the manifest alone shows: ``references`` (a split of that name) and
        ``attributes`` (:attr:`caption_attributes` is not empty)."""
        return frozenset({"references"} if "references" in self.manifest["splits"] else set()) \
            | frozenset({"attributes"} if self.caption_attributes else set())

    @property
    def holds(self) -> frozenset[str]:
        """What the dataset holds, of :data:`HOLDINGS`: what any of its splits holds (:attr:`Split.holds`; each
        split's first shard is opened). Evaluation tasks, training negatives and the lexicon are chosen from
        this, not from the generator's name.

        Raises:
            DatasetError: a first shard cannot be read (named).
        """
        return frozenset().union(*(self.split(name).holds for name in self.split_names))
    @property
    def split_names(self) -> list[str]:
        return list(self.manifest["splits"])

    def split(self, name: str) -> Split:
        """The split ``name``. Raises DatasetError naming the available splits if it does not exist."""
        if name not in self.manifest["splits"]:
            raise DatasetError(f"dataset {str(self.path)!r} has no split {name!r}; "
                               f"it has: {', '.join(self.split_names)}")
        if name not in self._splits:
            self._splits[name] = Split(self, name)
        return self._splits[name]

    def check(self, splits: list[str] | None = None) -> None:
        """Open every shard of ``splits`` (default: all) as :meth:`Split.shard` does, so that a changed,
        corrupt or inconsistent shard is refused before a long job writes anything.

        Raises:
            DatasetError: the first bad shard, named (or an unknown split).
        """
        for name in self.split_names if splits is None else splits:
            for _ in self.split(name).shards():
                pass

    def require_generator(self, *names: str) -> None:
        """Raise DatasetError unless the dataset was made by one of the generators ``names`` (a generator's own
        tools, such as its preview, use this; other readers ask :attr:`holds`)."""
        if self.generator not in names:
            raise DatasetError(f"dataset {str(self.path)!r} was made by {self.generator!r}; "
                               f"this task needs a {' or '.join(names)} dataset")

    def close(self) -> None:
        for split in self._splits.values():
            split.close()

    def __enter__(self) -> "Dataset":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
