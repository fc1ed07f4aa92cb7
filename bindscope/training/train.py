"""``bindscope train`` / ``madman train``: train a small CLIP from scratch on any bindscope dataset with captions
(MADMAN, ComCO / SimCO, COCO imports; the MADMAN study's model: Gurung et al., GCPR 2025, section 2).

Objective: open_clip's symmetric contrastive loss (``open_clip.loss.ClipLoss``: mean of image->text and
text->image cross-entropy over the batch, logits = ``exp(logit_scale) * cos``). With hard negatives (NegCLIP,
Yuksekgonul et al., ICLR 2023) the M attribute-swapped captions are appended to the B captions as extra
image->text candidates (:mod:`bindscope.training.data`: the dataset's stored binding negatives or shuffled
captions): ``loss = (CE(L_it[B, B+M], arange(B)) + CE(L_ti[B, B], arange(B))) / 2`` (the
text->image term ranks images for the B true captions only). Optimiser: AdamW (no weight decay on
biases, norms, 1-D parameters and the logit scale, as in open_clip's training), learning rate warmed up
linearly over ``warmup_steps`` and then cosine-decayed to 0 at ``steps``; ``logit_scale`` clamped to
``[0, ln 100]`` after each step (open_clip's training).

A run folder holds ``run.json`` (the resolved config), ``checkpoint.pt`` (full state, atomic), ``log.jsonl``
(one JSON object per line: training lines with ``step, loss, loss_mean, lr, logit_scale, images_per_s,
elapsed_s, cpu_s``; evaluation lines with ``step`` and ``eval``), ``model.pt`` (final weights) and ``result.json``
(the evaluation module's result for the final model, :mod:`bindscope.training.evaluation`). Repeating the command resumes from ``checkpoint.pt``
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
from bindscope.training.checkpoint import (  # RUN: run.json; KEPT: OUT/checkpoints/, with keep_checkpoints
    CHECKPOINT,
    CHECKPOINT_FORMAT,
    KEPT,
    MODEL,
    MODEL_FORMAT,
    RUN,
    TrainedClipAdapter,
    autocast_dtype,
    check_tensors,
    read_weights_file,
    save_atomic,
)
from bindscope.training import distributed
from bindscope.training.evaluation import eval_summary, evaluate_run
from bindscope.training.model import VISION_TOWERS, WORD_SPECIALS, ModelConfig
from bindscope.training.options import (
    DEFAULTS,
    EVAL_BATCH_SIZE,
    FREEZE,
    LR_RANGE,
    MODEL_KEYS,
    NEGATIVES,
    SETTINGS,
    WEIGHT_DECAY_RANGE,
)

RUN_KIND = "train-run"  # the ownership marker's kind (see bindscope.io.ownership)
VOCAB = "vocab.json"
LOG = "log.jsonl"
RESULT = "result.json"
# Options that are TrainConfig fields as they are (the model's go to ModelConfig).
_RUN_KEYS = tuple(key for key in DEFAULTS if key not in (*MODEL_KEYS, "image_size"))
# Config keys that change the training trajectory: a resumed run must match them (the fine-tuning ones where set).
_IDENTITY_KEYS = ("split", "batch_size", "steps", "lr", "weight_decay", "warmup_steps", "negatives",
                  "negatives_per_sample", "seed", "precision", "model")
_FINETUNE_IDENTITY = {"init": None, "pretrained": None, "pretrained_sha256": None, "freeze": "none"}


def _is_real(value) -> bool:
    """A finite real number (not a bool)."""
    import numbers

    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class TrainConfig:
    """Settings of one ``bindscope train`` run (CLI flag names in brackets; defaults from
    :class:`bindscope.training.options.TrainSettings`).

    Attributes:
        data: training dataset folder [DATA]: MADMAN, ComCO / SimCO or a COCO import.
        split: its split trained on [--split]; None: ``train``, else ``scenes``, else the only split
            (:func:`bindscope.training.data.training_split`; the trainer stores the resolved name).
        out: run folder [--out].
        eval_data: evaluation dataset folder [--eval]; default ``data``. Evaluated on ``eval_splits``.
        eval_splits: splits to evaluate [--eval-split]; MADMAN default: those of ``"test"`` and ``"ood"`` that
            exist; ComCO / COCO: one split of scenes (default ``scenes`` or the only split).
        eval_tasks: ComCO / COCO evaluation tasks [--eval-tasks] (default: those ``comco eval`` runs on the
            dataset; :mod:`bindscope.training.evaluation`).
        model: the architecture (:class:`ModelConfig`) [--embed-dim, --image-size, --vision, ...].
        batch_size: images per step B [--batch-size] (the paper: 16-256).
        steps: optimiser steps [--steps].
        lr: peak learning rate [--lr]; weight_decay: AdamW decoupled weight decay [--weight-decay].
        warmup_steps: linear warm-up steps [--warmup]; capped at ``steps``.
        negatives: NegCLIP hard negatives [--negatives]: ``"none"`` (plain CLIP), ``"stored"`` (the dataset's
            binding negatives) or ``"shuffled"`` (made from each caption; :mod:`bindscope.training.data`).
        negatives_per_sample: hard negatives added per sample [--negatives-per-sample].
        seed: seeds weights, batch order and hard-negative choice [--seed].
        precision: ``fp32`` | ``bf16`` | ``fp16`` autocast [--precision]; fp16 needs CUDA.
        device: ``auto`` | ``cpu`` | ``cuda`` [--device]. workers: DataLoader worker processes [--workers].
        threads: torch intra-op CPU threads, 0 = torch's default [--threads] (does not change the results'
            meaning, but float sums may round differently, so resume with the same value for exact equality).
        checkpoint_every / log_every / eval_every: steps between checkpoints, log lines and evaluations
            (``eval_every`` 0 = evaluate only the final model).
        keep_checkpoints: also save the weights evaluated every ``eval_every`` steps, and the final ones, as
            ``OUT/checkpoints/step-<step>.pt`` (model files, loadable by ``madman eval --model``; their results
            record the step, so ``bindscope collect`` draws binding over training) [--keep-checkpoints].
        eval_batch_size: images or texts per forward pass during evaluation.
        init: the open_clip model fine-tuned [--init] (None: a small CLIP from scratch); ``model`` is then its
            :class:`ModelConfig` (:mod:`bindscope.training.finetune`).
        pretrained: its starting weights [--pretrained], resolved: an open_clip tag, ``"none"``, an absolute
            file path or an ``hf-hub:`` name; pretrained_sha256: the sha256 of a weights file.
        freeze: ``"none"``, ``"image"`` or ``"text"``: the tower kept fixed [--freeze].
    """

    data: str
    out: str
    eval_data: str | None = None
    eval_splits: list[str] | None = None
    eval_tasks: list[str] | None = None
    model: ModelConfig = field(default_factory=ModelConfig)
    split: str | None = None
    batch_size: int = SETTINGS.batch_size
    steps: int = SETTINGS.steps
    lr: float = SETTINGS.lr
    weight_decay: float = SETTINGS.weight_decay
    warmup_steps: int = SETTINGS.warmup_steps
    negatives: str = SETTINGS.negatives
    negatives_per_sample: int = SETTINGS.negatives_per_sample
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
    init: str | None = SETTINGS.init
    pretrained: str | None = SETTINGS.pretrained
    pretrained_sha256: str | None = None
    freeze: str = SETTINGS.freeze

    def validate(self) -> None:
        """Raise BadInput naming the first bad value."""
        checks = [("batch_size", 1), ("steps", 1), ("checkpoint_every", 1), ("log_every", 1),
                  ("eval_batch_size", 1), ("warmup_steps", 0), ("negatives_per_sample", 1), ("workers", 0),
                  ("threads", 0), ("eval_every", 0), ("seed", 0)]
        for name, low in checks:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise BadInput(f"{name} must be an integer >= {low}, got {value!r}", param=name)
        if self.negatives not in NEGATIVES:
            raise BadInput(f"negatives {self.negatives!r} is not known; allowed: {', '.join(NEGATIVES)}",
                           param="negatives")
        if self.freeze not in FREEZE:
            raise BadInput(f"freeze {self.freeze!r} is not allowed; use one of {', '.join(FREEZE)}", param="freeze")
        if self.pretrained is not None and self.init is None:
            raise BadInput("pretrained weights need init=MODEL (an open_clip model to fine-tune)", param="pretrained")
        if (self.init or "") != self.model.open_clip:
            raise BadInput(f"init {self.init!r} and the model config's open_clip {self.model.open_clip!r} differ",
                           param="init")
        low, high = LR_RANGE
        if not (_is_real(self.lr) and low < self.lr <= high):
            raise BadInput(f"lr {self.lr!r} is not allowed; use a finite number in ({low:g}, {high:g}]", param="lr")
        low, high = WEIGHT_DECAY_RANGE
        if not (_is_real(self.weight_decay) and low <= self.weight_decay <= high):
            raise BadInput(f"weight_decay {self.weight_decay!r} is not allowed; use a finite number in "
                           f"[{low:g}, {high:g}]", param="weight_decay")

    def identity(self) -> dict:
        """The values a resumed run must share with the interrupted one."""
        data = json.loads(json.dumps(self.to_dict()))  # as stored in run.json (tuples become lists)
        return {key: data[key] for key in (*_IDENTITY_KEYS, *_FINETUNE_IDENTITY) if key in data}

    def to_dict(self) -> dict:
        """The config as plain values, as ``run.json`` holds it (the fine-tuning keys only where set)."""
        data = asdict(self)
        data["model"] = self.model.to_dict()
        for key, default in _FINETUNE_IDENTITY.items():
            if data[key] == default:
                del data[key]
        return data


def build_train_config(data: str, out: str, eval_data: str | None, eval_splits: list[str] | None,
                       canvas: int | None = None, split: str | None = None, eval_tasks: list[str] | None = None,
                       **options):
    """A validated :class:`TrainConfig` from option values (the keys of ``madman train``'s options; a key left
    out takes its value from :data:`bindscope.training.options.DEFAULTS`).

    Args:
        canvas: the training images' side in pixels, used for the default ``image_size``; read from the
            dataset's manifest when None.
        split / eval_tasks: :attr:`TrainConfig.split` and :attr:`TrainConfig.eval_tasks`.

    Raises:
        BadInput: a bad value (named), or a dataset that cannot be read.
    """
    model_options = sorted(set(options) & {*MODEL_KEYS, "image_size"})
    options = {**DEFAULTS, **options}
    run = {key: options[key] for key in _RUN_KEYS}
    if options["init"] is not None:
        if model_options:
            raise BadInput(f"{model_options[0]} does not apply with init={options['init']!r}: a fine-tuned open_clip "
                           f"model keeps its own architecture ({', '.join(model_options)} given)",
                           param=model_options[0])
        from bindscope.training.finetune import open_clip_model_config

        model, weights, digest = open_clip_model_config(options["init"], options["pretrained"])
        run.update(init=model.open_clip, pretrained=weights, pretrained_sha256=digest)
    else:
        model = _small_clip_config(data, canvas, options)
    config = TrainConfig(data=data, out=out, eval_data=eval_data, eval_splits=eval_splits, eval_tasks=eval_tasks,
                         split=split, model=model, **run)
    config.validate()
    return config


def _small_clip_config(data: str, canvas: int | None, options: dict) -> ModelConfig:
    """The small CLIP's :class:`ModelConfig` of the option values (``image_size`` None: the canvas of ``data``,
    or ``canvas``, rounded down to what the vision tower allows)."""
    image_size = options["image_size"]
    if options["vision"] not in VISION_TOWERS:
        raise BadInput(f"vision {options['vision']!r} is not known; allowed: {', '.join(VISION_TOWERS)}",
                       param="vision")
    check_int("patch_size", options["patch_size"], 1, what="pixels")
    if image_size is None:
        side = canvas if canvas is not None else min(load_manifest(data)["image_size"])
        step = {"vit": options["patch_size"], "resnet": 32, "cnn": 8}[options["vision"]]
        image_size = max(step, side - side % step)
    return ModelConfig(image_size=image_size, **{key: options[key] for key in MODEL_KEYS})


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


def _same(ours, theirs) -> bool:
    """Equal values of equal types, containers compared entry by entry (a tensor never equals a number)."""
    if type(ours) is not type(theirs):
        return False
    if isinstance(ours, (list, tuple)):
        return len(ours) == len(theirs) and all(_same(a, b) for a, b in zip(ours, theirs))
    if isinstance(ours, dict):
        return set(ours) == set(theirs) and all(_same(ours[k], theirs[k]) for k in ours)
    return bool(ours == theirs)


def _bad(file: Path, problem: str) -> BadInput:
    return BadInput(f"{str(file)!r}: {problem}")


def check_resume_state(file: Path, blob: dict, trainer: "Trainer") -> None:
    """Raise BadInput (naming ``file`` and the entry) unless the training states of checkpoint ``blob`` fit
    ``trainer`` (its freshly built optimiser, scheduler and grad scaler): the step within the run's steps; AdamW's
    parameter groups equal the run's (the learning rate the schedule's at that step), each moment a finite
    tensor of its parameter's shape and dtype; the scheduler and scaler states of the same keys and types,
    at that step; the RNG states of the shapes torch, numpy and Python use. The model weights are checked by
    :func:`bindscope.training.checkpoint.read_weights_file`."""
    import torch

    step, config = blob["step"], trainer.config
    if step > config.steps:
        raise _bad(file, f"step {step} is beyond this run's {config.steps} steps")
    ours = trainer.optimizer.state_dict()
    optimizer = blob["optimizer"]
    if not isinstance(optimizer, dict) or set(optimizer) != {"state", "param_groups"}:
        raise _bad(file, "optimizer is not an optimiser state (state and param_groups)")
    groups = optimizer["param_groups"]
    if not isinstance(groups, list) or len(groups) != len(ours["param_groups"]):
        raise _bad(file, f"optimizer has {len(groups) if isinstance(groups, list) else 'no'} parameter groups; "
                         f"this run has {len(ours['param_groups'])}")
    factor = _lr_lambda(min(config.warmup_steps, config.steps), config.steps)(step)
    for k, (group, mine) in enumerate(zip(groups, ours["param_groups"])):
        if not isinstance(group, dict) or set(group) != set(mine):
            raise _bad(file, f"optimizer param_groups[{k}] does not have the keys of an AdamW group")
        for key, value in mine.items():
            if key == "lr":
                lr = group["lr"]
                if not (_is_real(lr) and math.isclose(lr, mine["initial_lr"] * factor, rel_tol=1e-9, abs_tol=0)):
                    raise _bad(file, f"optimizer param_groups[{k}].lr is {lr!r}; the schedule has "
                                     f"{mine['initial_lr'] * factor!r} at step {step}")
            elif not _same(value, group[key]):
                raise _bad(file, f"optimizer param_groups[{k}].{key} is {group[key]!r}; this run has {value!r}")
    parameters = [p for group in trainer.optimizer.param_groups for p in group["params"]]
    state = optimizer["state"]
    if not isinstance(state, dict):
        raise _bad(file, "optimizer state is not a mapping of parameter numbers to states")
    for key, entry in state.items():
        if not isinstance(key, int) or isinstance(key, bool) or not 0 <= key < len(parameters):
            raise _bad(file, f"optimizer state has the entry {key!r}; this run's parameters are "
                             f"0..{len(parameters) - 1}")
        if not isinstance(entry, dict) or set(entry) != {"step", "exp_avg", "exp_avg_sq"}:
            raise _bad(file, f"optimizer state {key} is not an AdamW state (step, exp_avg, exp_avg_sq)")
        count = entry["step"]
        if not (isinstance(count, torch.Tensor) and count.shape == () and count.dtype == torch.float32
                and bool(torch.isfinite(count)) and float(count) == int(count) and 0 <= int(count) <= step):
            raise _bad(file, f"optimizer state {key}: step is not a step count within 0..{step}")
        parameter = parameters[key]
        expected = {"exp_avg": (tuple(parameter.shape), parameter.dtype),
                    "exp_avg_sq": (tuple(parameter.shape), parameter.dtype)}
        check_tensors(file, f"optimizer state {key}", {n: entry[n] for n in expected}, expected)
        if bool((entry["exp_avg_sq"] < 0).any()):
            raise _bad(file, f"optimizer state {key}: exp_avg_sq holds negative values")
    _check_scheduler(file, blob["scheduler"], trainer.scheduler.state_dict(), step)
    _check_scaler(file, blob["scaler"], trainer.scaler.state_dict())
    _check_rng(file, blob["rng"])


def _check_scheduler(file: Path, scheduler, ours: dict, step: int) -> None:
    if not isinstance(scheduler, dict) or set(scheduler) != set(ours):
        raise _bad(file, "scheduler does not have the keys of this run's learning-rate schedule")
    for key, value in ours.items():
        if type(scheduler[key]) is not type(value):
            raise _bad(file, f"scheduler {key} is a {type(scheduler[key]).__name__}; expected a {type(value).__name__}")
    for key in ("base_lrs", "lr_lambdas"):
        if key in ours and not _same(ours[key], scheduler[key]):
            raise _bad(file, f"scheduler {key} is {scheduler[key]!r}; this run has {ours[key]!r}")
    if scheduler.get("last_epoch") != step or scheduler.get("_step_count", step + 1) != step + 1:
        raise _bad(file, f"scheduler is at step {scheduler.get('last_epoch')!r}; the checkpoint is at step {step}")
    last = scheduler.get("_last_lr", [])
    if not (len(last) == len(ours.get("_last_lr", [])) and all(_is_real(v) and v >= 0 for v in last)):
        raise _bad(file, f"scheduler _last_lr {last!r} is not one finite learning rate per parameter group")


def _check_scaler(file: Path, scaler, ours: dict) -> None:
    if not isinstance(scaler, dict) or set(scaler) != set(ours):
        raise _bad(file, f"scaler does not have the keys of this run's grad scaler ({', '.join(ours) or 'none'})")
    for key, value in ours.items():
        if key == "scale":
            if not (_is_real(scaler[key]) and scaler[key] > 0):
                raise _bad(file, f"scaler scale {scaler[key]!r} is not a finite positive number")
        elif key == "_growth_tracker":
            if not (isinstance(scaler[key], int) and not isinstance(scaler[key], bool) and scaler[key] >= 0):
                raise _bad(file, f"scaler _growth_tracker {scaler[key]!r} is not a count")
        elif not _same(value, scaler[key]):
            raise _bad(file, f"scaler {key} is {scaler[key]!r}; this run has {value!r}")


def _check_rng(file: Path, rng) -> None:
    import torch

    if not isinstance(rng, dict) or not {"torch", "numpy", "python"} <= set(rng) <= {"torch", "numpy", "python",
                                                                                         "cuda"}:
        raise _bad(file, "rng is not the torch, numpy and Python generator states")
    reference = torch.get_rng_state()
    state = rng["torch"]
    if not (isinstance(state, torch.Tensor) and state.dtype == torch.uint8 and state.shape == reference.shape):
        raise _bad(file, f"rng torch is not a generator state (a uint8 tensor of shape {tuple(reference.shape)})")
    numpy_state = rng["numpy"]
    keys = numpy_state[1] if isinstance(numpy_state, (tuple, list)) and len(numpy_state) == 5 else None
    if not (keys is not None and numpy_state[0] == "MT19937" and isinstance(keys, torch.Tensor)
            and keys.dtype == torch.int64 and tuple(keys.shape) == (624,)
            and bool(((keys >= 0) & (keys < 2 ** 32)).all())
            and _is_count(numpy_state[2], 624) and _is_count(numpy_state[3], 1) and _is_real(numpy_state[4])):
        raise _bad(file, "rng numpy is not a numpy MT19937 state")
    python_state = rng["python"]
    if not (isinstance(python_state, (tuple, list)) and len(python_state) == 3 and python_state[0] == 3
            and isinstance(python_state[1], tuple) and len(python_state[1]) == 625
            and all(_is_count(v, 2 ** 32 - 1) for v in python_state[1][:-1]) and _is_count(python_state[1][-1], 624)
            and (python_state[2] is None or _is_real(python_state[2]))):
        raise _bad(file, "rng python is not a Python random state")
    if "cuda" in rng and torch.cuda.is_available():
        states = rng["cuda"]
        if not (isinstance(states, list) and len(states) <= torch.cuda.device_count() and all(
                isinstance(t, torch.Tensor) and t.dtype == torch.uint8
                and t.shape == torch.cuda.get_rng_state(i).shape for i, t in enumerate(states))):
            raise _bad(file, "rng cuda is not one generator state per CUDA device of this machine")


def _is_count(value, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= high


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
        config.validate()
        world = distributed.world_from_env()
        distributed.check_world(config.batch_size, config.device, world[1])
        self.group = distributed.Group()
        self.group = distributed.start(config.device, world)  # under torchrun: this process's rank; see there
        try:
            self._init(config, overwrite, progress)
            self.group.agree()
        except BaseException as exc:
            try:
                if isinstance(exc, Exception) and self.group.active and not getattr(exc, "reported", False):
                    self.group.agree(error=exc)  # the other ranks raise too
            finally:
                self.close()
            raise

    def _init(self, config: TrainConfig, overwrite: bool, progress: bool) -> None:
        import torch

        from bindscope.training.data import BatchSource, check_negatives, load_split
        from bindscope.training.evaluation import plan_run_evaluation
        from bindscope.training.model import build_model, build_vocabulary

        if config.threads:
            torch.set_num_threads(config.threads)
        self.device = self.group.device
        self._dtype = autocast_dtype(config.precision, self.device)
        param = "eval_data" if config.eval_data is not None else "data"
        if config.eval_data is None:
            config = replace(config, eval_data=config.data)
        # The evaluation module's plan: the dataset, its splits and tasks, every shard, checked before training.
        self.evaluation = plan_run_evaluation(config.eval_data, config.eval_splits, config.eval_tasks, param)
        config = replace(config, eval_splits=self.evaluation.splits, eval_tasks=self.evaluation.tasks)
        self.progress = progress and self.group.rank == 0
        self.out = Path(config.out)
        self.data = load_split(config.data, config.split)
        config = replace(config, split=self.data.split)
        self.config = config
        check_negatives(self.data, config.negatives)
        if config.model.tokenizer == "word" and not config.model.vocabulary:
            texts = self.data.captions + [n for pool in self.data.hard_negatives for n in pool]
            config = replace(config, model=replace(config.model, vocabulary=build_vocabulary(texts)))
            self.config = config
        self.source = BatchSource(self.data, config.batch_size, config.seed, config.model,
                                  config.negatives_per_sample if config.negatives != "none" else 0,
                                  "stored" if config.negatives == "none" else config.negatives,
                                  self.group.rank, self.group.world_size)
        self.data_manifest_sha = load_manifest(config.data)["config_sha256"]
        run_record = {"config": self._config_dict(), "identity": config.identity(),
                      "data_config_sha256": self.data_manifest_sha}
        self.resumed = self._prepare_out_once(run_record, overwrite)

        torch.manual_seed(config.seed)
        self.model = build_model(config.model)
        from_checkpoint = self.resumed and (self.out / CHECKPOINT).is_file()
        if config.init is not None and not from_checkpoint:  # a resumed run takes its weights from the checkpoint
            from bindscope.training.finetune import initial_weights

            state = initial_weights(config.model, config.pretrained)
            if state is not None:
                try:
                    self.model.load_state_dict(state)
                except RuntimeError as exc:
                    raise BadInput(f"pretrained {config.pretrained!r} does not fit open_clip {config.init!r} "
                                   f"({str(exc).splitlines()[0][:300]})", param="pretrained") from None
        from bindscope.training.finetune import freeze, frozen_modules

        freeze(self.model, config.freeze)
        self._frozen = frozen_modules(self.model, config.freeze)
        self.model = self.model.to(self.device)
        decay, no_decay = [], []
        for name, parameter in self.model.named_parameters():
            if not parameter.requires_grad:  # a frozen tower: not optimised
                continue
            excluded = parameter.ndim < 2 or "logit_scale" in name or "bias" in name or "ln" in name
            (no_decay if excluded else decay).append(parameter)
        self.optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                                            {"params": no_decay, "weight_decay": 0.0}], lr=config.lr)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, _lr_lambda(min(config.warmup_steps, config.steps), config.steps))
        self.scaler = torch.amp.GradScaler("cuda", enabled=config.precision == "fp16")
        self.step = 0
        if from_checkpoint:
            try:
                self._load_checkpoint()
            except BaseException:
                self.close()
                raise
        self._saved_step = self.step
        self._interrupted = self._stop_agreed = False
        self._trim_log()

    # ----------------------------------------------------------------- run folder
    def _prepare_out_once(self, record: dict, overwrite: bool) -> bool:
        """:meth:`_prepare_out` on rank 0 only (the one that writes); every rank learns whether the run resumes,
        or stops with rank 0's error."""
        if not self.group.active:
            return self._prepare_out(record, overwrite)
        self.group.agree()  # every rank read its datasets and settings
        resumed, error = False, None
        if self.group.rank == 0:
            try:
                resumed = self._prepare_out(record, overwrite)
            except Exception as exc:
                error = exc
        else:
            self.out = resolve_output(self.out)
        return bool(self.group.agree(int(resumed), error)[0])

    def _config_dict(self) -> dict:
        data = self.config.to_dict()
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
        """Release the run folder's lock and leave the process group (done by :meth:`run` when it ends);
        idempotent."""
        lock, self._lock = getattr(self, "_lock", None), None
        if lock is not None:
            lock.__exit__(None, None, None)
        group = getattr(self, "group", None)
        if group is not None:
            group.close()

    def __del__(self) -> None:
        self.close()

    def _load_checkpoint(self) -> None:
        """Restore every state from ``checkpoint.pt``, validated first (:func:`check_resume_state`).

        Raises:
            BadInput: naming the file and the problem, for a checkpoint that is not this run's or not sound.
        """
        file = self.out / CHECKPOINT
        tensors = list(self.model.state_dict().values())
        limit = 4 * sum(t.numel() * t.element_size() for t in tensors) + (16 << 20)  # model, 2 AdamW moments
        blob, model_config = read_weights_file(file, (CHECKPOINT_FORMAT,), max_bytes=limit)
        if model_config != self.config.model:
            raise BadInput(f"{str(file)!r}: its model_config is not this run's; remove the file to start afresh")
        check_resume_state(file, blob, self)
        try:
            self.model.load_state_dict(blob["model"])
            self.optimizer.load_state_dict(blob["optimizer"])
            self.scheduler.load_state_dict(blob["scheduler"])
            self.scaler.load_state_dict(blob["scaler"])
            _set_rng_state(blob["rng"])
        except (RuntimeError, ValueError, TypeError, KeyError, IndexError) as exc:  # a check above missed it
            raise BadInput(f"{str(file)!r}: cannot be restored ({type(exc).__name__}: {exc})") from None
        self.step = blob["step"]

    def save_checkpoint(self) -> None:
        """Write ``checkpoint.pt`` atomically with the current step and every state (between optimiser steps);
        rank 0 only (every rank holds the same states)."""
        self._saved_step = self.step
        if self.group.rank:
            return
        save_atomic({"format": CHECKPOINT_FORMAT, "version": 1, "step": self.step,
                     "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                     "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(),
                     "rng": _rng_state(), "model_config": self.config.model.to_dict(),
                     "train_config": self._config_dict()}, self.out / CHECKPOINT)

    def _trim_log(self) -> None:
        """Drop log lines from steps after the checkpoint (they will be redone)."""
        log = self.out / LOG
        if self.group.rank or not log.is_file():
            return
        kept = [line for line in log.read_text().splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= self.step]
        write_text_atomic(log, "".join(line + "\n" for line in kept))

    def _log(self, record: dict) -> None:
        if self.group.rank:
            return
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
        for module in self._frozen:  # a frozen tower's normalisation statistics stay as they are
            module.eval()
        images = batch["images"].to(self.device, non_blocking=True)
        texts = batch["texts"].to(self.device, non_blocking=True)
        with torch.autocast(device_type, dtype=self._dtype, enabled=self._dtype is not None):
            image_features = self.model.encode_image(images, normalize=True).float()
            text_features = self.model.encode_text(texts, normalize=True).float()
            num_captions = batch["num_captions"]
            if self.group.active:  # the global batch's features from every rank, with gradient
                image_features, text_features = self.group.gather_features(
                    image_features, text_features[:num_captions], text_features[num_captions:],
                    batch["negative_counts"])
                num_captions *= self.group.world_size
            loss = clip_loss(image_features, text_features, self.model.logit_scale.exp(), num_captions)
        value = float(loss.detach())
        if not math.isfinite(value):
            raise TrainingDiverged(self.step + 1, "the loss", value, self._saved_step, self.config.lr)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if self.group.active:  # the mean over ranks, as DistributedDataParallel; carries any rank's stop request
            self._stop_agreed = self.group.average_gradients(list(self.model.parameters()), self._interrupted)
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
        self._interrupted = self._stop_agreed = False
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
                interval_images += batch["num_captions"] * self.group.world_size
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
                if (config.eval_every and self.step % config.eval_every == 0 and self.step < config.steps
                        and self.group.rank == 0):  # the other ranks wait in the next step's gather
                    if config.keep_checkpoints:
                        self.save_model(self.out / KEPT / f"step-{self.step:07d}.pt")
                    self._log({"step": self.step, "eval": eval_summary(self._evaluate())})
                if callback is not None:
                    try:
                        callback(self, last_loss)
                    except KeyboardInterrupt:  # raised between two steps: stop as on Ctrl-C
                        self._interrupted = True
                if self._stop_requested():
                    self._stop()
                tick, cpu_tick = time.perf_counter(), time.process_time()
            self._stop_agreed = self.group.any(self._interrupted)
            if self._stop_requested():  # Ctrl-C after the last step
                self._stop()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            bar.close()
        return self._finish(start, train_seconds, cpu_seconds, last_loss, truncated)

    def _catch_sigint(self) -> dict:
        """In the main thread: make Ctrl-C (SIGINT) only set a flag that the training loop reads after the step
        under way (so a checkpoint never holds weights ahead of the optimiser state or the step count); a
        second Ctrl-C interrupts at once, without a checkpoint. Under several processes SIGINT and SIGTERM
        (which torchrun forwards to every process, and may send twice) only ever set the flag, and every rank
        stops after the same step (the flag travels with the gradients). Returns the previous handlers."""
        if threading.current_thread() is not threading.main_thread():
            return {}

        def on_sigint(signum, frame):
            self._interrupted = True
            if not self.group.active:
                signal.signal(signal.SIGINT, signal.default_int_handler)

        signals = distributed.STOP_SIGNALS if self.group.active else (signal.SIGINT,)
        return {signum: signal.signal(signum, on_sigint) for signum in signals}

    def _stop_requested(self) -> bool:
        """A stop after this step: this process's Ctrl-C, or under several processes any rank's."""
        return self._stop_agreed if self.group.active else self._interrupted

    def _stop(self):
        """Checkpoint the finished step (unless it is saved already; rank 0), then raise KeyboardInterrupt on
        every rank, once the checkpoint is written."""
        if self.step != self._saved_step:
            self.save_checkpoint()
        self.group.barrier()
        raise KeyboardInterrupt

    def _evaluate(self, pretrained: str = "in-memory") -> dict:
        try:
            return evaluate_run(self.evaluation, self.adapter(pretrained))
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
        result_path = self.out / RESULT
        if self.group.rank == 0:
            self.save_model(self.out / MODEL)
            if config.keep_checkpoints:  # the final model is evaluated too: it belongs to the kept curve
                self.save_model(self.out / KEPT / f"step-{self.step:07d}.pt")
            if result_path.is_file():
                result = json.loads(result_path.read_text())
            else:
                result = self._evaluate(str(self.out / MODEL))
                write_text_atomic(result_path, canonical_json(result))
                self._log({"step": self.step, "eval": eval_summary(result)})
        self.group.barrier()  # the other ranks read rank 0's result
        if self.group.rank:
            result = json.loads(result_path.read_text())
        steps_done = self.step - start
        return {"steps": self.step, "resumed_from": start, "train_seconds": train_seconds, "cpu_seconds": cpu_seconds,
                "steps_per_s": steps_done / train_seconds if train_seconds else None,
                "images_per_s": steps_done * config.batch_size / train_seconds if train_seconds else None,
                "final_loss": last_loss, "truncated_captions": truncated, "result": result,
                "rank": self.group.rank, "processes": self.group.world_size,
                "files": {name: str(self.out / name) for name in (RUN, CHECKPOINT, MODEL, LOG, RESULT)}}
