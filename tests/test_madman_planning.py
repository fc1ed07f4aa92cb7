"""MADMAN planning: data-property statistics, captions, negatives, hold-out and digit pools (no pixels)."""

import math

import numpy as np
import pytest
from madman_support import make_generator, small_source

from bindscope.errors import BadInput
from bindscope.generators.madman import config as madman_config
from bindscope.generators.madman.attributes import ATTRIBUTES, DEFAULT_VALUES
from bindscope.generators.madman.captions import describe, parse_caption
from bindscope.generators.madman.planning import Planner, plan_counts

N = 2000


def planner(flags=None, seed=0, preset=None):
    cfg = madman_config.resolve(preset, None, flags, seed)
    source = small_source()
    return Planner(cfg, seed, {"train": source.train_pool, "eval": source.eval_pool})


def realised(p, split="train", n=N):
    counts = {}
    for i in range(n):
        spec, caption, negatives = p.plan(split, i)
        for k, v in plan_counts(spec, negatives).items():
            counts[k] = counts.get(k, 0) + v
    return counts


def within(value, p, n, sd_of_one=None):
    """|value - p| within 4 standard errors of a mean of n draws."""
    sd = math.sqrt(p * (1 - p)) if sd_of_one is None else sd_of_one
    return abs(value - p) <= 4 * sd / math.sqrt(n) + 1e-9


@pytest.mark.parametrize("distribution", ["two-point", "binomial"])
def test_realised_data_properties_match_the_request(distribution):
    want = {"multi_object_images": 0.7, "multi_object_captions": 0.6, "attribute_density": 2.5,
            "saliency_bias": 0.8}
    c = realised(planner({**want, "density_distribution": distribution}))
    assert c["images"] == N
    mi = c["two_digit_images"] / N
    assert within(mi, 0.7, N), mi
    two = c["two_digit_images"]
    mc = c["two_digit_both_described"] / two
    assert within(mc, 0.6, two), mc
    sb = c["two_digit_salient_first"] / two
    assert within(sb, 0.8, two), sb
    described = c["described_digits"]
    assert described == N + c["two_digit_both_described"]
    sd = 0.5 if distribution == "two-point" else math.sqrt(6 * (2.5 / 6) * (1 - 2.5 / 6))
    density = c["mentioned_attributes"] / described
    assert within(density, 2.5, described, sd), density
    # attributes are mentioned uniformly: each of the six about density / 6 of the time
    for a in ATTRIBUTES:
        share = c[f"mentions/{a}"] / described
        assert abs(share - 2.5 / 6) < 0.05, (a, share)


def test_two_point_density_uses_the_two_nearest_counts():
    p = planner({"attribute_density": 3.5})
    counts = set()
    for i in range(300):
        spec, _, _ = p.plan("train", i)
        counts |= {len(m["attributes"]) for m in spec["mentions"]}
    assert counts == {3, 4}


def test_extreme_properties():
    c = realised(planner({"multi_object_images": 0.0}), n=200)
    assert c["two_digit_images"] == 0 and c["described_digits"] == 200 and c["negatives_binding"] == 0
    c = realised(planner({"multi_object_images": 1.0, "multi_object_captions": 1.0, "saliency_bias": 1.0,
                          "attribute_density": 6}), n=200)
    assert c["two_digit_images"] == c["two_digit_both_described"] == c["two_digit_salient_first"] == 200
    assert c["mentioned_attributes"] == 200 * 2 * 6
    c = realised(planner({"attribute_density": 0}), n=100)
    assert c["mentioned_attributes"] == 0


def test_caption_grammar_and_parse_back():
    caption = describe([(7, {"colour": "yellow", "size": "small"}), (4, {"size": "large", "colour": "blue"})])
    assert caption == "small yellow 7 and large blue 4"
    assert parse_caption(caption) == [(7, {"size": "small", "colour": "yellow"}),
                                      (4, {"size": "large", "colour": "blue"})]
    assert describe([(3, {})]) == "3"
    with pytest.raises(BadInput, match="'purple'"):
        parse_caption("purple 3")
    p = planner({"multi_object_captions": 0.5, "attribute_density": 2.2, "saliency_bias": 0.6})
    for i in range(300):
        spec, caption, _ = p.plan("train", i)
        parsed = parse_caption(caption, DEFAULT_VALUES)
        assert len(parsed) == len(spec["mentions"])
        for (digit, attrs), m in zip(parsed, spec["mentions"]):
            obj = spec["digits"][m["index"] - 1]
            assert digit == obj["digit"]
            assert attrs == {a: obj["attributes"][a] for a in m["attributes"]}


def test_negatives_follow_the_contract():
    p = planner({"attribute_density": 3.5})
    seen_equal_values = 0
    for split in ("train", "test"):
        for i in range(300):
            spec, caption, negatives = p.plan(split, i)
            if len(spec["mentions"]) < 2:
                assert negatives == []
                continue
            shared = [a for a in ATTRIBUTES if all(a in m["attributes"] for m in spec["mentions"])]
            values = {k: spec["digits"][k - 1]["attributes"] for k in (1, 2)}
            differ = [a for a in shared if values[1][a] != values[2][a]]
            seen_equal_values += len(shared) - len(differ)
            assert [n.kind for n in negatives].count("recognition") == 2 * len(shared)
            assert [n.attribute for n in negatives if n.kind == "binding"] == differ
            for n in negatives:
                assert n.caption != caption
                parsed = dict((d, a) for d, a in parse_caption(n.caption))
                if n.kind == "recognition":
                    (k,) = n.objects
                    assert n.original == values[k][n.attribute] != n.replacement
                    assert n.replacement in DEFAULT_VALUES[n.attribute]
                    assert parsed[spec["digits"][k - 1]["digit"]][n.attribute] == n.replacement
                    other = 3 - k
                    assert parsed[spec["digits"][other - 1]["digit"]][n.attribute] == values[other][n.attribute]
                else:
                    assert n.objects == (1, 2)
                    assert n.original == f"{values[1][n.attribute]}|{values[2][n.attribute]}"
                    assert n.replacement == f"{values[2][n.attribute]}|{values[1][n.attribute]}"
                    assert parsed[spec["digits"][0]["digit"]][n.attribute] == values[2][n.attribute]
                    assert parsed[spec["digits"][1]["digit"]][n.attribute] == values[1][n.attribute]
    assert seen_equal_values > 0  # ties occurred and produced no binding negative


def test_test_split_describes_both_digits_with_one_subset_and_no_saliency_bias():
    p = planner({"saliency_bias": 1.0, "multi_object_captions": 0.0, "attribute_density": 2.0})
    first_salient = 0
    for i in range(400):
        spec, _, negatives = p.plan("test", i)
        assert len(spec["digits"]) == 2 and len(spec["mentions"]) == 2
        assert spec["mentions"][0]["attributes"] == spec["mentions"][1]["attributes"]
        assert len(spec["mentions"][0]["attributes"]) == 2
        assert len(negatives) >= 4
        first_salient += spec["mentions"][0]["index"] == 1
    assert within(first_salient / 400, 0.5, 400)


def test_holdout_combinations_stay_out_of_train_and_test_and_fill_ood():
    p = planner({"ood": {"holdout": ["7:colour=red", "3:size=large"]}})
    for split in ("train", "test"):
        for i in range(600):
            spec, _, _ = p.plan(split, i)
            for d in spec["digits"]:
                assert not (d["digit"] == 7 and d["attributes"]["colour"] == "red")
                assert not (d["digit"] == 3 and d["attributes"]["size"] == "large")
    held = {"7:colour=red": 0, "3:size=large": 0}
    for i in range(200):
        spec, caption, negatives = p.plan("ood", i)
        digit, rest = spec["holdout"].split(":")
        attribute, value = rest.split("=")
        held[spec["holdout"]] += 1
        carriers = [k for k, d in enumerate(spec["digits"], 1)
                    if d["digit"] == int(digit) and d["attributes"][attribute] == value]
        assert carriers
        assert all(attribute in m["attributes"] for m in spec["mentions"])
        assert any(n.attribute == attribute for n in negatives)
    assert min(held.values()) > 60


def test_holdout_fraction_is_seeded_and_recorded():
    a = madman_config.resolve(flags={"ood": {"holdout_fraction": 0.1}}, seed=3)
    b = madman_config.resolve(flags={"ood": {"holdout_fraction": 0.1}}, seed=3)
    c = madman_config.resolve(flags={"ood": {"holdout_fraction": 0.1}}, seed=4)
    total = 10 * sum(len(v) for v in DEFAULT_VALUES.values())
    assert a["ood"]["holdout"] == b["ood"]["holdout"] != c["ood"]["holdout"]
    assert abs(len(a["ood"]["holdout"]) - round(0.1 * total)) <= 2


def test_training_and_evaluation_use_disjoint_mnist_instances():
    source = small_source()
    train_pool = set(np.concatenate(source.train_pool).tolist())
    eval_pool = set(np.concatenate(source.eval_pool).tolist())
    assert not train_pool & eval_pool
    p = planner({"ood": {"holdout": ["1:colour=blue"]}})
    for split, pool in (("train", train_pool), ("test", eval_pool), ("ood", eval_pool)):
        used = {d["source"] for i in range(300) for d in p.plan(split, i)[0]["digits"]}
        assert used <= pool, split
        for d in (d for i in range(50) for d in p.plan(split, i)[0]["digits"]):
            assert source.labels[d["source"]] == d["digit"]


def test_plans_depend_on_seed_split_and_index_only():
    p, q = planner(seed=5), planner(seed=5)
    assert [q.plan("train", i)[:2] for i in (9, 3, 7)] == [p.plan("train", i)[:2] for i in (9, 3, 7)]
    assert planner(seed=6).plan("train", 3)[1] != p.plan("train", 3)[1] or \
        planner(seed=6).plan("train", 3)[0] != p.plan("train", 3)[0]


def test_presets_fill_properties_and_flags_win():
    ideal = madman_config.resolve("ideal")
    realistic = madman_config.resolve("realistic", None, {"saliency_bias": 0.6})
    assert (ideal["multi_object_captions"], ideal["attribute_density"], ideal["saliency_bias"]) == (1.0, 3.5, 0.5)
    assert realistic["multi_object_captions"] == 0.3 and realistic["saliency_bias"] == 0.6
    assert realistic["preset"] == "realistic"


def test_config_file_replaces_a_value_set():
    cfg = madman_config.resolve(None, {"attributes": {"colour": {"red": [255, 0, 0], "blue": [0, 0, 255]}}})
    assert cfg["attributes"]["colour"] == {"red": [255, 0, 0], "blue": [0, 0, 255]}
    assert cfg["attributes"]["size"] == DEFAULT_VALUES["size"]
    gen = make_generator({"attributes": {"colour": {"red": [255, 0, 0], "blue": [0, 0, 255]}}})
    for s in gen.make_samples("test", 0, 30):
        assert {o.attributes["colour"] for o in s.objects} <= {"red", "blue"}
