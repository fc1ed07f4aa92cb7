"""TOC / IOC position heads (bindscope.evaluation.position_heads) on embeddings built by hand: when the class at
each position is linearly readable by construction the heads reach accuracy 1.0; on shuffled labels they stay
near chance."""

from __future__ import annotations

from itertools import permutations

import numpy as np
import pytest
from eval_fakes import FakeEncoder, SpecGenerator, build, image, obj

from bindscope.errors import BadInput
from bindscope.evaluation.comco import VocabEntry, evaluate_comco, evaluate_tor_sampled
from bindscope.evaluation.position_heads import HeadSettings, position_classification, split_units
from bindscope.evaluation.sampled import SampledCaptions
from bindscope.format.records import Sample
from bindscope.schemas import validate

CLASSES = ["cube", "sphere", "cone", "star", "moon", "leaf"]
FAST = HeadSettings(epochs=120, lr=0.1, batch_size=64, test_fraction=0.2, seed=3)
FAST_OPTIONS = {"head_epochs": 120, "head_lr": 0.1, "head_batch_size": 64, "head_test_fraction": 0.2, "head_seed": 3}


def block_embedding(names: list[str], noise: np.ndarray | None = None) -> np.ndarray:
    """One one-hot block per position: block k holds the class of the k-th object, so the class at position k is
    a linear function of the embedding (separable by construction)."""
    v = np.zeros(len(CLASSES) * 2, np.float32)
    for k, name in enumerate(names):
        v[k * len(CLASSES) + CLASSES.index(name)] = 1.0
    if noise is not None:
        v = v + noise
    return (v / np.linalg.norm(v)).astype(np.float32)


PAIRS = [list(p) for p in permutations(CLASSES, 2)]  # 30 ordered pairs


def test_split_units_keeps_units_together_and_is_seeded():
    units = ["a", "b", "a", "c", "d", "b", "e"]
    train, test = split_units(units, 0.4, seed=1)
    assert sorted(train.tolist() + test.tolist()) == list(range(7))
    assert not {units[i] for i in train} & {units[i] for i in test}
    assert len({units[i] for i in test}) == 2  # round(0.4 * 5 units)
    again = split_units(units, 0.4, seed=1)
    assert again[0].tolist() == train.tolist() and again[1].tolist() == test.tolist()
    assert split_units(["x", "x"], 0.5, 0)[1].size == 0  # one unit: nothing held out


def test_separable_positions_are_read_perfectly():
    emb = np.stack([block_embedding(p) for p in PAIRS])
    out = position_classification(emb, PAIRS, CLASSES, [" and ".join(p) for p in PAIRS], FAST, "src", "mention")
    g = out["by_num_objects"]["2"]
    assert (g["queries"], g["train"], g["test"], g["test_units"]) == (30, 24, 6, 6)
    for p in g["positions"]:
        assert p["test"]["accuracy"] == 1.0 and p["test"]["total"] == 6
        assert p["train"]["accuracy"] == 1.0
        assert p["test"]["ci95"][1] == 1.0 and p["test"]["ci95"][0] == pytest.approx(0.6097, abs=1e-3)
    assert out["classes"] == 6 and out["settings"]["epochs"] == 120
    again = position_classification(emb, PAIRS, CLASSES, [" and ".join(p) for p in PAIRS], FAST, "src", "mention")
    assert again == out  # seeded


def test_shuffled_labels_stay_near_chance():
    rng = np.random.default_rng(0)
    objects = [PAIRS[i % len(PAIRS)] for i in range(360)]
    emb = np.stack([block_embedding(p, 0.05 * rng.standard_normal(12)) for p in objects])
    shuffled = [objects[i] for i in rng.permutation(len(objects))]
    out = position_classification(emb, shuffled, CLASSES, list(range(360)), FAST)
    g = out["by_num_objects"]["2"]
    assert g["test"] == 72
    for p in g["positions"]:
        assert p["test"]["accuracy"] < 0.4, p  # chance is 1/6; separable labels would give 1.0
    truthful = position_classification(emb, objects, CLASSES, list(range(360)), FAST)
    assert all(p["test"]["accuracy"] == 1.0 for p in truthful["by_num_objects"]["2"]["positions"])


def test_toc_through_given_captions():
    texts = {name: np.eye(12, dtype=np.float32)[j] for j, name in enumerate(CLASSES)}
    texts.update({" and ".join(p): block_embedding(p) for p in PAIRS})
    source = SampledCaptions(names=[VocabEntry(n) for n in CLASSES], captions=PAIRS)
    result = evaluate_tor_sampled(FakeEncoder(12, texts, {}), source, tasks="toc", options={"toc": FAST_OPTIONS},
                                  progress=False)
    validate(result, "eval_result", "result")
    assert set(result["metrics"]) == {"toc"}
    g = result["metrics"]["toc"]["by_num_objects"]["2"]
    assert [p["test"]["accuracy"] for p in g["positions"]] == [1.0, 1.0]


def test_ioc_on_a_dataset_split_by_scene(tmp_path):
    texts = {name: np.eye(12, dtype=np.float32)[j] for j, name in enumerate(CLASSES)}
    images, scenes, refs = {}, [], []
    for index, pair in enumerate(PAIRS):
        images[10 + index] = block_embedding(pair)
        # mention order = the pair; size ranks reversed (the IOC object order is the mention order)
        records = [obj(1, pair[0], {}, size_rank=2, mention=1), obj(2, pair[1], {}, size_rank=1, mention=2)]
        scenes.append(Sample(index, image(10 + index), np.zeros((8, 8), np.uint8), " and ".join(pair), records,
                             [], {}))
    for j, name in enumerate(CLASSES):
        images[200 + j] = np.eye(12, dtype=np.float32)[j]
        refs.append(Sample(j, image(200 + j), np.zeros((8, 8), np.uint8), name, [obj(1, name, {}, 1, 1)], [], {}))
    path = build(tmp_path, "ioc", SpecGenerator({"scenes": scenes, "references": refs}, name="comco",
                                                attribute_names=[]))
    result = evaluate_comco(path, FakeEncoder(12, texts, images), ["ioc"], options={"ioc": FAST_OPTIONS},
                            progress=False)
    validate(result, "eval_result", "result")
    g = result["metrics"]["ioc"]["by_num_objects"]["2"]
    assert (g["train_units"], g["test_units"]) == (24, 6)
    assert [p["test"]["accuracy"] for p in g["positions"]] == [1.0, 1.0]
    # read by size rank the positions swap: the heads still read them perfectly (both blocks are in the image)
    by_size = evaluate_comco(path, FakeEncoder(12, texts, images), ["ioc"],
                             options={"ioc": {**FAST_OPTIONS, "object_order": "size"}}, progress=False)
    assert [p["test"]["accuracy"] for p in by_size["metrics"]["ioc"]["by_num_objects"]["2"]["positions"]] == [1, 1]
    assert result["settings"]["heads"]["epochs"] == 120


def test_bad_head_settings_name_the_value():
    with pytest.raises(BadInput, match="head_test_fraction 1.5"):
        HeadSettings(test_fraction=1.5).check()
    with pytest.raises(BadInput, match="head_epochs 0"):
        HeadSettings(epochs=0).check()
    with pytest.raises(BadInput, match="'dog' is not one of the 6 classes"):
        position_classification(np.eye(2, 12, dtype=np.float32), [["dog", "cube"], ["cube", "cone"]], CLASSES,
                                [0, 1])
