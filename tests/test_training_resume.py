"""A run killed with SIGKILL at any moment and resumed ends with the weights and the ``log.jsonl`` of an
uninterrupted run (timing fields aside), evaluation lines included: killed during the evaluation of a checkpoint
step, mid-step after a checkpoint that is not on a log line, and between ``result.json`` and its log line; SIGTERM
stops like Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from train_runs import TINY_CNN, start_slow_train, tiny_training_data, train_args

from bindscope.cli.main import madman

STEPS = 8
TIMING = ("images_per_s", "elapsed_s", "cpu_s", "step_s")  # wall and CPU time: differ between any two runs


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return tiny_training_data(tmp_path_factory.mktemp("resume"))


def _args(data: Path, out: Path) -> list[str]:
    """Log lines every 3 steps, checkpoints every 2, evaluations (kept as model files) every 4."""
    return train_args(data, out, STEPS, TINY_CNN, "--log-every", "3", "--checkpoint-every", "2", "--eval-every", "4",
                      "--keep-checkpoints", "--eval-split", "test")


def _finish(args: list[str]) -> str:
    process = start_slow_train(args)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr
    return stderr


def _kill_at(args: list[str], line: str, delay: float = 0.0, eval_delay: float = 0.0,
             number: int = signal.SIGKILL) -> subprocess.Popen:
    """Start the run and send ``number`` as soon as it prints ``line`` (see tests/slow_train.py)."""
    process = start_slow_train(args, delay, eval_delay)
    for printed in process.stdout:
        if printed.startswith(line):
            process.send_signal(number)
            break
    process.communicate(timeout=300)
    return process


def _log(out: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING}
            for line in (out / "log.jsonl").read_text().splitlines()]


def _tensors_equal(ours, theirs) -> bool:
    if isinstance(theirs, torch.Tensor):
        return isinstance(ours, torch.Tensor) and ours.dtype == theirs.dtype and torch.equal(ours, theirs)
    if isinstance(theirs, dict):
        return isinstance(ours, dict) and set(ours) == set(theirs) and all(
            _tensors_equal(ours[k], theirs[k]) for k in theirs)
    if isinstance(theirs, (list, tuple)):
        return len(ours) == len(theirs) and all(_tensors_equal(a, b) for a, b in zip(ours, theirs))
    return ours == theirs


def _files(out: Path) -> list[str]:
    return sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))


def _assert_same_run(out: Path, reference: Path) -> None:
    assert _log(out) == _log(reference)
    assert _files(out) == _files(reference)  # no temporary file, no lock file, the same kept models
    for name in ("model.pt", f"checkpoints/step-{4:07d}.pt", f"checkpoints/step-{STEPS:07d}.pt"):
        assert _tensors_equal(torch.load(out / name, weights_only=True)["model"],
                              torch.load(reference / name, weights_only=True)["model"]), name
    ours, theirs = (torch.load(p / "checkpoint.pt", weights_only=True) for p in (out, reference))
    for key in ("step", "model", "optimizer", "scheduler", "scaler", "log"):
        assert _tensors_equal(ours[key], theirs[key]), key
    assert _tensors_equal(ours["rng"]["torch"], theirs["rng"]["torch"])
    assert json.loads((out / "result.json").read_text())["metrics"] == \
        json.loads((reference / "result.json").read_text())["metrics"]


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reference") / "run"
    _finish(_args(data, out))
    log = _log(out)
    assert [(r["step"], "eval" in r) for r in log] == [(3, False), (4, True), (6, False), (8, False), (8, True)]
    return out


def test_killed_during_the_evaluation_of_a_checkpoint_step(data, reference, tmp_path):
    out = tmp_path / "run"
    killed = _kill_at(_args(data, out), "evaluating step 4", eval_delay=60)
    assert killed.returncode == -signal.SIGKILL
    assert torch.load(out / "checkpoint.pt", weights_only=True)["step"] == 4
    assert [r["step"] for r in _log(out)] == [3]  # the evaluation of step 4 did not end
    stderr = _finish(_args(data, out))
    assert f"resumed {out} at step 4 of {STEPS}" in stderr
    _assert_same_run(out, reference)


def test_killed_mid_step_after_a_checkpoint_between_two_log_lines(data, reference, tmp_path):
    out = tmp_path / "run"
    killed = _kill_at(_args(data, out), "step 5 ", delay=1.0)  # during step 6: checkpoint 4, log lines 3 and 4
    assert killed.returncode == -signal.SIGKILL
    checkpoint = torch.load(out / "checkpoint.pt", weights_only=True)
    assert checkpoint["step"] == 4 and len(checkpoint["log"]["losses"]) == 1  # the loss of step 4, not logged yet
    _finish(_args(data, out))
    _assert_same_run(out, reference)  # loss_mean of step 6 averages steps 4, 5 and 6, as without the kill


def test_killed_between_the_result_and_its_log_line(data, reference, tmp_path, monkeypatch):
    from bindscope.training.resume import RunLog

    append = RunLog.append

    def killed_before_the_final_line(self, record):
        if "eval" in record and record["step"] == STEPS:
            raise SystemExit("killed")  # nothing after it runs but the claim's release, as after kill -9
        append(self, record)

    out = tmp_path / "run"
    monkeypatch.setattr(RunLog, "append", killed_before_the_final_line)
    assert CliRunner().invoke(madman, _args(data, out)).exit_code != 0
    assert (out / "result.json").is_file() and not any("eval" in r and r["step"] == STEPS for r in _log(out))
    monkeypatch.setattr(RunLog, "append", append)
    again = CliRunner().invoke(madman, _args(data, out))
    assert again.exit_code == 0, again.output
    _assert_same_run(out, reference)


def test_sigterm_finishes_the_step_checkpoints_and_leaves_nothing_half_written(data, reference, tmp_path):
    out = tmp_path / "run"
    stopped = _kill_at(_args(data, out), "step 2 ", delay=1.0, number=signal.SIGTERM)
    assert stopped.returncode == 1  # click's "Aborted!", as after Ctrl-C
    saved = torch.load(out / "checkpoint.pt", weights_only=True)
    assert saved["step"] in (2, 3) and saved["scheduler"]["last_epoch"] == saved["step"]  # a finished step
    assert set(_files(out)) <= {".bindscope.json", "checkpoint.pt", "log.jsonl", "run.json", "vocab.json"}
    assert [p for p in out.parent.iterdir() if p != out] == []  # nothing beside the run folder
    _finish(_args(data, out))
    _assert_same_run(out, reference)
