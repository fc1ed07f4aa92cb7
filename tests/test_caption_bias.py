"""Caption bias (ComCO Claim 2) on a COCO import, a ComCO-format and a MADMAN-format dataset: hand-counted shares."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from coco_fixture import write_coco
from eval_fakes import SpecGenerator, build, comco_fixture, image, obj

from bindscope.cli.main import bindscope
from bindscope.errors import BadInput
from bindscope.evaluation.caption_bias import caption_bias
from bindscope.evaluation.stats import wilson_interval
from bindscope.format.records import Sample
from bindscope.importers.coco import import_coco


@pytest.fixture()
def coco_dataset(tmp_path):
    files = write_coco(tmp_path / "src")
    import_coco(*files, tmp_path / "coco", image_size=40, progress=False)
    return tmp_path / "coco"


def test_coco_every_caption(coco_dataset):
    result = caption_bias(coco_dataset)
    # Largest objects: person (image 7), car (image 9), couch (image 12). Positions of the largest per caption:
    # image 7: 1 ("man ... dog"), 2 ("dog and a woman"), 1 ("people"), not mentioned ("scenic view");
    # image 9: 2 ("kitten ... car"), 1 ("car and a cat"); image 12: 2 ("person ... couch ... dog").
    assert (result["num_captions"], result["num_images"]) == (7, 3)
    assert result["largest_first_share"] == pytest.approx(3 / 7)
    assert result["largest_first_share_when_mentioned"] == pytest.approx(3 / 6)
    positions = result["positions"]
    assert list(positions) == ["1", "2", "not_mentioned"]
    assert [(positions[k]["count"], positions[k]["of"]) for k in positions] == [(3, 7), (3, 7), (1, 7)]
    assert positions["1"]["ci95"] == pytest.approx(wilson_interval(3, 7))
    low, high = positions["1"]["ci95_cluster"]
    assert 0 <= low <= 3 / 7 <= high <= 1
    by_num = result["by_num_mentioned"]
    assert {m: (b["captions"], b["images"]) for m, b in by_num.items()} == {"0": (1, 1), "1": (1, 1), "2": (4, 2),
                                                                            "3": (1, 1)}
    assert [(b["count"], b["of"]) for b in by_num["2"]["positions"].values()] == [(2, 4), (2, 4), (0, 4)]
    assert by_num["3"]["positions"]["2"]["share"] == 1.0
    assert "images" in result["intervals"]["ci95_cluster"] and "independent" in result["intervals"]["ci95"]


def test_comco_format_excludes_references(tmp_path):
    path, _ = comco_fixture(tmp_path)
    result = caption_bias(path)
    # Scenes A..E: the size-rank-1 object is mentioned 2nd, 1st, 2nd, 1st, 2nd.
    assert result["dataset"]["splits"] == ["scenes"]
    assert result["largest_first_share"] == pytest.approx(2 / 5)
    assert [(b["count"], b["of"]) for b in result["positions"].values()] == [(2, 5), (3, 5), (0, 5)]


def test_madman_format_single_caption(tmp_path):
    def sample(i, objects, caption="x"):
        return Sample(i, image(i), np.zeros((8, 8), np.uint8), caption, objects, [], {})

    samples = [sample(0, [obj(1, "1", {}, 1, 1), obj(2, "2", {}, 2, 2)]),  # largest first
               sample(1, [obj(1, "1", {}, 2, 1), obj(2, "2", {}, 1, 3)]),  # positions 1, 3: largest is 2nd of 2
               sample(2, [obj(1, "1", {}, 1, 0), obj(2, "2", {}, 2, 1)]),  # largest not mentioned
               sample(3, [obj(1, "1", {}, 1, 1)]),                         # one object, first
               sample(4, [], caption="no objects")]                          # skipped
    path = build(tmp_path, "madman", SpecGenerator({"test": samples}, attribute_names=[]))
    result = caption_bias(path)
    assert result["skipped"] == {"samples": 1} and result["num_captions"] == 4
    assert result["largest_first_share"] == 0.5
    assert [(k, b["count"]) for k, b in result["positions"].items()] == [("1", 2), ("2", 1), ("not_mentioned", 1)]
    assert {m: b["captions"] for m, b in result["by_num_mentioned"].items()} == {"1": 2, "2": 2}


def test_cli_writes_json_and_plot(tmp_path, coco_dataset):
    out = tmp_path / "bias.json"
    result = CliRunner().invoke(bindscope, ["caption-bias", str(coco_dataset), "--out", str(out), "--plot",
                                            str(tmp_path / "bias.png")])
    assert result.exit_code == 0, result.output
    assert "42.9% of captions" in result.output
    data = json.loads(out.read_text())
    assert data["largest_first_share"] == pytest.approx(3 / 7)
    assert (tmp_path / "bias.png").stat().st_size > 1000
    again = CliRunner().invoke(bindscope, ["caption-bias", str(coco_dataset), "--out", str(out)])
    assert again.exit_code == 2 and "already exists" in again.output


def test_no_captions_is_bad_input(tmp_path):
    samples = [Sample(0, image(1), np.zeros((8, 8), np.uint8), "", [obj(1, "1", {}, 1, 0)], [], {})]
    path = build(tmp_path, "empty", SpecGenerator({"test": samples}, attribute_names=[]))
    with pytest.raises(BadInput, match="no caption of an image with objects"):
        caption_bias(path)
    assert CliRunner().invoke(bindscope, ["caption-bias", str(tmp_path / "missing")]).exit_code == 2
