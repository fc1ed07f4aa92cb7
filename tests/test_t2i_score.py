"""Scoring of text-to-image prompt order (comco t2i-score): presence by mention position and the paired first-vs-last
test, on planted detections and planted CLIP similarities (hand-computed values), and the scorers' models (tiny
random-weight OWLv2 / OWL-ViT and CLIP) end to end."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest
from eval_fakes import FakeEncoder, SpecGenerator, build, image
from scipy.stats import binomtest

from bindscope.build.registry import register_generator
from bindscope.errors import BadInput
from bindscope.evaluation.detection import query
from bindscope.evaluation.t2i import first_vs_last, presence_block, score_t2i, strict_ranks
from bindscope.format.records import ObjectRecord, Sample


def test_the_paired_test_is_mcnemar_exact_on_discordant_prompts():
    # ten one-image prompts of two objects: first present & last absent in 8, the reverse in 1, both present in 1
    first = [1] * 8 + [0] + [1]
    last = [0] * 8 + [1] + [1]
    present = np.array([v for pair in zip(first, last) for v in pair], bool)
    position = np.tile([1, 2], 10)
    prompt = np.repeat(np.arange(10), 2)
    test = first_vs_last(present, position, np.full(20, 2), prompt)
    assert (test["prompts"], test["first_more"], test["last_more"], test["ties"]) == (10, 8, 1, 1)
    # exact McNemar: P(X <= 1 | X ~ Bin(9, 1/2)) doubled = 2 (C(9,0) + C(9,1)) / 2^9 = 20/512
    assert test["p_value"] == pytest.approx(2 * (comb(9, 0) + comb(9, 1)) / 2 ** 9) == pytest.approx(0.0390625)
    assert (test["first"]["count"], test["first"]["of"], test["last"]["count"]) == (9, 10, 2)
    assert test["difference"] == pytest.approx(0.7)
    # no discordant prompt: no test
    none = first_vs_last(np.ones(4, bool), np.tile([1, 2], 2), np.full(4, 2), np.repeat([0, 1], 2))
    assert none["p_value"] is None and none["ties"] == 2


def test_prompts_with_several_images_count_images_per_object():
    # one prompt, three images: first present in 2, last in 3 -> the prompt favours the last
    present = np.array([1, 1, 1, 1, 0, 1], bool)
    test = first_vs_last(present, np.tile([1, 2], 3), np.full(6, 2), np.zeros(6, int))
    assert (test["first_more"], test["last_more"], test["p_value"]) == (0, 1, 1.0)


def test_ranks_count_ties_against_the_target():
    assert strict_ranks(np.array([0.1, 0.5, 0.5, 0.9]), [3, 1, 2, 0]).tolist() == [1, 3, 3, 4]


# ------------------------------------------------------------------- planted detections and similarities
CATEGORIES = ["car", "cat", "cup", "dog"]
# (image id, prompt objects in mention order, detector scores, CLIP similarities to car, cat, cup, dog)
PLANTED = [
    (1, ["dog", "cat"], [0.9, 0.2], [0.1, 0.5, 0.3, 0.8]),
    (2, ["dog", "cat"], [0.8, 0.6], [0.6, 0.5, 0.1, 0.7]),
    (3, ["cat", "dog"], [0.7, 0.1], [0.2, 0.9, 0.3, 0.1]),
    (4, ["cat", "dog"], [0.3, 0.4], [0.5, 0.4, 0.5, 0.3]),
    (5, ["dog", "cup", "car"], [0.9, 0.5, 0.0], [0.4, 0.4, 0.9, 0.4]),
]


register_generator(SpecGenerator, "t2i-planted")  # datasets of given samples, under a name of their own


class PlantedDetector:
    """Scores from the table above, keyed by the image id in pixel (0, 0, 0) and the query text."""

    def __init__(self):
        self.scores = {(i, query(name)): s for i, names, scores, _ in PLANTED for name, s in zip(names, scores)}

    def info(self):
        return {"name": "planted", "identity": "planted", "family": "owlv2"}

    def detect(self, images, queries):
        out = []
        for im, texts in zip(images, queries):
            scores = np.array([self.scores[(int(im[0, 0, 0]), t)] for t in texts])
            out.append((scores, np.zeros((len(texts), 4))))
        return out


def _planted_dataset(tmp_path):
    samples = []
    for k, (i, names, _, _) in enumerate(PLANTED):
        objects = [ObjectRecord(index=p, category=n, category_id=CATEGORIES.index(n), attributes={},
                                bbox=(0, 0, 0, 0), area=0, size_rank=p, salient=False, mention_position=p)
                   for p, n in enumerate(names, start=1)]
        caption = "a photo of " + " and ".join(f"a {n}" for n in names)
        samples.append(Sample(k, image(i), np.zeros((8, 8), np.uint8), caption, objects, [], {}))
    return build(tmp_path, "t2i", SpecGenerator({"images": samples}, name="t2i-planted", attribute_names=[]))


def _encoder():
    texts = {query(name): np.eye(4, dtype=np.float32)[j] for j, name in enumerate(CATEGORIES)}
    return FakeEncoder(4, text_vectors=texts, image_vectors={i: np.array(s, np.float32) for i, _, _, s in PLANTED})


def test_planted_detections_and_similarities_give_hand_counted_presence(tmp_path):
    rows = []
    result = score_t2i(_planted_dataset(tmp_path), PlantedDetector(), _encoder(), threshold=0.5, progress=False,
                       rows=rows)
    assert (result["num_images"], result["num_prompts"], result["num_mentions"]) == (5, 3, 11)
    detector = result["scorers"]["detector"]["presence"]
    # present at threshold 0.5 (a score equal to it counts): 1: dog; 2: dog, cat; 3: cat; 4: none; 5: dog, cup
    assert (detector["all"]["count"], detector["all"]["of"]) == (6, 11)
    assert {p: (b["count"], b["of"]) for p, b in detector["by_position"].items()} == {"1": (4, 5), "2": (2, 5),
                                                                                       "3": (0, 1)}
    test = detector["first_vs_last"]  # every prompt shows its first object in more images than its last
    assert (test["first_more"], test["last_more"], test["ties"]) == (3, 0, 0)
    assert test["p_value"] == pytest.approx(binomtest(3, 3, 0.5).pvalue) == pytest.approx(0.25)
    assert (test["first"]["count"], test["last"]["count"], test["difference"]) == (4, 1, pytest.approx(0.6))
    two = detector["by_objects"]["2"]
    assert (two["prompts"], two["mentions"]) == (2, 8)
    assert [(b["count"], b["of"]) for b in two["by_position"].values()] == [(3, 4), (1, 4)]
    assert two["first_vs_last"]["p_value"] == pytest.approx(0.5)
    low, high = detector["by_position"]["1"]["ci95_cluster"]
    assert 0 <= low <= 0.8 <= high <= 1
    clip = result["scorers"]["clip"]
    assert clip["candidates"] == 4  # the categories the objects name (no name list in this dataset's config)
    presence = clip["presence"]
    # ranks within the prompt's object count: 1: dog 1, cat 2; 2: dog 1, cat 3; 3: cat 1, dog 4; 4: cat 3, dog 4;
    # 5 (three objects): dog 4 (a four-way tie at 0.4), cup 1, car 4
    assert {p: (b["count"], b["of"]) for p, b in presence["by_position"].items()} == {"1": (3, 5), "2": (2, 5),
                                                                                       "3": (0, 1)}
    assert (presence["first_vs_last"]["first_more"], presence["first_vs_last"]["ties"]) == (2, 1)
    assert clip["similarity_by_position"]["1"]["mean"] == pytest.approx((0.8 + 0.7 + 0.9 + 0.4 + 0.4) / 5)
    assert rows[4] == {"index": 4, "prompt": "a photo of a dog and a cup and a car", "objects": ["dog", "cup", "car"],
                       "detector_scores": [0.9, 0.5, 0.0], "detector_present": [True, True, False],
                       "clip_similarity": pytest.approx([0.4, 0.9, 0.4]), "clip_rank": [4, 1, 4]}


def test_collect_reads_the_result(tmp_path):
    from bindscope.evaluation.collect import collect
    from bindscope.evaluation.results import write_result

    result = score_t2i(_planted_dataset(tmp_path), PlantedDetector(), _encoder(), threshold=0.5, progress=False)
    write_result(tmp_path / "t2i.json", result, schema="t2i_result")
    table = collect([tmp_path / "t2i.json"])
    row = table["rows"][0]
    assert (row["kind"], row["model"], row["pretrained"]) == ("t2i-score", "fake + planted", "hand-chosen")  # clip, detector
    figures = row["figures"]
    assert figures["t2i/detector/pos1"]["value"] == pytest.approx(80.0)
    assert figures["t2i/detector/pos1"]["interval"] == "prompt"
    assert figures["t2i/detector/last"]["value"] == pytest.approx(20.0)
    assert figures["t2i/clip/2obj/pos2"]["value"] == pytest.approx(25.0)  # cat in image 1 only, of 4
    assert "bootstrap over prompts" in table["definitions"]["t2i/clip/first"]


def test_scoring_needs_a_scorer_and_a_threshold_in_range(tmp_path):
    path = _planted_dataset(tmp_path)
    with pytest.raises(BadInput, match="needs a detector, an encoder or both"):
        score_t2i(path, progress=False)
    with pytest.raises(BadInput, match=r"^threshold 1.5 is not allowed; use a number in 0..1"):
        score_t2i(path, PlantedDetector(), threshold=1.5, progress=False)


def test_presence_block_without_detections_keeps_every_position():
    block = presence_block(np.zeros(4, bool), np.array([1, 2, 1, 2]), np.full(4, 2), np.array([0, 0, 1, 1]))
    assert [b["share"] for b in block["by_position"].values()] == [0.0, 0.0]
    assert block["first_vs_last"]["p_value"] is None
