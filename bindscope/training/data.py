"""Training batches from a bindscope dataset split: deterministic by step, with NegCLIP hard negatives.

The split is read once into memory through :class:`bindscope.format.reader.Dataset` (images as one uint8 array, the
captions, and each sample's ``"binding"`` negatives). Batch ``s`` is a pure function of (seed, s): epoch
``e = s // (N // B)`` visits the samples in the order ``numpy.random.default_rng([seed, e]).permutation(N)``,
batches are consecutive slices of that order, and the last incomplete slice of an epoch is dropped. So a run
resumed at step ``s`` sees exactly the batches an uninterrupted run sees, whatever the number of workers.

Hard negatives (``--hard-negatives``, NegCLIP: Yuksekgonul et al., ICLR 2023, adapted as in the MADMAN
paper's baseline): for each sample of the batch that has binding negatives (its caption with one attribute's
values swapped between the two digits), ``k`` of them (default 1, chosen with
``numpy.random.default_rng([seed, s, 1])``) are appended to the batch's texts. They are extra candidates for
the image->text loss only (see :func:`bindscope.training.train.clip_loss`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from bindscope.errors import BadInput


@dataclass
class TrainingData:
    """A split held in memory.

    Attributes:
        images: ``(N, H, W, 3)`` uint8 RGB.
        captions: N captions.
        hard_negatives: per sample, the captions of its ``"binding"`` negatives (possibly empty).
        source: the dataset folder; split: the split name.
    """

    images: np.ndarray
    captions: list[str]
    hard_negatives: list[list[str]]
    source: str
    split: str

    def __len__(self) -> int:
        return len(self.captions)


def load_split(path: str | os.PathLike, split: str = "train") -> TrainingData:
    """Read split ``split`` of the dataset at ``path`` into memory.

    Raises:
        DatasetError: the folder is not a finished dataset, lacks the split, or a shard is unreadable.
        BadInput: the split holds no samples.
    """
    from bindscope.format.reader import Dataset

    with Dataset(path) as dataset:
        part = dataset.split(split)
        images, captions, negatives = None, [], []
        for reader in part.shards():
            block = reader.all_images()
            if images is None:  # one array filled shard by shard: memory peaks at the split plus one shard
                images = np.empty((len(part), *block.shape[1:]), block.dtype)
            images[len(captions):len(captions) + len(block)] = block
            captions.extend(reader.captions)
            for local in range(reader.count):
                negatives.append([n.caption for n in reader.negatives(local) if n.kind == "binding"])
    if not captions:
        raise BadInput(f"split {split!r} of {str(path)!r} holds no samples")
    return TrainingData(images, captions, negatives, str(path), split)


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

    Every caption (and, with hard negatives, every binding negative) is tokenised once, up front, into one
    int64 tensor, and the images are held as one uint8 tensor, so a batch is a few tensor index operations.

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
        hard_negatives: binding negatives per sample appended to the texts (0 = none).
        rank, world_size: this process's part (``batch_size`` divides by ``world_size``).
    """

    def __init__(self, data: TrainingData, batch_size: int, seed: int, model, hard_negatives: int = 0,
                 rank: int = 0, world_size: int = 1):
        import torch

        from bindscope.training.model import make_tokenizer

        if hard_negatives < 0:
            raise BadInput(f"hard negatives per sample must be >= 0, got {hard_negatives}")
        batch_indices(0, len(data), batch_size, seed)  # validates the batch size
        self.data = data
        self.batch_size = batch_size
        self.seed = seed
        self.image_size = model.image_size
        self.hard_negatives = hard_negatives
        if batch_size % world_size or not 0 <= rank < world_size:
            raise BadInput(f"batch_size {batch_size} does not split into {world_size} equal parts "
                           f"(rank {rank})", param="batch_size")
        self.rank, self.world_size = rank, world_size
        self.images = torch.from_numpy(data.images)
        tokenizer = make_tokenizer(model)
        self.caption_tokens = tokenizer(data.captions)
        self.caption_truncated = np.array(tokenizer.is_truncated(data.captions), dtype=bool)
        if hard_negatives:
            self.negative_texts = [n for pool in data.hard_negatives for n in pool]
            self.negative_start = np.cumsum([0] + [len(pool) for pool in data.hard_negatives])
            self.negative_tokens = tokenizer(self.negative_texts)
            self.negative_truncated = np.array(tokenizer.is_truncated(self.negative_texts), dtype=bool)

    def __getitem__(self, step: int) -> dict:
        import torch

        from bindscope.training.model import preprocess_images

        indices = batch_indices(step, len(self.data), self.batch_size, self.seed)
        chosen, owner = [], []
        if self.hard_negatives:
            rng = np.random.default_rng([self.seed, step, 1])
            for position, i in enumerate(indices):
                size = len(self.data.hard_negatives[i])
                if size:
                    k = min(self.hard_negatives, size)
                    chosen.extend(self.negative_start[i] + j for j in sorted(rng.choice(size, size=k, replace=False)))
                    owner.extend([position] * k)
        chosen = np.asarray(chosen, dtype=np.int64)
        owner = np.asarray(owner, dtype=np.int64)
        truncated = int(self.caption_truncated[indices].sum()) + int(self.negative_truncated[chosen].sum()
                                                                     if len(chosen) else 0)
        part = self.batch_size // self.world_size
        counts = np.bincount(owner // part, minlength=self.world_size).tolist()
        if self.world_size > 1:  # this rank's slice of the global batch
            mine = owner // part == self.rank
            indices, chosen, owner = indices[self.rank * part:(self.rank + 1) * part], chosen[mine], owner[mine]
            owner = owner - self.rank * part
        tokens = self.caption_tokens[indices]
        negatives = []
        if len(chosen):
            tokens = torch.cat([tokens, self.negative_tokens[chosen]])
            negatives = [self.negative_texts[j] for j in chosen]
        return {"images": preprocess_images(self.images[indices], self.image_size),
                "texts": tokens, "num_captions": len(indices), "indices": torch.from_numpy(indices),
                "negatives": negatives, "negative_of": torch.from_numpy(owner),
                "negative_counts": counts, "truncated": truncated}
