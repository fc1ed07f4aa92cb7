"""``madman train``: train a small CLIP from scratch on a MADMAN dataset (Gurung et al., GCPR 2025, section 2).

Objective: open_clip's symmetric contrastive loss (``open_clip.loss.ClipLoss``: mean of image->text and
text->image cross-entropy over the batch, logits = ``exp(logit_scale) * cos``). With hard negatives (NegCLIP,
Yuksekgonul et al., ICLR 2023) the M attribute-swapped captions are appended to the B captions as extra
image->text candidates: ``loss = (CE(L_it[B, B+M], arange(B)) + CE(L_ti[B, B], arange(B))) / 2`` (the
text->image term ranks images for the B true captions only). Optimiser: AdamW (no weight decay on
biases, norms, 1-D parameters and the logit scale, as in open_clip's training), learning rate warmed up
linearly over ``warmup_steps`` and then cosine-decayed to 0 at ``steps``; ``logit_scale`` clamped to
``[0, ln 100]`` after each step (open_clip's training).

A run folder holds ``run.json`` (the resolved config), ``checkpoint.pt`` (full state, atomic), ``log.jsonl``
(one JSON object per line: training lines with ``step, loss, loss_mean, lr, logit_scale, images_per_s,
elapsed_s, cpu_s``; evaluation lines with ``step`` and ``eval``), ``model.pt`` (final weights) and ``result.json``
(the evaluation module's result for the final model). Repeating the command resumes from ``checkpoint.pt``
and the continued run equals an uninterrupted one (batches are a pure function of seed and step; model,
optimizer, scheduler, grad scaler and RNG states are restored).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import signal
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from bindscope.errors import BadInput, GenerationError, check_int
from bindscope.format.manifest import load_manifest
from bindscope.io.atomic import remove_temp_files, write_text_atomic
from bindscope.io.canonical import canonical_json
from bindscope.io.ownership import (
    OutputLock,
    bookkeeping,
    clear_owned,
    is_owned,
    require_owned,
    resolve_output,
    write_marker,
)
from bindscope.training.checkpoint import (
    CHECKPOINT,
    CHECKPOINT_FORMAT,
    MODEL,
    MODEL_FORMAT,
    TrainedClipAdapter,
    autocast_dtype,
    resolve_device,
    save_atomic,
)
from bindscope.training.model import VISION_TOWERS, WORD_SPECIALS, ModelConfig
from bindscope.training.options import (
    DEFAULTS,
    EVAL_BATCH_SIZE,
    LR_RANGE,
    MODEL_KEYS,
    SETTINGS,
    WEIGHT_DECAY_RANGE,
)

RUN = "run.json"
RUN_KIND = "train-run"  # the ownership marker's kind (see bindscope.io.ownership)
VOCAB = "vocab.json"
LOG = "log.jsonl"
RESULT = "result.json"
KEPT = "checkpoints"  # OUT/checkpoints/step-<step>.pt, written with keep_checkpoints
# Config fields whose parameter of :func:`bindscope.train` has another name.
_PARAMS = {"hard_negatives": "hard_negatives_per_sample"}
# Options that are TrainConfig fields as they are (the model's go to ModelConfig; hard_negatives is a count here).
_RUN_KEYS = tuple(key for key in DEFAULTS if key not in
                  (*MODEL_KEYS, "image_size", "hard_negatives", "hard_negatives_per_sample"))
# Config keys that change the training trajectory: a resumed run must match them.
_IDENTITY_KEYS = ("split", "batch_size", "steps", "lr", "weight_decay", "warmup_steps", "hard_negatives", "seed",
                  "precision", "model")


def _is_real(value) -> bool:
    """A finite real number (not a bool)."""
    import numbers

    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class TrainConfig:
    """Settings of one ``madman train`` run (CLI flag names in brackets; defaults from
    :class:`bindscope.training.options.TrainSettings`).

    Attributes:
        data: training dataset folder [DATA]; its ``split`` split is used (default ``"train"``).
        out: run folder [--out].
        eval_data: evaluation dataset folder [--eval]; default ``data``. Evaluated on ``eval_splits``.
        eval_splits: splits to evaluate; default: those of ``"test"`` and ``"ood"`` that exist.
        model: the architecture (:class:`ModelConfig`) [--embed-dim, --image-size, --vision, ...].
        batch_size: images per step B [--batch-size] (the paper: 16-256).
        steps: optimiser steps [--steps].
        lr: peak learning rate [--lr]; weight_decay: AdamW decoupled weight decay [--weight-decay].
        warmup_steps: linear warm-up steps [--warmup]; capped at ``steps``.
        hard_negatives: binding negatives added per sample (0 = plain CLIP) [--hard-negatives gives 1,
            --hard-negatives-per-sample K].
        seed: seeds weights, batch order and hard-negative choice [--seed].
        precision: ``fp32`` | ``bf16`` | ``fp16`` autocast [--precision]; fp16 needs CUDA.
        device: ``auto`` | ``cpu`` | ``cuda`` [--device]. workers: DataLoader worker processes [--workers].
        threads: torch intra-op CPU threads, 0 = torch's default [--threads] (does not change the results'
            meaning, but float sums may round differently, so resume with the same value for exact equality).
        checkpoint_every / log_every / eval_every: steps between checkpoints, log lines and evaluations
            (``eval_every`` 0 = evaluate only the final model).
        keep_checkpoints: also save the weights evaluated every ``eval_every`` steps as
            ``OUT/checkpoints/step-<step>.pt`` (model files, loadable by ``madman eval --model``; their results
            record the step, so ``bindscope collect`` draws binding over training) [--keep-checkpoints].
        eval_batch_size: images or texts per forward pass during evaluation.
    """

    data: str
    out: str
    eval_data: str | None = None
    eval_splits: list[str] | None = None
    model: ModelConfig = field(default_factory=ModelConfig)
    split: str = "train"
    batch_size: int = SETTINGS.batch_size
    steps: int = SETTINGS.steps
    lr: float = SETTINGS.lr
    weight_decay: float = SETTINGS.weight_decay
    warmup_steps: int = SETTINGS.warmup_steps
    hard_negatives: int = SETTINGS.hard_negatives_per_sample if SETTINGS.hard_negatives else 0
    seed: int = SETTINGS.seed
    precision: str = SETTINGS.precision
    device: str = SETTINGS.device
    workers: int = SETTINGS.workers
    threads: int = SETTINGS.threads
    checkpoint_every: int = SETTINGS.checkpoint_every
    log_every: int = SETTINGS.log_every
    eval_every: int = SETTINGS.eval_every
    keep_checkpoints: bool = SETTINGS.keep_checkpoints
    eval_batch_size: int = EVAL_BATCH_SIZE

    def validate(self) -> None:
        """Raise BadInput naming the first bad value."""
        checks = [("batch_size", 1), ("steps", 1), ("checkpoint_every", 1), ("log_every", 1),
                  ("eval_batch_size", 1), ("warmup_steps", 0), ("hard_negatives", 0), ("workers", 0), ("threads", 0),
                  ("eval_every", 0), ("seed", 0)]
        for name, low in checks:
            value = getattr(self, name)
            if not isinstance(value, int) or value < low:
                param = _PARAMS.get(name, name)
                raise BadInput(f"{param} must be an integer >= {low}, got {value!r}", param=param)
        low, high = LR_RANGE
        if not (_is_real(self.lr) and low < self.lr <= high):
            raise BadInput(f"lr {self.lr!r} is not allowed; use a finite number in ({low:g}, {high:g}]", param="lr")
        low, high = WEIGHT_DECAY_RANGE
        if not (_is_real(self.weight_decay) and low <= self.weight_decay <= high):
            raise BadInput(f"weight_decay {self.weight_decay!r} is not allowed; use a finite number in "
                           f"[{low:g}, {high:g}]", param="weight_decay")

    def identity(self) -> dict:
        """The values a resumed run must share with the interrupted one."""
        data = json.loads(json.dumps(asdict(self)))  # as stored in run.json (tuples become lists)
        return {key: data[key] for key in _IDENTITY_KEYS}


def build_train_config(data: str, out: str, eval_data: str | None, eval_splits: list[str] | None,
                       canvas: int | None = None, **options):
    """A validated :class:`TrainConfig` from option values (the keys of ``madman train``'s options; a key left
    out takes its value from :data:`bindscope.training.options.DEFAULTS`).

    Args:
        canvas: the training images' side in pixels, used for the default ``image_size``; read from the
            dataset's manifest when None.

    Raises:
        BadInput: a bad value (named), or a dataset that cannot be read.
    """
    options = {**DEFAULTS, **options}
    if options["hard_negatives_per_sample"] < 1:
        raise BadInput(f"hard_negatives_per_sample must be >= 1, got {options['hard_negatives_per_sample']}",
                       param="hard_negatives_per_sample")
    image_size = options["image_size"]
    if options["vision"] not in VISION_TOWERS:
        raise BadInput(f"vision {options['vision']!r} is not known; allowed: {', '.join(VISION_TOWERS)}",
                       param="vision")
    check_int("patch_size", options["patch_size"], 1, what="pixels")
    if image_size is None:
        side = canvas if canvas is not None else min(load_manifest(data)["image_size"])
        step = {"vit": options["patch_size"], "resnet": 32, "cnn": 8}[options["vision"]]
        image_size = max(step, side - side % step)
    model = ModelConfig(image_size=image_size, **{key: options[key] for key in MODEL_KEYS})
    config = TrainConfig(
        data=data, out=out, eval_data=eval_data, eval_splits=eval_splits, model=model,
        hard_negatives=options["hard_negatives_per_sample"] if options["hard_negatives"] else 0,
        **{key: options[key] for key in _RUN_KEYS})
    config.validate()
    return config


def clip_loss(image_features, text_features, logit_scale, num_captions: int):
    """open_clip's CLIP loss, with NegCLIP hard negatives when ``text_features`` has more rows than images.

    Args:
        image_features: ``(B, D)`` L2-normalised image embeddings.
        text_features: ``(B + M, D)`` L2-normalised: the B matching captions (row i matches image i), then
            M hard-negative captions.
        logit_scale: the scalar ``exp(logit_scale)`` multiplier (a tensor).
        num_captions: B.

    Returns:
        scalar tensor: ``(CE(image->all B+M texts) + CE(caption->B images)) / 2`` (plain ``ClipLoss`` when M=0).
    """
    import torch
    import torch.nn.functional as F
    from open_clip.loss import ClipLoss

    loss_fn = ClipLoss()
    if text_features.shape[0] == num_captions:
        return loss_fn(image_features, text_features, logit_scale)
    logits_per_image, logits_per_text = loss_fn.get_logits(image_features, text_features, logit_scale)
    labels = torch.arange(num_captions, device=image_features.device)
    return (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_text[:num_captions], labels)) / 2


def evaluate(adapter, eval_data: str, splits: list[str] | None) -> dict:
    """Recognition and binding of ``adapter`` on ``eval_data`` through the evaluation module (the one call site).

    Returns the evaluation module's schema-valid result (:func:`bindscope.evaluation.madman.evaluate_madman`;
    binding conditional on recognition, strict ``>``, no embedding cache: the weights change every evaluation).
    """
    from bindscope.evaluation.madman import evaluate_madman

    return evaluate_madman(eval_data, adapter, splits=splits, progress=False)


def binding_summary(result: dict) -> dict:
    """``{split: {"recognition": {attribute: acc}, "binding": {attribute: acc}}}`` from an evaluation result.

    Accuracies are fractions in [0, 1] (None where no negative was scored).
    """
    summary = {}
    for split, metrics in result["metrics"]["splits"].items():
        summary[split] = {kind: {attribute: value["accuracy"]
                                 for attribute, value in metrics[kind]["per_attribute"].items()}
                          for kind in ("recognition", "binding")}
    return summary


def _lr_lambda(warmup: int, total: int) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return factor


class TrainingDiverged(GenerationError):
    """The loss or a weight became NaN or infinite: training stops (the CLI's exit status 1) and nothing of
    that step is saved, neither a model file nor a checkpoint (the run folder keeps its last finite
    checkpoint, if any).

    Attributes: ``step`` (the optimiser step, 1-based), ``what`` (``"the loss"`` or ``"weight 'NAME'"``) and
    ``value`` (the first non-finite value).
    """

    def __init__(self, step: int, what: str, value: float, saved_step: int = 0, lr: float | None = None):
        kept = f"the checkpoint of step {saved_step} is kept" if saved_step else "no checkpoint was written"
        hint = f"; a lower lr than {lr:g} may help" if lr is not None else ""
        super().__init__(f"training stopped at step {step}: {what} is {value!r}, not a finite number; no model "
                         f"was saved ({kept}){hint}")
        self.step, self.what, self.value = step, what, value


def non_finite_tensor(tensors: dict) -> tuple[str, float] | None:
    """``(name, value)`` of the first floating-point tensor of ``tensors`` (a state dict) holding a NaN or an
    infinity, and that value; None when every value is finite."""
    import torch

    names = [name for name, t in tensors.items() if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not names:
        return None
    finite = torch.stack([torch.isfinite(tensors[name]).all() for name in names])
    if bool(finite.all()):
        return None
    name = names[int((~finite).nonzero()[0, 0])]
    tensor = tensors[name].detach()
    return name, float(tensor[~torch.isfinite(tensor)].reshape(-1)[0])


def _ignore_sigint(worker_id: int) -> None:
    """DataLoader workers ignore Ctrl-C: the training process handles it (between two steps)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _rng_state() -> dict:
    """The RNG states as tensors and plain Python values, so checkpoints load with ``weights_only=True``."""
    import torch

    kind, keys, pos, has_gauss, cached = np.random.get_state()
    numpy_state = (kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached))
    state = {"torch": torch.get_rng_state(), "numpy": numpy_state, "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Trainer:
    """One training run: validates, prepares (or resumes) the run folder, then :meth:`run` trains.

    Everything is validated before anything is written: both datasets (finished, with the needed splits),
    the device and precision, the batch size against the split size, and an existing run folder's config.

    Attributes after construction: ``model``, ``optimizer``, ``scheduler``, ``scaler``, ``step`` (optimiser
    steps done; > 0 when resumed), ``resumed`` (bool), ``data`` (:class:`~bindscope.training.data.TrainingData`).

    Raises:
        BadInput: any bad setting, a missing or unfinished dataset, or a run folder holding another run
            (without ``overwrite``) or foreign files.
    """

    def __init__(self, config: TrainConfig, overwrite: bool = False, progress: bool = True):
        import torch

        from bindscope.training.data import BatchSource, load_split
        from bindscope.training.model import build_model, build_vocabulary

        config.validate()
        if config.threads:
            torch.set_num_threads(config.threads)
        self.device = resolve_device(config.device)
        self._dtype = autocast_dtype(config.precision, self.device)
        param = "eval_data" if config.eval_data is not None else "data"
        if config.eval_data is None:
            config = replace(config, eval_data=config.data)
        eval_manifest = load_manifest(config.eval_data, param=param)
        if eval_manifest["generator"]["name"] != "madman":
            raise BadInput(f"{param} {config.eval_data!r} was made by {eval_manifest['generator']['name']!r}; "
                           "training needs a madman dataset", param=param)
        available = list(eval_manifest["splits"])
        if config.eval_splits is None:
            config = replace(config, eval_splits=[s for s in ("test", "ood") if s in available])
        missing = [s for s in config.eval_splits if s not in available]
        if missing:
            raise BadInput(f"eval_splits {', '.join(missing)!r}: {param} {config.eval_data!r} has no such split; "
                           f"it has: {', '.join(available)}", param="eval_splits")
        if not config.eval_splits:
            raise BadInput(f"{param} {config.eval_data!r} has no split test or ood; it has: {', '.join(available)} "
                           "(pass eval_splits)", param=param)
        from bindscope.format.reader import Dataset

        with Dataset(config.eval_data) as eval_data:  # a bad evaluation shard is refused before training
            eval_data.check(config.eval_splits)
        self.config = config
        self.progress = progress
        self.out = Path(config.out)
        self.data = load_split(config.data, config.split)
        if config.model.tokenizer == "word" and not config.model.vocabulary:
            texts = self.data.captions + [n for pool in self.data.hard_negatives for n in pool]
            config = replace(config, model=replace(config.model, vocabulary=build_vocabulary(texts)))
            self.config = config
        self.source = BatchSource(self.data, config.batch_size, config.seed, config.model, config.hard_negatives)
        self.data_manifest_sha = load_manifest(config.data)["config_sha256"]
        run_record = {"config": self._config_dict(), "identity": config.identity(),
                      "data_config_sha256": self.data_manifest_sha}
        self.resumed = self._prepare_out(run_record, overwrite)

        torch.manual_seed(config.seed)
        self.model = build_model(config.model).to(self.device)
        decay, no_decay = [], []
        for name, parameter in self.model.named_parameters():
            excluded = parameter.ndim < 2 or "logit_scale" in name or "bias" in name or "ln" in name
            (no_decay if excluded else decay).append(parameter)
        self.optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                                            {"params": no_decay, "weight_decay": 0.0}], lr=config.lr)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, _lr_lambda(min(config.warmup_steps, config.steps), config.steps))
        self.scaler = torch.amp.GradScaler("cuda", enabled=config.precision == "fp16")
        self.step = 0
        if self.resumed and (self.out / CHECKPOINT).is_file():
            try:
                self._load_checkpoint()
            except BaseException:
                self.close()
                raise
        self._saved_step = self.step
        self._interrupted = False
        self._trim_log()

    # ----------------------------------------------------------------- run folder
    def _config_dict(self) -> dict:
        data = asdict(self.config)
        data["data"] = str(Path(self.config.data))
        return data

    def _check_out(self, record: dict, overwrite: bool) -> str:
        """``"new"``, ``"resume"`` (the same run) or ``"overwrite"``; BadInput for a folder that is not ours."""
        out = self.out
        if out.exists() and not out.is_dir():
            raise BadInput(f"out {str(out)!r} exists and is not a folder", param="out")
        if not out.is_dir() or all(bookkeeping(p.name) for p in out.iterdir()):
            return "new"
        if not is_owned(out, RUN_KIND):
            if overwrite:
                require_owned(out, RUN_KIND, "madman train run")
            raise BadInput(f"out {str(out)!r} holds files that are not a madman train run; choose another folder",
                           param="out")
        try:
            old = json.loads((out / RUN).read_text())
        except (OSError, ValueError):
            old = {}
        old = old if isinstance(old, dict) else {}
        if (old.get("identity") == record["identity"]
                and old.get("data_config_sha256") == record["data_config_sha256"]):
            return "resume"
        if not overwrite:
            changed = sorted(k for k in record["identity"] if (old.get("identity") or {}).get(k) !=
                             record["identity"][k])
            if old.get("data_config_sha256") != record["data_config_sha256"]:
                changed.append("training data")
            raise BadInput(f"out {str(out)!r} holds another run (different {', '.join(changed)}); "
                           "pass overwrite=True to replace it, or choose another folder", param="out")
        return "overwrite"

    def _prepare_out(self, record: dict, overwrite: bool) -> bool:
        """Check the run folder, lock it (held until :meth:`run` ends or :meth:`close`), then claim it."""
        self.out = resolve_output(self.out)
        self._check_out(record, overwrite)  # refuse before anything (even the lock file) is written
        self._lock = OutputLock(self.out).__enter__()
        try:
            decision = self._check_out(record, overwrite)
            if decision == "overwrite":
                clear_owned(self.out, RUN_KIND, "madman train run")
            remove_temp_files(self.out)  # of writes a kill cut short (e.g. a checkpoint); the folder is locked
            if decision != "resume":
                write_marker(self.out, RUN_KIND, hashlib.sha256(canonical_json(record).encode()).hexdigest())
                if self.config.model.tokenizer == "word":
                    write_text_atomic(self.out / VOCAB, canonical_json({
                        "tokenizer": "word", "words": list(self.config.model.vocabulary),
                        "special": dict(zip(WORD_SPECIALS, range(3))), "end": self.config.model.vocab_size - 1}))
                write_text_atomic(self.out / RUN, canonical_json(record))
        except BaseException:
            self.close()
            raise
        return decision == "resume"

    def close(self) -> None:
        """Release the run folder's lock (done by :meth:`run` when it ends); idempotent."""
        lock, self._lock = getattr(self, "_lock", None), None
        if lock is not None:
            lock.__exit__(None, None, None)

    def __del__(self) -> None:
        self.close()

    def _load_checkpoint(self) -> None:
        import torch

        blob = torch.load(self.out / CHECKPOINT, map_location="cpu", weights_only=True)
        if blob.get("format") != CHECKPOINT_FORMAT:
            raise BadInput(f"{str(self.out / CHECKPOINT)!r} is not a madman train checkpoint")
        self.model.load_state_dict(blob["model"])
        self.optimizer.load_state_dict(blob["optimizer"])
        self.scheduler.load_state_dict(blob["scheduler"])
        self.scaler.load_state_dict(blob["scaler"])
        _set_rng_state(blob["rng"])
        self.step = int(blob["step"])

    def save_checkpoint(self) -> None:
        """Write ``checkpoint.pt`` atomically with the current step and every state (between optimiser steps)."""
        self._saved_step = self.step
        save_atomic({"format": CHECKPOINT_FORMAT, "version": 1, "step": self.step,
                     "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                     "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(),
                     "rng": _rng_state(), "model_config": self.config.model.to_dict(),
                     "train_config": self._config_dict()}, self.out / CHECKPOINT)

    def _trim_log(self) -> None:
        """Drop log lines from steps after the checkpoint (they will be redone)."""
        log = self.out / LOG
        if not log.is_file():
            return
        kept = [line for line in log.read_text().splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= self.step]
        write_text_atomic(log, "".join(line + "\n" for line in kept))

    def _log(self, record: dict) -> None:
        fd = os.open(self.out / LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)  # never a link
        with os.fdopen(fd, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")

    # ----------------------------------------------------------------- training
    def adapter(self, pretrained: str = "in-memory") -> TrainedClipAdapter:
        """The current model as an encoder adapter (shares the weights; switch back with ``model.train()``)."""
        return TrainedClipAdapter(self.model, self.config.model, name=str(self.out), pretrained=pretrained,
                                  device=self.device, precision=self.config.precision,
                                  batch_size=self.config.eval_batch_size)

    def train_step(self, batch: dict) -> float:
        """One optimiser step on ``batch`` (from :class:`BatchSource`); returns the loss (float).

        Raises:
            TrainingDiverged: the loss (before the step is taken) or a weight or buffer (after it) is NaN or
                infinite.
        """
        import torch

        device_type = "cuda" if self.device.startswith("cuda") else "cpu"
        self.model.train()
        images = batch["images"].to(self.device, non_blocking=True)
        texts = batch["texts"].to(self.device, non_blocking=True)
        with torch.autocast(device_type, dtype=self._dtype, enabled=self._dtype is not None):
            image_features = self.model.encode_image(images, normalize=True)
            text_features = self.model.encode_text(texts, normalize=True)
            loss = clip_loss(image_features.float(), text_features.float(), self.model.logit_scale.exp(),
                             batch["num_captions"])
        value = float(loss.detach())
        if not math.isfinite(value):
            raise TrainingDiverged(self.step + 1, "the loss", value, self._saved_step, self.config.lr)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        with torch.no_grad():
            self.model.logit_scale.clamp_(0, math.log(100))
        self.step += 1
        bad = non_finite_tensor(self.model.state_dict())
        if bad is not None:
            raise TrainingDiverged(self.step, f"weight {bad[0]!r}", bad[1], self._saved_step, self.config.lr)
        return value

    def run(self, callback: Callable[["Trainer", float], None] | None = None) -> dict:
        """Train up to ``config.steps``, then write ``model.pt`` and evaluate into ``result.json``.

        Args:
            callback: called as ``callback(trainer, loss)`` after every step (after any checkpoint of that step).

        Returns:
            a summary dict: ``steps``, ``resumed_from``, ``train_seconds`` (wall), ``cpu_seconds`` (this process's
            CPU time in training steps, all threads), ``steps_per_s``, ``images_per_s``,
            ``final_loss``, ``truncated_captions``, ``result`` (the evaluation result) and the files written.
            On Ctrl-C (SIGINT) the step under way is finished and checkpointed, then KeyboardInterrupt is
            raised (a second Ctrl-C interrupts at once, without a checkpoint), so a resumed run equals an
            uninterrupted one. The run folder's lock is released when it returns or raises.

        Raises:
            TrainingDiverged: a non-finite loss or weight (nothing of that step is saved).
        """
        try:
            return self._run(callback)
        finally:
            self.close()

    def _run(self, callback) -> dict:
        import torch
        from tqdm.auto import tqdm

        config = self.config
        start = self.step
        # The loader draws its workers' base seed from a generator of its own, not from torch's global one (whose
        # state the checkpoint holds): a resumed run's global RNG then equals an uninterrupted run's.
        loader = torch.utils.data.DataLoader(self.source, batch_size=None, sampler=range(start, config.steps),
                                             num_workers=config.workers, worker_init_fn=_ignore_sigint,
                                             generator=torch.Generator().manual_seed(config.seed),
                                             persistent_workers=False)
        losses: list[float] = []
        truncated = 0
        train_seconds = cpu_seconds = 0.0
        interval_images, interval_seconds = 0, 0.0
        last_loss = float("nan")
        bar = tqdm(total=config.steps, initial=start, unit="step", desc=f"train {self.out.name}",
                   disable=not self.progress)
        self._interrupted = False
        previous = self._catch_sigint()
        try:
            tick, cpu_tick = time.perf_counter(), time.process_time()
            for batch in loader:
                last_loss = self.train_step(batch)
                now = time.perf_counter()
                cpu_seconds += time.process_time() - cpu_tick
                train_seconds += now - tick
                interval_seconds += now - tick
                losses.append(last_loss)
                truncated += batch["truncated"]
                interval_images += batch["num_captions"]
                if self.step % config.log_every == 0 or self.step == config.steps:
                    speed = interval_images / max(interval_seconds, 1e-9)
                    self._log({"step": self.step, "loss": last_loss, "loss_mean": float(np.mean(losses)),
                               "lr": self.scheduler.get_last_lr()[0],
                               "logit_scale": float(self.model.logit_scale.detach().exp()),
                               "images_per_s": speed, "elapsed_s": train_seconds, "cpu_s": cpu_seconds})
                    bar.set_postfix(loss=f"{last_loss:.4f}", img_s=f"{speed:.0f}")
                    losses, interval_images, interval_seconds = [], 0, 0.0
                bar.update(1)
                if self.step % config.checkpoint_every == 0 or self.step == config.steps:
                    self.save_checkpoint()
                if config.eval_every and self.step % config.eval_every == 0 and self.step < config.steps:
                    if config.keep_checkpoints:
                        self.save_model(self.out / KEPT / f"step-{self.step:07d}.pt")
                    self._log({"step": self.step, "eval": binding_summary(self._evaluate())})
                if callback is not None:
                    try:
                        callback(self, last_loss)
                    except KeyboardInterrupt:  # raised between two steps: stop as on Ctrl-C
                        self._interrupted = True
                if self._interrupted:
                    self._stop()
                tick, cpu_tick = time.perf_counter(), time.process_time()
            if self._interrupted:  # Ctrl-C after the last step
                self._stop()
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
            bar.close()
        return self._finish(start, train_seconds, cpu_seconds, last_loss, truncated)

    def _catch_sigint(self):
        """In the main thread: make Ctrl-C (SIGINT) only set a flag that the training loop reads after the step
        under way (so a checkpoint never holds weights ahead of the optimiser state or the step count); a
        second Ctrl-C interrupts at once, without a checkpoint. Returns the previous handler (None elsewhere)."""
        if threading.current_thread() is not threading.main_thread():
            return None

        def on_sigint(signum, frame):
            self._interrupted = True
            signal.signal(signal.SIGINT, signal.default_int_handler)

        return signal.signal(signal.SIGINT, on_sigint)

    def _stop(self):
        """Checkpoint the finished step (unless it is saved already), then raise KeyboardInterrupt."""
        if self.step != self._saved_step:
            self.save_checkpoint()
        raise KeyboardInterrupt

    def _evaluate(self, pretrained: str = "in-memory") -> dict:
        try:
            return evaluate(self.adapter(pretrained), self.config.eval_data, self.config.eval_splits)
        finally:
            self.model.train()

    def save_model(self, path: Path) -> None:
        """Write the current weights as a model file (format ``MODEL_FORMAT``, with the step), atomically."""
        path.parent.mkdir(parents=True, exist_ok=True)
        save_atomic({"format": MODEL_FORMAT, "version": 1, "step": self.step, "model": self.model.state_dict(),
                     "model_config": self.config.model.to_dict(), "train_config": self._config_dict()}, path)

    def _finish(self, start: int, train_seconds: float, cpu_seconds: float, last_loss: float,
                truncated: int) -> dict:
        config = self.config
        self.save_model(self.out / MODEL)
        result_path = self.out / RESULT
        if result_path.is_file():
            result = json.loads(result_path.read_text())
        else:
            result = self._evaluate(str(self.out / MODEL))
            write_text_atomic(result_path, canonical_json(result))
            self._log({"step": self.step, "eval": binding_summary(result)})
        steps_done = self.step - start
        return {"steps": self.step, "resumed_from": start, "train_seconds": train_seconds, "cpu_seconds": cpu_seconds,
                "steps_per_s": steps_done / train_seconds if train_seconds else None,
                "images_per_s": steps_done * config.batch_size / train_seconds if train_seconds else None,
                "final_loss": last_loss, "truncated_captions": truncated, "result": result,
                "files": {name: str(self.out / name) for name in (RUN, CHECKPOINT, MODEL, LOG, RESULT)}}
