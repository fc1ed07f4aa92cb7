"""Size-defined saliency of MADMAN captions and the first-mention / large-object retrieval shares."""

from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner

from bindscope.errors import BadInput
from bindscope.evaluation.saliency import score_first_mention, score_large_object
from bindscope.generators.madman import config as madman_config
from bindscope.generators.madman.planning import salient_object
from tiny_madman import tiny_madman

TWO_DIGITS = {"multi_object_images": 1.0, "multi_object_captions": 1.0}


def _binomial_bound(n: int, p: float) -> float:
    return 4.0 * math.sqrt(p * (1 - p) / n)  # |share - p| above 4 standard errors: < 1e-4 by chance


@pytest.mark.parametrize("bias", [0.75, 1.0])
def test_size_saliency_realises_the_asked_bias_and_leaves_equal_sizes_in_random_order(bias):
    gen = tiny_madman(splits={"train": 1200, "test": 4}, saliency="size", saliency_bias=bias, **TWO_DIGITS)
    plans = gen.plan_only("train", 0, 1200)
    larger_first = unequal = object1_first = equal = 0
    for spec, _, _ in plans:
        salient = salient_object(gen.config, spec["digits"])
        first = spec["mentions"][0]["index"]
        assert len(spec["mentions"]) == 2  # both digits described
        if salient is None:
            equal += 1
            object1_first += first == 1
        else:
            unequal += 1
            larger_first += first == salient
    assert unequal > 300 and equal > 100
    share = larger_first / unequal
    if bias == 1.0:
        assert share == 1.0
    else:
        assert abs(share - bias) < _binomial_bound(unequal, bias)
    assert abs(object1_first / equal - 0.5) < _binomial_bound(equal, 0.5)
    # the manifest's realised values count the same plans
    samples = gen.make_samples("train", 0, 40)
    counts = gen.shard_statistics("train", samples)
    realised = gen.statistics({"train": counts})["train"]["realised"]
    hand = [salient_object(gen.config, s.spec["digits"]) for s in samples]
    pairs = [(h, s.spec["mentions"][0]["index"]) for h, s in zip(hand, samples)]
    assert realised["saliency_bias"] == pytest.approx(
        sum(f == h for h, f in pairs if h is not None) / sum(h is not None for h, _ in pairs))
    assert realised["equal_size_object1_first"] == pytest.approx(
        sum(f == 1 for h, f in pairs if h is None) / sum(h is None for h, _ in pairs))


def test_centre_saliency_is_the_default_and_leaves_the_config_unchanged():
    plain = madman_config.resolve(flags={"splits": {"train": 4, "test": 2}}, seed=0)
    centre = madman_config.resolve(flags={"splits": {"train": 4, "test": 2}, "saliency": "centre"}, seed=0)
    assert plain == centre and "saliency" not in centre
    assert salient_object(centre, [{"attributes": {"size": "small"}}, {"attributes": {"size": "large"}}]) == 1


def test_single_digit_renders_are_the_image_with_the_other_digit_removed():
    gen = tiny_madman(splits={"train": 4, "test": 12}, saliency="size", **TWO_DIGITS)
    samples = [s for s in gen.make_samples("test", 0, 12) if len(s.objects) == 2]
    assert len(samples) == 12
    for s in samples:
        alone = {k: gen.render_alone(s.spec, k) for k in (1, 2)}
        for k, (image, mask) in alone.items():
            other = 3 - k
            assert np.array_equal(mask, np.where(s.mask == k, k, 0).astype(np.uint8))
            ink = s.mask == k
            assert np.array_equal(image[ink], s.image[ink])
            assert not image[s.mask == other].any()  # background where the other digit was
            assert (image > 0).any()
        assert np.array_equal(alone[1][0].astype(np.int32) + alone[2][0], s.image)
    with pytest.raises(ValueError):
        gen.render_alone(samples[0].spec, 3)


def test_first_mention_share_on_hand_built_embeddings():
    e = np.eye(3, dtype=np.float32)
    caption = np.stack([e[0], e[0], e[1], e[1]])
    # per caption: (first-mentioned description, other description)
    desc = np.stack([np.stack([e[0], e[1]]),    # first wins (1 vs 0)
                     np.stack([e[1], e[0]]),    # second wins
                     np.stack([e[1], e[2]]),    # first wins
                     np.stack([e[2], e[2]])])   # tie: counts for the second
    rows: list = []
    out = score_first_mention(caption, desc, ["first_larger", "first_smaller", "first_larger", "equal_size"],
                              sample_ids=[10, 11, 12, 13], rows=rows)
    assert (out["all"]["correct"], out["all"]["total"]) == (2, 4)
    assert out["all"]["accuracy"] == 0.5
    assert out["by_relation"]["first_larger"]["accuracy"] == 1.0
    assert out["by_relation"]["first_smaller"]["accuracy"] == 0.0
    assert out["by_relation"]["equal_size"]["total"] == 1 and out["by_relation"]["equal_size"]["correct"] == 0
    assert [r["first_wins"] for r in rows] == [True, False, True, False] and rows[0]["sample"] == 10


def test_large_object_share_on_hand_built_embeddings():
    e = np.eye(2, dtype=np.float32)
    image = np.stack([e[0], e[0], e[0], e[1]])
    renders = np.stack([np.stack([e[0], e[1]]),   # object 1 large, wins
                        np.stack([e[0], e[1]]),   # object 2 large, object 1 wins: larger loses
                        np.stack([e[0], e[1]]),   # equal sizes: skipped
                        np.stack([e[0], e[1]])])  # object 2 large (large vs medium), wins
    levels = {"small": 0.5, "medium": 0.7, "large": 0.9}
    out = score_large_object(image, renders, [("large", "small"), ("small", "large"), ("small", "small"),
                                              ("medium", "large")], levels)
    assert out["equal_size_skipped"] == 1
    assert (out["all"]["correct"], out["all"]["total"]) == (2, 3)
    assert out["by_size_pair"]["large>small"]["correct"] == 1 and out["by_size_pair"]["large>small"]["total"] == 2
    assert out["by_size_pair"]["large>medium"]["accuracy"] == 1.0
    assert list(out["by_size_pair"]) == ["large>medium", "large>small"]
    with pytest.raises(BadInput, match="huge"):
        score_large_object(image[:1], renders[:1], [("huge", "small")], levels)


@pytest.mark.parametrize("flags, match", [({"saliency": "size", "multi_object_images": 0.0}, "two-digit"),
                                          ({"saliency": "loudest"}, "saliency")])
def test_bad_saliency_is_refused(flags, match, tmp_path):
    with pytest.raises(BadInput, match=match):
        madman_config.resolve(flags={"splits": {"train": 4, "test": 2}, **flags}, seed=0)
    from bindscope.cli.main import madman

    args = ["generate", "--out", str(tmp_path / "d"), "--saliency", flags["saliency"]]
    if "multi_object_images" in flags:
        args += ["--multi-object-images", "0"]
    result = CliRunner().invoke(madman, args)
    assert result.exit_code == 2, result.output
    assert match in result.output and not (tmp_path / "d").exists()
