"""The encoder interface every evaluation, training and alignment part uses.

Concrete adapters live in their own modules: open_clip models in :mod:`bindscope.encoders.open_clip`,
sentence-transformers text models in :mod:`bindscope.encoders.sentence_transformers`, ``transformers`` text
encoders in :mod:`bindscope.encoders.hf_text`, ``transformers`` vision-language models in
:mod:`bindscope.encoders.hf_vision_language`, CLIPs trained by ``bindscope train`` in
:mod:`bindscope.training.checkpoint`. :mod:`bindscope.encoders.registry` maps a model name or path to the loader of
one (:func:`bindscope.encoders.registry.load_encoder`, from an
:class:`~bindscope.encoders.settings.EncoderSettings`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

from bindscope.errors import PRECISIONS, BadInput, check_device, resolve_device  # noqa: F401  (imported from here)

if TYPE_CHECKING:
    import torch


CPU_BATCH_SIZE = 64
CUDA_BATCH_SIZE = 512


def default_batch_size(device: str) -> int:
    """Inputs per forward pass when none is given: :data:`CPU_BATCH_SIZE` (64) on a CPU, where a larger batch
    is no faster and only holds more activations, and :data:`CUDA_BATCH_SIZE` (512) on a GPU, where small
    batches leave the device idle between launches (ViT-B/32 at 512 images of 224 px needs about 2 GB in
    inference; ViT-L/14 at 336 px still fits a 24 GB card). ``auto`` counts as CUDA when torch sees a GPU."""
    if device == "auto":
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            return CPU_BATCH_SIZE
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    return CUDA_BATCH_SIZE if str(device).startswith("cuda") else CPU_BATCH_SIZE


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` ``(N, D)`` scaled to unit L2 norm, keeping a float ``x``'s dtype; norms are floored at
    1e-12, so a zero row stays zero. The one normalisation of embeddings used everywhere."""
    x = np.asarray(x)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def square_resize(x, size: int, interpolation: str = "bicubic"):
    """The one image preprocessing rule (open_clip adapters and the CLIPs ``madman train`` makes): a
    ``(N, 3, H, W)`` float torch tensor in [0, 1] padded with black to a centred square when H != W (never
    cropped), then resized to ``(size, size)`` pixels with ``interpolation`` (antialiased for bilinear and
    bicubic; torch.nn.functional.interpolate) when its side differs. Returns the new tensor."""
    import torch.nn.functional as F

    height, width = x.shape[-2:]
    if height != width:
        side = max(height, width)
        top, left = (side - height) // 2, (side - width) // 2
        x = F.pad(x, (left, side - width - left, top, side - height - top), value=0.0)
    if x.shape[-1] != size:
        x = F.interpolate(x, size=(size, size), mode=interpolation,
                          antialias=interpolation in ("bilinear", "bicubic"), align_corners=False)
    return x


def device_preprocess(images: torch.Tensor, size: int, mean, std, interpolation: str = "bicubic",
                      dtype: torch.dtype | None = None) -> torch.Tensor:
    """uint8 images to a CLIP model's input, on whatever device ``images`` is on (the GPU, for speed).

    The open_clip rule of :func:`bindscope.encoders.interface.square_resize`: [0, 1] floats, padded with black
    to a centred square when not square (never cropped), resized to ``size`` x ``size`` with ``interpolation``
    (antialiased), clamped to [0, 1], normalised with ``mean`` and ``std`` (3 values each), cast to ``dtype``
    (default float32).
    For square images this is open_clip's own PIL preprocessing (``open_clip.image_transform``: resize the
    shorter side, centre crop, normalise) but for PIL's rounding and clamping to 8 bits after each of its two
    resampling passes. Measured on MADMAN digits upsampled 96 -> 224 px (tests/test_eval_feed.py): 99.8 % of the
    values agree within 0.02 after normalisation (about 5/255 before), the mean difference is below 0.001, the
    largest (the bicubic overshoot PIL clips between its passes, at sharp stroke edges) below 0.3; without
    resizing (224 px images) the two are identical.

    Args:
        images: ``(B, 3, H, W)`` or ``(B, H, W, 3)`` uint8 tensor.
        size: the model's input side, pixels. mean, std: per channel, in [0, 1] units.

    Returns:
        ``(B, 3, size, size)`` tensor of ``dtype`` on ``images.device``.

    Raises:
        ValueError: not a 4-d uint8 tensor with 3 channels first or last.
    """
    import torch

    if images.dtype != torch.uint8 or images.ndim != 4 or 3 not in (images.shape[1], images.shape[-1]):
        raise ValueError(f"images must be (B, 3, H, W) or (B, H, W, 3) uint8, got {tuple(images.shape)} "
                         f"{images.dtype}")
    if images.shape[1] != 3:
        images = images.permute(0, 3, 1, 2)
    x = square_resize(images.float().div_(255.0), size, interpolation).clamp_(0.0, 1.0)
    m = torch.as_tensor(mean, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    s = torch.as_tensor(std, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    return ((x - m) / s).to(torch.float32 if dtype is None else dtype)


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
        normalised: True (the contract above); False on the copy :meth:`unnormalised` makes.
        can_unnormalise: whether :meth:`unnormalised` is available for this kind of encoder.
    """

    name: str
    pretrained: str
    embed_dim: int
    supports_images: bool = True
    cache_key: str
    forward_seconds: float = 0.0
    preprocessing: str = ""
    normalised: bool = True
    can_unnormalise: bool = False

    def unnormalised(self) -> "EncoderAdapter":
        """This encoder giving the model's embeddings *before* their L2 normalisation, as its projection heads
        return them (float32 ``(N, D)``, rows of any norm): a shallow copy sharing the model, with ``normalised``
        False and ``cache_key`` ending in ``|unnormalised``, so the embedding cache keeps the two apart. The LABCLIP
        authors' probes read these (``bindscope probe --protocol authors``).

        Raises:
            BadInput: this kind of encoder does not offer them (open_clip models, ``transformers`` vision-language
                models and bindscope's own checkpoints do).
        """
        import copy

        if not self.can_unnormalise:
            raise BadInput(f"model {self.name!r} gives only L2-normalised embeddings; embeddings before the "
                           "normalisation (the LABCLIP authors' probe inputs) need an open_clip model, a transformers "
                           "vision-language model (hf-vlm:) or a bindscope checkpoint", param="model")
        out = copy.copy(self)
        out.normalised = False
        out.cache_key = f"{self.cache_key}|unnormalised"
        return out

    @abstractmethod
    def encode_texts(self, texts: list[str]) -> np.ndarray:
        """Encode captions or names. Returns ``(len(texts), D)`` float32 with unit L2 norm per row."""

    def encode_images(self, images: np.ndarray) -> np.ndarray:
        """Encode ``(N, H, W, 3)`` uint8 RGB images. Returns ``(N, D)`` float32 with unit L2 norm per row.

        Raises:
            BadInput: the encoder has no image tower.
        """
        raise BadInput(f"model {self.name!r} is text-only: it cannot encode images")

    def truncated(self, texts: list[str]) -> list[bool]:
        """For each text, whether the tokenizer cuts it at the model's context length (e.g. 77 tokens).

        The default says False for every text; adapters with a fixed context length override it.
        """
        return [False] * len(texts)

    def limit_context(self, tokens: int) -> None:
        """Cut every text to at most ``tokens`` tokens (start and end tokens included) from now on
        (:attr:`~bindscope.encoders.settings.EncoderSettings.context_length`): ``context_length`` becomes
        ``tokens``, :meth:`truncated` counts against it and ``cache_key`` records it. Adapters whose tokenizer
        can be cut override this (after :meth:`check_context`); the default refuses.

        Raises:
            BadInput: this encoder's texts cannot be cut, or ``tokens`` exceeds its own context length.
        """
        raise BadInput(f"context_length {tokens} is not allowed for model {self.name!r}: its texts cannot be cut "
                       "to another length; leave context_length unset", param="context_length")

    def check_context(self, tokens: int) -> int:
        """``tokens`` if it is at most the model's own ``context_length``; BadInput naming both otherwise."""
        own = getattr(self, "context_length", None)
        if own is not None and tokens > own:
            raise BadInput(f"context_length {tokens} is not allowed for model {self.name!r}: its own context "
                           f"length is {own} tokens; use 2..{own}", param="context_length")
        return tokens


def check_images(images) -> np.ndarray:
    """``images`` as an ``(N, H, W, 3)`` uint8 array.

    Raises:
        BadInput: any other shape or dtype.
    """
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

