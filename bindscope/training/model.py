"""A small CLIP trained from scratch, built from open_clip's own model classes (the MADMAN study's model).

The MADMAN paper (Gurung, Hoffmann, Brox, GCPR 2025, docs/papers.md section 2) trains small CLIPs from scratch
with embedding sizes 32-256 and batch sizes 16-256. This module builds such a model as an
``open_clip.CLIP`` with a small vision tower (a ViT, ``open_clip.transformer.VisionTransformer``; open_clip's
CNN ``open_clip.modified_resnet.ModifiedResNet``; or :func:`build_conv_tower`, a light CNN for CPU training) and a
small causal text transformer. Text is tokenised with open_clip's CLIP BPE tokenizer
(``open_clip.tokenizer.SimpleTokenizer``, vocabulary 49,408) or, with ``tokenizer="word"``, by
:class:`WordTokenizer`: one token per word (:func:`caption_words`) of a vocabulary built from the training captions
(MADMAN captions with the default value sets use 32 words, so the text tower's embedding table shrinks from
49,408 rows to 36).
Nothing here is pretrained.

Image preprocessing (:func:`preprocess_images`): uint8 RGB ``(N, H, W, 3)`` -> float ``(N, 3, S, S)``, resized
to the model's square ``image_size`` S with bilinear, antialiased interpolation when the dataset's canvas
differs (no crop, so no object near an edge is cut off), scaled to [0, 1] and normalised with open_clip's
``OPENAI_DATASET_MEAN`` / ``OPENAI_DATASET_STD``. No augmentation: flips, crops and colour jitter would change
the very attributes (rotation, size, colour) the captions describe.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from bindscope.errors import BadInput
from bindscope.training.options import DEFAULTS, MLP_RATIO, MODEL_IMAGE_SIZE, MODEL_KEYS, OPTION, option_fields

MAX_VOCABULARY = 1_000_000  # words of the word tokenizer
MAX_MLP_RATIO = 16.0
INTERPOLATIONS = ("bilinear", "bicubic")  # image resizing of the model input
# Word tokenizer ids: 0 padding, 1 unknown word, 2 start, 3.. the vocabulary's words, then the end token last
# (open_clip's text tower pools at the largest id of each row, its "argmax" pooling).
WORD_SPECIALS = ("<pad>", "<unk>", "<start>")
SMALL_CLIP_ONLY = (*(k for k in MODEL_KEYS if k not in ("embed_dim", "context_length")), "mlp_ratio", "vocabulary")
"""The fields that describe a small CLIP only: a fine-tuned open_clip model's ``to_dict`` leaves them out (its
``architecture`` says what it is)."""
_FINETUNE_FIELDS = {"open_clip": "", "image_mean": (), "image_std": (), "interpolation": "bilinear",
                    "architecture": {}}  # left out of a small CLIP's dict (as they are unset)


@dataclass(frozen=True)
@option_fields("model")
class ModelConfig:
    """Architecture of a small CLIP, or of a fine-tuned open_clip model (all sizes in units of features or
    pixels). The fields of the training options' group ``"model"`` (embed_dim, vision, vision_width,
    vision_layers, patch_size, head_width, text_width, text_layers, tokenizer, context_length) come from
    :data:`bindscope.training.options.OPTIONS`, with their defaults and ranges.

    Attributes:
        embed_dim: joint embedding dimension D (the paper uses 32-256).
        image_size: square input side S in pixels; images are resized to S x S.
        vision: ``"vit"`` (vision transformer), ``"resnet"`` (open_clip's ModifiedResNet CNN) or ``"cnn"``
            (:func:`build_conv_tower`, a light CNN).
        vision_width: ViT token width, the ResNet's base channel width, or the light CNN's channels at S/8.
        vision_layers: ViT blocks, residual blocks per ResNet stage (4 stages), or the light CNN's residual
            blocks at S/8.
        patch_size: ViT patch side in pixels (S must be divisible by it); unused by the CNNs.
        text_width: text transformer width.
        text_layers: text transformer blocks.
        head_width: features per attention head (heads = width / head_width) in both towers.
        mlp_ratio: transformer MLP hidden size / width.
        context_length: text tokens per caption including start and end tokens; longer captions are
            truncated (the number truncated is counted and logged).
        tokenizer: ``"bpe"`` (open_clip's CLIP BPE) or ``"word"`` (:class:`WordTokenizer`).
        vocabulary: the word tokenizer's words (token ids 3, 4, ... in this order); empty = built from the
            training data by ``madman train`` (:func:`build_vocabulary`). Must be empty for ``"bpe"``.
        open_clip: a fine-tuned open_clip model's name (``bindscope train --init``; empty for a small CLIP). The
            model is then that architecture: ``embed_dim``, ``image_size`` and ``context_length`` are its own,
            ``architecture`` is open_clip's model config of that name (``open_clip.get_model_config``: its
            ``vision_cfg`` and ``text_cfg``, e.g. ViT-B-32's width 768, 12 layers, patch 32), and the small
            CLIP's fields (:data:`SMALL_CLIP_ONLY`) keep their defaults and are left out of :meth:`to_dict`.
        image_mean, image_std: the input normalisation (3 values each; empty: ``OPENAI_DATASET_MEAN`` /
            ``OPENAI_DATASET_STD``). interpolation: ``"bilinear"`` or ``"bicubic"`` resizing of the input.
    """

    image_size: int = MODEL_IMAGE_SIZE
    mlp_ratio: float = MLP_RATIO
    vocabulary: tuple[str, ...] = ()
    open_clip: str = ""
    image_mean: tuple[float, ...] = ()
    image_std: tuple[float, ...] = ()
    interpolation: str = "bilinear"
    architecture: dict = field(default_factory=dict, hash=False)

    def __post_init__(self):
        for name in ("image_mean", "image_std"):
            value = getattr(self, name)
            if not isinstance(value, (list, tuple)) or len(value) not in (0, 3) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 10 for v in value):
                raise BadInput(f"{name} must be empty (open_clip's OPENAI_DATASET values) or 3 numbers in (0, 10), "
                               f"got {_short(value)}", param=name)
            object.__setattr__(self, name, tuple(float(v) for v in value))
        if self.interpolation not in INTERPOLATIONS:
            raise BadInput(f"interpolation {self.interpolation!r} is not allowed; use one of "
                           f"{', '.join(INTERPOLATIONS)}", param="interpolation")
        if not isinstance(self.vocabulary, (list, tuple)) or not all(isinstance(w, str) for w in self.vocabulary):
            raise BadInput(f"vocabulary must be a list of words (strings), got {_short(self.vocabulary)}",
                           param="vocabulary")
        if len(self.vocabulary) > MAX_VOCABULARY:
            raise BadInput(f"vocabulary of {len(self.vocabulary)} words is not allowed; at most {MAX_VOCABULARY}",
                           param="vocabulary")
        object.__setattr__(self, "vocabulary", tuple(self.vocabulary))
        for name in (*MODEL_KEYS, "image_size"):
            OPTION[name].check(getattr(self, name), allow_none=False)
        if self.open_clip:
            self._check_open_clip()
            return
        if self.architecture:
            raise BadInput("architecture is only recorded for a fine-tuned open_clip model (open_clip=NAME)",
                           param="architecture")
        if self.tokenizer == "bpe" and self.vocabulary:
            raise BadInput("a vocabulary is only used by the word tokenizer (tokenizer='word')")
        bad = [w for w in self.vocabulary if not w or w != w.strip().lower() or " " in w or w in WORD_SPECIALS]
        if bad or len(set(self.vocabulary)) != len(self.vocabulary):
            raise BadInput(f"vocabulary words must be unique, lowercase, without spaces and not one of "
                           f"{', '.join(WORD_SPECIALS)}; got {bad or 'duplicates'}")
        ratio = self.mlp_ratio
        if not (isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and 0 < ratio <= MAX_MLP_RATIO):
            raise BadInput(f"mlp_ratio {ratio!r} is not allowed; use a number in (0, {MAX_MLP_RATIO:g}]",
                           param="mlp_ratio")
        if self.vision == "vit" and self.image_size % self.patch_size:
            raise BadInput(f"image_size {self.image_size} is not divisible by patch_size={self.patch_size}; "
                           "choose a multiple of the patch size", param="image_size")
        if self.vision == "cnn" and self.image_size % 8:
            raise BadInput(f"image_size {self.image_size} is not allowed: the cnn vision tower needs a multiple of 8",
                           param="image_size")
        if self.vision == "resnet" and self.image_size % 32:
            raise BadInput(f"image_size {self.image_size} is not allowed: the resnet vision tower needs a multiple "
                           "of 32", param="image_size")
        for name in ("vision_width", "text_width"):
            if getattr(self, name) % self.head_width:
                raise BadInput(f"{name} {getattr(self, name)} is not divisible by the head width "
                               f"{self.head_width}", param=name)

    def _check_open_clip(self) -> None:
        """The checks of a fine-tuned open_clip model; fills :attr:`architecture` from open_clip when empty.
        The small CLIP's fields must keep their defaults (records written before ``architecture`` existed hold
        exactly those)."""
        import open_clip

        if not isinstance(self.open_clip, str) or self.open_clip not in open_clip.list_models():
            raise BadInput(f"open_clip model {_short(self.open_clip)} is not a name open_clip.list_models() knows",
                           param="init")
        defaults = {**DEFAULTS, "mlp_ratio": MLP_RATIO, "vocabulary": ()}
        for name in SMALL_CLIP_ONLY:
            if getattr(self, name) != defaults[name]:
                raise BadInput(f"{name} {_short(getattr(self, name))} does not apply to the open_clip model "
                               f"{self.open_clip!r}, which has its own architecture", param=name)
        own = json.loads(json.dumps(open_clip.get_model_config(self.open_clip)))
        if not self.architecture:
            object.__setattr__(self, "architecture", own)
        elif self.architecture != own:
            raise BadInput(f"architecture {_short(self.architecture)} is not open_clip's config of "
                           f"{self.open_clip!r}", param="architecture")

    def to_dict(self) -> dict:
        """The config as plain JSON values. A small CLIP's dict leaves out the fine-tuning fields (so it is the
        same as before they existed); a fine-tuned open_clip model's leaves out :data:`SMALL_CLIP_ONLY`."""
        data = asdict(self)
        data["vocabulary"] = list(self.vocabulary)
        for name in SMALL_CLIP_ONLY if self.open_clip else ():
            del data[name]
        for name, default in _FINETUNE_FIELDS.items():
            if data[name] == default:
                del data[name]
            elif isinstance(data[name], tuple):
                data[name] = list(data[name])
        return data

    @property
    def vocab_size(self) -> int:
        """Rows of the text tower's token embedding: 49,408 (BPE) or the words plus 4 special tokens."""
        return 49408 if self.tokenizer == "bpe" else len(self.vocabulary) + len(WORD_SPECIALS) + 1

    @classmethod
    def from_dict(cls, data: dict) -> "ModelConfig":
        """Rebuild from :meth:`to_dict` output. Raises BadInput on unknown keys or a bad value (named)."""
        if not isinstance(data, dict) or not all(isinstance(key, str) for key in data):
            raise BadInput(f"a model config must be a mapping of names to values, got {_short(data)}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise BadInput(f"unknown model config key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)


def _short(value, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters."""
    text = repr(value) if not isinstance(value, (list, tuple, dict)) or len(value) < 100 else \
        f"{type(value).__name__} of {len(value)} entries"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def build_conv_tower(config: ModelConfig):
    """The light CNN image tower (``vision="cnn"``): a ``torch.nn.Sequential`` of torchvision building blocks.

    With C = ``vision_width``: a 3x3 convolution at full resolution to C/4 channels, three stride-2 3x3
    convolutions to C/2, C and C channels (torchvision ``Conv2dNormActivation``: convolution, BatchNorm, ReLU;
    an S/8 x S/8 feature map whose cells see 17 px), then ``vision_layers`` residual blocks at S/8 (torchvision
    ``BasicBlock``; each widens the receptive field by 16 px), global average pooling and a linear projection
    to ``embed_dim``. Input ``(N, 3, S, S)`` float32, output ``(N, embed_dim)``. Much cheaper than open_clip's
    ModifiedResNet (whose channels grow to 32 C), and its first layer sees full-resolution detail (stroke
    widths, fracture gaps).
    """
    import torch
    from torchvision.models.resnet import BasicBlock
    from torchvision.ops import Conv2dNormActivation

    width = config.vision_width
    widths = [max(1, width // 4), max(1, width // 2), width, width]
    layers = [Conv2dNormActivation(3, widths[0], 3)]
    layers += [Conv2dNormActivation(a, b, 3, stride=2) for a, b in zip(widths, widths[1:])]
    layers += [BasicBlock(width, width) for _ in range(config.vision_layers)]
    layers += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(width, config.embed_dim)]
    return torch.nn.Sequential(*layers)


def build_model(config: ModelConfig):
    """A randomly initialised ``open_clip.CLIP`` for ``config`` (GELU, learnable logit scale init 1/0.07); with
    ``config.open_clip`` that open_clip model (``open_clip.create_model(name, pretrained=None)``).

    ``model.encode_image`` takes ``(N, 3, S, S)`` float32, ``model.encode_text`` ``(N, context_length)`` int64
    token ids; both return ``(N, embed_dim)`` (L2-normalised with ``normalize=True``). The caller seeds torch
    first for reproducible weights. With ``vision="cnn"`` the ``visual`` module is :func:`build_conv_tower`'s.
    """
    import open_clip
    from open_clip.model import CLIPTextCfg, CLIPVisionCfg

    if config.open_clip:  # the architecture of a fine-tuned model; its weights are loaded by the caller
        import torch

        from bindscope.encoders.open_clip_weights import no_random_init_warning

        with no_random_init_warning():
            return open_clip.create_model(config.open_clip, pretrained=None, pretrained_text=False,
                                          device=torch.get_default_device())  # "meta" under torch.device("meta")
    if config.vision == "vit":
        vision = CLIPVisionCfg(layers=config.vision_layers, width=config.vision_width,
                               head_width=config.head_width, mlp_ratio=config.mlp_ratio,
                               patch_size=config.patch_size, image_size=config.image_size)
    elif config.vision == "cnn":  # a minimal ViT placeholder, replaced below
        vision = CLIPVisionCfg(layers=1, width=config.head_width, head_width=config.head_width,
                               patch_size=config.image_size, image_size=config.image_size)
    else:  # open_clip builds a ModifiedResNet when `layers` is a 4-tuple
        vision = CLIPVisionCfg(layers=(config.vision_layers,) * 4, width=config.vision_width,
                               head_width=config.head_width, image_size=config.image_size)
    text = CLIPTextCfg(context_length=config.context_length, vocab_size=config.vocab_size, width=config.text_width,
                       heads=config.text_width // config.head_width, layers=config.text_layers,
                       mlp_ratio=config.mlp_ratio)
    model = open_clip.CLIP(embed_dim=config.embed_dim, vision_cfg=vision, text_cfg=text)
    if config.vision == "cnn":
        model.visual = build_conv_tower(config)
    return model


class OpenClipTokenizer:
    """The tokenizer of an open_clip model (``open_clip.get_tokenizer(name)``) at its context length, counting
    truncated texts (start and end tokens included) as :class:`Tokenizer` does."""

    def __init__(self, name: str, context_length: int):
        import open_clip

        self.context_length = context_length
        self._tokenizer = open_clip.get_tokenizer(name, context_length=context_length)
        self.truncated = 0

    def __call__(self, texts: list[str]):
        texts = list(texts)
        self.truncated += sum(self.is_truncated(texts))
        return self._tokenizer(texts, context_length=self.context_length)

    def is_truncated(self, texts: list[str]) -> list[bool]:
        """Per text: True when its tokens, start and end included, exceed the context (open_clip cuts them)."""
        inner = self._tokenizer
        if hasattr(inner, "encode"):  # open_clip's SimpleTokenizer (CLIP BPE)
            return [len(inner.encode(t)) + 2 > self.context_length for t in texts]
        return [len(ids) > self.context_length for ids in inner.tokenizer(list(texts))["input_ids"]]  # HF


class Tokenizer(OpenClipTokenizer):
    """open_clip's CLIP BPE tokenizer at a fixed context length, counting truncated texts.

    Calling it on ``n`` texts returns ``(n, context_length)`` int64 token ids (start token, BPE tokens, end
    token, zero padding). open_clip truncates silently (DESIGN.md pitfall); :attr:`truncated` counts how many
    texts lost tokens so callers can report it (:meth:`is_truncated`: start + BPE tokens + end exceed the
    context).
    """

    def __init__(self, context_length: int):
        from open_clip.tokenizer import SimpleTokenizer

        self.context_length = context_length
        self._tokenizer = SimpleTokenizer(context_length=context_length)
        self.truncated = 0


WORD_PATTERN = re.compile(r"[^\W_]+(?:['\-_][^\W_]+)*|[^\w\s]|_")
"""A word of the word tokenizer: letters and digits, joined by inner hyphens, apostrophes or underscores
(``tilted-left``, ``man's``), or one punctuation mark (``.``, ``,``)."""


def caption_words(text: str) -> list[str]:
    """The words of ``text`` for the word tokenizer: lowercased, split on whitespace and before and after
    punctuation (``"A man with his dog."`` -> ``["a", "man", "with", "his", "dog", "."]``), so a caption's last
    word is the same word as elsewhere. Text without punctuation (MADMAN and ComCO captions) splits exactly on
    whitespace."""
    return WORD_PATTERN.findall(text.lower())


def build_vocabulary(texts) -> tuple[str, ...]:
    """The sorted distinct words (:func:`caption_words`) of ``texts``: a word tokenizer's vocabulary, from any
    dataset's captions."""
    return tuple(sorted({word for text in texts for word in caption_words(text)}))


class WordTokenizer:
    """One token per word (:func:`caption_words`), from a fixed vocabulary (``ModelConfig(tokenizer="word")``).

    Token ids: 0 padding, 1 unknown word, 2 start, ``3 + i`` for ``vocabulary[i]``, and the end token
    ``len(vocabulary) + 3``, the largest id (open_clip's text tower pools at each row's largest id). Text is
    lowercased before splitting. Calling it on ``n`` texts returns ``(n, context_length)`` int64: start, the
    words, end, zero padding; a text with more than ``context_length - 2`` words keeps its first words and
    the end token (counted in :attr:`truncated`); words outside the vocabulary become id 1 (counted in
    :attr:`unknown`).
    """

    def __init__(self, vocabulary, context_length: int):
        self.vocabulary = tuple(vocabulary)
        self.context_length = context_length
        self.ids = {word: i + 3 for i, word in enumerate(self.vocabulary)}
        self.end = len(self.vocabulary) + 3
        self.truncated = 0
        self.unknown = 0

    def __call__(self, texts: list[str]):
        import torch

        tokens = torch.zeros((len(texts), self.context_length), dtype=torch.long)
        for row, text in enumerate(texts):
            ids = [self.ids.get(word, 1) for word in caption_words(text)]
            self.unknown += ids.count(1)
            if len(ids) + 2 > self.context_length:
                self.truncated += 1
                ids = ids[:self.context_length - 2]
            tokens[row, :len(ids) + 2] = torch.tensor([2, *ids, self.end])
        return tokens

    def is_truncated(self, texts: list[str]) -> list[bool]:
        """Per text: True when start + words + end exceed the context."""
        return [len(caption_words(t)) + 2 > self.context_length for t in texts]

    def decode(self, tokens) -> list[str]:
        """Token id rows back to text (the words between start and end; unknown words as ``<unk>``)."""
        words = (*WORD_SPECIALS, *self.vocabulary)
        return [" ".join(words[i] for i in row if 0 < i < self.end and i != 2) for row in tokens.tolist()]


def make_tokenizer(config: ModelConfig):
    """The tokenizer ``config`` names: :class:`Tokenizer` (BPE), :class:`WordTokenizer` (its vocabulary) or, for
    a fine-tuned open_clip model, :class:`OpenClipTokenizer`."""
    if config.open_clip:
        return OpenClipTokenizer(config.open_clip, config.context_length)
    if config.tokenizer == "word":
        if not config.vocabulary:
            raise BadInput("the word tokenizer needs a vocabulary (madman train builds it from the training data)")
        return WordTokenizer(config.vocabulary, config.context_length)
    return Tokenizer(config.context_length)


def preprocess_images(images, image_size: int, config: ModelConfig | None = None):
    """``(N, H, W, 3)`` uint8 RGB (numpy array or torch tensor) -> ``(N, 3, image_size, image_size)`` float32
    torch tensor, normalised (channels-last in memory: the permuted view of the RGB array).

    The evaluation adapters' rule (:func:`bindscope.encoders.interface.square_resize`): a non-square image is
    padded with black to a centred square (never cropped or stretched), then resized with antialiasing when its
    side differs: bilinearly, or as ``config.interpolation`` says. Values: ``(x / 255 - mean) / std`` per channel,
    with ``config.image_mean`` / ``config.image_std`` where set (a fine-tuned open_clip model's own), else
    open_clip's ``OPENAI_DATASET_MEAN`` / ``OPENAI_DATASET_STD``.
    """
    import torch
    from open_clip.constants import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD

    from bindscope.encoders.interface import square_resize

    if not isinstance(images, torch.Tensor):
        images = torch.from_numpy(np.ascontiguousarray(images))
    mode = config.interpolation if config is not None else "bilinear"
    x = square_resize(images.permute(0, 3, 1, 2).float().div_(255.0), image_size, mode)
    mean = torch.tensor((config.image_mean if config is not None else ()) or OPENAI_DATASET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor((config.image_std if config is not None else ()) or OPENAI_DATASET_STD).view(1, 3, 1, 1)
    return (x - mean) / std
