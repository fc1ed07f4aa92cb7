"""Linear probes, LABCLIP and the modality gap on synthetic embeddings (no model, no dataset)."""

from __future__ import annotations

import numpy as np
import pytest

from bindscope.alignment.data import (
    SplitTable,
    build_binding_swaps,
    compose_caption,
    described_attributes,
    varying_attributes,
)
from bindscope.alignment.gap import modality_gap
from bindscope.alignment.labclip import LabclipMap, fit_labclip, labclip_loss, load_labclip, pair_scores
from bindscope.alignment.probes import (ProbeSettings, bag_of_words_bound, bag_of_words_features, fit_linear_probe,
                                       run_probes)
from bindscope.alignment.splits import hold_out_triples, scene_combination, split_by_combination
from bindscope.alignment.pairs import Pairs, binding_report
from bindscope.errors import BadInput
from bindscope.format.records import ObjectRecord


def unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def obj(index, category, **attributes):
    return ObjectRecord(index, category, int(category) if category.isdigit() else 0, attributes, (0, 0, 1, 1),
                        1, index, index == 1, index)


# ----------------------------------------------------------------------------------------- modality gap

def test_modality_gap_hand_computed():
    images = np.array([[1.0, 0.0], [0.0, 1.0]])          # mean (0.5, 0.5)
    texts = np.array([[-3.0, 0.0], [0.0, 2.0]])          # normalised: (-1, 0), (0, 1) -> mean (-0.5, 0.5)
    assert modality_gap(images, texts) == pytest.approx(1.0)
    assert modality_gap(images, images * 7) == pytest.approx(0.0)
    # opposite unit vectors: centroids (1, 0) and (-1, 0)
    assert modality_gap(np.array([[2.0, 0.0]]), np.array([[-1.0, 0.0]])) == pytest.approx(2.0)
    with pytest.raises(BadInput, match="non-empty"):
        modality_gap(np.zeros((0, 2)), texts)


# ----------------------------------------------------------------------------------------- splits

def test_combination_split_never_leaks_a_combination():
    rng = np.random.default_rng(1)
    colours = ["red", "blue", "green", "yellow"]
    objects = [[obj(1, str(a), colour=colours[c]), obj(2, str(b), colour=colours[d])]
               for a, b, c, d in rng.integers(0, 4, size=(500, 4))]
    keys = [scene_combination(o, "colour") for o in objects]
    assert keys[0] == tuple(sorted([(objects[0][0].category, objects[0][0].attributes["colour"]),
                                    (objects[0][1].category, objects[0][1].attributes["colour"])]))
    ids = split_by_combination(keys, (0.6, 0.2, 0.2), seed=3)
    per_split = [{k for k, s in zip(keys, ids) if s == part} for part in range(3)]
    assert all(per_split)
    assert not (per_split[0] & per_split[1]) and not (per_split[0] & per_split[2]) \
        and not (per_split[1] & per_split[2])
    shares = np.bincount(ids, minlength=3) / len(ids)
    assert shares == pytest.approx([0.6, 0.2, 0.2], abs=0.05)
    assert np.array_equal(ids, split_by_combination(keys, (0.6, 0.2, 0.2), seed=3))
    assert not np.array_equal(ids, split_by_combination(keys, (0.6, 0.2, 0.2), seed=4))
    with pytest.raises(BadInput, match="summing to 1"):
        split_by_combination(keys, (0.5, 0.2, 0.2))
    with pytest.raises(BadInput, match="distinct"):
        split_by_combination([("a",)] * 5)


def test_hold_out_triples_keeps_held_out_combinations_out_of_fitting():
    rng = np.random.default_rng(2)
    triples = [{(str(rng.integers(10)), "colour", str(rng.integers(5))),
                (str(rng.integers(10)), "size", str(rng.integers(3)))} for _ in range(300)]
    held, is_held = hold_out_triples(triples, 0.1, seed=0)
    distinct = set().union(*triples)
    assert len(held) == round(0.1 * len(distinct))
    for t, h in zip(triples, is_held):
        assert bool(t & held) == bool(h)
    fit_triples = set().union(*(t for t, h in zip(triples, is_held) if not h))
    assert not fit_triples & held
    with pytest.raises(BadInput, match="between 0 and 1"):
        hold_out_triples(triples, 1.0)


# ----------------------------------------------------------------------------------------- probes

def test_probe_recovers_planted_signal_and_stays_at_chance_on_shuffled_labels():
    rng = np.random.default_rng(0)
    n, dim, classes = 900, 64, 4
    y = rng.integers(0, classes, n)
    directions = rng.normal(size=(classes, dim))
    x = unit(rng.normal(size=(n, dim)) + 0.5 * directions[y]).astype(np.float32)
    probe = fit_linear_probe(x[:500], y[:500], classes, x[500:650], y[500:650])
    assert probe.accuracy(x[650:], y[650:]) > 0.85
    shuffled = rng.permutation(y)
    control = fit_linear_probe(x[:500], shuffled[:500], classes, x[500:650], shuffled[500:650])
    assert abs(control.accuracy(x[650:], shuffled[650:]) - 1 / classes) < 0.1


def _binding_table(n=700, seed=0, dim=96):
    """Two digits with colours; embedding = sum of one random code per (digit, colour) pair + noise."""
    rng = np.random.default_rng(seed)
    colours = ["red", "blue", "green", "yellow"]
    codes = rng.normal(size=(5, 4, dim))
    table = SplitTable("madman", "test", ["colour"])
    emb = np.zeros((n, dim), np.float32)
    for i in range(n):
        a, b = rng.choice(5, 2, replace=False)
        c, d = rng.choice(4, 2, replace=False)
        objects = [obj(1, str(a), colour=colours[c]), obj(2, str(b), colour=colours[d])]
        table.captions.append(f"{colours[c]} {a} and {colours[d]} {b}")
        table.objects.append(objects)
        table.negatives.append([])
        table.described.append({1: {"colour"}, 2: {"colour"}})
        emb[i] = unit(codes[a, c] + codes[b, d] + 0.1 * rng.normal(size=dim))
    return table, emb


def test_run_probes_beats_bag_of_words_when_binding_is_linearly_encoded():
    table, emb = _binding_table()
    result = run_probes(table, {"image": emb, "text": emb}, ["colour"], ProbeSettings(seed=0))
    for modality in ("image", "text"):
        summary = result["modalities"][modality]["colour"]
        assert summary["n_targets"] == 5
        assert summary["chance"] == pytest.approx(0.25)
        # the bag of words knows the two colours but not which digit has which: at most 0.5
        assert summary["bag_of_words_bound"] == pytest.approx(0.5)
        assert 0.3 < summary["bag_of_words"] < 0.6
        assert summary["accuracy"] > 0.85
    # every sample holds two different digits: each is a target once
    assert sum(sum(per.values()) for per in result["splits"]["colour"].values()) == 2 * len(table)


def test_probe_splits_never_leak_a_distractor_combination():
    from bindscope.alignment.probes import probe_splits
    from bindscope.alignment.splits import distractor_combination

    table, _ = _binding_table(n=600, seed=3)
    splits = probe_splits(table, "colour", (0.6, 0.2, 0.2), seed=0)
    assert sorted(splits) == ["0", "1", "2", "3", "4"]
    for category, per in splits.items():
        keys = [set(), set(), set()]
        for sample, part in per.items():
            target = next(o for o in table.objects[sample] if o.category == category)
            keys[part].add(distractor_combination(table.objects[sample], target.index, "colour"))
        assert all(keys) and not (keys[0] & keys[1]) and not (keys[0] & keys[2]) and not (keys[1] & keys[2])
        # the target's own classes are all seen in training
        values = [{next(o for o in table.objects[s] if o.category == category).attributes["colour"]
                   for s, p in per.items() if p == part} for part in range(3)]
        assert values[2] <= values[0]
    assert distractor_combination(table.objects[0], 1, "colour") == \
        ((table.objects[0][1].category, table.objects[0][1].attributes["colour"]),)


def test_bag_of_words_features_count_categories_and_values_without_pairing():
    table = SplitTable("madman", "test", ["colour"])
    table.captions.append("red 7 and 4")
    table.objects.append([obj(1, "7", colour="red"), obj(2, "4", colour="blue")])
    table.negatives.append([])
    table.described.append({1: {"colour"}, 2: set()})
    values = ["blue", "green", "red"]
    image = bag_of_words_features(table, [0], "image", "colour", values)
    text = bag_of_words_features(table, [0], "text", "colour", values)
    assert image.tolist() == [[1, 0, 1]]
    assert text.tolist() == [[0, 0, 1]]   # the caption gives no colour for the 4
    assert bag_of_words_bound(np.array([[1, 0, 1], [0, 0, 2], [1, 1, 1]])).tolist() == [0.5, 1.0, 1 / 3]


# ----------------------------------------------------------------------------------------- captions

def test_described_attributes_and_built_swaps():
    objects = [obj(1, "7", colour="yellow", size="small"), obj(2, "4", colour="blue", size="small")]
    described = described_attributes("small yellow 7 and blue 4", objects, ["colour", "size"])
    assert described == {1: {"colour", "size"}, 2: {"colour"}}
    swaps = build_binding_swaps("small yellow 7 and blue 4", objects, described, ["colour", "size"])
    assert [(n.caption, n.attribute, n.objects, n.original, n.replacement) for n in swaps] == \
        [("small blue 7 and yellow 4", "colour", (1, 2), "yellow|blue", "blue|yellow")]
    # equal values give no swap (it would equal the caption)
    same = [obj(1, "7", colour="red"), obj(2, "4", colour="red")]
    assert build_binding_swaps("red 7 and red 4", same, {1: {"colour"}, 2: {"colour"}}, ["colour"]) == []
    # nor does a swap that only reorders the caption's parts (two 7s: the same scene said the other way round)
    twins = [obj(1, "7", colour="blue"), obj(2, "7", colour="red")]
    assert build_binding_swaps("blue 7 and red 7", twins, {1: {"colour"}, 2: {"colour"}}, ["colour"]) == []


def test_composed_captions_for_attribute_free_captions():
    # ComCO-like: size_class is a per-category constant, size varies; the caption names objects only
    scene = [ObjectRecord(1, "pizza", 1, {"size_class": "medium", "size": "large"}, (0, 0, 1, 1), 9, 1, True, 2),
             ObjectRecord(2, "apple", 2, {"size_class": "small", "size": "small"}, (0, 0, 1, 1), 3, 2, False, 1)]
    other = [ObjectRecord(1, "pizza", 1, {"size_class": "medium", "size": "small"}, (0, 0, 1, 1), 3, 2, False, 1)]
    assert varying_attributes([scene, other], ["size_class", "size"]) == ["size"]
    caption = compose_caption(scene, ["size"])
    assert caption == "small apple and large pizza"
    swaps = build_binding_swaps(caption, scene, {1: {"size"}, 2: {"size"}}, ["size"])
    assert [n.caption for n in swaps] == ["large apple and small pizza"]
    # a value repeated in the caption ("small" twice) still swaps inside each object's own part
    three = scene + [ObjectRecord(3, "cube", 3, {"size_class": "shape", "size": "small"}, (0, 0, 1, 1), 2, 3,
                                  False, 3)]
    caption = compose_caption(three, ["size"])
    assert caption == "small apple and large pizza and small cube"
    swaps = build_binding_swaps(caption, three, {k: {"size"} for k in (1, 2, 3)}, ["size"])
    assert sorted((n.caption, n.objects) for n in swaps) == [
        ("large apple and small pizza and small cube", (2, 1)),
        ("small apple and small pizza and large cube", (1, 3))]


class _BareNameScenes:
    """ComCO-like scenes: captions are bare names joined with " and "; attributes size_class and size."""

    splits = {"scenes": 6}
    shard_size = 3
    seed = 0
    name = "comco"
    version = "test"
    attribute_names = ["size_class", "size"]
    extra_names: list = []
    config: dict = {}
    image_size = (8, 8)

    def make_samples(self, split, start, count):
        from bindscope.format.records import Sample

        names = [("pizza", "medium"), ("apple", "small"), ("bus", "large")]
        out = []
        for index in range(start, start + count):
            mask = np.zeros((8, 8), np.uint8)
            objects = []
            for k in range(3):
                mask[k * 2, :] = k + 1
                name, size_class = names[(index + k) % 3]
                objects.append(ObjectRecord(k + 1, name, k, {"size_class": size_class,
                                                            "size": "large" if k == index % 3 else "small"},
                                            (0, 2 * k, 8, 2 * k + 1), 8, k + 1, k == index % 3, 3 - k))
            caption = " and ".join(o.category for o in sorted(objects, key=lambda o: o.mention_position))
            out.append(Sample(index, np.zeros((8, 8, 3), np.uint8), mask, caption, objects))
        return out

    def shard_statistics(self, split, samples):
        return {"samples": len(samples)}

    def statistics(self, counts):
        return {}

    def card(self, manifest):
        return "# scenes\n"


def test_load_table_recomposes_attribute_free_captions(tmp_path):
    from bindscope.alignment.data import load_table
    from bindscope.alignment.data import default_split
    from bindscope.alignment.pairs import labclip_items
    from bindscope.alignment.probes import check_probe_table
    from bindscope.build.builder import build_dataset
    from bindscope.format.reader import Dataset

    build_dataset(_BareNameScenes(), tmp_path / "scenes", progress=False)
    ds = Dataset(tmp_path / "scenes")
    assert default_split(ds) == "scenes"
    table = load_table(ds, "scenes")
    assert table.composed == ["size"]
    # sample 0: objects 3 (bus), 2 (apple), 1 (pizza, large) in mention order
    assert table.captions[0] == "small bus and small apple and large pizza"
    assert sorted(n.caption for n in table.negatives[0]) == ["large bus and small apple and small pizza",
                                                             "small bus and large apple and small pizza"]
    assert all(n.kind == "binding" and n.attribute == "size" for negs in table.negatives for n in negs)
    assert len(labclip_items(table)) == 6
    counts = check_probe_table(table, ("image", "text"), ["size_class", "size"])
    assert counts["text"]["size_class"] == 0 and counts["text"]["size"] == 18 and counts["image"]["size"] == 18
    with pytest.raises(BadInput, match="no sample to probe"):
        check_probe_table(table, ("text",), ["size_class"])
    with pytest.raises(BadInput, match=r"nothing to probe: every attribute probed \(size_class\)"):
        check_probe_table(table, ("image",), ["size_class"])  # a per-category constant: one class per target
    assert load_table(ds, "scenes", compose=None).captions[0] == "bus and apple and pizza"


def test_probe_on_a_coco_import_is_refused_before_any_model_is_loaded(tmp_path):
    """A COCO import's one attribute (supercategory) is fixed by the category: every probe would have one
    class. bindscope probe says so (exit 2, nothing written) instead of failing after fitting."""
    from click.testing import CliRunner
    from coco_fixture import write_coco

    from bindscope.cli.main import bindscope
    from bindscope.importers.coco import import_coco

    import_coco(*write_coco(tmp_path / "src"), tmp_path / "coco", image_size=40, progress=False)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    args = ["probe", str(tmp_path / "coco"), "--model", "ViT-B-32", "--pretrained", "none", "--device", "cpu",
            "--quiet", "--no-cache"]
    for extra in ([], ["--min-objects", "1"], ["--modality", "image"]):
        result = CliRunner().invoke(bindscope, [*args, *extra])
        assert result.exit_code == 2, result.output
        assert result.output.startswith("Error: split 'val2017' has nothing to probe: every attribute probed "
                                        "(supercategory) takes one value"), result.output
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


# ----------------------------------------------------------------------------------------- LABCLIP

def _bow_world(n, seed=0, dim=32):
    """Images and captions that agree on the bag of words; the pair codes live in rotated subspaces."""
    rng = np.random.default_rng(seed)
    half = dim // 2
    objects, values = rng.normal(size=(4, half)), rng.normal(size=(4, half))
    codes = 0.7 * rng.normal(size=(4, 4, half))
    rotation, _ = np.linalg.qr(rng.normal(size=(half, half)))

    def embed(pairs, image):
        bag = sum(objects[o] + values[v] for o, v in pairs)
        bound = sum(codes[o, v] for o, v in pairs)
        return unit(np.concatenate([bag, bound @ rotation.T if image else bound]) + 0.05 * rng.normal(size=dim))

    images, texts, negatives = [], [], []
    for _ in range(n):
        o1, o2 = rng.choice(4, 2, replace=False)
        v1, v2 = rng.choice(4, 2, replace=False)
        images.append(embed([(o1, v1), (o2, v2)], True))
        texts.append(embed([(o1, v1), (o2, v2)], False))
        negatives.append(embed([(o1, v2), (o2, v1)], False))
    return [np.array(a, np.float32) for a in (images, texts, negatives)]


def test_labclip_starts_at_identity_and_its_loss_falls(tmp_path):
    import torch

    images, texts, negatives = _bow_world(800)
    owners = np.arange(800)
    fit, test = slice(0, 600), slice(600, 800)
    identity = LabclipMap.identity(32)
    assert np.allclose(identity(texts), texts, atol=1e-6)
    before = pair_scores(images[test], texts[test], negatives[test], owners[:200])
    assert np.array_equal(before, pair_scores(images[test], identity(texts[test]), identity(negatives[test]),
                                              owners[:200]))
    fitted, losses = fit_labclip(images[fit], texts[fit], negatives[fit], owners[:600], epochs=30,
                                 batch_size=64, lr=1e-2, seed=0)
    # losses[0] is the loss of the identity map at CLIP's initial temperature
    with torch.no_grad():
        step0 = labclip_loss(torch.eye(32), torch.tensor(np.log(1 / 0.07), dtype=torch.float32),
                             torch.from_numpy(images[:64]), torch.from_numpy(texts[:64]),
                             torch.from_numpy(negatives[:64])).item()
    assert 0.5 * step0 < losses[0] < 2 * step0
    assert losses[-1] < 0.5 * losses[0]
    after = pair_scores(images[test], fitted(texts[test]), fitted(negatives[test]), owners[:200])
    assert before.mean() < 0.65 and after.mean() > 0.9
    assert not np.allclose(fitted.weight, np.eye(32))
    # round trip through the file, applied to stored embeddings without re-encoding
    path = tmp_path / "labclip.pt"
    fitted.meta["model"] = "synthetic"
    fitted.save(path)
    loaded = load_labclip(path)
    assert np.array_equal(loaded.weight, fitted.weight) and loaded.meta["model"] == "synthetic"
    assert np.allclose(loaded(texts[test]), fitted(texts[test]))
    with pytest.raises(BadInput, match="32-dimensional"):
        loaded(np.ones((2, 16), np.float32))
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(BadInput, match="not readable"):
        load_labclip(tmp_path / "junk.pt")


def test_binding_report_counts_binding_given_recognition_by_hand():
    e = np.eye(3, dtype=np.float32)
    images = np.array([e[0], e[1]])
    texts = np.array([e[0], e[1]])
    # sample 0: binding passed, recognition passed for both digits -> counted given recognition
    # sample 1: binding passed, recognition of digit 2 fails (a tie: cos 1 = cos 1) -> excluded
    negatives = np.array([unit(e[0] + e[2]), unit(e[0] + e[1]), e[2],
                          unit(e[1] + e[2]), e[0], e[1]], np.float32)
    pairs = Pairs(np.array([0, 1]), images, texts, negatives, np.array([0, 0, 0, 1, 1, 1]),
                  ["binding", "recognition", "recognition"] * 2, ["colour"] * 6,
                  [(1, 2), (1,), (2,)] * 2, [set()] * 6)
    report = binding_report(pairs)
    assert report["binding"]["accuracy"] == 1.0 and report["binding"]["n"] == 2
    assert report["recognition"]["accuracy"] == 0.75 and report["recognition"]["n"] == 4
    assert report["binding_given_recognition"]["n"] == 1
    assert report["binding_given_recognition"]["accuracy"] == 1.0
    assert report["modality_gap"] == pytest.approx(0.0)
    # selecting binding negatives: only sample 1's
    selected = binding_report(pairs, select_binding=np.array([False, True, True, True, True, True]))
    assert selected["binding"]["n"] == 1 and selected["binding_given_recognition"]["n"] == 0
    # a map (here: swapping axes 0 and 1 of the text side) changes every comparison
    swap = LabclipMap(np.array([[0, 1, 0], [1, 0, 0], [0, 0, 1]], np.float32))
    mapped = binding_report(pairs, swap)
    assert mapped["modality_gap"] == pytest.approx(0.0)  # the two captions trade places: same centroid
    assert mapped["binding"]["accuracy"] == 0.0


def test_probe_accuracy_by_object_count_adds_up():
    table, emb = _binding_table()
    table.objects[0].append(obj(3, "9", colour="red"))  # one sample with a third object
    result = run_probes(table, {"image": emb}, ["colour"], ProbeSettings(seed=0))
    summary = result["modalities"]["image"]["colour"]
    by = summary["by_object_count"]
    assert set(by) <= {"2", "3"} and sum(c["total"] for c in by.values()) == summary["n_test"]
    assert sum(c["correct"] for c in by.values()) == round(summary["accuracy_micro"] * summary["n_test"])
    for c in by.values():
        assert c["accuracy"] == pytest.approx(c["correct"] / c["total"])
        assert c["ci95"][0] <= c["accuracy"] <= c["ci95"][1]


def test_conjunctive_search_probe_reads_binding_and_bag_of_words_cannot():
    from bindscope.alignment.conjunctive import bag_features, presence_labels, run_conjunctive_search, stratified_split
    from bindscope.generators.comco.attributes import DEFAULT_COLOURS, plan_conjunctive

    rng = np.random.default_rng(0)
    shapes = ["cube", "sphere", "cylinder", "cone", "torus"]
    colours = list(DEFAULT_COLOURS)
    config = {"conjunctive_search": {"target": {"category": "sphere", "colour": "red"}}, "colours": DEFAULT_COLOURS}
    dim = 48
    codes = {(s, c): rng.normal(size=dim) for s in shapes for c in colours}
    table = SplitTable("comco", "scenes", ["colour"])
    emb = np.zeros((600, dim), np.float32)
    for i in range(600):
        planned = plan_conjunctive(config, shapes, 2 + i % 3, (i // 3) % 2 == 0, rng)
        table.objects.append([obj(k + 1, s, colour=c) for k, (s, c) in enumerate(planned)])
        table.captions.append("")
        emb[i] = unit(sum(codes[p] for p in planned) + 0.05 * rng.normal(size=dim))
    y = presence_labels(table, {"category": "sphere", "colour": "red"})
    assert y.sum() == 300
    bags = bag_features(table)
    assert bags.shape == (600, 5 + 8) and np.array_equal(bags.sum(axis=1),
                                                         2 * np.array([2 + i % 3 for i in range(600)]))
    parts = stratified_split([(i % 3, int(y[i])) for i in range(600)], (0.6, 0.2, 0.2), seed=1)
    assert np.bincount(parts).tolist() == [360, 120, 120]
    result = run_conjunctive_search(table, emb, {"category": "sphere", "colour": "red"},
                                    ProbeSettings(seed=1, steps=300))
    assert result["n_test"] == 120 and set(result["by_distractors"]) == {"1", "2", "3"}
    assert all(c["n_present"] == c["n_absent"] == 20 for c in result["by_distractors"].values())
    assert result["accuracy"]["accuracy"] > 0.85
    assert 0.3 < result["bag_of_words"]["accuracy"] < 0.7  # same bag for present and absent: chance
