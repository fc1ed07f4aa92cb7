"""Training reads its batches from the shards: the same batches, losses and weights as with the split held in memory,
for any number of reader workers and processes; the tables are read without an image; a run with reader workers
resumes exactly after Ctrl-C and after kill -9, and its workers end with it."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import torch
from train_runs import TINY_CNN, start_slow_train, train_args

import bindscope
from bindscope.format.shard import ShardReader
from bindscope.training.batches import BatchSource
from bindscope.training.checkpoint import weights_sha256
from bindscope.training.data import StreamedSplit, load_split, read_tables
from bindscope.training.model import ModelConfig

TINY = dict(embed_dim=16, image_size=32, vision="cnn", vision_width=16, vision_layers=1, text_width=32, text_layers=1,
            head_width=16, tokenizer="word", context_length=16)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A tiny MADMAN dataset: 24 training images in 5 shards (6 batches of 4 per epoch), 4 test images."""
    from tiny_madman import tiny_madman

    from bindscope.build.builder import build_dataset

    path = tmp_path_factory.mktemp("stream") / "madman"
    build_dataset(tiny_madman({"train": 24, "test": 4}, shard_size=5), path, jobs=1, progress=False)
    return path


def _losses(out: Path) -> list[float]:
    return [r["loss"] for r in map(json.loads, (out / "log.jsonl").read_text().splitlines()) if "loss" in r]


def _weights(out: Path) -> str:
    return weights_sha256(torch.load(out / "model.pt", weights_only=True)["model"])


def test_streamed_and_in_memory_training_give_the_same_losses_and_weights(data, tmp_path):
    options = dict(TINY, batch_size=4, steps=20, warmup_steps=2, lr=3e-3, negatives="stored", threads=1,
                   log_every=1, device="cpu", eval_splits="test", progress=False)
    bindscope.train(data, tmp_path / "memory", data_in_memory=True, **options)
    bindscope.train(data, tmp_path / "streamed", workers=2, **options)
    assert len(_losses(tmp_path / "memory")) == 20
    assert _losses(tmp_path / "streamed") == _losses(tmp_path / "memory")
    assert _weights(tmp_path / "streamed") == _weights(tmp_path / "memory")


@pytest.mark.parametrize("mode", ["stored", "shuffled"])
def test_every_rank_gets_the_in_memory_batch_slice(data, mode):
    """Batch by batch, for one process and for each of two: the same samples, pixels, texts and negatives."""
    memory = load_split(data)
    model = ModelConfig(**TINY, vocabulary=memory.words)
    with bindscope.Dataset(data) as dataset:
        streamed = StreamedSplit(dataset, read_tables(dataset, words=True))
    for rank, world in ((0, 1), (0, 2), (1, 2)):
        sources = [BatchSource(d, 4, seed=3, model=model, hard_negatives=2, mode=mode, rank=rank, world_size=world)
                   for d in (memory, streamed)]
        for step in range(8):  # across an epoch boundary (6 batches per epoch)
            ours, theirs = (source[step] for source in sources)
            assert set(ours) == set(theirs)
            for key, value in theirs.items():
                assert torch.equal(ours[key], value) if isinstance(value, torch.Tensor) else ours[key] == value, key
            assert ours["images"].shape == (4 // world, 3, 32, 32)


def test_the_tables_are_read_without_an_image(data, monkeypatch):
    memory = load_split(data)

    def no_pixels(*args, **kwargs):
        raise AssertionError("an image was read")

    for name in ("image", "all_images", "read_images"):
        monkeypatch.setattr(ShardReader, name, no_pixels)
    tables = read_tables(data, words=True)
    assert tables.indices.tolist() == memory.indices.tolist() == list(range(24))
    assert (tables.lexicon, tables.words, tables.with_negatives, tables.skipped) == \
           (memory.lexicon, memory.words, memory.with_negatives, 0)
    assert tables.with_negatives == sum(1 for pool in memory.hard_negatives if pool) > 0


# ------------------------------------------------------------------------------ interrupted, with reader workers

STEPS = 8


def _args(data: Path, out: Path) -> list[str]:
    return train_args(data, out, STEPS, TINY_CNN, "--loader-jobs", "2", "--checkpoint-every", "2", "--log-every", "1",
                      "--eval-split", "test")


def _finish(args: list[str]) -> str:
    process = start_slow_train(args)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr
    return stderr


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("stream-reference") / "run"
    _finish(_args(data, out))
    return out


@pytest.mark.parametrize("number, after", [(signal.SIGINT, "step 3 "), (signal.SIGKILL, "step 5 ")],
                         ids=["sigint", "kill-9"])
def test_a_run_with_reader_workers_resumes_exactly(data, reference, tmp_path, number, after):
    out = tmp_path / "run"
    process = start_slow_train(_args(data, out), delay=0.5)
    for line in process.stdout:  # one line per finished step
        if line.startswith(after):
            workers = _children(process.pid)
            process.send_signal(number)
            break
    process.communicate(timeout=300)
    assert process.returncode == (1 if number == signal.SIGINT else -signal.SIGKILL)
    assert len(workers) == 2
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers)  # the reader workers ended with their run
    saved = torch.load(out / "checkpoint.pt", weights_only=True)["step"]
    assert 2 <= saved < STEPS and not (out / "model.pt").exists()
    assert f"resumed {out} at step {saved} of {STEPS}" in _finish(_args(data, out))
    assert _losses(out) == _losses(reference) and len(_losses(out)) == STEPS
    assert _weights(out) == _weights(reference)
    ours, theirs = (torch.load(p / "checkpoint.pt", weights_only=True) for p in (out, reference))
    assert weights_sha256(ours["model"]) == weights_sha256(theirs["model"])
    assert torch.equal(ours["rng"]["torch"], theirs["rng"]["torch"])
