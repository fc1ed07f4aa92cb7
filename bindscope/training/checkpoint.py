"""Checkpoints of ``madman train`` runs, and the encoder adapter that evaluates a trained model.

Files in a run folder (see docs/training.md):

- ``checkpoint.pt``: the full training state (step, model, AdamW, LR scheduler, grad scaler, the torch /
  numpy / Python / CUDA RNG states, the run config), rewritten atomically every ``checkpoint_every`` steps,
  on Ctrl-C, and at the end. Repeating the same ``madman train`` command resumes from it.
- ``model.pt``: the final weights and architecture only (what ``madman eval --model PATH`` loads).

:func:`load_trained_adapter` turns either file (or the run folder) into a
:class:`bindscope.encoders.interface.EncoderAdapter`. Every file is read with ``weights_only=True`` and validated
before a model is built from it (:func:`read_weights_file`: keys, config within size limits, shapes, dtypes,
finite values), so a crafted file is one BadInput naming the file and the problem.
"""

from __future__ import annotations

import hashlib
import math
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
from bindscope.io.weights import check_plain, check_tensors, read_torch_file

CHECKPOINT = "checkpoint.pt"
MODEL = "model.pt"
RUN = "run.json"  # the run's resolved config (written by bindscope.training.train)
KEPT = "checkpoints"  # OUT/checkpoints/step-<step>.pt, the model files kept with keep_checkpoints
CHECKPOINT_FORMAT = "bindscope-train-checkpoint"
MODEL_FORMAT = "bindscope-small-clip"
FORMAT_VERSION = 1
MODEL_FILE_KEYS = frozenset({"format", "version", "step", "model", "model_config", "train_config"})
CHECKPOINT_KEYS = MODEL_FILE_KEYS | {"optimizer", "scheduler", "scaler", "rng"}
CHECKPOINT_OPTIONAL = frozenset({"log"})  # the losses since the last log line (absent from older checkpoints)
MAX_FILE_BYTES = 8 << 30  # a model or checkpoint file larger than this is refused before it is read
MAX_PARAMETERS = 2_000_000_000  # numbers in a model's state dict
MAX_JSON_BYTES = 16 << 20  # the JSON-like entries (train_config) of a model file


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
    can_unnormalise = True

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
        norm = ("OPENAI_DATASET_MEAN,OPENAI_DATASET_STD" if not model_config.image_mean else
                f"{list(model_config.image_mean)},{list(model_config.image_std)}")
        self.preprocessing = (f"resize({size}x{size},{model_config.interpolation},antialias,no-crop)+normalise("
                              f"{norm})")
        tokens = model_config.tokenizer if not model_config.open_clip else f"open_clip:{model_config.open_clip}"
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
                features = features.float()
                out.append((torch.nn.functional.normalize(features, dim=-1) if self.normalised else features)
                           .cpu().numpy())
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

        return preprocess_images(check_images(images), self.model_config.image_size, self.model_config)


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


def _problem(file: Path, problem: str) -> BadInput:
    return BadInput(f"{str(file)!r}: {problem}")


def expected_state(config) -> dict:
    """``{name: (shape, dtype)}`` of the state dict of :func:`~bindscope.training.model.build_model`'s model for
    ``config``, built on torch's ``meta`` device (no memory for weights, nothing initialised)."""
    import torch

    from bindscope.training.model import build_model

    with torch.device("meta"):
        model = build_model(config)
    return {name: (tuple(t.shape), t.dtype) for name, t in model.state_dict().items()}


def seed_group(record: dict) -> dict | None:
    """The ``model.run`` block of the results of a trained model, from its run's record (``run.json``):
    ``{"seed": the training seed, "identity_except_seed_sha256": the sha256 of the canonical JSON of the run's
    identity without its seed and of its training data's config_sha256}``. Runs that differ only in seed share the
    sha256 (``bindscope collect`` groups their results). None when the record names no seed."""
    from bindscope.io.canonical import canonical_json

    identity = record.get("identity")
    if not isinstance(identity, dict) or not isinstance(identity.get("seed"), int):
        return None
    rest = {"identity": {k: v for k, v in identity.items() if k != "seed"},
            "data_config_sha256": record.get("data_config_sha256")}
    return {"seed": identity["seed"],
            "identity_except_seed_sha256": hashlib.sha256(canonical_json(rest).encode()).hexdigest()}


def _run_record(file: Path) -> tuple[Path, dict, dict] | None:
    """``(run.json, its model config, the whole record)`` of the run folder ``file`` belongs to (``OUT/model.pt``,
    ``OUT/checkpoint.pt``, ``OUT/checkpoints/step-N.pt``); None when there is no madman train record there."""
    import json

    folder = file.parent.parent if file.parent.name == KEPT else file.parent
    record_file = folder / RUN
    if not record_file.is_file():
        return None
    try:
        record = json.loads(record_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    model = record.get("config", {}).get("model") if isinstance(record, dict) and \
        isinstance(record.get("config"), dict) else None
    return (record_file, model, record) if isinstance(model, dict) else None


def _as_written(model: dict) -> dict:
    """A run.json model config as this bindscope writes it (a fine-tune's recorded before its ``architecture``
    entry existed gains it); unchanged where it is not a valid config."""
    from bindscope.training.model import ModelConfig

    try:
        return ModelConfig.from_dict(model).to_dict()
    except (BadInput, TypeError):
        return model


def read_weights_file(file: Path, formats: tuple[str, ...] = (MODEL_FORMAT, CHECKPOINT_FORMAT),
                      max_bytes: int | None = None) -> tuple[dict, object]:
    """Read and validate a ``madman train`` model or checkpoint file: ``(blob, ModelConfig)``.

    Loaded with ``weights_only=True``; then, before any model is built: the format, version and keys; the step;
    the model config (types and size limits, :class:`~bindscope.training.model.ModelConfig`; equal to the
    config in the run folder's ``run.json`` where there is one); the parameter count; and the state dict
    against the model the config describes (names, shapes, dtypes; finite). Other entries of a checkpoint
    (optimiser, RNG states) are checked by the trainer that resumes from it.

    Raises:
        BadInput: naming ``file`` and the first problem found.
    """
    from bindscope.training.model import ModelConfig

    blob = read_torch_file(file, "madman train model or checkpoint",
                           MAX_FILE_BYTES if max_bytes is None else max_bytes)
    if not isinstance(blob, dict) or blob.get("format") not in formats:
        found = blob.get("format") if isinstance(blob, dict) else type(blob).__name__
        raise _problem(file, f"is not a madman train {'model or checkpoint' if len(formats) > 1 else 'checkpoint'} "
                             f"(format {found!r}; expected {' or '.join(map(repr, formats))})")
    keys = CHECKPOINT_KEYS if blob["format"] == CHECKPOINT_FORMAT else MODEL_FILE_KEYS
    if blob["format"] == CHECKPOINT_FORMAT:
        keys = keys | (CHECKPOINT_OPTIONAL & set(blob))
    if set(blob) != keys:
        missing, unexpected = sorted(keys - set(blob)), sorted(set(blob) - keys, key=str)
        raise _problem(file, "has " + "; ".join(p for p in (
            f"no {', '.join(missing)}" if missing else "",
            f"unexpected entries {', '.join(map(repr, unexpected[:5]))}" if unexpected else "") if p))
    if blob["version"] != FORMAT_VERSION or isinstance(blob["version"], bool):
        raise _problem(file, f"has format version {blob['version']!r}; this bindscope reads version {FORMAT_VERSION}")
    step = blob["step"]
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise _problem(file, f"step {step!r} is not a step count (an integer >= 0)")
    if blob["train_config"] is not None:
        import json

        check_plain(blob["train_config"], "train_config", lambda problem: _problem(file, problem))
        if len(json.dumps(blob["train_config"])) > MAX_JSON_BYTES:
            raise _problem(file, f"train_config is larger than {MAX_JSON_BYTES} bytes")
    check_plain(blob["model_config"], "model_config", lambda problem: _problem(file, problem))
    try:
        config = ModelConfig.from_dict(blob["model_config"])
    except BadInput as exc:
        raise _problem(file, f"model_config: {exc}") from None
    run = _run_record(file)
    if run is not None and _as_written(run[1]) != config.to_dict():
        record_file, model, _ = run
        changed = sorted(k for k in set(model) | set(config.to_dict()) if model.get(k) != config.to_dict().get(k))
        raise _problem(file, f"model_config differs from the run's {str(record_file)!r} in {', '.join(changed)}")
    expected = expected_state(config)
    count = sum(math.prod(shape) for shape, _ in expected.values())
    if count > MAX_PARAMETERS:
        raise _problem(file, f"model_config declares {count} parameters; at most {MAX_PARAMETERS}")
    check_tensors(file, "model", blob["model"], expected)
    return blob, config


def load_weights(path: str | os.PathLike) -> tuple[dict, object, dict]:
    """Load ``(state_dict, ModelConfig, info)`` from a run folder, ``model.pt`` or ``checkpoint.pt``, validated by
    :func:`read_weights_file` before anything is built.

    ``info`` has ``step``, ``train_config`` and ``file``. Raises BadInput for a file that is not one of ours.
    """
    file = find_weights_file(path)
    blob, config = read_weights_file(file)
    return blob["model"], config, {"step": blob["step"], "train_config": blob["train_config"], "file": str(file)}


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
    record = _run_record(Path(info["file"]))
    adapter.run = None if record is None else seed_group(record[2])  # likewise: runs that differ only in seed
    return adapter


def load_run_adapter(path: str, pretrained: str | None = None, **options) -> TrainedClipAdapter:
    """The encoder registry's loader for run folders and checkpoints (``pretrained`` and ``pooling`` do not
    apply)."""
    options.pop("pooling", None)
    return load_trained_adapter(path, **options)


RUN_ENCODER = EncoderKind("run", lambda model: os.path.isfile(model) or os.path.isdir(model), load_run_adapter)
"""The encoder kind of run folders and checkpoint files (any existing path the kinds before it did not take),
declared in the ``bindscope.encoders`` entry-point group (pyproject.toml)."""
