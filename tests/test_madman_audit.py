"""`madman audit`: the oracle's figures recomputed by hand from its confusion matrices and from the dataset's own
object table, schema-valid JSON, the confusion figure, determinism, and single-valued attributes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from bindscope.cli.main import madman
from bindscope.evaluation.audit import audit_madman, confusion_figures
from bindscope.format.reader import Dataset
from bindscope.schemas import validate

FAST = ["--epochs", "2", "--batch-size", "16", "--width", "4", "--quiet"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """Real digits: train 24 / test 12 two-digit images; swelling has a single value."""
    from tiny_madman import tiny_madman

    from bindscope.build.builder import build_dataset

    path = tmp_path_factory.mktemp("audit") / "madman"
    generator = tiny_madman(splits={"train": 24, "test": 12, "ood": 0}, shard_size=8,
                            attributes={"swelling": {"unswollen": 0.0}}, ood={"holdout": []})
    build_dataset(generator, path, jobs=1, progress=False)
    return path


def test_confusion_figures_by_hand():
    truth = np.array([0, 0, 1, 2, 2, 2])
    predicted = np.array([0, 1, 1, 2, 0, 2])
    f = confusion_figures(truth, predicted, ["a", "b", "c"])
    assert f["confusion"] == [[1, 1, 0], [0, 1, 0], [1, 0, 2]]
    assert (f["n"], f["correct"]) == (6, 4)
    assert f["accuracy"] == pytest.approx(4 / 6)
    assert f["per_class"] == pytest.approx({"a": 0.5, "b": 1.0, "c": 2 / 3})
    assert f["macro"] == pytest.approx((0.5 + 1 + 2 / 3) / 3)
    low, high = f["ci95"]
    assert low < 4 / 6 < high
    # a class with no test object has no per-class accuracy and stays out of the macro average
    f = confusion_figures(np.array([0, 0]), np.array([0, 1]), ["a", "b"])
    assert f["per_class"] == {"a": 0.5, "b": None} and f["macro"] == 0.5


def _truth(path: Path, split: str) -> tuple[dict, dict]:
    """Per head, how many visible objects of ``split`` have each true class, read from the object table; and the
    same per size level."""
    counts, by_size = {}, {}
    with Dataset(path) as ds:
        for sample in ds.split(split):
            for o in sample.objects:
                if o.area:
                    for head, value in dict(o.attributes, digit=o.category).items():
                        for table in (counts, by_size.setdefault(o.attributes["size"], {})):
                            table.setdefault(head, Counter())[value] += 1
    return counts, by_size


def _check_block(block: dict, true_counts: Counter) -> None:
    """Every figure of one head recomputed by hand from its confusion matrix (rows = true class)."""
    m = np.array(block["confusion"])
    assert m.shape == (len(block["classes"]),) * 2
    assert m.sum(axis=1).tolist() == [true_counts[c] for c in block["classes"]]
    assert block["n"] == m.sum() and block["correct"] == np.trace(m)
    assert block["accuracy"] == pytest.approx(np.trace(m) / m.sum())
    for i, name in enumerate(block["classes"]):
        expected = m[i, i] / m[i].sum() if m[i].sum() else None
        assert block["per_class"][name] == pytest.approx(expected)


def test_audit_cli_figures_schema_plot(data, tmp_path):
    out, plot = tmp_path / "audit.json", tmp_path / "confusion.png"
    result = CliRunner().invoke(madman, ["audit", str(data), "--out", str(out), "--plot", str(plot), *FAST],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    audit = json.loads(out.read_text())
    validate(audit, "audit_result", "audit")
    counts, by_size = _truth(data, "test")
    assert audit["settings"]["train_split"] == "train" and audit["settings"]["test_split"] == "test"
    assert audit["counts"]["test_objects"] == 24 and audit["counts"]["train_objects"] == 48
    assert sorted(audit["attributes"]) == ["colour", "fracture", "rotation", "size", "swelling", "thickness"]
    assert audit["attributes"]["swelling"] == {"trained": False, "classes": ["unswollen"]}
    assert "swelling   single value 'unswollen' in the config: not trained" in result.output
    for name, block in audit["attributes"].items():
        if block["trained"]:
            _check_block(block, counts[name])
    _check_block(audit["digit"], counts["digit"])
    assert audit["digit"]["classes"] == [str(d) for d in range(10)]
    # per size level: each level's figures come from its own objects, and the levels add up to the whole
    assert sorted(audit["by_size"]) == ["large", "medium", "small"]
    for name in ["colour", "rotation", "digit"]:
        total = 0
        for level, part in audit["by_size"].items():
            block = part["digit"] if name == "digit" else part["attributes"][name]
            _check_block(block, by_size[level][name])
            total = total + np.array(block["confusion"])
        whole = audit["digit"] if name == "digit" else audit["attributes"][name]
        assert total.tolist() == whole["confusion"]
    for level, part in audit["by_size"].items():  # within a size level only that level is a true class
        block = part["attributes"]["size"]
        assert [sum(row) for row in block["confusion"]] == [block["n"] if c == level else 0 for c in block["classes"]]
    # classes in the order of their parameter
    assert audit["attributes"]["size"]["classes"] == ["small", "medium", "large"]
    assert audit["attributes"]["rotation"]["classes"] == ["tilted-right", "upright", "tilted-left"]
    # the table shows the overall accuracy of each trained head
    assert f"colour     {100 * audit['attributes']['colour']['accuracy']:10.2f}" in result.output
    with Image.open(plot) as image:
        assert image.format == "PNG" and image.size[0] > 400
    # never overwrite a result silently
    again = CliRunner().invoke(madman, ["audit", str(data), "--out", str(out), *FAST])
    assert again.exit_code == 2 and "already exists" in again.output
    assert json.loads(out.read_text()) == audit


def test_audit_is_deterministic_and_learns_colour(data):
    first = audit_madman(data, epochs=30, batch_size=16, width=8, seed=3)
    second = audit_madman(data, epochs=30, batch_size=16, width=8, seed=3)
    assert first == second
    # colour is the easiest attribute: 8 classes (chance 1/8), 48 training objects, 24 test objects
    assert first["attributes"]["colour"]["accuracy"] >= 0.5, first["attributes"]["colour"]
    assert first["settings"]["crop"] % 8 == 0 and first["settings"]["crop"] <= 64


def test_audit_subsets_and_another_split(data):
    audit = audit_madman(data, train_split="test", test_split="train", epochs=1, batch_size=8, width=4,
                         max_train_objects=10, max_test_objects=7)
    assert audit["counts"]["train_objects"] == 10 and audit["counts"]["test_objects"] == 7
    assert audit["settings"]["train_split"] == "test" and audit["dataset"]["splits"] == ["test", "train"]
    assert audit["digit"]["n"] == 7


def test_training_shift_moves_each_crop_within_bounds():
    import torch

    from bindscope.evaluation.audit import _shifted

    crops = torch.zeros((64, 16, 16, 3), dtype=torch.uint8)
    crops[:, 6:10, 5:9] = torch.arange(1, 17, dtype=torch.uint8).reshape(1, 4, 4, 1)  # a 4x4 patch, row-major 1..16
    out = _shifted(crops, 3, torch.Generator().manual_seed(0))
    assert out.shape == crops.shape and out.dtype == torch.uint8
    moves = set()
    for moved in out:
        ys, xs = np.nonzero(moved[:, :, 0].numpy())
        dy, dx = int(ys.min()) - 6, int(xs.min()) - 5
        assert -3 <= dy <= 3 and -3 <= dx <= 3
        assert torch.equal(moved[6 + dy:10 + dy, 5 + dx:9 + dx], crops[0, 6:10, 5:9])  # moved whole, unchanged
        assert int(moved.sum()) == int(crops[0].sum())
        moves.add((dy, dx))
    assert len(moves) > 20  # 49 possible offsets, 64 draws
    again = _shifted(crops, 3, torch.Generator().manual_seed(0))
    assert torch.equal(out, again)
