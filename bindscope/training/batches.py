"""Training batch ``s`` of a split: a pure function of (seed, s), with NegCLIP hard negatives, the same whether its
samples are streamed from the shards or held in memory (:mod:`bindscope.training.data`).

The samples of batch ``s`` are :func:`bindscope.training.data.batch_indices` (an epoch-wise permutation seeded by
``(seed, epoch)``), so a run resumed at step ``s`` sees exactly the batches an uninterrupted run sees, whatever
the number of workers or processes.

Hard negatives (NegCLIP: Yuksekgonul et al., ICLR 2023; the MADMAN paper's baseline), ``mode=``:

- ``"stored"``: for each sample of the batch that has binding negatives (its caption with one attribute's values
  swapped between two objects: MADMAN, ComCO rendered with ``--attributes``), ``k`` of them (chosen with
  ``numpy.random.default_rng([seed, s, 1])``) are appended to the batch's texts.
- ``"shuffled"``: for each sample, up to ``k`` distinct captions made from its own caption by the NegCLIP /
  ARO recipe ``shuffle_nouns_and_adj`` (:func:`bindscope.text.negatives.shuffled_negative`: its nouns shuffled
  among themselves and its adjectives among themselves, every other word and the punctuation in place), tagged
  by :func:`bindscope.text.negatives.lexicon_tagger` with the dataset's lexicon, the ``j``-th seeded by
  ``(seed, s, position, j)``. A caption the recipe cannot change (fewer than two different nouns and fewer than
  two different attribute words, e.g. a one-object ComCO caption) adds none.

They are extra candidates for the image->text loss only (see :func:`bindscope.training.objective.clip_loss`).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from bindscope.errors import BadInput
from bindscope.training.data import TrainingData, batch_indices
from bindscope.training.options import NEGATIVES

TOKEN_CACHE = 16_384
"""Texts whose tokens a :class:`BatchSource` over streamed data keeps per process (the most recently used; about
8 MB): a caption seen again in a later epoch is not tokenised again. Over data in memory every text's tokens are
kept, as the texts themselves are."""


class BatchSource:
    """A map-style torch dataset whose item ``s`` is training batch ``s`` (use with ``batch_size=None``).

    Each item is a dict: ``images`` ``(B, 3, S, S)`` float32 (see :func:`~bindscope.training.model.
    preprocess_images`), ``texts`` ``(B + M, context_length)`` int64 (the B captions, then M hard negatives),
    ``num_captions`` = B, ``indices`` ``(B,)`` int64 positions, ``negatives`` the M hard-negative texts,
    ``negative_of`` ``(M,)`` int64 (the batch position each negative belongs to), ``truncated`` the number of
    texts longer than the context (in the whole global batch), ``negative_counts`` every rank's M.

    Under data-parallel training (``world_size`` N > 1) the item is rank ``rank``'s part of the global batch:
    the contiguous slice ``[rank B/N, (rank+1) B/N)`` of its samples and the hard negatives of those samples
    (the negatives are drawn for the whole global batch first, so every rank's choice is the one-process one);
    ``num_captions`` is then B/N and ``negative_of`` counts from the slice's start. Only the slice's pixels are
    read.

    Args:
        data: where the samples come from: a :class:`~bindscope.training.data.StreamedSplit` (read from the
            shards for each batch) or a :class:`~bindscope.training.data.TrainingData` (in memory).
        batch_size, seed: see :func:`~bindscope.training.data.batch_indices`.
        model: the :class:`~bindscope.training.model.ModelConfig` (image size, tokenizer, context length).
        hard_negatives: hard negatives per sample appended to the texts (0 = none).
        mode: ``"stored"`` (the samples' binding negatives) or ``"shuffled"`` (made from the captions with the
            data's lexicon; see the module docstring).
        rank, world_size: this process's part (``batch_size`` divides by ``world_size``).
    """

    def __init__(self, data, batch_size: int, seed: int, model, hard_negatives: int = 0,
                 mode: str = "stored", rank: int = 0, world_size: int = 1):
        from bindscope.training.model import make_tokenizer

        if hard_negatives < 0:
            raise BadInput(f"hard negatives per sample must be >= 0, got {hard_negatives}")
        if mode not in NEGATIVES[1:]:
            raise BadInput(f"negatives {mode!r} is not known; allowed: {', '.join(NEGATIVES)}",
                           param="negatives")
        batch_indices(0, len(data), batch_size, seed)  # validates the batch size
        if batch_size % world_size or not 0 <= rank < world_size:
            raise BadInput(f"batch_size {batch_size} does not split into {world_size} equal parts "
                           f"(rank {rank})", param="batch_size")
        self.data, self.batch_size, self.seed, self.model_config = data, batch_size, seed, model
        self.hard_negatives, self.mode, self.rank, self.world_size = hard_negatives, mode, rank, world_size
        self.tokenizer = make_tokenizer(model)
        self._tokens: OrderedDict[str, tuple[np.ndarray, bool]] = OrderedDict()
        self._cache_limit = None if isinstance(data, TrainingData) else TOKEN_CACHE
        if hard_negatives and mode == "shuffled":
            from bindscope.text.negatives import lexicon_tagger

            self.tagger = lexicon_tagger(data.lexicon.nouns, data.lexicon.adjectives)

    def __len__(self) -> int:
        return len(self.data) // self.batch_size

    def tokens(self, texts: list[str]) -> tuple[np.ndarray, list[bool]]:
        """``(len(texts), context_length)`` int64 token ids of ``texts`` and, per text, whether it was truncated;
        texts tokenised before are taken from the cache (:data:`TOKEN_CACHE`; every text over data in memory)."""
        cache = self._tokens
        missing = list(dict.fromkeys(t for t in texts if t not in cache))
        if missing:
            for text, row, cut in zip(missing, self.tokenizer(missing).numpy(), self.tokenizer.is_truncated(missing)):
                cache[text] = (row, cut)
        found = [cache[t] for t in texts]
        if self._cache_limit is not None:
            for text in texts:
                cache.move_to_end(text)
            while len(cache) > self._cache_limit:
                cache.popitem(last=False)
        return np.stack([row for row, _ in found]), [cut for _, cut in found]

    def shuffled(self, step: int, position: int, caption: str) -> list[str]:
        """The shuffled negatives of ``caption`` (position ``position``) in batch ``step``: up to
        ``hard_negatives`` distinct captions, none equal to the caption."""
        from bindscope.text.negatives import shuffled_negative

        out = []
        for j in range(self.hard_negatives):
            text = shuffled_negative(caption, (self.seed, step, position, j), tagger=self.tagger)
            if text is not None and text != caption and text not in out:
                out.append(text)
        return out

    def __getitem__(self, step: int) -> dict:
        import torch

        from bindscope.training.model import preprocess_images

        indices = batch_indices(step, len(self.data), self.batch_size, self.seed)
        stored = bool(self.hard_negatives) and self.mode == "stored"
        captions, pools = self.data.texts(indices, negatives=stored)
        owner, negatives = [], []
        if stored:
            rng = np.random.default_rng([self.seed, step, 1])
            for position, pool in enumerate(pools):
                if pool:
                    k = min(self.hard_negatives, len(pool))
                    negatives.extend(pool[j] for j in sorted(rng.choice(len(pool), size=k, replace=False)))
                    owner.extend([position] * k)
        elif self.hard_negatives:
            for position, (i, caption) in enumerate(zip(indices.tolist(), captions)):
                made = self.shuffled(step, i, caption)
                negatives.extend(made)
                owner.extend([position] * len(made))
        # the negatives are made for the whole global batch, so every rank's choice is the one-process one
        tokens, cut = self.tokens(captions + negatives)
        owner = np.asarray(owner, dtype=np.int64)
        part = self.batch_size // self.world_size
        counts = np.bincount(owner // part, minlength=self.world_size).tolist()
        if self.world_size > 1:  # this rank's slice of the global batch
            mine = owner // part == self.rank
            rows = np.concatenate([np.arange(self.rank * part, (self.rank + 1) * part),
                                   len(captions) + np.flatnonzero(mine)])
            indices = indices[self.rank * part:(self.rank + 1) * part]
            negatives = [text for text, keep in zip(negatives, mine) if keep]
            owner = owner[mine] - self.rank * part
            tokens = tokens[rows]
        return {"images": preprocess_images(self.data.pixels(indices), self.model_config.image_size,
                                            self.model_config),
                "texts": torch.from_numpy(tokens), "num_captions": len(indices), "indices": torch.from_numpy(indices),
                "negatives": negatives, "negative_of": torch.from_numpy(owner), "negative_counts": counts,
                "truncated": sum(cut)}
