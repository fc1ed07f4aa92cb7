"""Checkpoints of ``madman train`` runs, and the encoder adapter that evaluates a trained model.

Files in a run folder (see docs/training.md):

- ``checkpoint.pt``: the full training state (step, model, AdamW, LR scheduler, grad scaler, the torch /
  numpy / Python / CUDA RNG states, the run config), rewritten atomically every ``checkpoint_every`` steps,
  on Ctrl-C, and at the end. Repeating the same ``madman train`` command resumes from it.
- ``model.pt``: the final weights and architecture only (what ``madman eval --model PATH`` loads).

:func:`load_trained_adapter` turns either file (or the run folder) into a
:class:`bindscope.encoders.interface.EncoderAdapter`.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import numpy as np

from bindscope.encoders.interface import (  # one device rule for every encoder
    PRECISIONS,
    EncoderAdapter,
    check_images,
    resolve_device,
)
from bindscope.encoders.registry import EncoderKind
from bindscope.errors import BadInput
from bindscope.io.atomic import atomic_open

CHECKPOINT = "checkpoint.pt"
MODEL = "model.pt"
CHECKPOINT_FORMAT = "bindscope-train-checkpoint"
MODEL_FORMAT = "bindscope-small-clip"


def save_atomic(obj: object, path: str | os.PathLike) -> None:
    """``torch.save(obj)`` to a temp file in ``path``'s folder, fsync, then rename onto ``path``."""
    import torch

    with atomic_open(path) as handle:
        torch.save(obj, handle)


def autocast_dtype(precision: str, device: str):
    """The autocast dtype for ``precision`` (``None`` for fp32).

    Raises:
        BadInput: unknown precision, or fp16 on the CPU (use bf16 there).
    """
    import torch

    if precision not in PRECISIONS:
        raise BadInput(f"precision {precision!r} is not known; choose one of {', '.join(PRECISIONS)}",
                       param="precision")
    if precision == "fp16" and not device.startswith("cuda"):
        raise BadInput("precision fp16 needs a CUDA device; on the CPU use bf16 or fp32", param="precision")
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def weights_sha256(state_dict: dict) -> str:
    """Hex sha256 over the parameter names, shapes, dtypes and bytes of a model state dict (sorted by name)."""
    import torch

    digest = hashlib.sha256()
    for name in sorted(state_dict):
        tensor = state_dict[name].detach().cpu().contiguous()
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class TrainedClipAdapter(EncoderAdapter):
    """A small CLIP trained by ``madman train``, as an :class:`EncoderAdapter`.

    ``encode_images`` takes ``(N, H, W, 3)`` uint8 RGB (resized to the model's square input, see
    :func:`bindscope.training.model.preprocess_images`); ``encode_texts`` takes strings (the model's tokenizer:
    CLIP BPE or its word vocabulary, at its context length; :meth:`truncated` says which texts are cut). Both
    return ``(N, embed_dim)`` float32 with unit L2 norm, computed under ``torch.no_grad`` in eval mode, in
    batches of ``batch_size``.

    Attributes: as :class:`EncoderAdapter`; ``pretrained`` is the weights' source (a path or ``"in-memory"``),
    ``cache_key`` ``"bindscope-small-clip:<sha256 of the weights>:<precision>:<preprocessing>:<tokenizer>"``
    (``bpe`` or ``word-<first 16 hex of the vocabulary's sha256>``),
    ``forward_seconds`` the time spent in forward passes so far.
    """

    supports_images = True

    def __init__(self, model, model_config, name: str, pretrained: str, device: str = "cpu",
                 precision: str = "fp32", batch_size: int = 256):
        from bindscope.training.model import make_tokenizer

        self.model = model.to(device).eval()
        self.model_config = model_config
        self.name = name
        self.pretrained = pretrained
        self.embed_dim = model_config.embed_dim
        self.device = device
        self.precision = precision
        self._dtype = autocast_dtype(precision, device)
        self.batch_size = batch_size
        self.tokenizer = make_tokenizer(model_config)
        self.context_length = model_config.context_length
        size = model_config.image_size
        self.preprocessing = (f"resize({size}x{size},bilinear,antialias,no-crop)+normalise(OPENAI_DATASET_MEAN,"
                              "OPENAI_DATASET_STD)")
        tokens = model_config.tokenizer
        if tokens == "word":
            tokens += "-" + hashlib.sha256("\n".join(model_config.vocabulary).encode()).hexdigest()[:16]
        self.cache_key = (f"{MODEL_FORMAT}:{weights_sha256(self.model.state_dict())}:{precision}:{self.preprocessing}"
                          f":{tokens}")
        self.forward_seconds = 0.0

    def truncated(self, texts: list[str]) -> list[bool]:
        """True where a text has more tokens (start and end included) than the model's context length."""
        return self.tokenizer.is_truncated(texts)

    def _run(self, prepare, forward, inputs) -> np.ndarray:
        import torch

        device_type = "cuda" if self.device.startswith("cuda") else "cpu"
        out = []
        with torch.no_grad(), torch.autocast(device_type, dtype=self._dtype, enabled=self._dtype is not None):
            for start in range(0, len(inputs), self.batch_size):
                batch = prepare(inputs[start:start + self.batch_size]).to(self.device)
                tick = time.perf_counter()
                features = forward(batch)
                if device_type == "cuda":
                    torch.cuda.synchronize()
                self.forward_seconds += time.perf_counter() - tick
                out.append(torch.nn.functional.normalize(features.float(), dim=-1).cpu().numpy())
        if not out:
            return np.zeros((0, self.embed_dim), np.float32)
        return np.concatenate(out).astype(np.float32, copy=False)

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        return self._run(lambda chunk: self.tokenizer(list(chunk)), self.model.encode_text, list(texts))

    def encode_images(self, images: np.ndarray) -> np.ndarray:
        return self._run(self.preprocess_images, self.model.encode_image, check_images(images))

    def preprocess_images(self, images: np.ndarray):
        """``(N, H, W, 3)`` uint8 RGB -> ``(N, 3, S, S)`` float32 model input (see
        :func:`bindscope.training.model.preprocess_images`), on the CPU."""
        from bindscope.training.model import preprocess_images

        return preprocess_images(check_images(images), self.model_config.image_size)


def find_weights_file(path: str | os.PathLike) -> Path:
    """``model.pt`` or ``checkpoint.pt`` for a run folder, or the file itself.

    Raises:
        BadInput: nothing loadable at ``path``.
    """
    path = Path(path)
    if path.is_dir():
        for name in (MODEL, CHECKPOINT):
            if (path / name).is_file():
                return path / name
        raise BadInput(f"{str(path)!r} holds neither {MODEL} nor {CHECKPOINT}: not a madman train run folder")
    if not path.is_file():
        raise BadInput(f"trained model {str(path)!r}: no such file or folder")
    return path


def load_weights(path: str | os.PathLike) -> tuple[dict, object, dict]:
    """Load ``(state_dict, ModelConfig, info)`` from a run folder, ``model.pt`` or ``checkpoint.pt``.

    ``info`` has ``step`` and ``train_config``. Raises BadInput for a file that is not one of ours.
    """
    import torch

    from bindscope.training.model import ModelConfig

    file = find_weights_file(path)
    try:
        blob = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a non-checkpoint file
        raise BadInput(f"{str(file)!r} is not a readable torch checkpoint ({type(exc).__name__}: {exc})") from None
    if not isinstance(blob, dict) or blob.get("format") not in (MODEL_FORMAT, CHECKPOINT_FORMAT):
        raise BadInput(f"{str(file)!r} is not a madman train model or checkpoint "
                       f"(expected format {MODEL_FORMAT!r} or {CHECKPOINT_FORMAT!r})")
    config = ModelConfig.from_dict(blob["model_config"])
    return blob["model"], config, {"step": blob.get("step"), "train_config": blob.get("train_config"),
                                   "file": str(file)}


def load_trained_adapter(path: str | os.PathLike, device: str = "auto", precision: str = "fp32",
                         batch_size: int = 256) -> TrainedClipAdapter:
    """An :class:`EncoderAdapter` for a model trained by ``madman train``.

    Args:
        path: the run folder (``model.pt`` is preferred, else ``checkpoint.pt``), or either file.
        device: ``auto`` | ``cpu`` | ``cuda`` | ``cuda:N``.
        precision: ``fp32`` | ``bf16`` | ``fp16`` (autocast; fp16 needs CUDA).
        batch_size: images or texts per forward pass.

    Raises:
        BadInput: missing path, a file that is not a madman train model, a bad device or precision.
    """
    device = resolve_device(device)
    autocast_dtype(precision, device)
    state_dict, config, info = load_weights(path)
    from bindscope.training.model import build_model

    model = build_model(config)
    model.load_state_dict(state_dict)
    adapter = TrainedClipAdapter(model, config, name=str(path), pretrained=info["file"], device=device,
                                 precision=precision, batch_size=batch_size)
    adapter.step = None if info["step"] is None else int(info["step"])  # recorded in results (bindscope collect)
    return adapter


def load_run_adapter(path: str, pretrained: str | None = None, **options) -> TrainedClipAdapter:
    """The encoder registry's loader for run folders and checkpoints (``pretrained`` and ``pooling`` do not
    apply)."""
    options.pop("pooling", None)
    return load_trained_adapter(path, **options)


RUN_ENCODER = EncoderKind("run", lambda model: os.path.isfile(model) or os.path.isdir(model), load_run_adapter)
"""The encoder kind of run folders and checkpoint files (any existing path the kinds before it did not take),
declared in the ``bindscope.encoders`` entry-point group (pyproject.toml)."""
