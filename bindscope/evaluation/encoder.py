"""The encoder interface every evaluation, training and alignment part uses.

Concrete adapters (open_clip models, sentence-transformers text models, CLIPs trained by ``madman train``)
live in :mod:`bindscope.evaluation.adapters`; :func:`bindscope.evaluation.adapters.load_adapter` picks one
from a model name or checkpoint path.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import contextmanager

import numpy as np


class EncoderAdapter(ABC):
    """A frozen image and/or text encoder giving L2-normalised float32 embeddings.

    Attributes:
        name: model name as the user addressed it (open_clip name, ``sentence-transformers/...``, or a path).
        pretrained: resolved pretrained tag (``"openai"``, ``"none"`` for random weights, a path, ...).
        embed_dim: embedding dimension D.
        supports_images: False for text-only encoders (e.g. sentence-transformers models).
        cache_key: a string that identifies model and weights exactly (used by the embedding cache).
        forward_seconds: wall-clock seconds spent in the encoders' forward passes so far (optional
            bookkeeping for benchmarks; adapters that do not measure it leave 0.0).
        preprocessing: how images are brought to the model's input (recorded in results).
    """

    name: str
    pretrained: str
    embed_dim: int
    supports_images: bool = True
    cache_key: str
    forward_seconds: float = 0.0
    preprocessing: str = ""

    @abstractmethod
    def encode_texts(self, texts: list[str]) -> np.ndarray:
        """Encode captions or names. Returns ``(len(texts), D)`` float32 with unit L2 norm per row."""

    def encode_images(self, images: np.ndarray) -> np.ndarray:
        """Encode ``(N, H, W, 3)`` uint8 RGB images. Returns ``(N, D)`` float32 with unit L2 norm per row.

        Raises:
            BadInput: the encoder has no image tower.
        """
        from bindscope.errors import BadInput

        raise BadInput(f"model {self.name!r} is text-only: it cannot encode images")

    def truncated(self, texts: list[str]) -> list[bool]:
        """For each text, whether the tokenizer cuts it at the model's context length (e.g. 77 tokens).

        The default says False for every text; adapters with a fixed context length override it.
        """
        return [False] * len(texts)


def check_images(images) -> np.ndarray:
    """``images`` as an ``(N, H, W, 3)`` uint8 array.

    Raises:
        BadInput: any other shape or dtype.
    """
    from bindscope.errors import BadInput

    images = np.asarray(images)
    if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
        raise BadInput(f"images must be (N, H, W, 3) uint8, got {images.shape} {images.dtype}")
    return images


@contextmanager
def torch_threads(count: int):
    """Run a block with ``torch.set_num_threads(count)`` and restore the previous count afterwards.

    The probes and LABCLIP optimise small matrices, where one thread avoids thread-pool overhead; on a busy
    machine more threads than free cores can make torch many times slower (``madman audit --threads``).
    """
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
