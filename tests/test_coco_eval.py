"""TOR, I2TOR, matching and IOR (external DomainNet-style references) on a COCO import, with a fake encoder whose
vectors are chosen by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from coco_fixture import write_coco
from eval_fakes import FakeEncoder, position_weighted_rule, unit
from PIL import Image

from bindscope.cli.main import comco
from bindscope.encoders.embedding_cache import Embedder
from bindscope.errors import BadInput
from bindscope.evaluation.comco import evaluate_comco
from bindscope.evaluation.references import load_references
from bindscope.importers.coco import import_coco

NAMES = ["person", "car", "cat", "dog", "couch"]  # the fixture's categories by COCO id
DIM = 8
E = {n: unit(DIM, i) for i, n in enumerate(NAMES)}
CAPTION_VECTORS = {  # caption -> the name its embedding equals (its TOR top-1)
    "A man with his dog.": "person",                       # mentions person, dog -> position 1 of 2
    "A dog and a woman on a sofa.": "person",              # dog, person -> position 2 of 2
    "Two people standing outside.": "person",              # person -> position 1 of 1
    "A scenic view.": "dog",                               # nothing mentioned -> not in query
    "A kitten sitting next to a parked car.": "couch",     # cat, car -> not in query
    "A red car and a cat.": "car",                         # car, cat -> position 1 of 2
    "A person sits on a couch near a dog.": "dog",         # person, couch, dog -> position 3 of 3
}
# Image ids are pixel [0, 0, 0]; image 9 is letterboxed (padding at the top), so its id pixel reads 0.
IMAGE_VECTORS = {7: E["dog"], 0: E["car"], 12: 0.8 * E["person"] + 0.6 * E["couch"],
                 101: E["person"], 102: (E["person"] + E["dog"]) / np.sqrt(2), 103: E["dog"], 104: E["car"],
                 105: E["cat"]}


@pytest.fixture()
def coco_dataset(tmp_path):
    files = write_coco(tmp_path / "src")
    import_coco(*files, tmp_path / "coco", image_size=40, progress=False)
    return tmp_path / "coco"


def encoder():
    texts = dict(E)
    texts.update({caption: E[name] for caption, name in CAPTION_VECTORS.items()})
    return FakeEncoder(DIM, texts, IMAGE_VECTORS, text_rule=position_weighted_rule(NAMES, DIM))


def write_references(root):
    """DomainNet layout: person (2 images), dog, car, and the cat under another name ('kitty'); no couch."""
    for folder, ids in {"person": [101, 102], "dog": [103], "car": [104], "kitty": [105], "airplane": [106]}.items():
        (root / folder).mkdir(parents=True)
        for k, image_id in enumerate(ids):
            pixels = np.full((40, 40, 3), 50, np.uint8)
            pixels[0, 0, 0] = image_id
            Image.fromarray(pixels).save(root / folder / f"{folder}_{k:03d}.png")
    (root / "notes.txt").write_text("not a folder of images")
    (root.parent / "map.yaml").write_text("cat: kitty\n")
    return root, root.parent / "map.yaml"


def positions(block):
    return {n: ([p["unconditional"]["count"] for p in b["positions"]], b["top1_not_in_query"], b["num_queries"])
            for n, b in block["by_num_objects"].items()}


def test_tor_i2tor_matching_on_coco(coco_dataset):
    result = evaluate_comco(coco_dataset, encoder(), ["tor", "i2tor", "matching"], progress=False)
    assert result["dataset"]["generator"] == "coco" and result["settings"]["scenes"] == "val2017"
    metrics = result["metrics"]
    assert metrics["tor"]["candidates"] == 5
    # TOR over every caption, grouped by the number of annotated categories it mentions.
    assert positions(metrics["tor"]) == {"0": ([], 1, 1), "1": ([1], 0, 1), "2": ([2, 1], 1, 4), "3": ([0, 0, 1], 0, 1)}
    # I2TOR: image 7 (person, dog) -> dog = rank 2; image 9 (car, cat) -> car = rank 1; image 12 (couch, person,
    # dog) -> person = rank 2.
    assert positions(metrics["i2tor"]) == {"2": ([1, 1], 0, 2), "3": ([0, 1, 0], 0, 1)}
    # Matching (position-weighted text encoder 3:2:1): by hand in the test module's notes.
    s1, s2 = metrics["matching"]["scenario_1"], metrics["matching"]["scenario_2"]
    assert (s1["all"]["correct"], s1["all"]["total"]) == (5, 8)
    assert {n: (p["correct"], p["total"]) for n, p in s1["by_num_objects"].items()} == {"2": (3, 6), "3": (2, 2)}
    assert (s2["all"]["correct"], s2["all"]["total"]) == (3, 8)
    assert {n: (p["correct"], p["total"]) for n, p in s2["by_num_objects"].items()} == {"2": (3, 6), "3": (0, 2)}


def test_ior_with_external_references(tmp_path, coco_dataset):
    refs, category_map = write_references(tmp_path / "domainnet" / "real")
    reference_set = load_references(refs, NAMES, 40, category_map)
    assert reference_set.missing == ["couch"] and reference_set.folders["cat"] == "kitty"
    assert [p.name for p in reference_set.files["person"]] == ["person_000.png", "person_001.png"]
    names, proto = reference_set.prototypes(Embedder(encoder(), progress=False))
    assert names == ["car", "cat", "dog", "person"]
    expected = E["person"] + (E["person"] + E["dog"]) / np.sqrt(2)
    assert np.allclose(proto[3], expected / np.linalg.norm(expected), atol=1e-6)
    result = evaluate_comco(coco_dataset, encoder(), ["ior"], progress=False,
                            options={"ior": {"references": str(refs), "category_map": str(category_map)}})
    ior = result["metrics"]["ior"]
    assert ior["candidates"] == 4
    # image 7 = dog -> dog (rank 2); image 9 = car -> car (rank 1); image 12 = 0.8 person + 0.6 couch: couch has
    # no reference, person's prototype wins -> rank 2 of 3.
    assert positions(ior) == {"2": ([1, 1], 0, 2), "3": ([0, 1, 0], 0, 1)}
    assert result["settings"]["references"]["categories_without_references"] == ["couch"]


def test_reference_errors(tmp_path, coco_dataset):
    refs, _ = write_references(tmp_path / "domainnet" / "real")
    bad_map = tmp_path / "bad.json"
    bad_map.write_text(json.dumps({"couch": "sofa"}))
    with pytest.raises(BadInput, match="maps 'couch' to 'sofa', but references .* has no such subfolder"):
        load_references(refs, NAMES, 40, bad_map)
    escape = tmp_path / "escape.json"
    escape.write_text(json.dumps({"couch": "../../src"}))
    with pytest.raises(BadInput, match="outside references"):
        load_references(refs, NAMES, 40, escape)
    with pytest.raises(BadInput, match="no image folder for any"):
        load_references(refs, ["zebra"], 40)
    base = ["eval", str(coco_dataset), "--model", "ViT-B-32", "--pretrained", "none"]
    runner = CliRunner()
    result = runner.invoke(comco, base + ["--tasks", "ior"])
    assert result.exit_code == 2 and "--reference-images DIR" in result.output
    result = runner.invoke(comco, base + ["--tasks", "ior", "--reference-images", str(refs), "--category-map", str(bad_map)])
    assert result.exit_code == 2 and result.output.count("Error:") == 1 and "'sofa'" in result.output
    assert not (coco_dataset / "eval").exists()
