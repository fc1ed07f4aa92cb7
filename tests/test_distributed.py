"""``madman train`` under torchrun on the CPU (gloo): two processes give one process's losses, and a checkpoint
written by either resumes in the other."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from train_runs import TINY_VIT, repo_env, tiny_training_data, train_args

import bindscope
from bindscope.errors import BadInput

SCRIPT = Path(__file__).with_name("ddp_stop.py")
STEPS = 5
# float32 sums in another order (half batches through the towers, gradients summed over two processes): the
# measured difference was 2e-7 relative over 5 steps
RTOL = 1e-5

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return tiny_training_data(tmp_path_factory.mktemp("ddp"))


def _args(data: Path, out: Path) -> list[str]:
    return train_args(data, out, STEPS, TINY_VIT, "--log-every", "1", "--eval-split", "test")


def _train(data: Path, out: Path, processes: int, stop: int = 0) -> subprocess.CompletedProcess:
    """The real CLI in 1 process, or in ``processes`` under ``python -m torch.distributed.run`` (gloo); with
    ``stop``, the last process asks for a stop after that step (as its Ctrl-C handler does)."""
    env = {**repo_env(), "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    launch = [] if processes == 1 else ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                                        str(processes)]
    return subprocess.run([sys.executable, *launch, str(SCRIPT), str(stop), *_args(data, out)], capture_output=True,
                          text=True, env=env, timeout=600)


def _losses(out: Path) -> dict[int, float]:
    lines = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in lines if "loss" in r}


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("one") / "run"
    done = _train(data, out, 1)
    assert done.returncode == 0, done.stderr
    return out


def _assert_same_run(ours: Path, reference: Path) -> None:
    expected = _losses(reference)
    assert sorted(expected) == list(range(1, STEPS + 1))
    got = _losses(ours)
    assert sorted(got) == sorted(expected)
    for step in expected:
        assert got[step] == pytest.approx(expected[step], rel=RTOL), step
    # the weights are not compared: AdamW scales gradients that are zero in exact arithmetic (the attention's key
    # bias) by their own rounding noise, so those entries differ by up to lr per step while the losses agree


def test_two_processes_give_the_losses_of_one(data, reference, tmp_path):
    out = tmp_path / "two"
    done = _train(data, out, 2)
    assert done.returncode == 0, done.stderr
    _assert_same_run(out, reference)
    # one result table (rank 0 prints), one log line per step, the run folder's files written once
    assert done.stdout.count("test (in-distribution") == 1
    assert len(_losses(out)) == STEPS
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == \
        sorted(p.name for p in reference.iterdir() if not p.name.startswith("."))
    assert json.loads((out / "result.json").read_text())["metrics"]["splits"]["test"]["num_scored"] == \
        json.loads((reference / "result.json").read_text())["metrics"]["splits"]["test"]["num_scored"]


def test_a_two_process_checkpoint_resumes_in_one_and_back(data, reference, tmp_path):
    out = tmp_path / "two-then-one"
    stopped = _train(data, out, 2, stop=2)
    # rank 1's request after step 2 reaches rank 0 with step 3's gradients: both stop after step 3
    # each process stops as on Ctrl-C (click: "Aborted!", exit 1), and torchrun reports the exit status
    assert stopped.returncode != 0 and stopped.stderr.count("Aborted!") == 2, stopped.stderr
    assert "KeyboardInterrupt" not in stopped.stderr and "ChildFailedError" in stopped.stderr, stopped.stderr
    checkpoint = torch.load(out / "checkpoint.pt", weights_only=True)
    assert checkpoint["step"] == checkpoint["scheduler"]["last_epoch"] == 3
    assert not (out / "model.pt").exists()
    resumed = _train(data, out, 1)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed {out} at step 3 of {STEPS}" in resumed.stderr
    _assert_same_run(out, reference)

    out = tmp_path / "one-then-two"
    stopped = _train(data, out, 1, stop=2)
    assert stopped.returncode == 1 and "Aborted!" in stopped.stderr, stopped.stderr
    assert torch.load(out / "checkpoint.pt", weights_only=True)["step"] == 2
    resumed = _train(data, out, 2)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed {out} at step 2 of {STEPS}" in resumed.stderr
    _assert_same_run(out, reference)


def test_a_batch_that_does_not_split_is_refused_before_anything_is_written(data, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(BadInput, match=r"batch_size 5 does not divide by the 2 processes.*e\.g\. 4 or 6"):
        bindscope.train(data, tmp_path / "run", batch_size=5, steps=1, device="cpu", progress=False)
    with pytest.raises(BadInput, match=r"device 'cuda:1' is one GPU for all 2 processes"):
        bindscope.train(data, tmp_path / "run", batch_size=4, steps=1, device="cuda:1", progress=False)
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(BadInput, match=r"RANK=2 is not within 0..WORLD_SIZE-1"):
        bindscope.train(data, tmp_path / "run", batch_size=4, steps=1, device="cpu", progress=False)
    assert not (tmp_path / "run").exists()
