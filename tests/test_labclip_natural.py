"""LABCLIP on natural captions: `bindscope labclip fit --negatives shuffled` on a COCO import (the fixture in the
published layout, plus three images), with a random-weight open_clip ViT-B-32 (no download); the negatives used
are checked caption by caption."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from click.testing import CliRunner
from coco_fixture import ANNOTATIONS, CAPTIONS, IMAGES, rect, write_coco

from bindscope.alignment.data import SHUFFLED, caption_lexicon, labclip_table
from bindscope.cli.main import bindscope
from bindscope.errors import BadInput
from bindscope.format.reader import Dataset
from bindscope.importers.coco import import_coco
from bindscope.text.negatives import split_words

EXTRA_IMAGES = [{"id": i, "file_name": f"0000000000{i}.png", "width": 40, "height": 40} for i in (20, 21, 22)]
EXTRA_ANNOTATIONS = [
    {"id": 401, "image_id": 20, "category_id": 18, "segmentation": [rect(0, 0, 20, 20)], "area": 400.0,
     "iscrowd": 0, "bbox": [0, 0, 20, 20]},
    {"id": 402, "image_id": 20, "category_id": 17, "segmentation": [rect(20, 20, 30, 30)], "area": 100.0,
     "iscrowd": 0, "bbox": [20, 20, 10, 10]},
    {"id": 501, "image_id": 21, "category_id": 3, "segmentation": [rect(0, 0, 25, 20)], "area": 500.0,
     "iscrowd": 0, "bbox": [0, 0, 25, 20]},
    {"id": 601, "image_id": 22, "category_id": 1, "segmentation": [rect(5, 5, 25, 35)], "area": 600.0,
     "iscrowd": 0, "bbox": [5, 5, 20, 30]},
]
EXTRA_CAPTIONS = [
    {"id": 4001, "image_id": 20, "caption": "A black dog and a white cat."},
    {"id": 5001, "image_id": 21, "caption": "A red car parked beside a blue car."},
    {"id": 6001, "image_id": 22, "caption": "A woman holding a small kitten."},
]
# Each image's first caption (the sample's caption) and the negatives the lexicon tagger allows: two different
# nouns (and at most one adjective each) can only swap; image 12 has three nouns, image 20 two of each kind.
FIRST = {7: "A man with his dog.", 9: "A kitten sitting next to a parked car.",
         12: "A person sits on a couch near a dog.", 20: "A black dog and a white cat.",
         21: "A red car parked beside a blue car.", 22: "A woman holding a small kitten."}
ONLY = {7: "A dog with his man.", 9: "A car sitting next to a parked kitten.",
        21: "A blue car parked beside a red car.", 22: "A kitten holding a small woman."}


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    root = tmp_path_factory.mktemp("natural")
    files = write_coco(root / "src", images=IMAGES + EXTRA_IMAGES, annotations=ANNOTATIONS + EXTRA_ANNOTATIONS,
                       captions=CAPTIONS + EXTRA_CAPTIONS)
    import_coco(*files, root / "coco", image_size=32, progress=False)
    return root / "coco", root


def _words(text):
    return Counter(text[a:b] for a, b in split_words(text))


def test_shuffled_negatives_of_a_coco_import(coco):
    data, _ = coco
    dataset = Dataset(data)
    table, source = labclip_table(dataset, "val2017")  # no stored negatives: shuffled is the default
    assert source == SHUFFLED
    nouns, adjectives = caption_lexicon(dataset, table)
    assert {"man", "woman", "people", "kitten", "couch", "sofa", "car", "cars"} <= set(nouns)
    assert {"black", "white", "red", "blue", "small"} <= set(adjectives) and not set(nouns) & set(adjectives)
    image_ids = [s.spec["coco_image_id"] for s in dataset.split("val2017")]
    assert dict(zip(image_ids, table.captions)) == FIRST
    made = {}
    for image_id, caption, negatives in zip(image_ids, table.captions, table.negatives):
        assert len(negatives) == 1
        neg = negatives[0]
        assert (neg.kind, neg.attribute) == ("binding", SHUFFLED)
        assert neg.caption != caption and _words(neg.caption) == _words(caption)
        made[image_id] = neg.caption
    assert {k: made[k] for k in ONLY} == ONLY
    assert made[20] in {"A white cat and a black dog.", "A black cat and a white dog.",
                        "A white dog and a black cat."}
    assert made[12] in {"A couch sits on a dog near a person.", "A dog sits on a person near a couch.",
                        "A person sits on a dog near a couch.", "A couch sits on a person near a dog.",
                        "A dog sits on a couch near a person."}
    again, _ = labclip_table(dataset, "val2017", "shuffled", "lexicon", 0)
    assert again.negatives == table.negatives  # seeded per sample
    other, _ = labclip_table(dataset, "val2017", "shuffled", "lexicon", 1)
    assert [n[0].caption for n in other.negatives if n] != [n[0].caption for n in table.negatives]
    with pytest.raises(BadInput, match="negatives 'swapped' is not allowed; allowed: stored, shuffled"):
        labclip_table(dataset, "val2017", "swapped")


def test_labclip_fit_and_eval_on_coco_with_shuffled_negatives(coco):
    data, root = coco
    runner = CliRunner()
    model = ["--model", "ViT-B-32", "--pretrained", "none", "--device", "cpu", "--no-cache"]
    stored = runner.invoke(bindscope, ["labclip", "fit", str(data), *model, "--out", str(root / "no.pt"),
                                       "--negatives", "stored"])
    assert stored.exit_code == 2 and "negatives='shuffled'" not in stored.output
    assert "--negatives 'shuffled'" in stored.output and not (root / "no.pt").exists()
    path = root / "labclip.pt"
    fit = runner.invoke(bindscope, ["labclip", "fit", str(data), *model, "--out", str(path), "--negatives",
                                    "shuffled", "--holdout-fraction", "0.3", "--epochs", "3", "--fit-batch-size", "4"])
    assert fit.exit_code == 0, fit.output
    assert "fitted on 4 samples (4 shuffled negatives)" in fit.output and "2 samples kept" in fit.output
    from bindscope.alignment.labclip import load_labclip

    labclip = load_labclip(path)
    meta = labclip.meta
    assert (meta["negatives"], meta["tagger"], meta["n_fit_samples"], meta["n_held_out_samples"]) == \
        ("shuffled", "lexicon", 4, 2)
    held = meta["held_out_samples"]
    assert len(held) == 2 and meta["held_out"] == [] and len(meta["loss_history"]) == 4
    assert labclip.weight.shape == (512, 512) and np.isfinite(labclip.weight).all()
    report = root / "labclip.json"
    ev = runner.invoke(bindscope, ["labclip", "eval", str(data), *model, "--labclip", str(path), "--out",
                                   str(report), "--quiet"])
    assert ev.exit_code == 0, ev.output
    result = json.loads(report.read_text())
    metrics = result["metrics"]
    assert result["kind"] == "labclip-eval" and result["dataset"]["generator"] == "coco"
    assert (metrics["negatives"], metrics["n_eval_samples"], metrics["evaluated_on"]) == \
        ("shuffled", 2, "held-out samples of the fitting split")
    for when in ("before", "after"):
        block = metrics[when]["binding"]
        assert block["n"] == 2 and list(block["per_attribute"]) == ["shuffled"]
        assert metrics[when]["recognition"]["n"] == 0
    assert metrics["fit_samples"]["n_samples"] == 4


def test_spacy_tagger_missing_is_one_error_before_a_model_loads(coco, monkeypatch):
    import builtins

    from bindscope.text import negatives

    data, root = coco
    real_import = builtins.__import__

    def no_spacy(name, *args, **kwargs):
        if name.split(".")[0] == "spacy":
            raise ImportError("No module named 'spacy'")
        return real_import(name, *args, **kwargs)

    negatives.spacy_pipeline.cache_clear()
    monkeypatch.setattr(builtins, "__import__", no_spacy)
    r = CliRunner().invoke(bindscope, ["labclip", "fit", str(data), "--model", "no-such-model", "--out",
                                       str(root / "spacy.pt"), "--negatives", "shuffled", "--tagger", "spacy"])
    negatives.spacy_pipeline.cache_clear()
    assert r.exit_code == 2 and r.output.count("Error:") == 1, r.output
    assert "pip install 'bindscope[text]' && python -m spacy download en_core_web_sm" in r.output
    assert not (root / "spacy.pt").exists()
