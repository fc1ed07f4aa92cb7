"""One HDF5 shard of a bindscope dataset: write (atomically) and read.

Layout of a shard (format version 2), N samples and M objects in total::

    attrs: format_version=2, split, first_index, count, run_id (the dataset's config_sha256),
           object_attributes, object_extras (JSON lists: the column order), statistics (JSON)
    images            (N, H, W, 3) uint8, gzip level 1, one chunk per image
    masks             (N, H, W)    uint8, gzip level 1: 0 background, k = object k
    captions          (N,) UTF-8 strings
    specs             (N,) UTF-8 JSON strings (the plan of each sample)
    object_offsets    (N+1,) int64: objects of sample i are rows object_offsets[i]:object_offsets[i+1]
    objects/index, category, category_id, bbox (M, 4) int32, area, size_rank, salient, mention_position
    objects/attributes/<name>  (M,) strings   objects/extras/<name>  (M,) float32
    negative_offsets  (N+1,) int64, and negatives/kind, caption, attribute, objects ("1|2"), original, replacement
    arrays/<name>     (N, *shape) per-sample numeric arrays (format version 2; absent in version 1 shards)

The bytes of a shard depend only on its samples: no timestamps are stored, so identical samples give an
identical file (and sha256).
"""

from __future__ import annotations

import json
import json.scanner
import os
from pathlib import Path
from typing import Callable

import h5py
import numpy as np

from bindscope.errors import DatasetError
from bindscope.format.records import Negative, ObjectRecord, Sample
from bindscope.io.atomic import atomic_hdf5
from bindscope.io.canonical import sha256_file
from bindscope.io.inside import regular_file

FORMAT_VERSION = 2
# Hard limits checked on open, before anything of that size is read (a few-KB crafted shard can declare
# billions of rows): samples per shard, image side, objects and negatives per sample on average.
MAX_SAMPLES = 1_000_000
MAX_SIDE = 8192
MAX_OBJECTS_PER_SAMPLE = 1024
MAX_NEGATIVES_PER_SAMPLE = 65_536
_STR = h5py.string_dtype("utf-8")
_OBJECT_INT_COLUMNS = {"index": np.int16, "category_id": np.int32, "area": np.int32,
                       "size_rank": np.int16, "mention_position": np.int16}
_NEGATIVE_STR_COLUMNS = ("kind", "caption", "attribute", "objects", "original", "replacement")


def _put(group: h5py.Group, name: str, data, dtype=None, **kwargs) -> None:
    # Flushing at once fixes where HDF5 places the data: otherwise placement happens when the dataset object is
    # garbage-collected, which a profiler holding stack frames (e.g. a Dask worker's) can delay, changing the bytes.
    group.create_dataset(name, data=np.asarray(data, dtype=dtype), track_times=False, **kwargs).flush()


def array_layout(sample: Sample) -> dict[str, dict]:
    """``{name: {"shape": [...], "dtype": "float32"}}`` of a sample's per-sample arrays (the manifest's
    ``sample_arrays``)."""
    return {name: {"shape": list(a.shape), "dtype": str(a.dtype)} for name, a in sorted(sample.arrays.items())}


def write_shard(path: str | os.PathLike, split: str, first_index: int, samples: list[Sample],
                attribute_names: list[str], extra_names: list[str], statistics: dict | None = None,
                run_id: str = "", before_rename: Callable[[], None] | None = None) -> dict:
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
        before_rename: called when the temporary file is complete and fsynced, right before it is renamed
            onto ``path`` (a worker checks there that its run is still alive).

    Returns:
        ``{"file": "shards/<name>", "first_index", "count", "num_objects", "sha256"}`` for the manifest.

    Raises:
        ValueError: if ``samples`` is empty, images differ in size, or the samples' ``arrays`` differ in
            names, shapes or dtypes.
    """
    path = Path(path)
    if not samples:
        raise ValueError("a shard needs at least one sample")
    height, width = samples[0].image.shape[:2]
    if any(s.image.shape != (height, width, 3) or s.mask.shape != (height, width) for s in samples):
        raise ValueError("all images and masks of a shard must share one (H, W) size")
    layout = array_layout(samples[0])
    if any(array_layout(s) != layout for s in samples):
        raise ValueError("all samples of a shard must have the same arrays (names, shapes, dtypes)")
    objects = [o for s in samples for o in s.objects]
    negatives = [n for s in samples for n in s.negatives]
    with atomic_hdf5(path, before_rename, libver="v110", track_order=False) as f:
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
        garr = f.create_group("arrays")
        for name, info in layout.items():
            _put(garr, name, np.stack([s.arrays[name] for s in samples]), info["dtype"],
                 chunks=(1, *info["shape"]) if info["shape"] else None,
                 compression="gzip" if info["shape"] else None, compression_opts=1 if info["shape"] else None)
    return {"file": f"shards/{path.name}", "first_index": first_index, "count": len(samples),
            "num_objects": len(objects), "sha256": sha256_file(path)}


def _strings(dataset: h5py.Dataset, selection=()) -> list[str]:
    values = dataset[selection].tolist()  # h5py gives a string column's values as bytes (UTF-8)
    try:
        return list(map(bytes.decode, values))
    except TypeError:  # a value that is not bytes
        return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values]


_SCAN_JSON = json.scanner.make_scanner(json.JSONDecoder())  # what json.loads runs on a text without outer spaces


def _is_bare_json(text: str) -> bool:
    """Whether ``text`` is one JSON value with nothing around it; False means: ask :func:`json.loads`, which also
    accepts surrounding whitespace (the check costs half of a parse by :func:`json.loads`)."""
    try:
        return _SCAN_JSON(text, 0)[1] == len(text)
    except (StopIteration, ValueError, RecursionError):
        return False


def file_key(path: str | os.PathLike) -> tuple[int, ...]:
    """``(device, inode, size, modification and status-change times in ns)`` of a file: any write changes it
    (the status-change time cannot be set back; a replaced file has another inode)."""
    return _stat_key(os.stat(path))


def opened_file_key(file: h5py.File) -> tuple[int, ...]:
    """:func:`file_key` of the file an open HDF5 file reads (not of whatever its path names now)."""
    return _stat_key(os.fstat(file.id.get_vfd_handle()))


def _stat_key(info: os.stat_result) -> tuple[int, ...]:
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


def _object_ids(text: str) -> tuple[int, ...]:
    """A negative's ``objects`` column value (``"1|2"``) as a tuple of ints."""
    return tuple(int(x) for x in text.split("|") if x)


class ShardReader:
    """Read one shard: its tables as columns, its images and masks per sample or as contiguous slices.

    On open every dataset the layout above names is checked for presence, shape and dtype against the shard's
    own ``count`` and its offset tables (``object_offsets`` and ``negative_offsets`` start at 0, never
    decrease and end at the table length), so a reader never indexes past a table or returns a wrongly typed
    array. Images and masks must be (N, H, W, 3) and (N, H, W) uint8. The numeric tables are loaded then.

    String columns (captions, specs, object categories and attributes, negatives) are read a whole column at a
    time. With ``validate=True`` (the default) every one is read and decoded, and every spec parsed as JSON, on
    open, so no reader starts work on a bad shard. With ``validate=False`` the open reads metadata and numeric
    tables only (a few ms) and each string column is read on its first use, with the same checks and the same
    error then; a reader that uses only some columns (an evaluation needs captions and negatives, not specs)
    reads only those. A few rows of a column not read yet (under a quarter of it: a batch that takes a few samples
    of each shard) are read alone, without the column.

    ``checked``: the :func:`file_key` of the same file when an earlier open checked it (the caller's, or its
    parent process's: ``file_key`` of that reader). When the file opened now still has that key (it was not
    written or replaced since), its structure is not checked again and the numeric tables are read on first use:
    a reopen costs about one HDF5 open. ``validate`` still applies.

    Raises:
        DatasetError: the file is not a readable HDF5 file, or a dataset is missing, unreadable (e.g. a
            corrupt chunk), or of the wrong shape or dtype; the message names the file and the dataset
            (e.g. ``.../train-00000.h5: objects/area: ...``). Reading an image, mask or (unvalidated) string
            column later raises it too.
    """

    def __init__(self, path: str | os.PathLike, attribute_names: list[str], extra_names: list[str],
                 validate: bool = True, checked: tuple[int, ...] | None = None):
        self.path = regular_file(path, "shard", DatasetError)
        try:  # no chunk cache: every reader reads a chunk (one image, one mask) once
            self._file = h5py.File(self.path, "r", rdcc_nbytes=0)
        except (OSError, ValueError) as exc:
            raise DatasetError(f"{self.path}: not a readable HDF5 shard ({_reason(exc)})") from None
        try:
            self.file_key = opened_file_key(self._file)
            trusted = checked is not None and checked == self.file_key
            if not trusted:
                self._closed_world(self._file, "")
            self._load(attribute_names, extra_names, trusted)
            if validate:
                self.validate()
        except BaseException:
            self._file.close()
            raise

    def _fail(self, name: str, problem: str) -> DatasetError:
        return DatasetError(f"{self.path}: {name}: {problem}")

    def _closed_world(self, group: h5py.Group, prefix: str) -> None:
        """Refuse anything that could make a read leave the shard file: a soft or external link, a dataset with
        external storage or a virtual dataset (whose bytes live in other files), and any object but a plain
        group or a dataset of numbers, booleans or strings (no committed types, references or compounds).
        Links are inspected without being followed."""
        for name in group:
            where = prefix + name
            link = group.get(name, getlink=True)
            if isinstance(link, h5py.ExternalLink):
                raise self._fail(where, f"is an HDF5 external link to {link.filename!r}: a shard reads nothing "
                                        "outside its file")
            if not isinstance(link, h5py.HardLink):
                raise self._fail(where, "is an HDF5 soft link: a shard holds plain groups and datasets only")
            item = group.get(name)
            if isinstance(item, h5py.Group):
                self._closed_world(item, where + "/")
            elif not isinstance(item, h5py.Dataset):
                raise self._fail(where, "is neither a group nor a dataset")
            elif item.is_virtual:
                raise self._fail(where, "is an HDF5 virtual dataset: a shard reads nothing outside its file")
            elif item.external:
                raise self._fail(where, f"has external storage in {item.external[0][0]!r}: a shard reads "
                                        "nothing outside its file")
            elif item.dtype.kind not in "biuf" and h5py.check_string_dtype(item.dtype) is None:
                raise self._fail(where, f"has dtype {item.dtype}: a shard holds numbers, booleans and strings")

    def _bound(self, name: str, value: int, limit: int, what: str) -> None:
        """Refuse a declared size above ``limit`` before anything of that size is allocated."""
        if value > limit:
            raise self._fail(name, f"declares {value:,} {what}, more than the {limit:,} a shard may hold")

    def _dataset(self, name: str, dtype_kind: str, shape: tuple) -> h5py.Dataset:
        """The dataset ``name`` after checking its dtype kind (numpy ``kind`` letters, ``"S"`` = strings) and
        shape (``None`` entries match any length)."""
        try:
            dataset = self._file[name]
        except (KeyError, OSError, ValueError):
            raise self._fail(name, "missing") from None
        if not isinstance(dataset, h5py.Dataset):
            raise self._fail(name, "is a group, not a dataset")
        kind = "S" if h5py.check_string_dtype(dataset.dtype) is not None else dataset.dtype.kind
        if kind not in dtype_kind:
            raise self._fail(name, f"has dtype {dataset.dtype}, expected {_KIND_NAMES[dtype_kind]}")
        if len(dataset.shape) != len(shape) or any(e is not None and e != g for e, g in zip(shape, dataset.shape)):
            expected = "(" + ", ".join("any" if e is None else str(e) for e in shape) + ")"
            raise self._fail(name, f"has shape {dataset.shape}, expected {expected}")
        return dataset

    def _read(self, name: str, dtype_kind: str, shape: tuple):
        dataset = self._dataset(name, dtype_kind, shape)
        try:
            return _strings(dataset) if dtype_kind == "S" else dataset[()]
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise self._fail(name, f"cannot be read ({_reason(exc)})") from None

    def _offsets(self, name: str, count: int, rows_name: str) -> tuple[np.ndarray, int]:
        offsets = self._read(name, "iu", (count + 1,)).astype(np.int64)
        if offsets[0] != 0 or np.any(np.diff(offsets) < 0):
            raise self._fail(name, "must start at 0 and never decrease")
        return offsets, int(offsets[-1])

    def _load(self, attribute_names: list[str], extra_names: list[str], trusted: bool) -> None:
        f = self._file
        try:
            self.count = int(f.attrs["count"])
            self.first_index = int(f.attrs["first_index"])
            self._attrs = None if trusted else self._read_attrs()
        except (KeyError, OSError, ValueError, TypeError) as exc:
            raise self._fail("attributes", f"count/first_index missing or not integers ({_reason(exc)})") from None
        if self.count < 1 or self.first_index < 0:
            raise self._fail("attributes", f"count {self.count} / first_index {self.first_index} out of range")
        self._bound("attributes", self.count, MAX_SAMPLES, "samples")
        n = self.count
        if trusted:
            self.images, self.masks = f["images"], f["masks"]
        else:
            self.images = self._dataset("images", "u", (n, None, None, 3))
            height, width = self.images.shape[1:3]
            self._bound("images", max(height, width), MAX_SIDE, "pixels per side")
            self.masks = self._dataset("masks", "u", (n, height, width))
            if self.images.dtype != np.uint8 or self.masks.dtype != np.uint8:
                raise self._fail("images" if self.images.dtype != np.uint8 else "masks", "must be uint8")
        self.object_offsets, m = self._offsets("object_offsets", n, "objects")
        self._bound("object_offsets", m, n * MAX_OBJECTS_PER_SAMPLE, "objects")
        self.negative_offsets, k = self._offsets("negative_offsets", n, "negatives")
        self._bound("negative_offsets", k, n * MAX_NEGATIVES_PER_SAMPLE, "negatives")
        self.num_objects, self.num_negatives = m, k
        self._attribute_names, self._extra_names = list(attribute_names), list(extra_names)
        # string columns: checked here, read on first use (see the class docstring); name -> expected length
        self._string_columns: dict[str, int] = {}
        self._strings_read: dict[str, list[str]] = {}
        self._rows_asked: dict[str, int] = {}  # rows read alone so far, per column
        self._handles: dict[str, h5py.Dataset] = {}
        self._specs_checked = False
        columns = {"captions": n, "specs": n, "objects/category": m,
                   **{f"objects/attributes/{name}": m for name in attribute_names},
                   **{f"negatives/{name}": k for name in _NEGATIVE_STR_COLUMNS}}
        for name, length in columns.items():
            if not trusted:
                self._dataset(name, "S", (length,))
            self._string_columns[name] = length
        self._tables: tuple[dict, dict] | None = None
        if not trusted:  # the numeric tables are checked (and loaded) on open; a trusted reopen loads them on use
            self._object_tables()
        arrays = f.get("arrays")  # format version 2 (version 1 shards have none)
        if arrays is not None and not isinstance(arrays, h5py.Group):
            raise self._fail("arrays", "is a dataset, not a group")
        self.arrays = {
            name: self._dataset(f"arrays/{name}", "fiu", (n, *[None] * (getattr(arrays[name], "ndim", 1) - 1)))
            for name in (arrays if arrays is not None else [])}
        for name, data in self.arrays.items():
            self._bound(f"arrays/{name}", int(np.prod(data.shape[1:], dtype=np.int64)), MAX_SIDE * MAX_SIDE,
                        "values per sample")

    def _read_attrs(self) -> dict:
        return {key: (value.decode() if isinstance(value, bytes) else value) for key, value in self._file.attrs.items()}

    @property
    def attrs(self) -> dict:
        """The shard's HDF5 attributes (``split``, ``count``, ``run_id``, ...; bytes decoded), read on open (a
        trusted reopen: on first use)."""
        if self._attrs is None:
            self._attrs = self._read_attrs()
        return self._attrs

    def _object_tables(self) -> tuple[dict, dict]:
        """The numeric columns of the objects table, ``(integer and boolean columns, extras)``, read once."""
        if self._tables is None:
            m = self.num_objects
            objects = {name: self._read(f"objects/{name}", "iu", (m,)) for name in _OBJECT_INT_COLUMNS}
            objects["bbox"] = self._read("objects/bbox", "iu", (m, 4))
            objects["salient"] = self._read("objects/salient", "b", (m,))
            self._tables = objects, {name: self._read(f"objects/extras/{name}", "f", (m,))
                                     for name in self._extra_names}
        return self._tables

    def _rows(self, name: str, start: int, stop: int) -> list[str]:
        """Rows ``start .. stop-1`` of the string column ``name``: a slice of the column once it was read; else
        these rows alone, until the rows asked for add up to a quarter of the column, which is then read whole (a
        reader that takes a few samples of each of many shards, such as training batches in a random order,
        reads no whole column of a shard it soon closes again)."""
        found = self._strings_read.get(name)
        asked = self._rows_asked.get(name, 0) + stop - start
        if found is not None or 4 * asked >= self._string_columns[name]:
            return (found if found is not None else self._column(name))[start:stop]
        self._rows_asked[name] = asked
        try:
            dataset = self._handles.get(name)
            if dataset is None:
                dataset = self._handles[name] = self._file[name]
            return _strings(dataset, np.s_[start:stop])
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise self._fail(name, f"rows {start}:{stop}: cannot be read ({_reason(exc)})") from None

    def _column(self, name: str) -> list[str]:
        """The decoded string column ``name`` (read once, on first use). Raises DatasetError naming the file and
        the dataset if it cannot be read or decoded."""
        found = self._strings_read.get(name)
        if found is None:
            found = self._strings_read[name] = self._read(name, "S", (self._string_columns[name],))
        return found

    def validate(self) -> None:
        """Read and decode every string column and parse every spec (what ``validate=True`` does on open).

        Raises:
            DatasetError: the first column that cannot be read or decoded, or the first spec that is not JSON.
        """
        for name in self._string_columns:
            self._column(name)
        self._checked_specs()

    def check_specs(self, parse: bool = True) -> None:
        """Parse every spec of the shard (once; later calls return at once). With ``parse=False``, only read the
        column (one HDF5 read), so that a later call parses it without touching the file.

        Raises:
            DatasetError: naming the file and the first sample whose spec is not JSON, or the column when it
                cannot be read.
        """
        if parse:
            self._checked_specs()
        else:
            self._column("specs")

    def _checked_specs(self) -> list[str]:
        texts = self._column("specs")
        if not self._specs_checked:  # every spec at once, so no sample of a bad shard is handed out
            for local, text in enumerate(texts):
                if not _is_bare_json(text):
                    self._spec(local, text)
            self._specs_checked = True
        return texts

    @property
    def captions(self) -> list[str]:
        """The captions, one str per sample (the column is read on first use)."""
        return self._column("captions")

    def caption_rows(self, start: int, stop: int) -> list[str]:
        """The captions of samples ``start .. stop-1`` (for a few samples, read without the whole column)."""
        return self._rows("captions", start, stop)

    @property
    def categories(self) -> list[str]:
        """The object table's category column, one str per object (rows ``object_offsets[i]:[i+1]``)."""
        return self._column("objects/category")

    def attribute_column(self, name: str) -> list[str]:
        """The objects table's column of attribute ``name``, one str per object (rows ``object_offsets[i]:[i+1]``).
        Raises KeyError for a name that is not one of the dataset's object attributes."""
        if name not in self._attribute_names:
            raise KeyError(f"no attribute column {name!r}; the attributes are {', '.join(self._attribute_names)}")
        return self._column(f"objects/attributes/{name}")

    def image(self, local: int) -> np.ndarray:
        """The ``local``-th image, (H, W, 3) uint8. Raises DatasetError naming the file for an unreadable chunk."""
        return self._chunk(self.images, "images", local)

    def mask(self, local: int) -> np.ndarray:
        """The ``local``-th instance mask, (H, W) uint8. Raises DatasetError for an unreadable chunk."""
        return self._chunk(self.masks, "masks", local)

    def all_images(self) -> np.ndarray:
        """Every image of the shard, (N, H, W, 3) uint8. Raises DatasetError for an unreadable chunk."""
        return self._chunk(self.images, "images", slice(None))

    def read_images(self, start: int = 0, stop: int | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """Images ``start .. stop-1`` (local indices) in one HDF5 read: ``(stop - start, H, W, 3)`` uint8.

        Args:
            start, stop: a contiguous range, ``0 <= start <= stop <= count`` (``stop`` None: the end).
            out: optional C-contiguous ``(stop - start, H, W, 3)`` uint8 array to read into (returned).

        Raises:
            IndexError: a range outside the shard. ValueError: ``out`` of another shape or dtype.
            DatasetError: an unreadable chunk (the message names the file).
        """
        return self._slice(self.images, "images", start, stop, out)

    def read_masks(self, start: int = 0, stop: int | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """Instance masks ``start .. stop-1`` in one HDF5 read: ``(stop - start, H, W)`` uint8 (as
        :meth:`read_images`)."""
        return self._slice(self.masks, "masks", start, stop, out)

    def _slice(self, dataset: h5py.Dataset, name: str, start: int, stop: int | None, out: np.ndarray | None):
        stop = self.count if stop is None else stop
        if not 0 <= start <= stop <= self.count:
            raise IndexError(f"{self.path}: {name} {start}:{stop} is outside 0:{self.count}")
        shape = (stop - start, *dataset.shape[1:])
        if out is None:
            out = np.empty(shape, np.uint8)
        elif out.shape != shape or out.dtype != np.uint8 or not out.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous {shape} uint8 array, got {out.shape} {out.dtype}")
        if start == stop:
            return out
        try:
            dataset.read_direct(out, np.s_[start:stop])
        except (OSError, ValueError) as exc:
            raise self._fail(name, f"samples {start}:{stop}: cannot be read ({_reason(exc)})") from None
        return out

    def _chunk(self, dataset: h5py.Dataset, name: str, index):
        try:
            return dataset[index]
        except (OSError, ValueError) as exc:
            where = "" if isinstance(index, slice) else f"sample {index}: "
            raise self._fail(name, f"{where}cannot be read ({_reason(exc)})") from None

    def close(self) -> None:
        self._file.close()

    def objects(self, local: int) -> list[ObjectRecord]:
        """The objects of the shard's ``local``-th sample."""
        return self._object_records(int(self.object_offsets[local]), int(self.object_offsets[local + 1]))

    def object_numbers(self, name: str) -> np.ndarray:
        """One integer column of the objects table for every object of the shard (``index``, ``category_id``,
        ``area``, ``size_rank`` or ``mention_position``). Raises KeyError for another name."""
        if name not in _OBJECT_INT_COLUMNS:
            raise KeyError(f"no integer objects column {name!r}; the columns are {', '.join(_OBJECT_INT_COLUMNS)}")
        return self._object_tables()[0][name]

    def all_objects(self) -> list[list[ObjectRecord]]:
        """The objects of every sample, ``[objects of sample 0, ...]`` (one pass over the table; the same
        records as :meth:`objects`)."""
        records = self._object_records(0, self.num_objects)
        bounds = self.object_offsets.tolist()
        return [records[bounds[i]:bounds[i + 1]] for i in range(self.count)]

    def object_dicts(self, start: int, stop: int) -> list[list[dict]]:
        """Per sample ``start .. stop-1`` its objects as dicts with the fields of :class:`ObjectRecord` (what
        ``dataclasses.asdict`` gives), built from the columns in one pass."""
        bounds = self.object_offsets[start:stop + 1].tolist()
        rows = self._object_records(bounds[0], bounds[-1], dict)
        return [rows[a - bounds[0]:b - bounds[0]] for a, b in zip(bounds, bounds[1:])]

    def negative_dicts(self, start: int, stop: int) -> list[list[dict]]:
        """Per sample ``start .. stop-1`` its negatives as dicts with the fields of :class:`Negative`."""
        bounds = self.negative_offsets[start:stop + 1].tolist()
        rows = self._negative_records(bounds[0], bounds[-1], dict)
        return [rows[a - bounds[0]:b - bounds[0]] for a, b in zip(bounds, bounds[1:])]

    def read_array(self, name: str, start: int, stop: int) -> np.ndarray:
        """The per-sample array ``name`` of samples ``start .. stop-1`` in one HDF5 read, ``(stop - start,
        *shape)``. Raises KeyError for an unknown name, DatasetError for an unreadable chunk."""
        return self._chunk(self.arrays[name], f"arrays/{name}", slice(start, stop))

    def _object_records(self, first: int, stop: int, make=ObjectRecord) -> list:
        c, extra_columns = self._object_tables()
        rows = slice(first, stop)
        attributes = {n: self._rows(f"objects/attributes/{n}", first, stop) for n in self._attribute_names}
        extras = {n: v[rows].tolist() for n, v in extra_columns.items()}
        names = list(attributes)
        extra_names = list(extras)
        columns = zip(c["index"][rows].tolist(), self._rows("objects/category", first, stop),
                      c["category_id"][rows].tolist(), c["bbox"][rows].tolist(), c["area"][rows].tolist(),
                      c["size_rank"][rows].tolist(), c["salient"][rows].tolist(), c["mention_position"][rows].tolist())
        return [make(index=index, category=category, category_id=category_id,
                     attributes={n: attributes[n][r] for n in names}, bbox=tuple(bbox), area=area,
                     size_rank=size_rank, salient=salient, mention_position=mention,
                     extras={n: extras[n][r] for n in extra_names})
                for r, (index, category, category_id, bbox, area, size_rank, salient, mention)
                in enumerate(columns)]

    def negative_column(self, name: str) -> list:
        """One column of the negatives table for every negative of the shard (sample ``i``'s are rows
        ``negative_offsets[i]:negative_offsets[i+1]``): ``kind``, ``caption``, ``attribute``, ``original`` or
        ``replacement`` as str, ``objects`` as tuples of ints. Read on first use.

        Raises:
            KeyError: another name. DatasetError: the column cannot be read.
        """
        if name not in _NEGATIVE_STR_COLUMNS:
            raise KeyError(f"no negatives column {name!r}; the columns are {', '.join(_NEGATIVE_STR_COLUMNS)}")
        column = self._column(f"negatives/{name}")
        if name == "objects":
            parsed = {text: _object_ids(text) for text in set(column)}  # few distinct values ("1", "2", "1|2")
            column = [parsed[text] for text in column]
        return column

    def negatives(self, local: int) -> list[Negative]:
        """The negatives of the shard's ``local``-th sample."""
        return self._negative_records(int(self.negative_offsets[local]), int(self.negative_offsets[local + 1]))

    def all_negatives(self) -> list[list[Negative]]:
        """The negatives of every sample, ``[negatives of sample 0, ...]`` (one pass over the table; the same
        records as :meth:`negatives`)."""
        records = self._negative_records(0, self.num_negatives)
        bounds = self.negative_offsets.tolist()
        return [records[bounds[i]:bounds[i + 1]] for i in range(self.count)]

    def negative_captions(self, start: int, stop: int, kind: str | None = None) -> list[list[str]]:
        """Per sample ``start .. stop-1`` the captions of its negatives (only those of ``kind``, e.g.
        ``"binding"``, if given), read from the caption and kind columns alone."""
        bounds = self.negative_offsets[start:stop + 1].tolist()
        first, last = bounds[0], bounds[-1]
        captions = self._rows("negatives/caption", first, last)
        if kind is None:
            return [captions[a - first:b - first] for a, b in zip(bounds, bounds[1:])]
        kinds = self._rows("negatives/kind", first, last)
        return [[c for c, k in zip(captions[a - first:b - first], kinds[a - first:b - first]) if k == kind]
                for a, b in zip(bounds, bounds[1:])]

    def _negative_records(self, first: int, stop: int, make=Negative) -> list:
        kind, caption, attribute, objects, original, replacement = (
            self._rows(f"negatives/{name}", first, stop) for name in _NEGATIVE_STR_COLUMNS)
        parsed = {text: _object_ids(text) for text in set(objects)}  # few distinct values ("1", "2", "1|2")
        return [make(kind=k, caption=c, attribute=a, objects=parsed[o], original=g, replacement=r)
                for k, c, a, o, g, r in zip(kind, caption, attribute, objects, original, replacement)]

    def _spec(self, local: int, text: str) -> dict:
        """Sample ``local``'s plan parsed from its JSON text; DatasetError naming the file if it is not JSON."""
        try:
            return json.loads(text)
        except ValueError as exc:
            raise self._fail("specs", f"sample {local} is not JSON ({exc})") from None

    def spec(self, local: int) -> dict:
        """Sample ``local``'s plan (a fresh dict parsed from its JSON). The first call checks every spec of the
        shard. Raises DatasetError naming the file when one is not JSON."""
        return self._spec(local, self._checked_specs()[local])

    def spec_text(self, local: int, check: bool = True) -> str:
        """Sample ``local``'s plan as its stored JSON text: checked as :meth:`spec` does, or with ``check=False``
        as stored, for a reader that parses only the specs it needs (and so checks those)."""
        return self._checked_specs()[local] if check else self._column("specs")[local]

    def sample(self, local: int) -> Sample:
        """The shard's ``local``-th sample (0 <= local < count)."""
        spec = self.spec(local)
        return Sample(index=self.first_index + local, image=self.image(local), mask=self.mask(local),
                      caption=self.captions[local], objects=self.objects(local),
                      negatives=self.negatives(local), spec=spec,
                      arrays={name: self._chunk(data, f"arrays/{name}", local)
                              for name, data in self.arrays.items()})


_KIND_NAMES = {"u": "unsigned integers", "iu": "integers", "b": "booleans", "f": "floats", "S": "UTF-8 strings",
               "fiu": "numbers"}


def _reason(exc: BaseException) -> str:
    """An exception as one short line (h5py messages can span lines)."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
