"""The training split: its tables (which samples train, the lexicon, the word vocabulary) and the two ways its
samples reach the batches, streamed from the shards or held in memory.

Any dataset with captions trains: MADMAN, ComCO / SimCO scenes (with or without attributes), COCO imports. The
split is :func:`training_split`'s (``train``, else ComCO's ``scenes``, else the dataset's only split). Samples with
an empty caption (e.g. COCO images without captions) are left out and counted; the N others are the *positions*
``0..N-1`` that :func:`batch_indices` orders. :func:`read_tables` reads the tables alone, one shard at a time,
without an image: the kept samples, how many of them store ``"binding"`` negatives, the dataset's lexicon
(:class:`Lexicon`: its category names and the attribute values its captions use) and, on request, the words of the
captions and their binding negatives (a word tokenizer's vocabulary).

The samples of a batch come from one of two sources with the same methods (``texts``, ``pixels``):

- :class:`StreamedSplit` (the default): each batch reads its samples from the shards through the PyTorch reader
  (:meth:`bindscope.format.reader.Split.as_torch`; in each DataLoader worker its own, holding at most
  :data:`bindscope.format.torchdata.MAX_OPEN_SHARDS` shards open): the pixels of the samples this process
  trains on, and the captions and binding negatives of the whole global batch (a few kB of text, so that every
  process draws the same hard negatives). Memory: the batch, the prefetched batches, the open shards, and 16
  bytes per sample (the kept samples' indices and the epoch's order).
- :class:`TrainingData` (:func:`load_split`): the split read once into memory (images as one uint8 array, filled
  shard by shard; captions and negatives as lists).

Both give every batch the same samples, texts and pixels, so a run's losses and weights do not depend on the
source.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field

import numpy as np

from bindscope.errors import BadInput
from bindscope.training.options import NEGATIVES

@dataclass(frozen=True)
class Lexicon:
    """The words a dataset's captions are made of, by role: ``nouns`` (category names, lowercased; for a COCO
    import also the phrases its captions use for them, e.g. ``"kitten"`` for ``cat``) and ``adjectives`` (the
    attribute values its captions say, e.g. ``"red"``, ``"metal"``, ``"tilted-left"``). Sorted tuples."""

    nouns: tuple[str, ...] = ()
    adjectives: tuple[str, ...] = ()


@dataclass
class SplitTables:
    """What the tables of a training split say, read without an image (:func:`read_tables`).

    Attributes:
        source: the dataset folder; split: the split name; generator: the manifest's generator name.
        indices: ``(N,)`` int64, each kept sample's index within the split (position ``p`` trains sample
            ``indices[p]``).
        lexicon: the dataset's nouns and attribute words (:class:`Lexicon`), from the kept samples.
        skipped: samples of the split left out because their caption is empty.
        with_negatives: kept samples that store at least one ``"binding"`` negative.
        words: the sorted distinct words of the kept captions and their binding negatives
            (:func:`bindscope.training.model.build_vocabulary`), when asked for; else None.
        image_size: ``(H, W)`` of the images, pixels.
    """

    source: str
    split: str
    generator: str = "madman"
    indices: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    lexicon: Lexicon = field(default_factory=Lexicon)
    skipped: int = 0
    with_negatives: int = 0
    words: tuple[str, ...] | None = None
    image_size: tuple[int, int] = (0, 0)

    def __len__(self) -> int:
        return len(self.indices)


@dataclass
class TrainingData(SplitTables):
    """A split held in memory (:func:`load_split`): the tables, and

    Attributes:
        images: ``(N, H, W, 3)`` uint8 RGB, in position order.
        captions: N captions (none empty).
        hard_negatives: per position, the captions of its stored ``"binding"`` negatives (possibly empty).
    """

    images: np.ndarray = field(default_factory=lambda: np.zeros((0, 1, 1, 3), np.uint8))
    captions: list[str] = field(default_factory=list)
    hard_negatives: list[list[str]] = field(default_factory=list)

    def texts(self, positions, negatives: bool = True) -> tuple[list[str], list[list[str]] | None]:
        """The captions of ``positions`` and (with ``negatives``) their binding negatives' captions."""
        captions = [self.captions[p] for p in positions]
        return captions, [self.hard_negatives[p] for p in positions] if negatives else None

    def pixels(self, positions):
        """The images of ``positions``: ``(len, H, W, 3)`` uint8 torch tensor."""
        import torch

        return torch.from_numpy(self.images[np.asarray(positions, dtype=np.int64)])


class StreamedSplit:
    """The samples of a split read from its shards for each batch (picklable: a DataLoader worker opens the
    shards itself, at most :data:`bindscope.format.torchdata.MAX_OPEN_SHARDS` at a time, each checked once; see
    :class:`bindscope.format.reader.Split`).

    Args:
        dataset: the dataset (a :class:`bindscope.format.reader.Dataset`; its manifest is not read again).
        tables: the split's :class:`SplitTables`.
    """

    def __init__(self, dataset, tables: SplitTables):
        self.tables = tables
        self.reader = dataset.split(tables.split).as_torch(fields=("image",))

    def __len__(self) -> int:
        return len(self.tables)

    @property
    def lexicon(self) -> Lexicon:
        return self.tables.lexicon

    def texts(self, positions, negatives: bool = True) -> tuple[list[str], list[list[str]] | None]:
        """As :meth:`TrainingData.texts`: read from the caption (and negatives) columns of each sample's shard,
        one read per run of consecutive samples."""
        from bindscope.format.torchdata import shard_runs

        split = self.reader.opened()
        captions, pools = [], [] if negatives else None
        for number, lo, hi in shard_runs(split, self.tables.indices[np.asarray(positions, dtype=np.int64)]):
            reader = split.shard(number)
            captions.extend(reader.caption_rows(lo, hi))
            if negatives:
                pools.extend(reader.negative_captions(lo, hi, "binding"))
        return captions, pools

    def pixels(self, positions):
        """As :meth:`TrainingData.pixels`: read through the PyTorch reader (one HDF5 read per run)."""
        batch = self.reader.__getitems__(self.tables.indices[np.asarray(positions, dtype=np.int64)].tolist())
        return batch.collated["image"].permute(0, 2, 3, 1)  # the (B, H, W, 3) bytes as read


def training_split(split_names: list[str], split: str | None, path: str = "data") -> str:
    """The split to train on: ``split`` if given, else ``train``, else ``scenes`` (ComCO), else the only split
    (a COCO import's, e.g. ``val2017``).

    Raises:
        BadInput: ``split`` is not one of ``split_names``, or several splits and none of the defaults.
    """
    if split is not None:
        if split not in split_names:
            raise BadInput(f"split {split!r}: {path!r} has no such split; it has: {', '.join(split_names)}",
                           param="split")
        return split
    for name in ("train", "scenes"):
        if name in split_names:
            return name
    if len(split_names) == 1:
        return split_names[0]
    raise BadInput(f"split: {path!r} has several splits ({', '.join(split_names)}) and none is called train or "
                   "scenes; choose one", param="split")


def split_sha256(manifest: dict, split: str) -> str:
    """The hex sha256 naming the bytes of a dataset's split: of the dataset's ``config_sha256`` and the sha256 of
    each shard of the split, as its manifest lists them (the processes of a run check that they train on the same
    data with it)."""
    from bindscope.io.canonical import canonical_json

    shards = [entry["sha256"] for entry in manifest["splits"][split]["shards"]]
    return hashlib.sha256(canonical_json({"config_sha256": manifest["config_sha256"], "shards": shards})
                          .encode()).hexdigest()


def _opened(source):
    """``(dataset, opened here)`` for a dataset folder or an opened :class:`bindscope.format.reader.Dataset`."""
    from bindscope.format.reader import Dataset

    return (source, False) if isinstance(source, Dataset) else (Dataset(source), True)


def read_tables(source, split: str | None = "train", words: bool = False) -> SplitTables:
    """The tables of split ``split`` (None: :func:`training_split`'s default), one shard at a time (each closed
    before the next is opened), without reading an image.

    Args:
        source: the dataset folder, or the dataset opened (a :class:`bindscope.format.reader.Dataset`, left open).
        words: also collect the words of the kept captions and their binding negatives (:attr:`SplitTables.words`).

    Raises:
        DatasetError: the folder is not a finished dataset, or a shard is unreadable.
        BadInput: no such split, or the split holds no sample with a caption.
    """
    return _scan(source, split, words, images=False)


def load_split(source, split: str | None = "train", words: bool = True) -> TrainingData:
    """Read split ``split`` (None: :func:`training_split`'s default) of a dataset into memory: the tables of
    :func:`read_tables`, the images, captions and binding negatives.

    Args:
        source: the dataset folder, or the dataset opened (a :class:`bindscope.format.reader.Dataset`, left open:
            its manifest is not read again).
        words: also collect the words (as :func:`read_tables`).

    Raises:
        DatasetError: the folder is not a finished dataset, or a shard is unreadable.
        BadInput: no such split, or the split holds no sample with a caption.
    """
    return _scan(source, split, words=words, images=True)


def _scan(source, split: str | None, words: bool, images: bool):
    from bindscope.format.reader import Split
    from bindscope.training.model import build_vocabulary

    dataset, opened = _opened(source)
    part = None
    try:
        path = str(dataset.path)
        split = training_split(dataset.split_names, split, path)
        part = Split(dataset, split, max_open=1)  # one shard open at a time
        attributes = dataset.caption_attributes  # the attribute values its captions say
        phrases = "phrases" in dataset.split(split).holds  # captions recorded with the phrases naming each object
        pixels = np.empty((len(part), *part.image_size, 3), np.uint8) if images else None
        captions, pools, kept, vocabulary = [], [], [], set()
        nouns, adjectives = set(), set()
        with_negatives = position = 0
        for reader in part.shards():
            keep = [local for local, caption in enumerate(reader.captions) if caption.strip()]
            if images:  # one array filled shard by shard: memory peaks at the split plus one shard
                pixels[len(kept):len(kept) + len(keep)] = reader.all_images()[keep]
            binding = reader.negative_captions(0, reader.count, "binding")
            kept_captions = [reader.captions[local] for local in keep]
            kept_pools = [binding[local] for local in keep]
            with_negatives += sum(1 for pool in kept_pools if pool)
            if words:
                vocabulary.update(build_vocabulary(kept_captions + [n for pool in kept_pools for n in pool]))
            if images:
                captions.extend(kept_captions)
                pools.extend(kept_pools)
            rows = np.repeat(np.isin(np.arange(reader.count), keep), np.diff(reader.object_offsets))
            nouns.update(c.lower() for c, k in zip(reader.categories, rows) if k)
            for name in attributes:
                adjectives.update(v.lower() for v, k in zip(reader.attribute_column(name), rows) if k and v)
            if phrases:
                for local in keep:
                    for phrase in (reader.spec(local).get("captions") or [{}])[0].get("phrases", {}).values():
                        nouns.add(str(phrase).lower())
            kept.extend(position + local for local in keep)
            position += reader.count
    finally:
        if part is not None:
            part.close()
        if opened:
            dataset.close()
    if not kept:
        raise BadInput(f"split {split!r} of {path!r} holds no samples with a caption")
    tables = dict(source=path, split=split, generator=dataset.generator, indices=np.asarray(kept, dtype=np.int64),
                  lexicon=Lexicon(tuple(sorted(nouns)), tuple(sorted(adjectives - nouns))),
                  skipped=position - len(kept), with_negatives=with_negatives,
                  words=tuple(sorted(vocabulary)) if words else None, image_size=part.image_size)
    if not images:
        return SplitTables(**tables)
    return TrainingData(**tables, images=pixels[:len(kept)], captions=captions, hard_negatives=pools)


def check_negatives(data: SplitTables, mode: str) -> None:
    """Raise BadInput unless ``negatives=mode`` can train on ``data``: ``stored`` needs samples with binding
    negatives; ``shuffled`` needs a lexicon with nouns or attribute words (checked before anything is written).
    """
    if mode not in NEGATIVES:
        raise BadInput(f"negatives {mode!r} is not known; allowed: {', '.join(NEGATIVES)}", param="negatives")
    if mode == "stored" and not data.with_negatives:
        raise BadInput(f"negatives 'stored': split {data.split!r} of {data.source!r} ({data.generator}) stores no "
                       "binding negatives (MADMAN datasets and ComCO scenes rendered with attributes do); use "
                       "negatives='shuffled' (made from the captions) or 'none'", param="negatives")
    if mode == "shuffled" and not (data.lexicon.nouns or data.lexicon.adjectives):
        raise BadInput(f"negatives 'shuffled': split {data.split!r} of {data.source!r} names no categories or "
                       "attribute values to swap; use negatives='none'", param="negatives")


@functools.lru_cache(maxsize=1)
def _epoch_order(seed: int, epoch: int, num_samples: int) -> np.ndarray:
    """Epoch ``epoch``'s order of the positions (computed once per epoch in each process; read-only)."""
    order = np.random.default_rng([seed, epoch]).permutation(num_samples)
    order.flags.writeable = False
    return order


def batch_indices(step: int, num_samples: int, batch_size: int, seed: int) -> np.ndarray:
    """Positions of batch ``step`` (0-based): ``(batch_size,)`` int64, no repeats within an epoch. Epoch
    ``e = step // (num_samples // batch_size)`` visits the positions in the order
    ``numpy.random.default_rng([seed, e]).permutation(num_samples)``; batches are consecutive slices of it, and the
    last incomplete slice of an epoch is dropped. So batch ``step`` is a pure function of (seed, step).

    Raises:
        BadInput: ``batch_size`` is larger than ``num_samples``.
    """
    per_epoch = num_samples // batch_size
    if per_epoch < 1:
        raise BadInput(f"batch_size {batch_size} is larger than the training split ({num_samples} samples); "
                       f"use at most {num_samples}", param="batch_size")
    epoch, within = divmod(step, per_epoch)
    return _epoch_order(seed, epoch, num_samples)[within * batch_size:(within + 1) * batch_size].copy()
