"""Resuming a ``bindscope train`` run: the checks of a checkpoint's training states, the RNG states a checkpoint
holds, and the run's log (``log.jsonl``) as a resumed run finds it.

A run killed at any moment (``kill -9`` included) resumes from its last ``checkpoint.pt`` and ends with the weights
and the ``log.jsonl`` of an uninterrupted run (timing fields aside): log lines of steps after the checkpoint are
dropped and redone (:meth:`RunLog.trim`; a last line that a kill cut short is dropped too), the losses since the
last training line travel in the checkpoint (its ``log`` entry, so ``loss_mean`` is the same), and an evaluation of
the checkpoint's step that the kill interrupted is run again before training goes on (the trainer asks
:meth:`RunLog.has_eval`).
"""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path

import numpy as np

from bindscope.errors import BadInput
from bindscope.io.atomic import write_text_atomic
from bindscope.io.weights import check_tensors
from bindscope.training.objective import lr_factor


def _is_real(value) -> bool:
    """A finite real number (not a bool)."""
    import numbers

    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


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


def check_resume_state(file: Path, blob: dict, trainer) -> None:
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
    factor = lr_factor(min(config.warmup_steps, config.steps), config.steps)(step)
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
    pending_losses(file, blob, step)


def pending_losses(file: Path, blob: dict, step: int) -> list[float]:
    """The losses of the steps after the last training log line, from checkpoint ``blob``'s ``log`` entry
    (``{"losses": [...]}``; a checkpoint written before the entry existed has none: ``[]``).

    Raises:
        BadInput: an entry that is not at most ``step`` finite losses.
    """
    if "log" not in blob:
        return []
    entry = blob["log"]
    losses = entry.get("losses") if isinstance(entry, dict) and set(entry) == {"losses"} else None
    if not (isinstance(losses, list) and len(losses) <= step and all(_is_real(v) for v in losses)):
        raise _bad(file, f"log is not the losses of at most {step} steps ({{'losses': [finite numbers]}})")
    return [float(v) for v in losses]


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


def rng_state() -> dict:
    """The RNG states as tensors and plain Python values, so checkpoints load with ``weights_only=True``."""
    import torch

    kind, keys, pos, has_gauss, cached = np.random.get_state()
    numpy_state = (kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached))
    state = {"torch": torch.get_rng_state(), "numpy": numpy_state, "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class RunLog:
    """A run's ``log.jsonl``: one JSON object per line, appended by process 0 only (``write``).

    Training lines hold ``step`` and ``loss``; evaluation lines ``step`` and ``eval``. A kill can cut the last
    line short: :meth:`records` drops such a last line; any other line that is not a JSON object is a BadInput
    naming the file and the line.
    """

    def __init__(self, path: Path, write: bool = True):
        self.path = Path(path)
        self.write = write

    def records(self) -> list[dict]:
        """Every complete line's object, in order ([] without a file)."""
        if not self.path.is_file():
            return []
        lines = self.path.read_text(encoding="utf-8", errors="replace").split("\n")
        found = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if not (isinstance(record, dict) and isinstance(record.get("step"), int)):
                if number == len(lines):  # the last line, without its newline: a write a kill cut short
                    break
                raise BadInput(f"{str(self.path)!r}: line {number} is not a log record (a JSON object with a step); "
                               "mend or remove that line to resume")
            found.append(record)
        return found

    def trim(self, step: int) -> None:
        """Keep the lines of steps up to ``step`` (a resumed run's checkpoint; the later ones are redone), and
        drop a last line cut short; rewritten atomically."""
        if self.write and self.path.is_file():
            kept = [r for r in self.records() if r["step"] <= step]
            write_text_atomic(self.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))

    def has_eval(self, step: int) -> bool:
        """True when an evaluation line of ``step`` is logged."""
        return any(r["step"] == step and "eval" in r for r in self.records())

    def append(self, record: dict) -> None:
        """Append one line (never through a link); only where ``write``."""
        if not self.write:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
