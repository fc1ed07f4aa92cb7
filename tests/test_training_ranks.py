"""Processes of one training run that disagree stop at once, and a process that dies ends the run: two gloo
processes started by hand with one rendezvous (as torchrun starts them), on the CPU."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).with_name("slow_train.py")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A tiny MADMAN dataset: 12 training images (3 batches of 4 per epoch), 4 test images."""
    from tiny_madman import tiny_madman

    from bindscope.build.builder import build_dataset

    path = tmp_path_factory.mktemp("ranks") / "madman"
    build_dataset(tiny_madman({"train": 12, "test": 4}), path, jobs=1, progress=False)
    return path


def _args(data: Path, out: Path, *extra: str) -> list[str]:
    return ["train", str(data), "--out", str(out), "--embed-dim", "16", "--image-size", "32", "--vision", "cnn",
            "--vision-width", "16", "--vision-layers", "1", "--text-width", "32", "--text-layers", "1",
            "--head-width", "16", "--tokenizer", "word", "--context-length", "16", "--batch-size", "4",
            "--warmup", "1", "--threads", "1", "--log-every", "1", "--checkpoint-every", "1", "--eval-split",
            "test", "--device", "cpu", "--quiet", *extra]


def _start_ranks(per_rank: list[list[str]], delay: float = 0.0) -> list[subprocess.Popen]:
    """One process per entry of ``per_rank`` (its ``madman`` arguments), joined by one gloo rendezvous on this
    machine, as ``torchrun --nproc_per_node N`` starts them (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"),
                                                          os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "WORLD_SIZE": str(len(per_rank))}
    return [subprocess.Popen([sys.executable, str(SCRIPT), str(delay), *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)})
            for rank, args in enumerate(per_rank)]


@pytest.mark.parametrize("flag, values, shown", [
    ("--seed", ("0", "1"), "--seed differs between the processes of this run: process 1 has 1, process 0 has 0"),
    ("--steps", ("5", "6"), "--steps differs between the processes of this run: process 1 has 6, process 0 has 5"),
])
def test_ranks_disagree(data, tmp_path, flag, values, shown):
    """shared/cases/ranks-disagree.md: every process exits 2 within a minute with one Error line naming the option
    and both values; nothing is written to the run folder."""
    out = tmp_path / "run"
    common = ["--steps", "5"] if flag != "--steps" else []
    ranks = _start_ranks([_args(data, out, *common, flag, value) for value in values])
    for process in ranks:
        _, stderr = process.communicate(timeout=60)
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert process.returncode == 2 and lines == [f"Error: {shown}; start every process with the same options "
                                                     "and training data"], stderr
    assert not out.exists()


def test_ranks_disagree_on_the_training_data(data, tmp_path):
    from tiny_madman import tiny_madman

    from bindscope.build.builder import build_dataset

    other = tmp_path / "other"
    build_dataset(tiny_madman({"train": 12, "test": 4}, seed=1), other, jobs=1, progress=False)
    out = tmp_path / "run"
    ranks = _start_ranks([_args(data, out, "--steps", "2"), _args(other, out, "--steps", "2")])
    for process in ranks:
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 2 and "Error: data differs between the processes of this run" in stderr, stderr
    assert not out.exists()


def test_a_process_that_dies_ends_the_run_and_the_run_resumes(data, tmp_path):
    out = tmp_path / "run"
    ranks = _start_ranks([_args(data, out, "--steps", "6", "--dist-timeout", "30")] * 2, delay=0.5)
    for line in ranks[0].stdout:  # one line per finished step
        if line.startswith("step 2 "):
            ranks[1].send_signal(signal.SIGKILL)
            break
    _, stderr = ranks[0].communicate(timeout=120)
    ranks[1].wait()
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert ranks[0].returncode == 1 and len(lines) == 1, stderr
    assert lines[0].startswith("Error: process 0 of 2: the other processes stopped answering"), stderr
    saved = torch.load(out / "checkpoint.pt", weights_only=True)["step"]
    assert saved >= 2 and not (out / "model.pt").exists()
    resumed = subprocess.run([sys.executable, str(SCRIPT), "0", *_args(data, out, "--steps", "6")],
                             capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
                                 "PYTHONPATH", "")])})
    assert resumed.returncode == 0 and f"resumed {out} at step {saved} of 6" in resumed.stderr, resumed.stderr
