"""open_clip encoders: model names, pretrained tags (resolved without loading), and the image-and-text adapter."""

from __future__ import annotations

import difflib
import os
import pickle
import time
from pathlib import Path

import numpy as np

from bindscope.encoders.interface import (
    EncoderAdapter,
    check_images,
    device_preprocess,
    l2_normalise,
    resolve_device,
)
from bindscope.io.model_folder import no_prompts
from bindscope.encoders.open_clip_config import check_hub_open_clip_config, check_open_clip_config
from bindscope.encoders.open_clip_weights import load_open_clip_file, no_random_init_warning
from bindscope.errors import check_precision
from bindscope.encoders.sentence_transformers import BUNDLED_SENTENCE_TRANSFORMERS, SENTENCE_TRANSFORMERS_PREFIX
from bindscope.errors import BadInput
from bindscope.io.canonical import sha256_file
from bindscope.io.weights import check_module_finite

RANDOM_WEIGHTS_SEED = 0


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

    can_unnormalise = True

    def __init__(self, model: str, pretrained: str | None = None, device: str = "auto", precision: str = "fp32",
                 batch_size: int = 64):
        import open_clip
        import torch

        check_precision(precision)
        self.name = model
        self.resolved_name, tag = resolve_open_clip(model, pretrained)
        self.pretrained = tag
        self.device = resolve_device(device)
        self.precision = precision
        self.batch_size = batch_size
        if tag.startswith("hf-hub:"):
            check_hub_open_clip_config(tag[len("hf-hub:"):], model)
        try:
            with no_prompts():  # an hf-hub text tower asking about custom code reads end of file and refuses
                net = self._create(open_clip, torch, tag, precision)
        except BadInput:
            raise
        except (OSError, RuntimeError, ValueError, KeyError, EOFError, pickle.UnpicklingError) as exc:
            # open_clip failing to fetch or build a tag or an hf-hub model (a local file is refused above as BadInput)
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise BadInput(f"could not load open_clip {self.resolved_name!r} with pretrained {tag!r}: {reason} "
                           "(weights are downloaded on first use; offline, use pretrained='none' or a local "
                           "checkpoint file)") from None
        net.eval()
        self.model = net
        with no_prompts():
            self.tokenizer = open_clip.get_tokenizer(tag if tag.startswith("hf-hub:") else self.resolved_name)
        self.context_length = self._model_context = int(getattr(self.tokenizer, "context_length", None) or 77)
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

    def _create(self, open_clip, torch, tag: str, precision: str):
        if tag == "none":
            with torch.random.fork_rng(devices=[]), no_random_init_warning():
                torch.manual_seed(RANDOM_WEIGHTS_SEED)
                return open_clip.create_model(self.resolved_name, pretrained=None, pretrained_text=False,
                                              precision=precision, device=self.device)
        if os.path.isfile(tag):  # read and checked by bindscope (open_clip_weights), never by open_clip's loader
            return load_open_clip_file(self.resolved_name, tag, precision, self.device)
        if tag.startswith("hf-hub:"):
            net = open_clip.create_model(tag, precision=precision, device=self.device)
        else:
            net = open_clip.create_model(self.resolved_name, pretrained=tag, precision=precision, device=self.device)
        check_module_finite(net, f"pretrained {tag!r}", param="pretrained")
        return net

    def _probe_dim(self) -> int:
        return int(self.encode_texts(["a"]).shape[1])

    def _sync(self) -> None:
        import torch

        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        out = []
        for start in range(0, len(texts), self.batch_size):
            tokens = self._tokenize(list(texts[start:start + self.batch_size])).to(self.device)
            out.append(self._timed(self.model.encode_text, tokens))
        return self._finish(out)

    def _tokenize(self, texts: list[str]):
        """``(N, L)`` int64 token ids at the model's own length ``L``; with :meth:`limit_context` each text is
        first cut to ``context_length`` tokens (the end token kept last) and the rest padded with zeros."""
        if self.context_length == self._model_context:
            return self.tokenizer(texts)
        import torch.nn.functional as F

        cut = self.tokenizer(texts, context_length=self.context_length)
        return F.pad(cut, (0, self._model_context - cut.shape[1]), value=0)

    def limit_context(self, tokens: int) -> None:
        """Models with CLIP's BPE tokenizer only (open_clip's ``SimpleTokenizer``, start and end tokens and zero
        padding; the text tower pools at the end token); other tokenizers refuse (see the interface)."""
        if not self._bpe():
            super().limit_context(tokens)
        self.context_length = self.check_context(tokens)
        self.cache_key += f"|context={tokens}"

    def _bpe(self) -> bool:
        tok = self.tokenizer
        return hasattr(tok, "encode") and hasattr(tok, "sot_token_id") and getattr(tok, "reduction_fn", None) is None

    def preprocess_images(self, images: np.ndarray):
        """``(N, H, W, 3)`` uint8 RGB -> the model's input, ``(N, 3, S, S)`` on the adapter's device.

        Padded to a centred black square (never cropped), resized to ``S = image_size`` with the model's
        interpolation and antialiasing, normalised with the model's mean and std, cast to the input dtype
        (:func:`bindscope.encoders.interface.device_preprocess`). The bytes travel as uint8 (through page-locked
        memory to a GPU) and are converted on the device.

        Raises:
            BadInput: the array is not (N, H, W, 3) uint8.
        """
        import torch

        images = check_images(images)
        x = torch.from_numpy(np.ascontiguousarray(images))
        if self.device.startswith("cuda"):
            x = x.pin_memory().to(self.device, non_blocking=True)
        else:
            x = x.to(self.device)
        return device_preprocess(x, self.image_size, self._mean.view(3), self._std.view(3), self.interpolation,
                                 self._input_dtype)

    def encode_images(self, images: np.ndarray) -> np.ndarray:
        images = check_images(images)
        out = []
        for start in range(0, len(images), self.batch_size):
            x = self.preprocess_images(images[start:start + self.batch_size])
            out.append(self._timed(self.model.encode_image, x))
        return self._finish(out)

    def _timed(self, encode, inputs) -> np.ndarray:
        """One forward pass ``encode(inputs, normalize=self.normalised)``, its time added to ``forward_seconds``."""
        import torch

        self._sync()
        t0 = time.perf_counter()
        with torch.inference_mode():
            feats = encode(inputs, normalize=self.normalised)
        self._sync()
        self.forward_seconds += time.perf_counter() - t0
        return feats.float().cpu().numpy()

    def _finish(self, parts: list[np.ndarray]) -> np.ndarray:
        if not parts:
            return np.zeros((0, self.embed_dim), np.float32)
        out = np.concatenate(parts).astype(np.float32)
        return l2_normalise(out) if self.normalised else out

    def truncated(self, texts: list[str]) -> list[bool]:
        """True where the caption has more tokens (start and end tokens included) than ``context_length``."""
        tok = self.tokenizer
        if hasattr(tok, "encode") and hasattr(tok, "sot_token_id"):  # open_clip SimpleTokenizer (BPE)
            return [len(tok.encode(t)) + 2 > self.context_length for t in texts]
        inner = getattr(tok, "tokenizer", None)  # open_clip HFTokenizer wraps a transformers tokenizer
        if inner is not None:
            return [len(inner(t)["input_ids"]) > self.context_length for t in texts]
        return [False] * len(texts)


CONFIG_KEYS = ("embed_dim", "vision_cfg", "text_cfg")


def load_open_clip_config_adapter(model: str, pretrained: str | None, **options) -> OpenCLIPAdapter:
    """An open_clip model built from the model config file ``model`` with the weights ``pretrained``.

    ``pretrained`` is a checkpoint of that architecture: one written by ``open_clip_train``
    (``<logs>/<name>/checkpoints/epoch_N.pt``, a dict whose ``state_dict`` keys are prefixed ``module.`` when
    trained with DDP; either is taken), a plain state dict or a safetensors file, or ``"none"`` for random weights
    (seed 0). It is read and checked by bindscope before the model is built, never by open_clip's loader
    (:func:`bindscope.encoders.open_clip_weights.read_open_clip_weights`). The config is registered with
    ``open_clip.add_model_config`` under the file's stem, the name ``open_clip_train --model`` used (a later
    file of the same stem replaces an earlier one).

    The config is data: a key that is not an open_clip architecture key, tokenizer options beyond the cleaning
    ones (``trust_remote_code`` among them), or a tokenizer, text tower or weights named from outside the file
    are refused (:func:`bindscope.encoders.open_clip_config.check_open_clip_config`).

    Raises:
        BadInput: the file is not an open_clip model config, or one of its keys is not allowed; its stem is the name of a model open_clip ships;
            no ``pretrained`` given, or a checkpoint that is missing or does not fit the config.
    """
    import json

    import open_clip

    from bindscope.publish.open_clip_config import shipped_by_open_clip

    path = Path(model).resolve()
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"model {model!r} is not a readable JSON file ({exc})", param="model") from None
    if not isinstance(config, dict) or not all(key in config for key in CONFIG_KEYS):
        raise BadInput(f"model {model!r} is not an open_clip model config: it needs the keys "
                       f"{', '.join(CONFIG_KEYS)} (bindscope export open-clip-config writes one)", param="model")
    check_open_clip_config(config, model, local=True)
    if shipped_by_open_clip(path.stem):
        raise BadInput(f"model {model!r}: its name {path.stem!r} (the file's stem) is a model open_clip ships; "
                       "rename the file", param="model")
    if pretrained is None:
        raise BadInput(f"model {model!r} is an architecture without weights; give pretrained=CHECKPOINT (e.g. "
                       "an open_clip_train epoch_N.pt) or pretrained='none' for random weights", param="pretrained")
    if pretrained.lower() != "none" and not os.path.isfile(pretrained):
        raise BadInput(f"pretrained {pretrained!r}: no such checkpoint file", param="pretrained")
    open_clip.add_model_config(path)
    options.pop("pooling", None)
    try:
        adapter = OpenCLIPAdapter(path.stem, pretrained, **options)
    except AssertionError as exc:  # open_clip asserts on some shape mismatches (e.g. the text width)
        raise BadInput(f"pretrained {pretrained!r} does not fit the model config {model!r} ({exc})",
                       param="pretrained") from None
    adapter.name = model
    adapter.cache_key += f"|config-sha256:{sha256_file(path)}"
    return adapter
