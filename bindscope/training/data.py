"""Training batches from a bindscope dataset split: deterministic by step, with NegCLIP hard negatives.

Any dataset with captions trains: MADMAN, ComCO / SimCO scenes (with or without attributes), COCO imports. The
split (:func:`training_split`: ``train``, else ComCO's ``scenes``, else the dataset's only split) is read once
into memory through :class:`bindscope.format.reader.Dataset`: images as one uint8 array, the captions (samples
with an empty caption, e.g. COCO images without captions, are left out and counted), each sample's stored
``"binding"`` negatives, and the dataset's lexicon (:class:`Lexicon`: its category names and the attribute values
its captions use). Batch ``s`` is a pure function of (seed, s): epoch ``e = s // (N // B)`` visits the samples
in the order ``numpy.random.default_rng([seed, e]).permutation(N)``, batches are consecutive slices of that
order, and the last incomplete slice of an epoch is dropped. So a run resumed at step ``s`` sees exactly the
batches an uninterrupted run sees, whatever the number of workers.

Hard negatives (NegCLIP: Yuksekgonul et al., ICLR 2023; the MADMAN paper's baseline), ``negatives=``:

- ``"stored"``: for each sample of the batch that has binding negatives (its caption with one attribute's values
  swapped between two objects: MADMAN, ComCO rendered with ``--attributes``), ``k`` of them (chosen with
  ``numpy.random.default_rng([seed, s, 1])``) are appended to the batch's texts.
- ``"shuffled"``: for each sample, up to ``k`` distinct captions made from its own caption by the NegCLIP /
  ARO recipe ``shuffle_nouns_and_adj`` (:func:`bindscope.text.negatives.shuffled_negative`: its nouns shuffled
  among themselves and its adjectives among themselves, every other word and the punctuation in place), tagged
  by :func:`bindscope.text.negatives.lexicon_tagger` with the dataset's lexicon, the ``j``-th seeded by
  ``(seed, s, sample index, j)``. A caption the recipe cannot change (fewer than two different nouns and fewer
  than two different attribute words, e.g. a one-object ComCO caption) adds none.

They are extra candidates for the image->text loss only (see :func:`bindscope.training.objective.clip_loss`).
"""

from __future__ import annotations

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
class TrainingData:
    """A split held in memory.

    Attributes:
        images: ``(N, H, W, 3)`` uint8 RGB.
        captions: N captions (none empty).
        hard_negatives: per sample, the captions of its stored ``"binding"`` negatives (possibly empty).
        source: the dataset folder; split: the split name; generator: the manifest's generator name.
        lexicon: the dataset's nouns and attribute words (:class:`Lexicon`).
        skipped: samples of the split left out because their caption is empty.
        indices: ``(N,)`` int64, each kept sample's index within the split.
    """

    images: np.ndarray
    captions: list[str]
    hard_negatives: list[list[str]]
    source: str
    split: str
    generator: str = "madman"
    lexicon: Lexicon = field(default_factory=Lexicon)
    skipped: int = 0
    indices: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.captions)


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


def load_split(source, split: str | None = "train") -> TrainingData:
    """Read split ``split`` (None: :func:`training_split`'s default) of a dataset into memory.

    Args:
        source: the dataset folder, or the dataset opened (a :class:`bindscope.format.reader.Dataset`, left open:
            its manifest is not read again).

    Raises:
        DatasetError: the folder is not a finished dataset, or a shard is unreadable.
        BadInput: no such split, or the split holds no sample with a caption.
    """
    from bindscope.format.reader import Dataset

    if isinstance(source, Dataset):
        return _read_split(source, split)
    with Dataset(source) as dataset:
        return _read_split(dataset, split)


def _read_split(dataset, split: str | None) -> TrainingData:
    path = str(dataset.path)
    split = training_split(dataset.split_names, split, path)
    part = dataset.split(split)
    attributes = dataset.caption_attributes  # the attribute values its captions say
    phrases = "phrases" in part.holds  # captions recorded with the phrases that mention each object
    images, captions, negatives, kept = None, [], [], []
    nouns, adjectives = set(), set()
    position = 0
    for reader in part.shards():
        block = reader.all_images()
        keep = [local for local in range(reader.count) if reader.captions[local].strip()]
        if images is None:  # one array filled shard by shard: memory peaks at the split plus one shard
            images = np.empty((len(part), *block.shape[1:]), block.dtype)
        images[len(captions):len(captions) + len(keep)] = block[keep]
        for local in keep:
            captions.append(reader.captions[local])
            negatives.append([n.caption for n in reader.negatives(local) if n.kind == "binding"])
            kept.append(position + local)
            for obj in reader.objects(local):
                nouns.add(obj.category.lower())
                adjectives.update(obj.attributes[a].lower() for a in attributes if obj.attributes.get(a))
            if phrases:
                for phrase in (reader.spec(local).get("captions") or [{}])[0].get("phrases", {}).values():
                    nouns.add(str(phrase).lower())
        position += reader.count
    if not captions:
        raise BadInput(f"split {split!r} of {str(path)!r} holds no samples with a caption")
    lexicon = Lexicon(tuple(sorted(nouns)), tuple(sorted(adjectives - nouns)))
    return TrainingData(images[:len(captions)], captions, negatives, path, split, dataset.generator, lexicon,
                        skipped=position - len(captions), indices=np.asarray(kept, dtype=np.int64))


def check_negatives(data: TrainingData, mode: str) -> None:
    """Raise BadInput unless ``negatives=mode`` can train on ``data``: ``stored`` needs samples with binding
    negatives; ``shuffled`` needs a lexicon with nouns or attribute words (checked before anything is written).
    """
    if mode not in NEGATIVES:
        raise BadInput(f"negatives {mode!r} is not known; allowed: {', '.join(NEGATIVES)}", param="negatives")
    if mode == "stored" and not any(data.hard_negatives):
        raise BadInput(f"negatives 'stored': split {data.split!r} of {data.source!r} ({data.generator}) stores no "
                       "binding negatives (MADMAN datasets and ComCO scenes rendered with attributes do); use "
                       "negatives='shuffled' (made from the captions) or 'none'", param="negatives")
    if mode == "shuffled" and not (data.lexicon.nouns or data.lexicon.adjectives):
        raise BadInput(f"negatives 'shuffled': split {data.split!r} of {data.source!r} names no categories or "
                       "attribute values to swap; use negatives='none'", param="negatives")


def batch_indices(step: int, num_samples: int, batch_size: int, seed: int) -> np.ndarray:
    """Sample indices of batch ``step`` (0-based): ``(batch_size,)`` int64, no repeats within an epoch.

    Raises:
        BadInput: ``batch_size`` is larger than ``num_samples``.
    """
    per_epoch = num_samples // batch_size
    if per_epoch < 1:
        raise BadInput(f"batch_size {batch_size} is larger than the training split ({num_samples} samples); "
                       f"use at most {num_samples}", param="batch_size")
    epoch, within = divmod(step, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(num_samples)
    return order[within * batch_size:(within + 1) * batch_size]


class BatchSource:
    """A map-style torch dataset whose item ``s`` is training batch ``s`` (use with ``batch_size=None``).

    Every caption (and, with stored hard negatives, every binding negative) is tokenised once, up front, into one
    int64 tensor, and the images are held as one uint8 tensor, so a batch is a few tensor index operations
    (shuffled negatives are made and tokenised per batch: B x k short texts).

    Each item is a dict: ``images`` ``(B, 3, S, S)`` float32 (see :func:`~bindscope.training.model.
    preprocess_images`), ``texts`` ``(B + M, context_length)`` int64 (the B captions, then M hard negatives),
    ``num_captions`` = B, ``indices`` ``(B,)`` int64 sample indices, ``negatives`` the M hard-negative texts,
    ``negative_of`` ``(M,)`` int64 (the batch position each negative belongs to), ``truncated`` the number of
    texts longer than the context (in the whole global batch), ``negative_counts`` every rank's M.

    Under data-parallel training (``world_size`` N > 1) the item is rank ``rank``'s part of the global batch:
    the contiguous slice ``[rank B/N, (rank+1) B/N)`` of its samples and the hard negatives of those samples
    (the negatives are drawn for the whole global batch first, so every rank's choice is the one-process one);
    ``num_captions`` is then B/N and ``negative_of`` counts from the slice's start.

    Args:
        data: the split in memory. batch_size, seed: see :func:`batch_indices`.
        model: the :class:`~bindscope.training.model.ModelConfig` (image size, tokenizer, context length).
        hard_negatives: hard negatives per sample appended to the texts (0 = none).
        mode: ``"stored"`` (the samples' binding negatives) or ``"shuffled"`` (made from the captions with the
            data's lexicon; see the module docstring).
        rank, world_size: this process's part (``batch_size`` divides by ``world_size``).
    """

    def __init__(self, data: TrainingData, batch_size: int, seed: int, model, hard_negatives: int = 0,
                 mode: str = "stored", rank: int = 0, world_size: int = 1):
        import torch

        from bindscope.training.model import make_tokenizer

        if hard_negatives < 0:
            raise BadInput(f"hard negatives per sample must be >= 0, got {hard_negatives}")
        if mode not in NEGATIVES[1:]:
            raise BadInput(f"negatives {mode!r} is not known; allowed: {', '.join(NEGATIVES)}",
                           param="negatives")
        batch_indices(0, len(data), batch_size, seed)  # validates the batch size
        self.data = data
        self.batch_size = batch_size
        self.seed = seed
        self.image_size = model.image_size
        self.model_config = model
        self.hard_negatives = hard_negatives
        if batch_size % world_size or not 0 <= rank < world_size:
            raise BadInput(f"batch_size {batch_size} does not split into {world_size} equal parts "
                           f"(rank {rank})", param="batch_size")
        self.rank, self.world_size = rank, world_size
        self.mode = mode
        self.images = torch.from_numpy(data.images)
        self.tokenizer = tokenizer = make_tokenizer(model)
        self.caption_tokens = tokenizer(data.captions)
        self.caption_truncated = np.array(tokenizer.is_truncated(data.captions), dtype=bool)
        if hard_negatives and mode == "stored":
            self.negative_texts = [n for pool in data.hard_negatives for n in pool]
            self.negative_start = np.cumsum([0] + [len(pool) for pool in data.hard_negatives])
            self.negative_tokens = tokenizer(self.negative_texts)
            self.negative_truncated = np.array(tokenizer.is_truncated(self.negative_texts), dtype=bool)
        if hard_negatives and mode == "shuffled":
            from bindscope.text.negatives import lexicon_tagger

            self.tagger = lexicon_tagger(data.lexicon.nouns, data.lexicon.adjectives)

    def shuffled(self, step: int, index: int) -> list[str]:
        """The shuffled negatives of sample ``index`` in batch ``step``: up to ``hard_negatives`` distinct
        captions, none equal to the sample's caption."""
        from bindscope.text.negatives import shuffled_negative

        caption, out = self.data.captions[index], []
        for j in range(self.hard_negatives):
            text = shuffled_negative(caption, (self.seed, step, index, j), tagger=self.tagger)
            if text is not None and text != caption and text not in out:
                out.append(text)
        return out

    def __getitem__(self, step: int) -> dict:
        import torch

        from bindscope.training.model import preprocess_images

        indices = batch_indices(step, len(self.data), self.batch_size, self.seed)
        owner, negatives, negative_tokens, negative_truncated = [], [], None, 0
        if self.hard_negatives and self.mode == "stored":
            rng = np.random.default_rng([self.seed, step, 1])
            chosen = []
            for position, i in enumerate(indices):
                size = len(self.data.hard_negatives[i])
                if size:
                    k = min(self.hard_negatives, size)
                    chosen.extend(self.negative_start[i] + j for j in sorted(rng.choice(size, size=k, replace=False)))
                    owner.extend([position] * k)
            if chosen:
                chosen = np.asarray(chosen, dtype=np.int64)
                negatives = [self.negative_texts[j] for j in chosen]
                negative_tokens = self.negative_tokens[chosen]
                negative_truncated = int(self.negative_truncated[chosen].sum())
        elif self.hard_negatives:
            for position, i in enumerate(indices):
                made = self.shuffled(step, int(i))
                negatives.extend(made)
                owner.extend([position] * len(made))
            if negatives:
                negative_tokens = self.tokenizer(negatives)
                negative_truncated = sum(self.tokenizer.is_truncated(negatives))
        # the negatives are made for the whole global batch, so every rank's choice is the one-process one
        owner = np.asarray(owner, dtype=np.int64)
        truncated = int(self.caption_truncated[indices].sum()) + negative_truncated
        part = self.batch_size // self.world_size
        counts = np.bincount(owner // part, minlength=self.world_size).tolist()
        if self.world_size > 1:  # this rank's slice of the global batch
            mine = owner // part == self.rank
            indices = indices[self.rank * part:(self.rank + 1) * part]
            negatives = [text for text, keep in zip(negatives, mine) if keep]
            if negative_tokens is not None:
                negative_tokens = negative_tokens[torch.from_numpy(mine)]
            owner = owner[mine] - self.rank * part
        tokens = self.caption_tokens[indices]
        if negatives:
            tokens = torch.cat([tokens, negative_tokens])
        return {"images": preprocess_images(self.images[indices], self.image_size, self.model_config),
                "texts": tokens, "num_captions": len(indices), "indices": torch.from_numpy(indices),
                "negatives": negatives, "negative_of": torch.from_numpy(owner),
                "negative_counts": counts, "truncated": truncated}
