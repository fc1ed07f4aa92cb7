"""The encoder registry: which loader turns a ``model`` string into an :class:`EncoderAdapter`.

The first kind whose ``matches`` accepts the string wins, in this order:

1. kinds added at run time with :func:`register_encoder` (newest first);
2. ``hf-vlm:``: ``hf-vlm:<repo id or folder>``, or a local folder (with or without ``hf:``) whose
   ``config.json`` declares a vision-language model: a ``transformers`` CLIP / SigLIP / ... model with its own
   processor (:mod:`bindscope.encoders.hf_vision_language`);
   ``hf:``: ``hf:<repo id or folder>``, any ``transformers`` text encoder with CLS or mean pooling
   (:mod:`bindscope.encoders.hf_text`; SimCSE, BERT-style models);
3. ``sentence-transformers folder``: a local folder holding ``modules.json``: that model, text-only;
4. ``open_clip config file``: an existing ``.json`` file, an open_clip model config (``bindscope export
   open-clip-config``), with ``pretrained`` its weights, e.g. an ``open_clip_train`` checkpoint ``epoch_N.pt``
   (:func:`bindscope.encoders.open_clip.load_open_clip_config_adapter`);
5. kinds declared by installed packages under the entry-point group ``bindscope.encoders`` (each entry point
   names an :class:`EncoderKind`), in entry-point name order. bindscope itself declares ``run`` there: a
   checkpoint file or run folder written by ``bindscope train`` / ``madman train``
   (:mod:`bindscope.training.checkpoint`);
6. ``sentence-transformers/``: a text-only sentence-transformers model (:mod:`bindscope.encoders.sentence_transformers`);
7. ``hf-hub:``: an open_clip model on the Hugging Face Hub, ``hf-hub:<org>/<repo>``;
8. ``open_clip`` (anything else): an open_clip model name (``ViT-B-32``, ``RN50``, ...) with a pretrained tag
   (:mod:`bindscope.encoders.open_clip`).

Image preprocessing (all open_clip models): uint8 RGB -> [0, 1]; a non-square image is padded with black to a
square centred on the image (never cropped); the square is resized to the model's input size with the model's
interpolation (bicubic for CLIP) and antialiasing (torch); then normalised with the model's mean and std.
MADMAN and ComCO images are square, so they are only resized.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points

from bindscope.encoders.interface import EncoderAdapter, default_batch_size
from bindscope.encoders.settings import SETTING_NAMES, EncoderSettings
from bindscope.encoders.sentence_transformers import SENTENCE_TRANSFORMERS_PREFIX
from bindscope.errors import BadInput

ENTRY_POINT_GROUP = "bindscope.encoders"


def _load_open_clip(model: str, pretrained: str | None, **options) -> EncoderAdapter:
    from bindscope.encoders.open_clip import OpenCLIPAdapter, resolve_open_clip

    if model.endswith((".pt", ".pth", ".bin", ".safetensors")):
        raise BadInput(f"model {model!r}: no such checkpoint file", param="model")
    resolve_open_clip(model, pretrained)  # fail fast on names before importing weights
    options.pop("pooling", None)
    return OpenCLIPAdapter(model, pretrained, **options)


def _load_sentence_transformer(model: str, pretrained: str | None, **options) -> EncoderAdapter:
    from bindscope.encoders.sentence_transformers import SentenceTransformerAdapter

    options.pop("pooling", None)
    return SentenceTransformerAdapter(model, **options)


def _load_hf_text(model: str, pretrained: str | None, **options) -> EncoderAdapter:
    from bindscope.encoders.hf_text import HFTextAdapter

    return HFTextAdapter(model, **options)


def _load_vision_language(model: str, pretrained: str | None, **options) -> EncoderAdapter:
    from bindscope.encoders.hf_vision_language import HFVisionLanguageAdapter

    options.pop("pooling", None)
    return HFVisionLanguageAdapter(model, **options)


def _is_vision_language(model: str) -> bool:
    from bindscope.encoders.hf_vision_language import VLM_PREFIX, is_vision_language_folder

    return model.startswith(VLM_PREFIX) or is_vision_language_folder(model)


def _load_open_clip_config(model: str, pretrained: str | None, **options) -> EncoderAdapter:
    from bindscope.encoders.open_clip import load_open_clip_config_adapter

    return load_open_clip_config_adapter(model, pretrained, **options)


def _is_open_clip_config_file(model: str) -> bool:
    return model.endswith(".json") and os.path.isfile(model)


def _is_sentence_transformers_folder(model: str) -> bool:
    from bindscope.encoders.hf_text import is_sentence_transformers_folder

    return os.path.isdir(model) and is_sentence_transformers_folder(model)


@dataclass(frozen=True)
class EncoderKind:
    """One entry of the encoder registry.

    Attributes:
        name: the kind's name (``"hf:"``, ``"run folder"``, ``"sentence-transformers/"``, ``"open_clip"``, ...).
        matches: ``model -> bool``; a prefix test for named kinds.
        loader: ``loader(model, pretrained, device=, precision=, batch_size=, pooling=) -> EncoderAdapter``
            (the values of an :class:`~bindscope.encoders.settings.EncoderSettings`, already checked; a kind that
            does not pool drops ``pooling``).
        slug: ``model -> str``, the file-name part naming the model in result files (None: the model string made
            safe for a file name).
    """

    name: str
    matches: Callable[[str], bool]
    loader: Callable[..., EncoderAdapter]
    slug: Callable[[str], str] | None = None

    def load(self, model: str, pretrained: str | None, **options) -> EncoderAdapter:
        return self.loader(model, pretrained, **options)


def _prefix(prefix: str) -> Callable[[str], bool]:
    return lambda model: model.startswith(prefix)


_FIRST = [
    EncoderKind("hf-vlm:", _is_vision_language, _load_vision_language),
    EncoderKind("hf:", _prefix("hf:"), _load_hf_text),
    EncoderKind("sentence-transformers folder", _is_sentence_transformers_folder, _load_sentence_transformer),
    EncoderKind("open_clip config file", _is_open_clip_config_file, _load_open_clip_config),
]
_LAST = [
    EncoderKind(SENTENCE_TRANSFORMERS_PREFIX, _prefix(SENTENCE_TRANSFORMERS_PREFIX), _load_sentence_transformer),
    EncoderKind("hf-hub:", _prefix("hf-hub:"), _load_open_clip),
    EncoderKind("open_clip", lambda model: True, _load_open_clip),
]
_REGISTERED: list[EncoderKind] = []


@cache
def _installed() -> tuple[EncoderKind, ...]:
    """The kinds declared under the ``bindscope.encoders`` entry-point group, in name order."""
    kinds = []
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        kind = point.load()
        if not isinstance(kind, EncoderKind):
            raise TypeError(f"entry point {point.name!r} of {ENTRY_POINT_GROUP!r} is not an EncoderKind")
        kinds.append(kind)
    return tuple(kinds)


def encoder_kinds() -> list[EncoderKind]:
    """Every encoder kind, in the order they are tried (see the module docstring)."""
    return _REGISTERED[::-1] + _FIRST + list(_installed()) + _LAST


def register_encoder(kind: EncoderKind) -> EncoderKind:
    """Add ``kind`` ahead of every other kind (so a new prefix wins over the open_clip catch-all); it is then
    used by :func:`load_encoder`, :func:`bindscope.evaluate`, the probes and every ``--model`` option of the
    command line (in the same process). Re-registering a name replaces the earlier kind. Returns ``kind``."""
    _REGISTERED[:] = [k for k in _REGISTERED if k.name != kind.name] + [kind]
    return kind


def encoder_kind(model: str) -> EncoderKind:
    """The registry entry that loads ``model`` (the first whose ``matches`` accepts it)."""
    return next(kind for kind in encoder_kinds() if kind.matches(model))


def load_encoder(encoder: EncoderSettings | str) -> EncoderAdapter:
    """Load the encoder that ``encoder`` names (see the module docstring for the accepted model forms).

    Args:
        encoder: an :class:`~bindscope.encoders.settings.EncoderSettings` (its cache fields are not used here),
            or a model name or path (every other setting at its default).

    Returns:
        An :class:`EncoderAdapter` giving (N, D) float32 L2-normalised embeddings; ``batch_size`` None becomes
        :func:`bindscope.encoders.interface.default_batch_size` of the device (64 on a CPU, 512 on CUDA); with
        ``context_length`` set, texts are cut to that many tokens (:meth:`EncoderAdapter.limit_context`).

    Raises:
        BadInput: unknown model (with the closest valid names), unknown tag, a setting out of range, a
            ``context_length`` the model cannot take, or weights that cannot be loaded.
    """
    settings = EncoderSettings.of(encoder)
    batch_size = settings.batch_size or default_batch_size(settings.device)
    adapter = encoder_kind(settings.model).load(settings.model, settings.pretrained, device=settings.device,
                                                precision=settings.precision, batch_size=batch_size,
                                                pooling=settings.pooling)
    if settings.context_length is not None:
        adapter.limit_context(settings.context_length)
    return adapter


def load_adapter(model: str, pretrained: str | None = None, **settings) -> EncoderAdapter:
    """:func:`load_encoder` of ``EncoderSettings(model, pretrained, **settings)``: the keyword form, e.g.
    ``load_adapter("ViT-B-32", "none", device="cpu", batch_size=32)``. ``settings``: the other fields of
    :class:`~bindscope.encoders.settings.EncoderSettings` (``device``, ``precision``, ``batch_size``,
    ``pooling``, ``context_length``). Raises BadInput as :func:`load_encoder`, and for an unknown keyword."""
    allowed = SETTING_NAMES[2:]  # after model and pretrained
    unknown = sorted(set(settings) - set(allowed))
    if unknown:
        raise BadInput(f"{unknown[0]} is not an encoder setting; allowed: {', '.join(allowed)}", param=unknown[0])
    return load_encoder(EncoderSettings(model, pretrained, **settings))
