"""``--report-to tensorboard,wandb``: the TensorBoard event files read back equal ``log.jsonl`` (also after a resumed
run), Weights & Biases (offline) gets the same records, and a missing package or unknown name is one Error line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import bindscope
from bindscope.cli.main import bindscope as bindscope_cli
from bindscope.training.report import scalars

TINY = dict(embed_dim=16, image_size=32, vision="cnn", vision_width=16, vision_layers=1, text_width=32, text_layers=1,
            head_width=16, tokenizer="word", context_length=16, batch_size=4, warmup_steps=1, lr=3e-3, threads=1,
            device="cpu", eval_splits="test", progress=False)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A tiny MADMAN dataset: 12 training images, 4 test images."""
    from tiny_madman import tiny_madman

    from bindscope.build.builder import build_dataset

    path = tmp_path_factory.mktemp("report") / "madman"
    build_dataset(tiny_madman({"train": 12, "test": 4}), path, jobs=1, progress=False)
    return path


def _log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]


def _events(out: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the run's TensorBoard event files, as TensorBoard reads them: ``{tag: [(step, value)]}``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def _expected(out: Path) -> dict[str, list[tuple[int, float]]]:
    """``log.jsonl``'s numbers as TensorBoard stores them (float32)."""
    expected: dict[str, list[tuple[int, float]]] = {}
    for record in _log(out):
        for tag, value in scalars(record).items():
            expected.setdefault(tag, []).append((record["step"], float(np.float32(value))))
    return expected


def test_tensorboard_event_files_equal_the_log(data, tmp_path):
    out = tmp_path / "run"
    bindscope.train(data, out, steps=6, log_every=2, eval_every=3, report_to="tensorboard", **TINY)
    events = _events(out)
    assert events == _expected(out)
    assert [step for step, _ in events["train/loss"]] == [2, 4, 6]
    assert {"train/loss", "train/loss_mean", "train/lr", "train/logit_scale", "train/step_s",
            "train/images_per_s"} <= set(events)
    recognition = [tag for tag in events if tag.startswith("eval/test/recognition/")]
    assert recognition and all([s for s, _ in events[tag]] == [3, 6] for tag in recognition)
    assert events["train/loss"][-1][1] == pytest.approx(_log(out)[-2]["loss"], rel=1e-6)


def test_a_resumed_run_rewrites_the_events_from_its_log(data, tmp_path):
    """Stopped after step 3 (checkpoint 2, log lines 1..3), resumed: the events of steps 3.. are not doubled."""
    from bindscope.training.config import build_train_config
    from bindscope.training.train import Trainer

    out = tmp_path / "run"
    options = {k: v for k, v in TINY.items() if k not in ("eval_splits", "progress")}
    config = build_train_config(str(data), str(out), None, ["test"], steps=6, log_every=1, checkpoint_every=2,
                                report_to="tensorboard", **options)

    def stop(trainer, loss):
        if trainer.step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Trainer(config, progress=False).run(stop)
    assert [r["step"] for r in _log(out)] == [1, 2, 3]
    bindscope.train(data, out, steps=6, log_every=1, checkpoint_every=2, report_to="tensorboard", **TINY)
    events = _events(out)
    assert [step for step, _ in events["train/loss"]] == [1, 2, 3, 4, 5, 6]
    assert events == _expected(out)


def test_wandb_offline_run_in_the_run_folder(data, tmp_path, monkeypatch):
    """W&B (offline, its run in OUT/wandb) gets every record of log.jsonl at its step; TensorBoard too."""
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    sent, init = [], wandb.init

    def spied(*args, **kwargs):  # the real run, its log calls recorded
        run = init(*args, **kwargs)
        log = run.log
        run.log = lambda values, step=None: (sent.append((step, dict(values))), log(values, step=step))[1]
        return run

    monkeypatch.setattr(wandb, "init", spied)
    out = tmp_path / "run"
    bindscope.train(data, out, steps=4, log_every=2, report_to="tensorboard,wandb", **TINY)
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("run-*.wandb"))
    assert sent == [(r["step"], scalars(r)) for r in _log(out)] and [step for step, _ in sent] == [2, 4, 4]
    assert _events(out) == _expected(out)


@pytest.mark.parametrize("value, shown", [
    ("wandb", "Error: --report-to 'wandb' needs the package wandb, which is not installed; install it with "
              "pip install 'bindscope[report]'"),
    ("tensorboard,mlflow", "Error: --report-to 'mlflow' is not known; allowed: tensorboard, wandb, comma-separated"),
])
def test_a_missing_package_or_unknown_name_is_one_error_line(data, tmp_path, monkeypatch, value, shown):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed
    out = tmp_path / "run"
    result = CliRunner().invoke(bindscope_cli, ["train", str(data), "--out", str(out), "--report-to", value,
                                                "--steps", "2", "--batch-size", "4", "--quiet"])
    assert result.exit_code == 2 and result.output.strip().splitlines() == [shown]
    assert not out.exists()
