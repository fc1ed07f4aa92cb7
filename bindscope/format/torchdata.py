"""A bindscope split as a PyTorch map-style dataset, the collate function that batches it, a batch sampler that
reads contiguous slices of a shard, and a loader that puts them together.

Example::

    from bindscope.format.reader import Dataset
    from bindscope.encoders.interface import device_preprocess
    from bindscope.format.torchdata import loader

    split = Dataset("data/madman").split("train")
    batches = loader(split.as_torch(fields=("index", "image", "caption")), batch_size=256, shuffle=True,
                     num_workers=4)
    for batch in batches:
        batch["image"]      # (B, 3, H, W) uint8, channels-last in memory (page-locked when CUDA is present)
        batch["caption"]    # list of B str
        x = device_preprocess(batch["image"].to("cuda", non_blocking=True), 224,  # resized on the GPU
                              open_clip.OPENAI_DATASET_MEAN, open_clip.OPENAI_DATASET_STD)

:func:`loader` reads each batch with one HDF5 call per run of consecutive samples (:class:`ShardBatchSampler`
makes batches of such runs; :meth:`TorchSplit.__getitems__` reads them), decodes it in the DataLoader's worker
processes, moves images as uint8 and pins them when CUDA is present; resizing and normalising belong on the
device (:func:`bindscope.encoders.interface.device_preprocess`). A plain
``DataLoader(split.as_torch(), batch_size=B, collate_fn=collate)`` still works and yields the same batches
(PyTorch calls ``__getitems__`` for them too), but moves each batch through a fresh block of shared memory and
pins every table entry.

Measured on 2 CPUs (``benchmarks/eval_ceiling.py``, one pass over 10,000 MADMAN images of 96 px, quiet machine):
with the fields a training loop reads (index, image, caption) the loader delivers 0.63 of the rate of bare h5py
reads in this process and 0.70 with two workers (which share the two CPUs with the consumer; starting them,
0.1-0.15 s, is a good part of one pass). The main process copies each batch out of the ring with numpy, not
torch: torch's copy ran on its thread pool, whose threads then spin on both CPUs and held the workers back (the
consumer's CPU time fell from 0.5 s to 0.1 s per pass). Every field (masks, object and negative dicts, specs parsed
from JSON) costs about three times as much with no worker (0.18) and more with two (0.13): building about
110,000 dicts per pass, and with workers pickling them to the main process, is Python work.

The dataset pickles without open file handles, and each process (each DataLoader worker) opens the shards
itself on first access, so it works with any ``num_workers`` and start method.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler, get_worker_info
from torch.utils.data import Dataset as _TorchDataset
from torch.utils.data import default_collate
from torch.utils.data._utils.collate import default_collate_fn_map

from bindscope.errors import DatasetError
from bindscope.format.records import Sample

FIELDS = ("index", "image", "mask", "caption", "objects", "negatives", "spec", "arrays")
DEFAULT_FIELDS = ("index", "image", "mask", "caption", "arrays")
"""The fields of an item when none are chosen: those of the same size in every sample (a caption is one str)."""
MAX_OPEN_SHARDS = 32
"""Shards a :class:`TorchSplit` holds open in each process (see :class:`bindscope.format.reader.Split`)."""
_TENSOR_FIELDS = ("index", "image", "mask", "arrays")  # stacked by collate; the others stay lists


def sample_dict(sample: Sample, transform=None) -> dict:
    """``sample`` as tensors and plain Python values (every field of :data:`FIELDS`; see :class:`TorchSplit`)."""
    if transform is None:
        image = torch.from_numpy(np.ascontiguousarray(sample.image.transpose(2, 0, 1)))
    else:
        from PIL import Image

        image = transform(Image.fromarray(np.ascontiguousarray(sample.image)))
    return {"index": sample.index, "image": image, "mask": torch.from_numpy(np.ascontiguousarray(sample.mask)),
            "caption": sample.caption, "objects": [dataclasses.asdict(o) for o in sample.objects],
            "negatives": [dataclasses.asdict(n) for n in sample.negatives], "spec": sample.spec,
            "arrays": {name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in sample.arrays.items()}}


class Rows(list):
    """A list field of a collated batch (captions, objects, ...): a plain list that ``pin_memory`` passes
    through as it is (PyTorch's pinning would otherwise copy every dict of every object in the main process)."""

    def pin_memory(self, device=None):
        return self


class SampleList(list):
    """One sample's ``objects`` or ``negatives``: a list of dicts whose length differs between samples."""


class SampleDict(dict):
    """One sample's ``spec``: a dict whose keys differ between samples."""


def _as_rows(batch, *, collate_fn_map=None) -> Rows:
    """What :func:`torch.utils.data.default_collate` makes of B values of a variable-size field: the list of them
    (its own way, stacking, fails on lists of different lengths and transposes lists of equal ones)."""
    return Rows(batch)


# PyTorch's documented way to extend default_collate (torch.utils.data._utils.collate.collate's docstring)
default_collate_fn_map.update({SampleList: _as_rows, SampleDict: _as_rows})


class ItemBatch(list):
    """What :meth:`TorchSplit.__getitems__` returns: the list of items (as ``__getitem__`` gives them) and, in
    ``collated``, the same batch already stacked, which :func:`collate` returns without stacking again."""

    collated: dict | None = None


def _buffer(shape: tuple[int, ...]) -> np.ndarray:
    """An uninitialised uint8 array for a batch; in a DataLoader worker its memory is shared memory already,
    so sending the batch to the main process passes a handle instead of copying the bytes."""
    tensor = torch.empty(shape, dtype=torch.uint8)
    if get_worker_info() is not None:
        tensor.share_memory_()
    return tensor.numpy()


def shard_runs(split, indices: list[int]) -> list[tuple[int, int, int]]:
    """``indices`` (in their order) as ``[(shard number, local start, local stop), ...]`` runs of consecutive
    samples of one shard."""
    runs: list[list[int]] = []
    for index in indices:
        number, local = split.locate(int(index))
        last = runs[-1] if runs else None
        if last is not None and last[0] == number and last[2] == local:
            last[2] += 1
        else:
            runs.append([number, local, local + 1])
    return [tuple(r) for r in runs]


class TorchSplit(_TorchDataset):
    """One split of a finished dataset as a :class:`torch.utils.data.Dataset`; made by ``Split.as_torch()``.

    Item ``i`` (the split's sample ``i``) is a dict of the chosen ``fields`` (default :data:`DEFAULT_FIELDS`:
    ``index``, ``image``, ``mask``, ``caption``, ``arrays``; the variable-size ``objects``, ``negatives`` and
    ``spec`` on request):

    - ``index``: int, the sample's index in the split;
    - ``image``: ``(3, H, W)`` uint8 tensor, RGB 0..255 (or whatever ``transform`` returns for the image as a
      PIL RGB image). It is laid out channels-last in memory, as stored (a view of the ``(H, W, 3)`` bytes;
      batches too: ``(B, 3, H, W)`` with ``torch.channels_last`` strides), since transposing bytes on the CPU
      costs as much as decompressing them; ``.contiguous()`` gives the NCHW layout, best done on the device;
    - ``mask``: ``(H, W)`` uint8 tensor, 0 background, k = visible pixels of object k;
    - ``caption``: str;
    - ``objects``: list of dicts with the fields of :class:`bindscope.format.records.ObjectRecord`
      (a :class:`SampleList`);
    - ``negatives``: list of dicts with the fields of :class:`bindscope.format.records.Negative`
      (a :class:`SampleList`);
    - ``spec``: dict, the generator's plan of the sample (a :class:`SampleDict`);
    - ``arrays``: dict of tensors, the sample's per-sample arrays (format version 2, e.g. ComCO's ``camera_K``
      (3, 3), ``world_to_camera`` (4, 4), ``depth`` (H, W)); empty for version-1 datasets.

    ``__getitems__(indices)`` (what a DataLoader calls for a batch) reads each run of consecutive indices of one
    shard with one HDF5 call per array, and builds the tables of the run in one pass.

    Batching: PyTorch's default collate (``DataLoader(split.as_torch(), batch_size=B)``) stacks ``index``,
    ``image``, ``mask`` and ``arrays`` into tensors with a leading B and makes ``caption`` a list of B str; the
    variable-size fields become lists of B values (:class:`SampleList` and :class:`SampleDict` are registered
    with it), as :func:`collate` and :func:`loader` make them.

    ``max_open_shards``: shards held open per process (each DataLoader worker opens its own); with more shards
    than that, the least recently used is closed (:class:`bindscope.format.reader.Split`), so memory does not
    grow with the number of shards a random order visits.

    Raises:
        ValueError: an unknown field (on construction). IndexError: an index out of range.
        DatasetError: a shard is missing or unreadable (on access).
    """

    def __init__(self, split, transform=None, fields=None, max_open_shards: int | None = MAX_OPEN_SHARDS):
        self.split = split  # a bindscope.format.reader.Split (pickles without its open shards)
        self.transform = transform
        self.max_open_shards = max_open_shards
        self.fields = DEFAULT_FIELDS if fields is None else tuple(fields)
        unknown = [f for f in self.fields if f not in FIELDS]
        if unknown or not self.fields:
            raise ValueError(f"fields {list(self.fields)!r}: unknown {unknown or '(none given)'}; "
                             f"choose from {', '.join(FIELDS)}")
        self._open: tuple[int, object] | None = None  # (process id, this process's own Split)
        self._ring: _Ring | None = None  # set on the copy a ShardLoader hands to its workers
        self._check_specs = False  # image_batches(check_specs=True): refuse a shard whose specs are not JSON

    def opened(self):
        """This process's own :class:`~bindscope.format.reader.Split` of the dataset (each process, each
        DataLoader worker, opens the shards itself, on first use)."""
        if self._open is None or self._open[0] != os.getpid():  # first use in this process (or worker)
            # each string column is checked when first read (only the fields used are read)
            self._open = (os.getpid(), type(self.split)(self.split.dataset, self.split.name, validate=False,
                                                        max_open=self.max_open_shards))
        return self._open[1]

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_open": None}

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, index: int) -> dict:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices) -> ItemBatch:
        split = self.opened()
        n = len(split)
        ring, slot, seq = self._ring, getattr(indices, "slot", None), getattr(indices, "seq", -1)
        indices = [int(i) + n if int(i) < 0 else int(i) for i in indices]
        runs = shard_runs(split, indices)
        fields = self.fields
        columns: dict[str, list] = {f: Rows() for f in fields if f not in ("image", "mask", "arrays")}
        images = masks = None
        in_ring = ring is not None and slot is not None and get_worker_info() is not None
        if in_ring:  # the batch's pixels go straight into the loader's shared slot
            ring.seq[slot] = -1
        if "image" in fields:
            images = ring.images[slot, :len(indices)].numpy() if in_ring and ring.images is not None else \
                _buffer((len(indices), *split.image_size, 3))
        if "mask" in fields:
            masks = ring.masks[slot, :len(indices)].numpy() if in_ring and ring.masks is not None else \
                _buffer((len(indices), *split.image_size))
        arrays: dict[str, list[np.ndarray]] = {}
        at = 0
        for number, lo, hi in runs:
            reader = split.shard(number)
            if self._check_specs:
                reader.check_specs()
            end = at + hi - lo
            if images is not None:
                reader.read_images(lo, hi, out=images[at:end])
            if masks is not None:
                reader.read_masks(lo, hi, out=masks[at:end])
            if "index" in columns:
                columns["index"].extend(range(reader.first_index + lo, reader.first_index + hi))
            if "caption" in columns:
                columns["caption"].extend(reader.caption_rows(lo, hi))
            if "objects" in columns:
                columns["objects"].extend(map(SampleList, reader.object_dicts(lo, hi)))
            if "negatives" in columns:
                columns["negatives"].extend(map(SampleList, reader.negative_dicts(lo, hi)))
            if "spec" in columns:
                columns["spec"].extend(SampleDict(reader.spec(local)) for local in range(lo, hi))
            if "arrays" in fields:
                for name, data in reader.arrays.items():
                    arrays.setdefault(name, []).append(reader.read_array(name, lo, hi))
            at = end
        collated: dict = {}
        items = ItemBatch({} for _ in indices)
        for key in fields:
            if key == "index":
                collated[key] = torch.tensor(columns["index"], dtype=torch.int64)
                for item, value in zip(items, columns["index"]):
                    item[key] = value
            elif key == "image":
                if self.transform is None:  # (B, 3, H, W) viewing the (B, H, W, 3) bytes as read: no transposing copy
                    collated[key] = torch.from_numpy(images).permute(0, 3, 1, 2)
                    for j, item in enumerate(items):
                        item[key] = collated[key][j]
                else:
                    from PIL import Image

                    for j, item in enumerate(items):
                        item[key] = self.transform(Image.fromarray(images[j]))
                    collated[key] = default_collate([item[key] for item in items])
            elif key == "mask":
                collated[key] = torch.from_numpy(masks)
                for j, item in enumerate(items):
                    item[key] = collated[key][j]
            elif key == "arrays":
                stacked = {name: torch.from_numpy(np.concatenate(parts)) for name, parts in arrays.items()}
                collated[key] = stacked
                for j, item in enumerate(items):
                    item[key] = {name: value[j] for name, value in stacked.items()}
            else:
                collated[key] = columns[key]
                for item, value in zip(items, columns[key]):
                    item[key] = value
        if in_ring:  # the main process copies the pixels out of the slot (ShardLoader); send only where they are
            for key in ("image", "mask"):
                if key in collated and getattr(ring, "images" if key == "image" else "masks") is not None:
                    collated[key] = _InRing(key, slot, len(indices), seq)
            ring.seq[slot] = seq
        items.collated = collated
        return items


def collate(batch: list[dict]) -> dict:
    """Batch items of :class:`TorchSplit`: ``index`` becomes an int64 tensor ``(B,)``; ``image`` and ``mask``
    are stacked (``(B, 3, H, W)``, ``(B, H, W)``, or the stacked ``transform`` outputs); ``caption``,
    ``objects``, ``negatives`` and ``spec`` stay lists of length B (objects and negatives differ in number
    per sample, which :func:`torch.utils.data.default_collate` rejects); ``arrays`` becomes a dict of stacked
    tensors ``(B, *shape)`` (every sample of a dataset has the same arrays). Only the keys the items have
    appear. A batch made by :meth:`TorchSplit.__getitems__` comes already stacked and is returned as it is."""
    collated = getattr(batch, "collated", None)
    if collated is not None:
        return collated
    keys = list(batch[0]) if batch else list(FIELDS)
    out = {key: default_collate([item[key] for item in batch]) for key in keys if key in _TENSOR_FIELDS}
    for key in keys:
        if key not in _TENSOR_FIELDS:
            out[key] = Rows(item[key] for item in batch)
    return out


class ShardBatchSampler(Sampler[list[int]]):
    """Batches of sample indices made of runs of consecutive samples of one shard, so a batch is read with a
    few HDF5 calls (:meth:`TorchSplit.__getitems__`) instead of one per sample.

    - ``shuffle=False``: batches ``0..B-1``, ``B..2B-1``, ... in index order (the batches of
      ``DataLoader(batch_size=B)``; a batch that crosses a shard boundary is two runs).
    - ``shuffle=True`` (training): the shards are visited in a random order; each shard is cut into runs of
      ``run_length`` consecutive samples, which enter a buffer of ``buffer`` samples (default 8 batches); each
      batch is filled with runs drawn at random from the buffer, so a batch mixes about ``B / run_length``
      places of the data, from several shards once the buffer spans them. Every sample appears once per
      epoch. The order depends on ``seed`` and the epoch only: :meth:`set_epoch`, or else each pass over the
      sampler is the next epoch.

    Args:
        split: a :class:`bindscope.format.reader.Split` (or a :class:`TorchSplit`, whose split is used).
        batch_size: samples per batch (>= 1). drop_last: leave out a last, smaller batch.
        shuffle, seed, run_length (>= 1), buffer (samples, >= run_length): as above.

    Raises:
        ValueError: a bad ``batch_size``, ``run_length`` or ``buffer``.
    """

    def __init__(self, split, batch_size: int, shuffle: bool = False, seed: int = 0, drop_last: bool = False,
                 run_length: int = 16, buffer: int | None = None):
        split = getattr(split, "split", split)
        buffer = 8 * batch_size if buffer is None else buffer
        if batch_size < 1 or run_length < 1 or buffer < run_length:
            raise ValueError(f"batch_size {batch_size}, run_length {run_length}, buffer {buffer}: need "
                             "batch_size >= 1, run_length >= 1 and buffer >= run_length")
        self.shards = [(e["first_index"], e["count"]) for e in split.dataset.manifest["splits"][split.name]["shards"]]
        self.length = len(split)
        self.batch_size, self.shuffle, self.seed, self.drop_last = batch_size, shuffle, seed, drop_last
        self.run_length, self.buffer = run_length, buffer
        self.epoch: int | None = None
        self._passes = 0

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch``'s order on the next passes (as ``DistributedSampler.set_epoch``)."""
        self.epoch = epoch

    def __len__(self) -> int:
        return self.length // self.batch_size if self.drop_last else -(-self.length // self.batch_size)

    def _order(self) -> Iterator[int]:
        if not self.shuffle:
            yield from range(self.length)
            return
        epoch = self._passes if self.epoch is None else self.epoch
        rng = np.random.default_rng([self.seed, epoch])
        pool: list[tuple[int, int]] = []
        capacity = max(1, self.buffer // self.run_length)

        def draw() -> tuple[int, int]:
            j = int(rng.integers(len(pool)))
            pool[j], pool[-1] = pool[-1], pool[j]
            return pool.pop()

        for number in rng.permutation(len(self.shards)):
            first, count = self.shards[number]
            for a in range(0, count, self.run_length):
                pool.append((first + a, first + min(a + self.run_length, count)))
                if len(pool) >= capacity:
                    yield from range(*draw())
        while pool:
            yield from range(*draw())

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for index in self._order():
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch
        self._passes += 1


@dataclasses.dataclass
class _InRing:
    """Stands in a worker's batch for pixels left in slot ``slot`` of the loader's ring."""

    key: str
    slot: int
    count: int
    seq: int


class _Ring:
    """Shared-memory slots, one batch each (images ``(B, H, W, 3)``, masks ``(B, H, W)`` uint8), made by the main
    process before the workers start and reused for every batch: a worker reads into a slot, the main process
    copies the batch out before the slot is handed out again. ``seq`` holds the number of the batch in each slot
    (-1 while one is being written), checked by the main process after its copy."""

    def __init__(self, slots: int, batch: int, size: tuple[int, int], images: bool, masks: bool):
        self.images = torch.empty((slots, batch, *size, 3), dtype=torch.uint8).share_memory_() if images else None
        self.masks = torch.empty((slots, batch, *size), dtype=torch.uint8).share_memory_() if masks else None
        self.seq = torch.full((slots,), -1, dtype=torch.int64).share_memory_()
        self.slots = slots


class IndexBatch(list):
    """A batch of sample indices with the ring slot it is read into and its running number."""

    slot: int | None = None
    seq: int = -1


class _Slotted:
    """Batches of ``batches`` as :class:`IndexBatch` es numbered in order, slot = number modulo ``slots``."""

    def __init__(self, batches, slots: int):
        self.batches, self.slots, self.count = batches, slots, 0

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        for indices in self.batches:
            batch = IndexBatch(indices)
            batch.slot, batch.seq = self.count % self.slots, self.count
            self.count += 1
            yield batch


class ShardLoader:
    """What :func:`loader` returns: iterates like its DataLoader (``len``, one pass per ``for``), and with worker
    processes moves images and masks through a ring of reused shared-memory slots (a fresh shared-memory block
    per batch, PyTorch's way, costs about as much as decompressing the images), copying each batch out of its
    slot (into page-locked memory with ``pin_memory``) before handing it over.

    Attributes:
        dataloader: the :class:`torch.utils.data.DataLoader`.
        batch_sampler: the :class:`ShardBatchSampler` (``set_epoch`` for training).
    """

    def __init__(self, dataset: TorchSplit, batch_sampler, num_workers: int, pin_memory: bool, **options):
        self.batch_sampler = batch_sampler
        self.pin_memory = pin_memory
        self.ring = None
        fields = dataset.fields
        wanted = dataset.transform is None and ("image" in fields or "mask" in fields)
        if num_workers > 0 and wanted:
            slots = options.get("prefetch_factor") or 2
            slots = slots * num_workers + 1  # a slot is written again only after its batch was copied out
            size = dataset.split.image_size
            try:
                self.ring = _Ring(slots, batch_sampler.batch_size, size, "image" in fields, "mask" in fields)
            except RuntimeError:  # no room in shared memory: PyTorch's own way
                self.ring = None
        if self.ring is not None:
            dataset = copy.copy(dataset)
            dataset._ring = self.ring
            batch_sampler = _Slotted(batch_sampler, self.ring.slots)
        # pinned here, not by the DataLoader, which would also walk every dict of the tables
        self.dataloader = DataLoader(dataset, batch_sampler=batch_sampler, num_workers=num_workers,
                                     collate_fn=collate, pin_memory=False, **options)

    def __len__(self) -> int:
        return len(self.dataloader)

    def __iter__(self):
        if self.dataloader.num_workers > 0 and self._forks():
            self.dataloader.dataset.opened().hash_shards()  # hashed once here, not again in each worker
        for batch in self.dataloader:
            for key in ("index", "image", "mask", "arrays"):
                value = batch.get(key)
                if isinstance(value, _InRing):
                    batch[key] = self._copy_out(value)
                elif self.pin_memory and key == "arrays":
                    batch[key] = {name: a.pin_memory() for name, a in value.items()}
                elif self.pin_memory and isinstance(value, torch.Tensor):
                    batch[key] = _pinned(value)
            yield batch

    def _forks(self) -> bool:
        import multiprocessing

        context = self.dataloader.multiprocessing_context
        if context is not None:
            return context.get_start_method() == "fork"
        method = multiprocessing.get_start_method(allow_none=True)  # None: the platform's default, not fixed here
        return (method or multiprocessing.get_all_start_methods()[0]) == "fork"

    def _copy_out(self, ref: _InRing) -> torch.Tensor:
        held = (self.ring.images if ref.key == "image" else self.ring.masks)[ref.slot, :ref.count]
        out = torch.empty(held.shape, dtype=torch.uint8, pin_memory=self.pin_memory)
        np.copyto(out.numpy(), held.numpy())  # numpy's copy: torch's runs on its thread pool, whose spinning
        # threads take the CPUs from the workers
        if int(self.ring.seq[ref.slot]) != ref.seq:
            raise RuntimeError(f"batch {ref.seq}: its shared-memory slot was overwritten before it was read "
                               "(a bindscope bug)")
        return out.permute(0, 3, 1, 2) if ref.key == "image" else out


def _pinned(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in page-locked memory, keeping a channels-last image batch channels-last (one plain copy)."""
    if tensor.ndim == 4 and tensor.is_contiguous(memory_format=torch.channels_last) and not tensor.is_contiguous():
        return tensor.permute(0, 2, 3, 1).pin_memory().permute(0, 3, 1, 2)
    return tensor.pin_memory()


def loader(dataset: TorchSplit, batch_size: int = 256, shuffle: bool = False, num_workers: int = 0,
           pin_memory: bool | None = None, seed: int = 0, drop_last: bool = False, run_length: int = 16,
           buffer: int | None = None, batches=None, **options) -> ShardLoader:
    """Batches of ``dataset`` as dicts (:func:`collate`), read a shard slice at a time.

    Each batch is read (in a worker when ``num_workers`` > 0) with one HDF5 call per run of consecutive samples
    and per array; images stay uint8 (resize and normalise them on the device:
    :func:`bindscope.encoders.interface.device_preprocess`).

    Args:
        dataset: ``split.as_torch(...)``.
        batch_size, shuffle, seed, drop_last, run_length, buffer: see :class:`ShardBatchSampler`.
        num_workers: DataLoader worker processes (each opens the shards itself).
        pin_memory: page-locked batches for fast, asynchronous copies to the GPU; None: when CUDA is present.
        batches: instead of a :class:`ShardBatchSampler`, these lists of indices, in order.
        **options: passed to :class:`torch.utils.data.DataLoader` (e.g. ``prefetch_factor``,
            ``persistent_workers``).

    Returns:
        A :class:`ShardLoader` (iterate it as a DataLoader).
    """
    if batches is None:
        sampler = ShardBatchSampler(dataset.split, batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last,
                                    run_length=run_length, buffer=buffer)
    else:
        sampler = _Batches([list(b) for b in batches])
    if pin_memory is None:
        pin_memory = torch.cuda.is_available()
    return ShardLoader(dataset, sampler, num_workers, pin_memory, **options)


class _Batches(list):
    """Given batches of indices, as a batch sampler."""

    @property
    def batch_size(self) -> int:
        return max((len(b) for b in self), default=1)


def worker_error(exc: BaseException) -> str:
    """The original one-line message of an exception re-raised by a DataLoader (which puts the worker's
    traceback in front of it)."""
    text = str(exc)
    if not text.startswith("Caught "):
        return text
    last = [line for line in text.splitlines() if line.strip()][-1]
    name = f"{type(exc).__module__}.{type(exc).__name__}: "
    return last[len(name):] if last.startswith(name) else last.split(": ", 1)[-1]


def image_batches(split, pieces: list[tuple[int, int, int]], workers: int,
                  check_specs: bool = False) -> Iterator[tuple[int, np.ndarray]]:
    """``(index of the first sample, (B, H, W, 3) uint8)`` per piece of ``split`` (:meth:`Split.slices`), in
    order, read and decompressed by ``workers`` DataLoader worker processes through a :class:`ShardLoader`
    (with ``check_specs``, each worker parses the specs of each shard it reads first).

    Raises:
        DatasetError: a shard a worker could not read (its one-line message, as if read here).
    """
    starts = [e["first_index"] for e in split.dataset.manifest["splits"][split.name]["shards"]]
    batches = [range(starts[number] + lo, starts[number] + hi) for number, lo, hi in pieces]
    images = TorchSplit(split, fields=("image",))
    images._check_specs = check_specs
    data = loader(images, batches=batches, num_workers=workers, pin_memory=False)
    try:
        for indices, batch in zip(batches, data):
            yield indices.start, batch["image"].permute(0, 2, 3, 1).numpy()
    except DatasetError as exc:
        raise DatasetError(worker_error(exc)) from None
