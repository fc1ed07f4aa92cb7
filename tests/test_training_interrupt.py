"""Ctrl-C (SIGINT) during ``madman train``, in a real process: the checkpoint holds a finished step, and the
resumed run ends with the weights, optimiser state, data order and RNG state of an uninterrupted run."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import torch
from train_runs import TINY_CNN, start_slow_train, tiny_training_data, train_args

STEPS = 8
INTERRUPT_AFTER = 3  # finished steps seen before Ctrl-C is sent


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return tiny_training_data(tmp_path_factory.mktemp("interrupt"))


def _args(data: Path, out: Path) -> list[str]:
    return train_args(data, out, STEPS, TINY_CNN, "--checkpoint-every", "100", "--log-every", "1")


def _steps(stdout: str) -> dict[int, str]:
    """``{step: the batch's sample indices}`` from the script's lines."""
    found = {}
    for line in stdout.splitlines():
        if line.startswith("step "):
            _, step, _, indices = line.split()
            found[int(step)] = indices
    return found


def _finish(args: list[str]) -> tuple[str, str]:
    process = start_slow_train(args, 0.0)
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr
    return stdout, stderr


def _assert_equal(ours, theirs, where: str = "") -> None:
    """Tensors equal (torch.equal), containers recursively, everything else ==."""
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, torch.Tensor) and ours.dtype == theirs.dtype and torch.equal(ours, theirs), where
    elif isinstance(theirs, dict):
        assert isinstance(ours, dict) and set(ours) == set(theirs), where
        for key in theirs:
            _assert_equal(ours[key], theirs[key], f"{where}/{key}")
    elif isinstance(theirs, (list, tuple)):
        assert isinstance(ours, (list, tuple)) and len(ours) == len(theirs), where
        for k, (a, b) in enumerate(zip(ours, theirs)):
            _assert_equal(a, b, f"{where}[{k}]")
    else:
        assert ours == theirs, where


def _losses(out: Path) -> dict[int, float]:
    lines = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in lines if "loss" in r}


def test_sigint_then_resume_equals_an_uninterrupted_run(data, tmp_path):
    reference = tmp_path / "reference"
    expected_stdout, _ = _finish(_args(data, reference))
    expected_order = _steps(expected_stdout)
    assert sorted(expected_order) == list(range(1, STEPS + 1))

    out = tmp_path / "interrupted"
    process = start_slow_train(_args(data, out), 0.5)
    seen = []
    for line in process.stdout:  # one line per finished step
        seen.append(line)
        if len(_steps("".join(seen))) == INTERRUPT_AFTER:
            time.sleep(0.2)  # into the next step's slowed-down window: weights updated, step not yet counted
            process.send_signal(signal.SIGINT)
            break
    rest, stderr = process.communicate(timeout=1800)
    interrupted = _steps("".join(seen) + rest)
    done = max(interrupted)
    # the step under way when Ctrl-C came was finished and checkpointed, then the run stopped (click: "Aborted!")
    assert process.returncode == 1 and "Aborted!" in stderr and "Traceback" not in stderr, stderr
    assert done >= INTERRUPT_AFTER and sorted(interrupted) == list(range(1, done + 1))
    checkpoint = torch.load(out / "checkpoint.pt", weights_only=True)
    assert checkpoint["step"] == checkpoint["scheduler"]["last_epoch"] == done
    assert all(int(s["step"]) == done for s in checkpoint["optimizer"]["state"].values())
    assert not (out / "model.pt").exists() and not (out / "result.json").exists()

    resumed_stdout, resumed_stderr = _finish(_args(data, out))
    resumed = _steps(resumed_stdout)
    assert f"resumed {out} at step {done} of {STEPS}" in resumed_stderr
    assert sorted(resumed) == list(range(done + 1, STEPS + 1))
    # the same batches in the same order (3 epochs of 3 batches: two epoch boundaries crossed)
    assert {**interrupted, **resumed} == expected_order

    ours = torch.load(out / "checkpoint.pt", weights_only=True)
    theirs = torch.load(reference / "checkpoint.pt", weights_only=True)
    assert ours["step"] == theirs["step"] == STEPS
    for key in ("model", "optimizer", "scheduler", "scaler", "model_config"):
        _assert_equal(ours[key], theirs[key], key)
    # torch's generator (weights, and anything random in a step); numpy's and Python's global generators are
    # not seeded by a run (training draws from seeded numpy Generators of its own, see training/data.py)
    _assert_equal(ours["rng"]["torch"], theirs["rng"]["torch"], "rng/torch")
    _assert_equal(torch.load(out / "model.pt", weights_only=True)["model"],
                  torch.load(reference / "model.pt", weights_only=True)["model"], "model.pt")
    assert _losses(out) == _losses(reference) and len(_losses(out)) == STEPS
    assert json.loads((out / "result.json").read_text())["metrics"] == \
        json.loads((reference / "result.json").read_text())["metrics"]
