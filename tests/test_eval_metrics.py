"""Evaluation metrics on hand-chosen embeddings: every expected value below is computed by hand."""

import math

import numpy as np
import pytest
from eval_fakes import (
    VOCAB,
    FakeEncoder,
    SpecGenerator,
    build,
    comco_fixture,
    image,
    madman_fixture,
    obj,
    position_weighted_rule,
    unit,
)

from bindscope.encoders.embedding_cache import EmbeddingCache
from bindscope.errors import BadInput, DatasetError
from bindscope.evaluation.comco import (
    VocabEntry,
    claim1_captions,
    evaluate_comco,
    evaluate_tor_sampled,
    matching_captions,
    sample_captions,
)
from bindscope.evaluation.madman import digit_negative, digit_recognition, evaluate_madman
from bindscope.evaluation.sampled import SampledCaptions
from bindscope.evaluation.stats import strict_top1, wilson_interval
from bindscope.format.records import Sample
from bindscope.schemas import validate

Z = 1.959963984540054  # two-sided 95% normal quantile


def wilson_by_hand(k, n):
    p = k / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return centre - half, centre + half


@pytest.mark.parametrize("k,n", [(2, 3), (0, 4), (5, 5), (37, 100)])
def test_wilson_interval_matches_the_formula(k, n):
    assert wilson_interval(k, n) == pytest.approx(wilson_by_hand(k, n), abs=1e-9)
    assert wilson_interval(0, 0) is None


def test_strict_top1_gives_no_winner_on_ties():
    scores = np.array([[0.1, 0.5, 0.2], [0.3, 0.3, 0.1], [0.0, 0.0, 0.0]])
    assert strict_top1(scores).tolist() == [1, -1, -1]


# ------------------------------------------------------------------------------------------------ MADMAN
def test_madman_recognition_and_binding_by_hand(tmp_path):
    path, enc = madman_fixture(tmp_path)
    result = evaluate_madman(path, enc, progress=False)
    validate(result, "eval_result", "result")
    test = result["metrics"]["splits"]["test"]
    assert (test["num_samples"], test["num_scored"]) == (4, 3)
    rec = test["recognition"]["per_attribute"]
    # colour: 6 recognition negatives, all below the caption score; size: 4, of which 0.6 (above) and 0.5 (tie) fail
    assert (rec["colour"]["correct"], rec["colour"]["total"], rec["colour"]["accuracy"]) == (6, 6, 1.0)
    assert (rec["size"]["correct"], rec["size"]["total"], rec["size"]["accuracy"]) == (2, 4, 0.5)
    assert rec["size"]["ci95"] == pytest.approx(wilson_by_hand(2, 4))
    assert test["recognition"]["average"]["macro"] == pytest.approx(0.75)
    assert test["recognition"]["average"]["micro"]["accuracy"] == pytest.approx(8 / 10)
    # binding counted only where both digits' recognition of that attribute passed:
    # colour: samples 1, 2, 3 all recognised; swaps 0.45 < 0.5 pass, 0.7 fail, 0.3 pass -> 2/3
    # size: sample 1 (0.6 fails) and sample 2 (tie fails) are both excluded -> 0/0
    bind = test["binding"]
    assert (bind["per_attribute"]["colour"]["correct"], bind["per_attribute"]["colour"]["total"]) == (2, 3)
    assert bind["per_attribute"]["colour"]["ci95"] == pytest.approx(wilson_by_hand(2, 3))
    assert bind["per_attribute"]["size"] == {"correct": 0, "total": 0, "accuracy": None, "ci95": None,
                                             "ci95_cluster": None, "clusters": 0}
    assert bind["excluded"] == {"colour": 0, "size": 2}
    assert bind["average"]["macro"] == pytest.approx(2 / 3)
    assert bind["average"]["macro_over"] == ["colour"]
    # unconditional binding: colour 2/3, size: 0.1 pass, 0.6 fail -> 1/2; macro 7/12, micro 3/5
    allb = test["binding_unconditional"]
    assert allb["per_attribute"]["size"]["accuracy"] == 0.5
    assert allb["average"]["macro"] == pytest.approx(7 / 12)
    assert allb["average"]["micro"]["accuracy"] == pytest.approx(3 / 5)
    ood = result["metrics"]["splits"]["ood"]
    assert ood["role"].startswith("out-of-distribution")
    assert ood["binding"]["per_attribute"]["colour"]["accuracy"] == 1.0
    assert ood["recognition"]["per_attribute"]["colour"]["correct"] == 2
    # every unique text and image encoded exactly once
    assert sorted(enc.image_calls) == [1, 2, 3, 5]
    assert len(enc.text_calls) == len(set(enc.text_calls)) == 4 + 6 + 6 + 3 + 3  # 4 scored captions, 18 negatives


def test_madman_text_transform_is_applied_and_renormalised(tmp_path):
    path, enc = madman_fixture(tmp_path)
    scaled = evaluate_madman(path, enc, text_transform=lambda e: 3.0 * e, progress=False)
    plain = evaluate_madman(path, enc, progress=False)
    assert scaled["metrics"] == plain["metrics"]  # a scale is undone by the re-normalisation
    flipped = evaluate_madman(path, enc, text_transform=lambda e: -e, progress=False)
    # negating every text embedding negates every score: colour negatives (all below 0.5) now all fail
    assert flipped["metrics"]["splits"]["test"]["recognition"]["per_attribute"]["colour"]["correct"] == 0
    assert flipped["settings"]["text_transform"] == "test_madman_text_transform_is_applied_and_renormalised.<locals>.<lambda>"


def test_embedding_cache_makes_a_rerun_skip_the_encoders(tmp_path):
    path, enc = madman_fixture(tmp_path)
    first = evaluate_madman(path, enc, cache=EmbeddingCache(tmp_path / "cache", enc.cache_key), progress=False)
    assert first["counts"]["images_encoded"] == 4 and first["counts"]["image_cache_hits"] == 0
    enc.text_calls.clear(), enc.image_calls.clear()
    second = evaluate_madman(path, enc, cache=EmbeddingCache(tmp_path / "cache", enc.cache_key), progress=False)
    assert enc.text_calls == [] and enc.image_calls == []
    assert second["counts"]["images_encoded"] == 0 and second["counts"]["image_cache_hits"] == 4
    assert second["counts"]["texts_encoded"] == 0
    assert second["counts"]["text_cache_hits"] == first["counts"]["texts_encoded"] == 22
    assert second["metrics"] == first["metrics"]
    # another model (cache key) shares nothing
    other = EmbeddingCache(tmp_path / "cache", "another-model")
    assert other.get(next(iter(EmbeddingCache(tmp_path / "cache", enc.cache_key)._load()))) is None


def test_madman_refuses_datasets_without_evaluation_splits_and_corrupt_shards(tmp_path):
    comco_path, enc = comco_fixture(tmp_path)
    with pytest.raises(DatasetError, match="has no evaluation split \\(test or ood\\); it has: references, scenes"):
        evaluate_madman(comco_path, enc, progress=False)
    with pytest.raises(DatasetError, match="task binding needs negatives .*split 'scenes' .* holds: "
                                           "captions, masks, mentions, objects, references"):
        evaluate_madman(comco_path, enc, splits=["scenes"], progress=False)
    path, enc = madman_fixture(tmp_path)
    shard = tmp_path / "madman" / "shards" / "test-00000.h5"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match="test-00000.h5: sha256 differs from the manifest"):
        evaluate_madman(path, enc, progress=False)
    with pytest.raises(DatasetError, match="splits 'val': .* has no such split"):
        evaluate_madman(path, enc, splits=["val"], progress=False)


# ------------------------------------------------------------------------------------------------ ComCO
def test_tor_ior_i2tor_shares_by_hand(tmp_path):
    path, enc = comco_fixture(tmp_path)
    result = evaluate_comco(path, enc, "tor,ior,i2tor", progress=False)
    validate(result, "eval_result", "result")
    tor = result["metrics"]["tor"]
    assert tor["candidates"] == 4
    three = tor["by_num_objects"]["3"]  # scenes A, C, D, E: pos 2, pos 1, not in caption, tie
    assert (three["num_queries"], three["top1_in_query"], three["top1_not_in_query"], three["ties"]) == (4, 2, 1, 1)
    assert [p["unconditional"]["share"] for p in three["positions"]] == [0.25, 0.25, 0.0]
    assert [p["conditional"]["share"] for p in three["positions"]] == [0.5, 0.5, 0.0]
    assert three["positions"][0]["unconditional"]["ci95"] == pytest.approx(wilson_by_hand(1, 4))
    two = tor["by_num_objects"]["2"]  # scene B: apple first
    assert [p["unconditional"]["count"] for p in two["positions"]] == [1, 0]
    for task in ("ior", "i2tor"):  # reference images and name texts share the directions e_0..e_3
        three = result["metrics"][task]["by_num_objects"]["3"]  # A rank 1, C rank 3, D not in scene, E rank 1
        assert (three["top1_in_query"], three["top1_not_in_query"], three["ties"]) == (3, 1, 0)
        assert [p["unconditional"]["share"] for p in three["positions"]] == [0.5, 0.0, 0.25]
        assert [p["conditional"]["share"] for p in three["positions"]] == pytest.approx([2 / 3, 0.0, 1 / 3])
        assert [p["unconditional"]["count"] for p in result["metrics"][task]["by_num_objects"]["2"]["positions"]] \
            == [0, 1]
    assert result["settings"]["vocabulary"] == {"source": "references split", "size": 4}


def test_matching_captions_follow_the_two_scenarios():
    objects = [obj(1, "desk", size_rank=1, mention=1), obj(2, "car", size_rank=2, mention=2),
               obj(3, "apple", size_rank=3, mention=3)]
    plan = matching_captions(objects, ["pizza"])
    assert plan["scenario_1"] == ("desk and car and apple", ["pizza and car and apple"])
    assert plan["scenario_2"] == ("car and apple and desk", ["desk and car and pizza"])


def test_matching_accuracy_by_hand(tmp_path):
    # rule encoder: "a and b and c" -> (3 e_a + 2 e_b + 1 e_c) / norm (first-mention bias)
    dim = 4
    e = {n: unit(dim, i) for i, n in enumerate(VOCAB)}
    scenes = [Sample(0, image(1), np.zeros((8, 8), np.uint8), "apple and pizza",
                     [obj(1, "pizza", size_rank=1, mention=2), obj(2, "apple", size_rank=2, mention=1)]),
              Sample(1, image(2), np.zeros((8, 8), np.uint8), "desk and car and apple",
                     [obj(1, "desk", size_rank=1, mention=1), obj(2, "car", size_rank=2, mention=2),
                      obj(3, "apple", size_rank=3, mention=3)])]
    refs = [Sample(i, image(100 + i), np.zeros((8, 8), np.uint8), n, [obj(1, n)]) for i, n in enumerate(VOCAB)]
    path = build(tmp_path, "match", SpecGenerator({"scenes": scenes, "references": refs}, name="comco",
                                                  attribute_names=[]))
    enc = FakeEncoder(dim, image_vectors={1: e["pizza"], 2: e["car"]}, text_rule=position_weighted_rule(VOCAB, dim))
    m = evaluate_comco(path, enc, ["matching"], progress=False)["metrics"]["matching"]
    # scene 0 (image = pizza, L = pizza, other = apple, absent desk, car):
    #   s1: correct "pizza and apple" 3/sqrt13 vs "desk and apple", "car and apple" 0 -> 2 of 2
    #   s2: correct "apple and pizza" 2/sqrt13 vs "pizza and desk", "pizza and car" 3/sqrt13 -> 0 of 2
    # scene 1 (image = car, L = desk, others car, apple, absent pizza):
    #   s1: "desk and car and apple" 2/sqrt14 vs "pizza and car and apple" 2/sqrt14: a tie -> 0 of 1
    #   s2: "car and apple and desk" 3/sqrt14 vs "desk and car and pizza" 2/sqrt14 -> 1 of 1
    assert (m["scenario_1"]["all"]["correct"], m["scenario_1"]["all"]["total"]) == (2, 3)
    assert (m["scenario_2"]["all"]["correct"], m["scenario_2"]["all"]["total"]) == (1, 3)
    assert m["scenario_1"]["by_num_objects"]["2"]["accuracy"] == 1.0
    assert m["scenario_1"]["by_num_objects"]["3"]["accuracy"] == 0.0
    assert m["scenario_2"]["by_num_objects"]["2"]["accuracy"] == 0.0
    assert m["scenario_2"]["by_num_objects"]["3"]["accuracy"] == 1.0
    assert m["scenario_1"]["all"]["ci95"] == pytest.approx(wilson_by_hand(2, 3))
    # a seeded sample of one absent category per scene and scenario
    capped = evaluate_comco(path, enc, ["matching"], options={"matching": {"matching_negatives": 1}},
                            progress=False)["metrics"]["matching"]
    assert capped["scenario_1"]["all"]["total"] == 2


def test_comco_errors(tmp_path):
    path, enc = comco_fixture(tmp_path)
    with pytest.raises(BadInput, match="unknown task 'tors'; allowed here: tor, ior, i2tor, matching"):
        evaluate_comco(path, enc, "tor,tors", progress=False)
    madman_path, _ = madman_fixture(tmp_path)
    with pytest.raises(BadInput, match="has several splits \\(ood, test\\); choose one"):
        evaluate_comco(madman_path, enc, "tor", progress=False)
    with pytest.raises(BadInput, match="task ior needs references .*or give references=DIR.*split 'test'"):
        evaluate_comco(madman_path, enc, "tor,ior", split="test", progress=False)
    enc.supports_images = False
    with pytest.raises(BadInput, match="need an image encoder"):
        evaluate_comco(path, enc, "tor,ior", progress=False)


# ------------------------------------------------------------------------------------- sampled captions
VOCAB8 = [VocabEntry(n, c) for n, c in [("bus", "large"), ("train", "large"), ("chair", "medium"),
                                        ("bench", "medium"), ("bicycle", "medium"), ("dog", "medium"),
                                        ("cup", "small"), ("apple", "small")]]


def test_sampled_captions_are_seeded_distinct_and_uniformly_ordered():
    a = sample_captions(VOCAB8, 4, 4000, seed=3)
    assert a == sample_captions(VOCAB8, 4, 4000, seed=3) and a != sample_captions(VOCAB8, 4, 4000, seed=4)
    assert all(len(set(c)) == 4 for c in a)
    first = np.array([sum(c[0] == v.name for c in a) for v in VOCAB8])  # expected 500 each
    assert np.all(np.abs(first - 500) < 100)
    large = claim1_captions(VOCAB8, 4, 50, 0, "large")
    assert all(c[0] in ("bus", "train") and {"chair", "bench", "bicycle", "dog"} >= set(c[1:]) for c in large)
    with pytest.raises(BadInput, match="claim1 needs categories of size class 'large'"):
        claim1_captions([VocabEntry("cube", "shape")] * 5, 4, 5, 0, "large")


def test_sampled_tor_with_a_first_biased_and_a_last_biased_encoder():
    names = [v.name for v in VOCAB8]
    first = FakeEncoder(8, text_rule=position_weighted_rule(names, 8))
    result = evaluate_tor_sampled(first, SampledCaptions(objects=4, n=60, vocab=VOCAB8), tasks="tor,claim1",
                                  progress=False)
    validate(result, "eval_result", "result")
    four = result["metrics"]["tor"]["by_num_objects"]["4"]
    assert [p["unconditional"]["count"] for p in four["positions"]] == [60, 0, 0, 0]
    for group in ("large_first", "small_first"):
        assert result["metrics"]["claim1"][group]["by_num_objects"]["4"]["positions"][0]["conditional"]["share"] == 1
    last = FakeEncoder(8, text_rule=position_weighted_rule(names, 8, weights=(1.0, 2.0, 3.0, 4.0)))
    four = evaluate_tor_sampled(last, SampledCaptions(objects=4, n=60, vocab=VOCAB8))["metrics"]["tor"][
        "by_num_objects"]["4"]
    assert [p["conditional"]["share"] for p in four["positions"]] == [0.0, 0.0, 0.0, 1.0]
    with pytest.raises(BadInput, match="unknown task 'ior'; allowed here: tor, claim1"):
        evaluate_tor_sampled(first, SampledCaptions(vocab=VOCAB8), tasks="ior")


def test_cache_round_trip_keeps_digests_ending_in_nul_and_skips_broken_chunks(tmp_path):
    keys = [bytes([1] * 31 + [0]), bytes([0] * 32), bytes(range(32))]
    cache = EmbeddingCache(tmp_path, "k")
    for i, key in enumerate(keys):
        cache.put(key, np.full(3, i, np.float32))
    cache.flush()
    (cache.folder / "broken.npz").write_bytes(b"not a zip file")
    again = EmbeddingCache(tmp_path, "k")
    assert [again.get(k).tolist() for k in keys] == [[0, 0, 0], [1, 1, 1], [2, 2, 2]]
    assert (cache.folder / "key.txt").read_text() == "k\n"


# ------------------------------------------------------------------------------------------------ digit recognition
def test_digit_negative_replaces_one_described_digit_by_an_absent_one():
    caption = "small red 7 and large blue 4"
    seen_parts, seen_digits = set(), set()
    for seed in range(200):
        negative = digit_negative(caption, {7, 4}, np.random.default_rng(seed))
        changed = [(i, a, b) for i, (a, b) in enumerate(zip(caption.split(), negative.split())) if a != b]
        assert len(negative.split()) == 7 and len(changed) == 1
        position, old, new = changed[0]
        assert position in (2, 6) and new in "01235689" and len(new) == 1
        seen_parts.add(position)
        seen_digits.add(new)
    assert seen_parts == {2, 6} and seen_digits == set("01235689")  # every description, every absent digit
    # the same rng state gives the same negative
    assert digit_negative(caption, {7, 4}, np.random.default_rng(3)) == \
        digit_negative(caption, {7, 4}, np.random.default_rng(3))
    with pytest.raises(BadInput, match="'red seven' does not end with a digit 0-9"):
        digit_negative("red seven", {7}, np.random.default_rng(0))


def test_digit_recognition_counts_strict_wins_by_hand(tmp_path):
    from tiny_madman import tiny_madman

    from bindscope.build.builder import build_dataset
    from bindscope.format.reader import Dataset

    build_dataset(tiny_madman(splits={"train": 2, "test": 5, "ood": 1}), tmp_path / "d", progress=False)
    with Dataset(tmp_path / "d") as ds:
        captioned = [s.caption for s in ds.split("test") if s.caption]
    assert len(captioned) == 5
    captions = set(captioned)
    # every image is e0 (black corner); a true caption is e0, any other text e1: all 5 negatives lose
    aligned = FakeEncoder(4, image_vectors={0: unit(4, 0)},
                          text_rule=lambda t: unit(4, 0) if t in captions else unit(4, 1))
    result = digit_recognition(tmp_path / "d", aligned)
    assert (result["correct"], result["total"], result["accuracy"]) == (5, 5, 1.0)
    assert result["ci95"] == pytest.approx(wilson_by_hand(5, 5))
    # every text the same vector: each comparison is a tie, and a tie is a failure
    tied = FakeEncoder(4, image_vectors={0: unit(4, 0)}, text_rule=lambda t: unit(4, 0))
    result = digit_recognition(tmp_path / "d", tied, limit=3)
    assert (result["correct"], result["total"], result["accuracy"]) == (0, 3, 0.0)


def test_binding_by_size_relation_groups_counted_binding_rows_by_hand():
    from bindscope.evaluation.madman import binding_by_size_relation

    sizes = {0: ("small", "small"), 1: ("small", "large"), 2: ("medium", "medium"), 3: ("large", "medium")}

    def row(sample, attribute, passed, counted=True, task="binding", split="test"):
        return {"split": split, "sample": sample, "task": task, "attribute": attribute, "passed": passed,
                "counted_in_binding": counted if task == "binding" else None}

    rows = [row(0, "colour", True), row(2, "colour", True), row(2, "thickness", False),  # same size
            row(1, "colour", False), row(3, "colour", True), row(1, "size", True), row(3, "size", True),
            row(0, "thickness", False, counted=False),        # excluded: recognition failed
            row(1, "colour", False, task="recognition"),      # not a binding row
            row(9, "colour", False, split="ood")]             # another split (sample 9 unknown there)
    result = binding_by_size_relation(rows, sizes)
    same, different = result["same_size"], result["different_size"]
    assert list(same) == ["colour", "thickness"] and list(different) == ["colour", "size"]
    assert (same["colour"]["correct"], same["colour"]["total"], same["colour"]["clusters"]) == (2, 2, 2)
    assert (same["thickness"]["correct"], same["thickness"]["total"]) == (0, 1)
    assert (different["colour"]["correct"], different["colour"]["total"]) == (1, 2)
    assert different["colour"]["ci95"] == pytest.approx(wilson_by_hand(1, 2))
    assert (different["size"]["correct"], different["size"]["total"]) == (2, 2)
    with pytest.raises(BadInput, match="sample 7 of split 'test': not a two-digit image"):
        binding_by_size_relation([row(7, "colour", True)], sizes)


def test_size_pairs_lists_the_two_digit_images_of_a_split(tmp_path):
    from tiny_madman import tiny_madman

    from bindscope.build.builder import build_dataset
    from bindscope.evaluation.madman import size_pairs
    from bindscope.format.reader import Dataset

    build_dataset(tiny_madman(splits={"train": 6, "test": 2}, multi_object_images=0.5), tmp_path / "d",
                  progress=False)
    with Dataset(tmp_path / "d") as ds:
        expected = {s.index: tuple(o.attributes["size"] for o in s.objects) for s in ds.split("train")
                    if len(s.objects) == 2}
        singles = [s.index for s in ds.split("train") if len(s.objects) == 1]
    assert expected and singles  # both kinds of image occur
    assert size_pairs(tmp_path / "d", "train") == expected
    with pytest.raises(DatasetError, match="valid"):
        size_pairs(tmp_path / "d", "valid")


def test_binding_additivity_correlates_binding_with_summed_recognition_margins_by_hand():
    from bindscope.evaluation.madman import binding_additivity

    def rows(sample, attribute, rec1, rec2, bind, split="test"):
        made = [{"split": split, "sample": sample, "task": "recognition", "attribute": attribute, "objects": [k],
                 "caption_similarity": 0.5, "negative_similarity": 0.5 + m} for k, m in ((1, rec1), (2, rec2))]
        if bind is not None:
            made.append({"split": split, "sample": sample, "task": "binding", "attribute": attribute,
                         "objects": [1, 2], "caption_similarity": 0.5, "negative_similarity": 0.5 + bind})
        return made

    data = (rows(0, "swelling", -0.1, -0.2, -0.3) + rows(1, "swelling", 0.05, -0.1, -0.05)  # y = x: r = 1
            + rows(2, "swelling", 0.2, 0.1, 0.3)
            + rows(0, "colour", -0.5, -0.5, 0.0) + rows(1, "colour", 0.0, 0.0, 0.25)  # x -1, 0, 1; y 0, .25, 0
            + rows(2, "colour", 0.5, 0.5, 0.0)
            + rows(3, "colour", 0.1, 0.1, None)                 # no binding negative: left out
            + rows(4, "colour", 0.9, 0.9, -0.9, split="ood")    # another split: left out
            + rows(0, "size", -0.1, -0.1, -0.2) + rows(1, "size", 0.1, 0.1, 0.2))  # two images: no r
    result = binding_additivity(data)
    assert list(result) == ["colour", "size", "swelling"]
    assert result["swelling"]["n"] == 3 and result["swelling"]["r"] == pytest.approx(1.0)
    assert result["colour"]["n"] == 3 and result["colour"]["r"] == pytest.approx(0.0, abs=1e-12)
    assert result["size"] == {"r": None, "n": 2}
    assert binding_additivity(data, split="ood")["colour"] == {"r": None, "n": 1}
