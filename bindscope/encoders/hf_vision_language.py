"""Vision-language models in the ``transformers`` format: ``--model hf-vlm:<repo id or folder>``.

Many CLIP and SigLIP checkpoints (OpenAI's ``openai/clip-vit-base-patch32``, Google's
``google/siglip-base-patch16-224``, NegCLIP-style and compositionality fine-tunes) are published as
``transformers`` models (``CLIPModel``, ``SiglipModel``, ``AltCLIPModel``, ...): any model class with
``get_image_features`` and ``get_text_features``. This adapter loads one with ``transformers.AutoModel`` and its own
preprocessing: ``AutoImageProcessor`` for images (e.g. CLIP: resize the shorter side, centre crop, normalise) and
``AutoTokenizer`` for texts, padded as the model family was trained (SigLIP: to its fixed length, ``max_length``;
the others: to the longest text of the batch) and truncated at the text tower's length (:meth:`truncated` says
which texts were cut). Embeddings are the projected features, float32, L2-normalised.

Which models it takes:

- ``hf-vlm:<org>/<repo>`` (downloaded on first use) or ``hf-vlm:<folder>``;
- a local folder whose ``config.json`` declares a vision-language model (both a ``text_config`` and a
  ``vision_config``), with or without the ``hf:`` prefix (the ``hf:`` kind is for text encoders).

Models load as data only (:mod:`bindscope.io.model_folder`): ``trust_remote_code=False``, no question on
standard input, a folder holding Python code or an ``auto_map`` refused before it is read, and safetensors weights
only (``model.safetensors``; ``use_safetensors=True`` for Hub models, so no pickle is read). The cache key holds
the transformers version, the model (the repository id and revision loaded, or a folder's resolved path, weight
sha256 and one sha256 over all its files) and the precision. Results name the model ``hf-vlm-<repo or folder>``.

What differs from the same weights through open_clip (e.g. ``ViT-B-32`` with ``--pretrained openai``): open_clip
pads a non-square image to a square and resizes it, while the ``transformers`` processor resizes the shorter side and
crops the centre (the same on square MADMAN and ComCO images); the tokenizers differ in lower-casing and in the
length they pad to (open_clip: 77 tokens for every text).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from bindscope.encoders.interface import EncoderAdapter, check_images, l2_normalise, resolve_device
from bindscope.encoders.model_folder import model_source
from bindscope.io.model_folder import no_prompts, quiet_transformers
from bindscope.errors import check_precision
from bindscope.errors import BadInput
from bindscope.io.weights import check_module_finite

VLM_PREFIX = "hf-vlm:"
WEIGHT_FILES = ("model.safetensors",)
MAX_LENGTH = 512
FIXED_LENGTH_FAMILIES = ("siglip",)  # trained on texts padded to a fixed length


def _config_of(folder: str) -> dict | None:
    path = Path(folder) / "config.json"
    try:
        if path.is_file() and path.stat().st_size < (1 << 20):
            config = json.loads(path.read_text(encoding="utf-8"))
            return config if isinstance(config, dict) else None
    except (OSError, ValueError):
        return None
    return None


def is_vision_language_folder(model: str) -> bool:
    """True for a local folder (optionally after ``hf:``) whose ``config.json`` has a ``text_config`` and a
    ``vision_config`` (a ``transformers`` vision-language model)."""
    folder = model[len("hf:"):] if model.startswith("hf:") else model
    if not os.path.isdir(folder):
        return False
    config = _config_of(folder)
    return bool(config) and "text_config" in config and "vision_config" in config


def vlm_source(model: str) -> str:
    """The repository id or folder named by ``model`` (``hf-vlm:X``, ``hf:X`` or ``X``)."""
    for prefix in (VLM_PREFIX, "hf:"):
        if model.startswith(prefix):
            return model[len(prefix):].strip()
    return model


class HFVisionLanguageAdapter(EncoderAdapter):
    """A ``transformers`` vision-language model (see the module docstring).

    Args:
        model: ``hf-vlm:<repo id or folder>``, or a vision-language model folder (recorded in ``name``).
        device: ``auto`` | ``cpu`` | ``cuda`` | ``cuda:N``. precision: ``fp32`` | ``bf16`` | ``fp16``.
        batch_size: images or texts per forward pass.

    Attributes (besides the interface's): ``context_length`` (tokens), ``image_size`` (pixels, the processor's
    output side), ``family`` (the config's ``model_type``, e.g. ``clip``, ``siglip``).

    Raises:
        BadInput: an empty name, a folder with code or without ``model.safetensors``, a model class without
            ``get_image_features`` / ``get_text_features``, or a model that cannot be loaded (offline and not
            cached, unknown repository).
    """

    can_unnormalise = True

    def __init__(self, model: str, device: str = "auto", precision: str = "fp32", batch_size: int = 64):
        import torch
        import transformers

        check_precision(precision)
        source = vlm_source(model)
        if not source:
            raise BadInput(f"model {model!r}: give a Hugging Face repository id or a folder after {VLM_PREFIX!r}",
                           param="model")
        self.name = model
        self.device = resolve_device(device)
        self.precision = precision
        self.batch_size = batch_size
        source, identity, local = model_source(source, model, WEIGHT_FILES)
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        try:
            with no_prompts(), quiet_transformers():
                net = transformers.AutoModel.from_pretrained(source, trust_remote_code=False, use_safetensors=True,
                                                             dtype=dtype)
                self.tokenizer = transformers.AutoTokenizer.from_pretrained(source, trust_remote_code=False)
                self.processor = transformers.AutoImageProcessor.from_pretrained(source, trust_remote_code=False)
        except (OSError, ValueError, EOFError, KeyError) as exc:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise BadInput(f"could not load transformers vision-language model {source!r}: {reason} (Hub models are "
                           "downloaded on first use; offline, give a local model folder)", param="model") from None
        check_module_finite(net, f"model {model!r}", param="model")
        if not (hasattr(net, "get_image_features") and hasattr(net, "get_text_features")):
            raise BadInput(f"model {model!r}: {type(net).__name__} has no get_image_features / get_text_features; "
                           "give a vision-language model such as CLIPModel or SiglipModel", param="model")
        self.model = net.to(self.device).eval()
        self.family = str(getattr(net.config, "model_type", "") or "")
        if not local:  # a Hub model: the revision actually loaded
            revision = getattr(net.config, "_commit_hash", None)
            identity = f"{source}@{revision}" if revision else source
        self.pretrained = identity
        text_config = getattr(net.config, "text_config", None)
        positions = getattr(text_config, "max_position_embeddings", None) or MAX_LENGTH
        self.context_length = int(min(positions, getattr(self.tokenizer, "model_max_length", MAX_LENGTH) or MAX_LENGTH,
                                      MAX_LENGTH))
        self.image_size = int(getattr(getattr(net.config, "vision_config", None), "image_size", 224))
        self.embed_dim = int(self.encode_texts(["a"]).shape[1])
        self.preprocessing = f"transformers {type(self.processor).__name__}({self._processor_summary()})"
        self.cache_key = (f"transformers=={transformers.__version__}|vlm|{identity}|{precision}|"
                          f"{self.preprocessing}")
        self.forward_seconds = 0.0

    def _processor_summary(self) -> str:
        keys = ("size", "crop_size", "do_center_crop", "resample", "image_mean", "image_std", "do_rescale")
        return ",".join(f"{k}={getattr(self.processor, k)}" for k in keys if hasattr(self.processor, k))

    def _padding(self) -> dict:
        if any(self.family.startswith(f) for f in FIXED_LENGTH_FAMILIES):
            return {"padding": "max_length", "max_length": self.context_length, "truncation": True}
        return {"padding": True, "max_length": self.context_length, "truncation": True}

    def _features(self, encode, inputs) -> np.ndarray:
        import torch

        t0 = time.perf_counter()
        with torch.inference_mode():
            out = encode(**inputs)
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
        self.forward_seconds += time.perf_counter() - t0
        feats = getattr(out, "pooler_output", out)  # transformers 5 returns an output object, 4 a tensor
        return feats.float().cpu().numpy()

    def _finish(self, parts: list[np.ndarray]) -> np.ndarray:
        if not parts:
            return np.zeros((0, getattr(self, "embed_dim", 0)), np.float32)
        out = np.concatenate(parts).astype(np.float32)
        return l2_normalise(out) if self.normalised else out

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        out = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(list(texts[start:start + self.batch_size]), return_tensors="pt", **self._padding())
            keep = {k: v.to(self.device) for k, v in batch.items() if k in ("input_ids", "attention_mask")}
            if self.family.startswith(FIXED_LENGTH_FAMILIES):
                keep.pop("attention_mask", None)  # SigLIP's text tower was trained without one
            out.append(self._features(self.model.get_text_features, keep))
        return self._finish(out)

    def encode_images(self, images: np.ndarray) -> np.ndarray:
        images = check_images(images)
        out = []
        for start in range(0, len(images), self.batch_size):
            pixels = self.processor(images=list(images[start:start + self.batch_size]), return_tensors="pt")
            values = pixels["pixel_values"].to(self.device, dtype=next(self.model.parameters()).dtype)
            out.append(self._features(self.model.get_image_features, {"pixel_values": values}))
        return self._finish(out)

    def truncated(self, texts: list[str]) -> list[bool]:
        """True where the text has more tokens (special tokens included) than ``context_length``."""
        return [len(self.tokenizer(t)["input_ids"]) > self.context_length for t in texts]
