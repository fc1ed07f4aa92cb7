"""Linear probes, LABCLIP and the modality gap on synthetic embeddings (no model, no dataset)."""

from __future__ import annotations

import numpy as np
import pytest

from bindscope.alignment.data import (SplitTable, build_binding_swaps, compose_caption, described_attributes,
                                      varying_attributes)
from bindscope.alignment.gap import modality_gap
from bindscope.alignment.labclip import LabclipMap, fit_labclip, labclip_loss, load_labclip, pair_scores
from bindscope.alignment.probes import bag_of_words_bound, bag_of_words_features, fit_linear_probe, run_probes
from bindscope.alignment.splits import hold_out_triples, scene_combination, split_by_combination
from bindscope.alignment.workflow import Pairs, binding_report
from bindscope.dataset.records import ObjectRecord
from bindscope.errors import BadInput


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
    result = run_probes(table, {"image": emb, "text": emb}, ["colour"], seed=0)
    for modality in ("image", "text"):
        summary = result["modalities"][modality]["colour"]
        assert summary["n_targets"] == 5
        assert summary["chance"] == pytest.approx(0.25)
        # the bag of words knows the two colours but not which digit has which: at most 0.5
        assert summary["bag_of_words_bound"] == pytest.approx(0.5)
        assert 0.3 < summary["bag_of_words"] < 0.6
        assert summary["accuracy"] > 0.85
    assert sum(result["splits"]["colour"].values()) == len(table)


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
    # sample 0: binding passed, its recognition passed; sample 1: binding passed, recognition failed
    negatives = np.array([unit(e[0] + e[2]), unit(e[0] + e[1]), unit(e[1] + e[2]), e[1]], np.float32)
    pairs = Pairs(np.array([0, 1]), images, texts, negatives, np.array([0, 0, 1, 1]),
                  ["binding", "recognition", "binding", "recognition"], ["colour"] * 4,
                  [(1, 2), (1,), (1, 2), (2,)], [set()] * 4)
    report = binding_report(pairs)
    assert report["binding"]["accuracy"] == 1.0 and report["binding"]["n"] == 2
    assert report["recognition"]["accuracy"] == 0.5  # the fourth negative ties its caption: a tie is wrong
    assert report["binding_given_recognition"]["n"] == 1
    assert report["modality_gap"] == pytest.approx(0.0)
