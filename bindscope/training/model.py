"""A small CLIP trained from scratch, built from open_clip's own model classes (the MADMAN study's model).

The MADMAN paper (Gurung, Hoffmann, Brox, GCPR 2025, docs/papers.md section 2) trains small CLIPs from scratch
with embedding sizes 32-256 and batch sizes 16-256. This module builds such a model as an
``open_clip.CLIP`` with a small vision tower (a ViT, ``open_clip.transformer.VisionTransformer``, or a CNN,
``open_clip.modified_resnet.ModifiedResNet``) and a small causal text transformer, tokenised with open_clip's
CLIP BPE tokenizer (``open_clip.tokenizer.SimpleTokenizer``, vocabulary 49,408). Nothing here is pretrained.

Image preprocessing (:func:`preprocess_images`): uint8 RGB ``(N, H, W, 3)`` -> float ``(N, 3, S, S)``, resized
to the model's square ``image_size`` S with bilinear, antialiased interpolation when the dataset's canvas
differs (no crop, so no object near an edge is cut off), scaled to [0, 1] and normalised with open_clip's
``OPENAI_DATASET_MEAN`` / ``OPENAI_DATASET_STD``. No augmentation: flips, crops and colour jitter would change
the very attributes (rotation, size, colour) the captions describe.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np

from bindscope.errors import BadInput

VISION_TOWERS = ("vit", "resnet")


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of a small CLIP (all sizes in units of features or pixels).

    Attributes:
        embed_dim: joint embedding dimension D (the paper uses 32-256).
        image_size: square input side S in pixels; images are resized to S x S.
        vision: ``"vit"`` (vision transformer) or ``"resnet"`` (open_clip's ModifiedResNet CNN).
        vision_width: ViT token width, or the ResNet's base channel width.
        vision_layers: ViT blocks, or residual blocks per ResNet stage (4 stages).
        patch_size: ViT patch side in pixels (S must be divisible by it); unused by the ResNet.
        text_width: text transformer width.
        text_layers: text transformer blocks.
        head_width: features per attention head (heads = width / head_width) in both towers.
        mlp_ratio: transformer MLP hidden size / width.
        context_length: text tokens per caption including start and end tokens; longer captions are
            truncated (the number truncated is counted and logged).
    """

    embed_dim: int = 64
    image_size: int = 64
    vision: str = "vit"
    vision_width: int = 128
    vision_layers: int = 4
    patch_size: int = 8
    text_width: int = 128
    text_layers: int = 4
    head_width: int = 32
    mlp_ratio: float = 2.0
    context_length: int = 32

    def __post_init__(self):
        if self.vision not in VISION_TOWERS:
            raise BadInput(f"vision tower {self.vision!r} is not known; choose one of {', '.join(VISION_TOWERS)}")
        for name in ("embed_dim", "image_size", "vision_width", "vision_layers", "patch_size", "text_width",
                     "text_layers", "head_width", "context_length"):
            if getattr(self, name) < 1:
                raise BadInput(f"model {name} must be a positive integer, got {getattr(self, name)}")
        if self.vision == "vit" and self.image_size % self.patch_size:
            raise BadInput(f"image size {self.image_size} is not divisible by patch size {self.patch_size}; "
                           "choose an image size that is a multiple of the patch size")
        if self.vision == "resnet" and self.image_size % 32:
            raise BadInput(f"the resnet vision tower needs an image size divisible by 32, got {self.image_size}")
        for name in ("vision_width", "text_width"):
            if getattr(self, name) % self.head_width:
                raise BadInput(f"model {name} {getattr(self, name)} is not divisible by head width "
                               f"{self.head_width}")
        if self.context_length < 3:
            raise BadInput(f"context length must be at least 3 tokens, got {self.context_length}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "ModelConfig":
        """Rebuild from :meth:`to_dict` output. Raises BadInput on unknown keys."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise BadInput(f"unknown model config key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)


def build_model(config: ModelConfig):
    """A randomly initialised ``open_clip.CLIP`` for ``config`` (GELU, learnable logit scale init 1/0.07).

    ``model.encode_image`` takes ``(N, 3, S, S)`` float32, ``model.encode_text`` ``(N, context_length)`` int64
    token ids; both return ``(N, embed_dim)`` (L2-normalised with ``normalize=True``). The caller seeds torch
    first for reproducible weights.
    """
    import open_clip
    from open_clip.model import CLIPTextCfg, CLIPVisionCfg

    if config.vision == "vit":
        vision = CLIPVisionCfg(layers=config.vision_layers, width=config.vision_width,
                               head_width=config.head_width, mlp_ratio=config.mlp_ratio,
                               patch_size=config.patch_size, image_size=config.image_size)
    else:  # open_clip builds a ModifiedResNet when `layers` is a 4-tuple
        vision = CLIPVisionCfg(layers=(config.vision_layers,) * 4, width=config.vision_width,
                               head_width=config.head_width, image_size=config.image_size)
    text = CLIPTextCfg(context_length=config.context_length, width=config.text_width,
                       heads=config.text_width // config.head_width, layers=config.text_layers,
                       mlp_ratio=config.mlp_ratio)
    return open_clip.CLIP(embed_dim=config.embed_dim, vision_cfg=vision, text_cfg=text)


class Tokenizer:
    """open_clip's CLIP BPE tokenizer at a fixed context length, counting truncated texts.

    Calling it on ``n`` texts returns ``(n, context_length)`` int64 token ids (start token, BPE tokens, end
    token, zero padding). open_clip truncates silently (DESIGN.md pitfall); :attr:`truncated` counts how many
    texts lost tokens so callers can report it.
    """

    def __init__(self, context_length: int):
        from open_clip.tokenizer import SimpleTokenizer

        self.context_length = context_length
        self._tokenizer = SimpleTokenizer(context_length=context_length)
        self.truncated = 0

    def __call__(self, texts: list[str]):
        texts = list(texts)
        self.truncated += sum(self.is_truncated(texts))
        return self._tokenizer(texts, context_length=self.context_length)

    def is_truncated(self, texts: list[str]) -> list[bool]:
        """Per text: True when start + BPE tokens + end exceed the context (open_clip cuts them silently)."""
        return [len(self._tokenizer.encode(t)) + 2 > self.context_length for t in texts]

    def __getstate__(self):  # DataLoader workers get a fresh tokenizer (the BPE cache need not travel)
        return {"context_length": self.context_length}

    def __setstate__(self, state):
        self.__init__(state["context_length"])


def preprocess_images(images: np.ndarray, image_size: int):
    """``(N, H, W, 3)`` uint8 RGB -> ``(N, 3, image_size, image_size)`` float32 torch tensor, normalised.

    Resizing (only when ``(H, W) != (image_size, image_size)``) is bilinear with antialiasing, to the full
    square (no crop). Values: ``(x / 255 - OPENAI_DATASET_MEAN) / OPENAI_DATASET_STD`` per channel.
    """
    import torch
    import torch.nn.functional as F
    from open_clip.constants import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD

    x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float().div_(255.0)
    if x.shape[-2:] != (image_size, image_size):
        x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", antialias=True, align_corners=False)
    mean = torch.tensor(OPENAI_DATASET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(OPENAI_DATASET_STD).view(1, 3, 1, 1)
    return (x - mean) / std
