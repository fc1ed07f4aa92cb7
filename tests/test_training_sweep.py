"""madman sweep at toy size: datasets generated, one model per value, table, CSV, plot; reruns skip finished points."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from click.testing import CliRunner

from bindscope.cli.main import madman
from bindscope.training.sweep import SweepConfig, run_sweep

TRAIN = dict(embed_dim=16, image_size=32, vision="vit", vision_width=32, vision_layers=1, patch_size=8,
             text_width=32, text_layers=1, context_length=32, batch_size=16, steps=3, lr=1e-3, weight_decay=0.1,
             warmup_steps=1, negatives="none", negatives_per_sample=1, seed=0, device="cpu",
             precision="fp32", workers=0, threads=1, checkpoint_every=100, log_every=1, eval_every=0)


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_sweep_runs_end_to_end_and_skips_finished_points(tmp_path):
    from madman_support import small_source

    config = SweepConfig(property="saliency-bias", values="0,1", out=str(tmp_path / "sweep"), base_preset="ideal",
                         seeds="0", num_train=32, num_test=12, train_options=TRAIN)
    first = run_sweep(config, progress=False, source=small_source())
    out = tmp_path / "sweep"
    assert first["skipped"] == 0 and len(first["points"]) == 2
    record = json.loads((out / "sweep.json").read_text())
    assert record["property"] == "saliency_bias" and record["values"] == [0.0, 1.0]
    # the realised saliency bias of each training set is the requested value (0 and 1 are exact)
    assert [p["realised"] for p in record["points"]] == [0.0, 1.0]
    for point in record["points"]:
        stored = json.loads((out / "runs" / f"saliency_bias={point['value']:g}" / "seed-0" / "result.json").read_text())
        assert stored["dataset"]["path"] == str(out / "data" / "eval")  # one shared evaluation set
        per_attribute = stored["metrics"]["splits"]["test"]["binding"]["per_attribute"]
        assert point["splits"]["test"]["binding"] == {a: v["accuracy"] for a, v in per_attribute.items()}
        assert stored["model"]["run"]["seed"] == 0  # the run's seed group, for bindscope collect
    # bindscope collect reads the sweep folder: one row per point, with the swept property, its value and the seed
    from bindscope.evaluation.collect import collect

    table = collect([out])
    assert [(r["property"], r["value"], r["seed"]) for r in table["rows"]] == [("saliency_bias", 0.0, 0),
                                                                               ("saliency_bias", 1.0, 0)]
    for row, point in zip(table["rows"], record["points"]):
        for attribute, accuracy in point["splits"]["test"]["binding"].items():
            figure = row["figures"][f"test/binding/{attribute}"]["value"]
            assert (figure is None and accuracy is None) or figure == pytest.approx(100 * accuracy)
    from bindscope.format.reader import Dataset
    assert Dataset(out / "data" / "eval").split_names == ["test"]
    assert Dataset(out / "data" / "saliency_bias=1").split_names == ["train"]
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert {r["value"] for r in rows} == {"0", "1"} and {r["split"] for r in rows} == {"test"}
    assert len(rows) == sum(len(set(p["splits"]["test"]["recognition"]) | set(p["splits"]["test"]["binding"]))
                            for p in record["points"])
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "binding accuracy (%), test split, by saliency_bias" in first["table"]
    mtime = (out / "runs" / "saliency_bias=0" / "seed-0" / "model.pt").stat().st_mtime_ns

    again = run_sweep(config, progress=False, source=small_source())
    assert again["skipped"] == 2 and again["points"] == first["points"]
    assert (out / "runs" / "saliency_bias=0" / "seed-0" / "model.pt").stat().st_mtime_ns == mtime


@pytest.mark.parametrize("args, message", [
    (["--property", "brightness", "--values", "0,1"], "not a MADMAN data property"),
    (["--property", "saliency-bias", "--values", "0,1.5"], "saliency-bias = 1.5 is not allowed"),
    (["--property", "attribute-density", "--values", "1,x"], "expected comma-separated float values"),
    (["--property", "saliency-bias", "--values", "0,1", "--batch-size", "64", "--num-train", "32"],
     "larger than --num-train 32"),
])
def test_sweep_rejects_bad_input_before_writing(tmp_path, args, message):
    out = tmp_path / "sweep"
    result = CliRunner().invoke(madman, ["sweep", "--out", str(out), "--quiet"] + args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not out.exists()


def test_the_sweep_folder_is_claimed(tmp_path, monkeypatch):
    """A foreign folder is refused before any work, a concurrent sweep is refused, a stale lock is taken over, and
    SIGTERM before the first output leaves the folder as it was (the claim's marker removed)."""
    import dataclasses
    import os
    import signal
    import time

    from bindscope.errors import BadInput
    from bindscope.io.ownership import LOCK, OutputLock
    from bindscope.training.sweep import Sweep

    config = SweepConfig(property="saliency-bias", values="0", out=str(tmp_path / "sweep"), num_train=32,
                         num_test=12, train_options=TRAIN)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(BadInput, match=r"is not empty and is not a madman sweep folder \(it holds no "
                                                 r"\.bindscope\.json marker of one; e\.g\. 'notes\.txt'\)"):
        Sweep(dataclasses.replace(config, out=str(foreign)))
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]

    out = tmp_path / "sweep"
    out.mkdir()
    with OutputLock(out), pytest.raises(BadInput, match=r"is in use by another bindscope run \(pid "):
        Sweep(config).run(progress=False)
    (out / LOCK).write_text("pid 99999 on elsewhere: madman sweep (killed -9)\n")  # a stale lock
    reached = []

    def terminated(self, progress, source):
        reached.append(json.loads((out / ".bindscope.json").read_text())["kind"])
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)

    monkeypatch.setattr(Sweep, "_run", terminated)
    with pytest.raises(KeyboardInterrupt):
        Sweep(config).run(progress=False)
    assert reached == ["sweep"] and list(out.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == \
        ["foreign", "sweep"]
