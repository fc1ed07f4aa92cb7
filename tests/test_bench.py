"""ARO and SugarCrepe from tiny fixtures in their published layouts: accuracy per subset by hand, groups, macro vs
micro, order perturbations, LABCLIP, bad files."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from eval_fakes import FakeEncoder, unit
from PIL import Image

from bindscope.alignment.labclip import LabclipMap, load_labclip
from bindscope.cli.main import bindscope
from bindscope.errors import BadInput
from bindscope.evaluation.bench import ORDER_PERTURBATIONS, evaluate_bench, order_words, perturb, read_bench

DIM = 16


def e(i):
    return unit(DIM, i)


def mix(i, s, j):
    """A text whose cosine with image direction e_i is exactly s (the rest along e_j)."""
    return (s * e(i) + np.sqrt(1 - s * s) * e(j)).astype(np.float32)


def save_image(path, value, size=40, box=None):
    """A uniform image of grey ``value`` (its id for the fake encoder); with ``box``, only that square region is
    ``value`` and the rest 200, so only the crop reads as the id."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.full((size, size, 3), value if box is None else 200, np.uint8)
    if box is not None:
        x, y, w, h = box
        pixels[y:y + h, x:x + w] = value
    Image.fromarray(pixels).save(path, format="PNG")  # lossless whatever the name: the id pixel stays exact


SUGARCREPE = {  # subset -> {id: (image id, caption, caption vector, negative, negative vector)}
    "add_att": {"0": (1, "a red bus", e(1), "a red bus on grass", e(2)),          # right
                "7": (2, "a dog", mix(2, 0.5, 9), "a big dog", e(2)),              # wrong
                "12": (1, "a cat", e(1), "a small cat", e(1))},                    # tie: wrong
    "swap_obj": {"3": (2, "a man and a horse", e(2), "a horse and a man", e(3)),  # right
                 "5": (3, "a cup on a table", e(3), "a table on a cup", mix(3, 0.9, 10))},  # right
}


def sugarcrepe_fixture(root):
    texts = {}
    for subset, entries in SUGARCREPE.items():
        data = {}
        for key, (img, cap, cap_vec, neg, neg_vec) in entries.items():
            data[key] = {"filename": f"{img:012d}.jpg", "caption": cap, "negative_caption": neg}
            texts[cap], texts[neg] = cap_vec, neg_vec
            save_image(root / "val2017" / f"{img:012d}.jpg", img)
        (root / "sugarcrepe").mkdir(parents=True, exist_ok=True)
        (root / "sugarcrepe" / f"{subset}.json").write_text(json.dumps(data))
    return root / "sugarcrepe", root / "val2017", texts


def fake(texts, rule=None):
    return FakeEncoder(DIM, texts, {i: e(i) for i in range(1, 9)}, text_rule=rule)


def test_sugarcrepe_accuracy_per_subset_macro_micro(tmp_path):
    data, images, texts = sugarcrepe_fixture(tmp_path)
    items = read_bench("sugarcrepe", data, images)
    assert list(items) == ["add_att", "swap_obj"] and len(items["add_att"]) == 3
    result = evaluate_bench("sugarcrepe", items, fake(texts), image_size=40, progress=False)
    subsets = result["metrics"]["subsets"]
    assert [(subsets[s]["accuracy"]["correct"], subsets[s]["accuracy"]["total"]) for s in subsets] == [(1, 3), (2, 2)]
    from bindscope.evaluation.stats import wilson_interval
    assert subsets["add_att"]["accuracy"]["ci95"] == pytest.approx(wilson_interval(1, 3))
    # add_att's three items show two images (image 1 twice): the bootstrap resamples 2 clusters.
    assert subsets["add_att"]["accuracy"]["clusters"] == 2
    average = result["metrics"]["average"]
    assert average["macro"] == pytest.approx((1 / 3 + 1) / 2)
    assert (average["micro"]["correct"], average["micro"]["total"]) == (3, 5)
    assert result["kind"] == "bench" and result["settings"]["text_transform"] is None
    from bindscope.evaluation.collect import collect

    (tmp_path / "bench.json").write_text(json.dumps(result))
    figures = collect([tmp_path / "bench.json"])["rows"][0]["figures"]
    assert sorted(figures) == ["sugarcrepe/add_att", "sugarcrepe/macro", "sugarcrepe/micro", "sugarcrepe/swap_obj"]
    assert figures["sugarcrepe/add_att"]["value"] == pytest.approx(100 / 3)
    assert figures["sugarcrepe/macro"]["value"] == pytest.approx(100 * (1 / 3 + 1) / 2)
    assert figures["sugarcrepe/micro"]["value"] == pytest.approx(60.0)


def test_labclip_map_changes_the_text_side(tmp_path):
    # The caption points along e_10, the negative along e_11, the image along e_1 + e_11: wrong without the map;
    # a map swapping text dims 10 and 11 makes it right.
    (tmp_path / "sc").mkdir()
    (tmp_path / "sc" / "swap_att.json").write_text(json.dumps(
        {"4": {"filename": "a.jpg", "caption": "a blue cube", "negative_caption": "a cube blue"}}))
    save_image(tmp_path / "img" / "a.jpg", 4)
    texts = {"a blue cube": e(10), "a cube blue": e(11)}
    enc = FakeEncoder(DIM, texts, {4: (e(11) + e(4)) / np.sqrt(2)})
    items = read_bench("sugarcrepe", tmp_path / "sc", tmp_path / "img")
    plain = evaluate_bench("sugarcrepe", items, enc, image_size=40, progress=False)
    assert plain["metrics"]["subsets"]["swap_att"]["accuracy"]["correct"] == 0
    weight = np.eye(DIM, dtype=np.float32)
    weight[[10, 11]] = weight[[11, 10]]
    LabclipMap(weight).save(tmp_path / "map.pt")
    mapped = evaluate_bench("sugarcrepe", items, enc, text_transform=load_labclip(tmp_path / "map.pt"),
                            image_size=40, progress=False)
    assert mapped["metrics"]["subsets"]["swap_att"]["accuracy"]["correct"] == 1
    assert mapped["settings"]["text_transform"] == "LABCLIP(map.pt)"


def test_aro_vg_subsets_crop_and_groups(tmp_path):
    data = tmp_path / "aro"
    rel, attr, texts = [], [], {}
    # Each VG image holds its id only inside the square box: the crop is what the encoder sees.
    for k, (img, relation, right) in enumerate([(1, "on", True), (2, "on", False), (3, "under", True)]):
        box = (8, 4, 24, 24)
        save_image(data / "images" / f"{img}.jpg", img, size=48, box=box)
        true, false = f"the cup is {relation} the table {k}", f"the table is {relation} the cup {k}"
        texts[true], texts[false] = (e(img), mix(img, 0.3, 12)) if right else (mix(img, 0.3, 12), e(img))
        rel.append({"image_path": f"{img}.jpg", "bbox_x": box[0], "bbox_y": box[1], "bbox_w": box[2],
                    "bbox_h": box[3], "true_caption": true, "false_caption": false, "relation_name": relation})
    for k, img in enumerate([4, 5]):
        save_image(data / "images" / f"{img}.jpg", img)
        true, false = f"the red shirt and the blue car {k}", f"the blue shirt and the red car {k}"
        texts[true], texts[false] = e(img), mix(img, 0.5, 13)
        attr.append({"image_path": f"{img}.jpg", "bbox_x": 0, "bbox_y": 0, "bbox_w": 40, "bbox_h": 40,
                     "true_caption": true, "false_caption": false, "attributes": ["red", "blue"]})
    (data / "visual_genome_relation.json").write_text(json.dumps(rel))
    (data / "visual_genome_attribution.json").write_text(json.dumps(attr))
    items = read_bench("aro", data)
    assert list(items) == ["vg_relation", "vg_attribution"]
    result = evaluate_bench("aro", items, fake(texts), image_size=24, progress=False)
    relation = result["metrics"]["subsets"]["vg_relation"]
    assert (relation["accuracy"]["correct"], relation["accuracy"]["total"]) == (2, 3)
    assert {g: (p["correct"], p["total"]) for g, p in relation["groups"].items()} == {"on": (1, 2), "under": (1, 1)}
    assert relation["group_average"]["macro"] == pytest.approx(0.75)
    assert result["metrics"]["subsets"]["vg_attribution"]["groups"] == {
        "red_blue": {"correct": 2, "total": 2, "accuracy": 1.0, "ci95": pytest.approx([0.3424, 1.0], abs=1e-4),
                     "ci95_cluster": [1.0, 1.0], "clusters": 2}}
    assert result["metrics"]["average"]["macro"] == pytest.approx((2 / 3 + 1) / 2)


NOUNS_ADJS = {"red", "bus", "road", "old", "man", "dog", "park", "big", "tree"}


def tagger(words):
    return [w in NOUNS_ADJS for w in words]


def test_order_perturbations_keep_their_invariants():
    words = order_words("A red bus drives down the road, next to an old man!")
    assert words == ["a", "red", "bus", "drives", "down", "the", "road", "next", "to", "an", "old", "man"]
    rng = np.random.default_rng(0)
    nouns = perturb(words, "shuffle_nouns_and_adjectives", rng, tagger)
    assert sorted(nouns) == sorted(words)
    assert all(a == b for a, b, flag in zip(words, nouns, tagger(words)) if not flag)
    others = perturb(words, "shuffle_all_but_nouns_and_adjectives", rng, tagger)
    assert all(a == b for a, b, flag in zip(words, others, tagger(words)) if flag) and others != words
    within = perturb(words, "shuffle_within_trigrams", rng, tagger)
    assert [sorted(within[i:i + 3]) for i in range(0, 12, 3)] == [sorted(words[i:i + 3]) for i in range(0, 12, 3)]
    blocks = perturb(words, "shuffle_trigrams", rng, tagger)
    assert sorted(tuple(blocks[i:i + 3]) for i in range(0, 12, 3)) == sorted(tuple(words[i:i + 3])
                                                                            for i in range(0, 12, 3))


def test_coco_and_flickr_order(tmp_path):
    data = tmp_path / "aro"
    data.mkdir()
    save_image(tmp_path / "coco" / "val2014" / "x.jpg", 5)
    save_image(tmp_path / "flickr" / "flickr30k-images" / "1.jpg", 6)
    (data / "coco_karpathy_test.json").write_text(json.dumps([{"image": "val2014/x.jpg", "caption": [
        "A red bus drives down the road next to an old man.", "A big dog runs in the park under a tree."]}]))
    (data / "flickr30k_test.json").write_text(json.dumps([{"image": "flickr30k-images/1.jpg", "caption": [
        "An old man walks a big dog in the park."]}]))
    items = read_bench("aro", data, images=tmp_path / "coco", flickr_images=tmp_path / "flickr", tagger=tagger)
    first = items["coco_order"][0]
    assert first.captions[0] == "a red bus drives down the road next to an old man"
    assert len(first.captions) == 5 and len(set(first.captions)) == 5
    assert items == read_bench("aro", data, images=tmp_path / "coco", flickr_images=tmp_path / "flickr",
                               tagger=tagger)  # seeded
    originals = {"a red bus drives down the road next to an old man": e(5),
                 "a big dog runs in the park under a tree": mix(5, 0.2, 14),   # weaker than its perturbations: wrong
                 "an old man walks a big dog in the park": e(6)}

    def rule(text):  # every perturbation: cosine 0.5 with both images
        return ((e(5) + e(6)) / 2 + np.sqrt(0.5) * e(15)).astype(np.float32)

    result = evaluate_bench("aro", items, fake(originals, rule), image_size=40, progress=False)
    subsets = result["metrics"]["subsets"]
    assert (subsets["coco_order"]["accuracy"]["correct"], subsets["coco_order"]["accuracy"]["total"]) == (1, 2)
    # Both captions share one image: one cluster, so the bootstrap cannot vary (interval = the point estimate).
    assert subsets["coco_order"]["accuracy"]["clusters"] == 1
    assert subsets["coco_order"]["accuracy"]["ci95_cluster"] == [0.5, 0.5]
    assert subsets["flickr_order"]["accuracy"]["accuracy"] == 1.0 and subsets["flickr_order"]["options"] == 5
    assert result["metrics"]["average"]["macro"] == pytest.approx(0.75)
    assert result["metrics"]["average"]["micro"]["accuracy"] == pytest.approx(2 / 3)
    assert len(ORDER_PERTURBATIONS) == 4


def test_bad_bench_files(tmp_path):
    data, images, _ = sugarcrepe_fixture(tmp_path)
    entries = json.loads((data / "add_att.json").read_text())
    entries["12"]["filename"] = "missing.jpg"
    (data / "add_att.json").write_text(json.dumps(entries))
    with pytest.raises(BadInput, match=r"sugarcrepe add_att.json item '12': image 'missing.jpg' is missing"):
        read_bench("sugarcrepe", data, images)
    with pytest.raises(BadInput, match="unknown sugarcrepe subset 'swap_rel'"):
        read_bench("sugarcrepe", data, images, subsets=["swap_rel"])
    with pytest.raises(BadInput, match="^images: sugarcrepe needs the COCO val2017"):
        read_bench("sugarcrepe", data)
    with pytest.raises(BadInput, match="holds none of the aro files"):
        read_bench("aro", data)
    out = tmp_path / "result.json"
    base = ["bench", "sugarcrepe", "--data", str(data), "--model", "ViT-B-32", "--pretrained", "none",
            "--out", str(out)]
    result = CliRunner().invoke(bindscope, base + ["--images", str(images)])
    assert result.exit_code == 2 and result.output.count("Error:") == 1 and "'missing.jpg'" in result.output
    assert not out.exists()


def _aro_order(tmp_path):
    data = tmp_path / "aro"
    data.mkdir()
    save_image(tmp_path / "coco" / "val2014" / "x.jpg", 5)
    (data / "coco_karpathy_test.json").write_text(json.dumps([{"image": "val2014/x.jpg", "caption": ["A red bus."]}]))
    return ["bench", "aro", "--data", str(data), "--images", str(tmp_path / "coco"), "--model", "nowhere:model",
            "--tagger", "spacy", "--out", str(tmp_path / "r.json")]


def test_the_order_subsets_without_spacys_model_name_the_model(tmp_path, monkeypatch):
    """spaCy installed, its English model not: the error names the model and how to get it."""
    import spacy

    from bindscope.text import negatives

    def load(name, **options):  # what spacy.load raises for a model that is not installed
        raise OSError(f"[E050] Can't find model '{name}'. It doesn't seem to be a Python package or a valid path "
                      "to a data directory.")

    args = _aro_order(tmp_path)
    negatives.spacy_pipeline.cache_clear()
    monkeypatch.setattr(spacy, "load", load)
    r = CliRunner().invoke(bindscope, args)
    negatives.spacy_pipeline.cache_clear()
    assert r.exit_code == 2
    assert r.output == ("Error: aro coco_order/flickr_order need a part-of-speech tagger; spaCy model "
                        "'en_core_web_sm' is not installed: python -m spacy download en_core_web_sm (or choose the "
                        "subsets vg_relation,vg_attribution, or --tagger 'lexicon')\n")
    assert not (tmp_path / "r.json").exists()


def test_the_order_subsets_without_spacy_name_the_install_command(tmp_path, monkeypatch):
    import builtins

    from bindscope.text import negatives

    real_import = builtins.__import__

    def no_spacy(name, *args, **kwargs):
        if name.split(".")[0] == "spacy":
            raise ImportError("No module named 'spacy'")
        return real_import(name, *args, **kwargs)

    args = _aro_order(tmp_path)
    negatives.spacy_pipeline.cache_clear()
    monkeypatch.setattr(builtins, "__import__", no_spacy)
    r = CliRunner().invoke(bindscope, args)
    monkeypatch.undo()
    negatives.spacy_pipeline.cache_clear()
    assert r.exit_code == 2
    assert r.output == ("Error: aro coco_order/flickr_order need a part-of-speech tagger; the spaCy tagger needs spaCy "
                        "and its English model: pip install 'bindscope[text]' && python -m spacy download "
                        "en_core_web_sm (or choose the subsets vg_relation,vg_attribution, or --tagger 'lexicon')\n")
