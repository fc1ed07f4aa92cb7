"""What the training-run tests share (tests/test_training_interrupt.py, tests/test_training_resume.py,
tests/test_distributed.py): the tiny dataset, the command line of a tiny model, and ``madman train`` started in a
process slowed down by tests/slow_train.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SLOW_TRAIN = Path(__file__).with_name("slow_train.py")
TINY_CNN = ["--vision", "cnn", "--vision-width", "16", "--vision-layers", "1"]
TINY_VIT = ["--vision", "vit", "--vision-width", "32", "--vision-layers", "1", "--patch-size", "8"]


def tiny_training_data(folder: Path) -> Path:
    """A tiny MADMAN dataset in ``folder/madman``: 12 training images (3 batches of 4 per epoch), 4 test images."""
    from tiny_madman import tiny_madman

    from bindscope.build.builder import build_dataset

    path = folder / "madman"
    build_dataset(tiny_madman({"train": 12, "test": 4}), path, jobs=1, progress=False)
    return path


def train_args(data: Path, out: Path, steps: int, vision: list[str], *more: str) -> list[str]:
    """``train DATA --out OUT`` of a tiny model (``vision``: :data:`TINY_CNN` or :data:`TINY_VIT`) for ``steps``
    steps of batches of 4 on one CPU thread, quiet, with the options ``more``."""
    return ["train", str(data), "--out", str(out), "--embed-dim", "16", "--image-size", "32", *vision,
            "--text-width", "32", "--text-layers", "1", "--head-width", "16", "--tokenizer", "word",
            "--context-length", "16", "--batch-size", "4", "--steps", str(steps), "--warmup", "2", "--lr", "3e-3",
            "--negatives", "stored", "--threads", "1", *more, "--device", "cpu", "--quiet"]


def repo_env() -> dict[str, str]:
    """This environment with the repository root first on ``PYTHONPATH`` (the scripts import bindscope)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(SLOW_TRAIN.parents[1]), os.environ.get("PYTHONPATH", "")])}


def start_slow_train(args: list[str], delay: float = 0.0, eval_delay: float = 0.0) -> subprocess.Popen:
    """``madman train ARGS`` in a new process, each step slowed by ``delay`` seconds and each evaluation by
    ``eval_delay`` (tests/slow_train.py), stdout and stderr piped."""
    extra = ["--eval-delay", str(eval_delay)] if eval_delay else []
    return subprocess.Popen([sys.executable, str(SLOW_TRAIN), str(delay), *extra, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=repo_env())
