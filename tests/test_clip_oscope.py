"""The ComCO/SimCO authors' TOR / IOR statistics and matching captions (bindscope.evaluation.clip_oscope) on
hand-set similarities: every expected value below is worked out by hand in the comments.

Candidates (in this order): car, carrot, apple, pizza, desk. A query's vector is sum_j s_j e_j plus a filler
direction, so its cosine with candidate j is exactly s_j. The top-n list is numpy.argsort(s)[-n:] (ascending),
the top-1 numpy.argmax(s) (first index on a tie).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from eval_fakes import FakeEncoder, SpecGenerator, build, image, obj, unit

from bindscope.cli.main import comco
from bindscope.encoders import registry
from bindscope.encoders.registry import EncoderKind, register_encoder
from bindscope.errors import BadInput
from bindscope.evaluation.clip_oscope import (
    DEFINITIONS,
    combination_captions,
    matching_captions_at,
    ordered_objects,
    oscope_statistics,
    read_caption_file,
)
from bindscope.evaluation.collect import collect
from bindscope.evaluation.comco import VocabEntry, evaluate_comco, evaluate_tor_sampled
from bindscope.evaluation.sampled import SampledCaptions
from bindscope.generators.comco.registry import read_names
from bindscope.schemas import validate

NAMES = ["car", "carrot", "apple", "pizza", "desk"]
DIM = 8
FILLER = 7
LOG3 = 1 / math.log2(3)  # DCG weight of the second list place


def vec(sims: list[float], filler: int = FILLER) -> np.ndarray:
    """A unit vector whose cosine with unit(DIM, j) is sims[j]."""
    v = np.zeros(DIM, np.float64)
    v[:len(sims)] = sims
    v[filler] = math.sqrt(1.0 - float(np.dot(v, v)))
    return v.astype(np.float32)


# ------------------------------------------------------------------------------------------------------- TOR
# caption, objects, similarities to car, carrot, apple, pizza, desk
TOR_CASES = [
    # C1 argsort: pizza carrot desk apple car -> top-2 [apple, car]; "car" is a substring of "carrot": correct.
    #    top-1 car is no object (no position). P = R = F1 = 1/2; P@1 [apple] 1, R@1 1/2; P@2 1/2, R@2 1/2;
    #    AP = (1/1)/2 = 1/2; NDCG rel [1, 0] -> 1.
    ("carrot and apple", ["carrot", "apple"], [0.5, 0.1, 0.4, 0.0, 0.2]),
    # C2 top-2 [pizza, desk], correct, top-1 desk = word 2. Everything 1; P@1 1, R@1 1/2.
    ("pizza and desk", ["pizza", "desk"], [0.1, 0.0, 0.2, 0.3, 0.6]),
    # C3 top-2 [pizza, apple], correct, top-1 apple = word 1. Everything 1; R@1 1/2.
    ("apple and pizza", ["apple", "pizza"], [0.05, 0.1, 0.7, 0.3, 0.2]),
    # C4 argsort: pizza carrot desk apple car -> top-2 [apple, car]: "apple" not in the caption -> not correct;
    #    top-1 car = word 2 (counts in the all-captions figure only). P = R = F1 = 1/2; P@1 [apple] 0, R@1 0;
    #    P@2 1/2, R@2 1/2; AP = (1/2)/2 = 1/4; NDCG rel [0, 1] -> (1/log2 3) / 1.
    ("desk and car", ["desk", "car"], [0.6, 0.1, 0.3, 0.0, 0.2]),
    # C5 top-2 [car, carrot], correct, top-1 carrot = word 2. Everything 1; R@1 1/2.
    ("car and carrot", ["car", "carrot"], [0.3, 0.5, 0.1, 0.2, 0.0]),
    # C6 apple and desk tie at 0.5: argmax takes the first index, apple = word 1 (bindscope: a tie, no top-1).
    #    top-2 {apple, desk} in either order: correct, everything 1; R@1 1/2.
    ("apple and desk", ["apple", "desk"], [0.1, 0.05, 0.5, 0.2, 0.5]),
]
# Totals over the 6 captions (n = 2): correct 5 (all but C4); given correct: word 1 {C3, C6} 2/5, word 2
# {C2, C5} 2/5; all captions: word 1 {C3, C6} 2/6, word 2 {C2, C4, C5} 3/6.
TOR_EXPECTED = {
    "top_n_accuracy": 5 / 6, "given": [2 / 5, 2 / 5], "all": [2 / 6, 3 / 6],
    "mean_precision": (0.5 + 1 + 1 + 0.5 + 1 + 1) / 6, "mean_recall": 5 / 6, "mean_f1": 5 / 6,
    "map": (0.5 + 1 + 1 + 0.25 + 1 + 1) / 6, "ndcg": (5 + LOG3) / 6,
    "p_at": [5 / 6, 5 / 6], "r_at": [(0.5 * 5 + 0) / 6, 5 / 6],
}


def _check_tor(block: dict) -> None:
    g = block["by_num_objects"]["2"]
    assert (g["n"], g["num_queries"], g["top1_ties"]) == (2, 6, 1)
    assert g["top_n_accuracy"]["value"] == pytest.approx(TOR_EXPECTED["top_n_accuracy"])
    assert (g["top_n_accuracy"]["count"], g["top_n_accuracy"]["of"]) == (5, 6)
    assert g["top_n_accuracy"]["definition"] == DEFINITIONS["top_n_accuracy_tor"]
    assert [p["value"] for p in g["position_given_correct_top_n"]["positions"]] == \
        pytest.approx(TOR_EXPECTED["given"])
    assert [(p["count"], p["of"]) for p in g["position_given_correct_top_n"]["positions"]] == [(2, 5), (2, 5)]
    assert [p["value"] for p in g["position_of_top1"]["positions"]] == pytest.approx(TOR_EXPECTED["all"])
    assert "most_similar_among_present" not in g
    for key in ("mean_precision", "mean_recall", "mean_f1", "map", "ndcg"):
        assert g[key]["value"] == pytest.approx(TOR_EXPECTED[key]), key
        assert g[key]["definition"] == DEFINITIONS[key] and g[key]["of"] == 6
    assert [v["value"] for v in g["precision_at_k"]["values"]] == pytest.approx(TOR_EXPECTED["p_at"])
    assert [v["value"] for v in g["recall_at_k"]["values"]] == pytest.approx(TOR_EXPECTED["r_at"])
    assert [v["k"] for v in g["recall_at_k"]["values"]] == [1, 2]


def test_tor_statistics_by_hand_including_a_substring_hit():
    sims = np.array([c[2] for c in TOR_CASES])
    out = oscope_statistics(sims, NAMES, [c[1] for c in TOR_CASES], "tor", [c[0] for c in TOR_CASES])
    _check_tor({"by_num_objects": out})


def test_the_substring_test_is_what_makes_c1_correct():
    caption, objects, sims = TOR_CASES[0]
    tor = oscope_statistics(np.array([sims]), NAMES, [objects], "tor", [caption])["2"]
    assert tor["top_n_accuracy"]["value"] == 1.0  # "car" in "carrot and apple"
    assert tor["mean_precision"]["value"] == 0.5  # but precision compares exact names
    renamed = oscope_statistics(np.array([sims]), NAMES, [objects], "tor", ["parrot and apple"])["2"]
    assert renamed["top_n_accuracy"]["value"] == 0.0  # no substring "car" left: not correct
    # IOR tests exact membership: the same similarities on an image of carrot and apple are not correct
    ior = oscope_statistics(np.array([sims]), NAMES, [objects], "ior")["2"]
    assert ior["top_n_accuracy"]["value"] == 0.0


def _tor_encoder() -> FakeEncoder:
    texts = {name: unit(DIM, j) for j, name in enumerate(NAMES)}
    texts.update({caption: vec(sims) for caption, _, sims in TOR_CASES})
    return FakeEncoder(DIM, texts, {})


def test_tor_through_evaluate_tor_sampled_with_given_captions_and_both_protocols():
    rows: list = []
    source = SampledCaptions(names=[VocabEntry(n) for n in NAMES], captions=[c[1] for c in TOR_CASES])
    result = evaluate_tor_sampled(_tor_encoder(), source, options={"tor": {"protocol": "both"}}, progress=False,
                                  rows=rows)
    validate(result, "eval_result", "result")
    _check_tor(result["metrics"]["clip_oscope"]["tor"])
    # bindscope's strict top-1 on the same captions: C6 is a tie; C1 top-1 car is no object
    b = result["metrics"]["tor"]["by_num_objects"]["2"]
    assert (b["num_queries"], b["ties"], b["top1_not_in_query"], b["top1_in_query"]) == (6, 1, 1, 4)
    assert [p["unconditional"]["count"] for p in b["positions"]] == [1, 3]
    oscope = [r for r in rows if r["task"] == "clip-oscope-tor"]
    assert oscope[3]["top_n"] == ["apple", "car"] and oscope[3]["top_n_correct"] is False  # ascending order
    assert oscope[0]["top_n_correct"] is True and oscope[5]["top1"] == "apple"
    assert result["settings"]["protocol"] == "both" and result["settings"]["captions"] == "given"


def test_clip_oscope_protocol_alone_leaves_out_the_bindscope_block():
    source = SampledCaptions(names=[VocabEntry(n) for n in NAMES], captions=[c[1] for c in TOR_CASES])
    result = evaluate_tor_sampled(_tor_encoder(), source, options={"tor": {"protocol": "clip-oscope"}},
                                  progress=False)
    assert set(result["metrics"]) == {"clip_oscope"}
    with pytest.raises(BadInput, match="protocol 'paper'"):
        evaluate_tor_sampled(_tor_encoder(), SampledCaptions(vocab=[VocabEntry(n) for n in NAMES]),
                             options={"tor": {"protocol": "paper"}})


# ------------------------------------------------------------------------------------------------------- IOR
# scene objects in mention order (the stand-in for the file name), similarities to the five references
IOR_CASES = [
    # S1 argsort: pizza carrot desk apple car -> top-3 [desk, apple, car]: car absent -> not correct.
    #    Among carrot, apple, desk the last in argsort is apple -> object 2. P = R = F1 = 2/3;
    #    P@1 [desk] 1, R@1 1/3; P@2 1, R@2 2/3; P@3 2/3, R@3 2/3; AP = (1 + 2/2)/3 = 2/3; NDCG [1, 1, 0] -> 1.
    (["carrot", "apple", "desk"], [0.5, 0.1, 0.4, 0.0, 0.2]),
    # S2 top-3 [apple, pizza, desk] correct; top-1 desk = object 2; restricted: desk (2). All 1;
    #    R@1 1/3, R@2 2/3.
    (["pizza", "desk", "apple"], [0.1, 0.0, 0.2, 0.3, 0.6]),
    # S3 argsort: car carrot desk pizza apple -> top-3 [desk, pizza, apple]: desk absent -> not correct.
    #    Restricted among apple, pizza, car: apple (1). P = R = F1 = 2/3; P@1 [desk] 0, R@1 0; P@2 1/2,
    #    R@2 1/3; P@3 2/3, R@3 2/3; AP = (1/2 + 2/3)/3 = 7/18; NDCG [0, 1, 1] -> (LOG3 + 1/2) / (1 + LOG3).
    (["apple", "pizza", "car"], [0.05, 0.1, 0.7, 0.3, 0.2]),
    # S4 argsort: apple pizza car desk carrot -> top-3 [car, desk, carrot] correct; top-1 carrot = object 3;
    #    restricted: carrot (3). All 1; R@1 1/3, R@2 2/3.
    (["desk", "car", "carrot"], [0.3, 0.5, 0.1, 0.2, 0.4]),
    # S5 argsort: desk carrot pizza apple car -> top-3 [pizza, apple, car]: car is not an object (exact
    #    membership, although "car" is inside "carrot") -> not correct. Restricted among carrot, apple, pizza:
    #    apple (2). P = R = F1 = 2/3; P@1 1, R@1 1/3; P@2 1, R@2 2/3; P@3 2/3, R@3 2/3; AP 2/3; NDCG 1.
    (["carrot", "apple", "pizza"], [0.6, 0.05, 0.4, 0.3, 0.0]),
]
S3_NDCG = (LOG3 + 0.5) / (1 + LOG3)
IOR_EXPECTED = {
    "top_n_accuracy": 2 / 5, "given": [0, 1 / 2, 1 / 2], "present": [1 / 5, 3 / 5, 1 / 5],
    "mean_precision": 0.8, "mean_recall": 0.8, "mean_f1": 0.8,
    "map": (2 / 3 + 1 + 7 / 18 + 1 + 2 / 3) / 5, "ndcg": (4 + S3_NDCG) / 5,
    "p_at": [4 / 5, 4.5 / 5, 0.8], "r_at": [(4 / 3) / 5, 3 / 5, 0.8],
}


def _ior_dataset(tmp_path):
    """Scenes of IOR_CASES (size ranks reversed against mention order), references for NAMES."""
    texts = {name: unit(DIM, j) for j, name in enumerate(NAMES)}
    images, scenes = {}, []
    for index, (objects, sims) in enumerate(IOR_CASES):
        images[10 + index] = vec(sims)
        records = [obj(k, name, {}, size_rank=len(objects) + 1 - k, mention=k) for k, name in
                   enumerate(objects, start=1)]
        caption = " and ".join(objects)
        texts[caption] = vec([0.1] * 5)
        scenes.append(sample(index, 10 + index, caption, records))
    refs = []
    for j, name in enumerate(NAMES):
        images[100 + j] = unit(DIM, j)
        refs.append(sample(j, 100 + j, name, [obj(1, name, {}, 1, 1)]))
    path = build(tmp_path, "ior", SpecGenerator({"scenes": scenes, "references": refs}, name="comco",
                                                attribute_names=[]))
    return path, FakeEncoder(DIM, texts, images)


def sample(index, image_id, caption, records):
    from bindscope.format.records import Sample

    return Sample(index, image(image_id), np.zeros((8, 8), np.uint8), caption, records, [], {})


def test_ior_statistics_by_hand_with_the_restricted_argmax(tmp_path):
    path, encoder = _ior_dataset(tmp_path)
    rows: list = []
    result = evaluate_comco(path, encoder, ["ior"], options={"ior": {"protocol": "clip-oscope"}}, progress=False,
                            rows=rows)
    validate(result, "eval_result", "result")
    assert "ior" not in result["metrics"]  # clip-oscope only
    block = result["metrics"]["clip_oscope"]["ior"]
    assert block["candidates"] == 5 and block["source"].endswith("Image_Encoder_Experiments/IOR.py")
    g = block["by_num_objects"]["3"]
    assert (g["num_queries"], g["top1_ties"]) == (5, 0)
    assert g["top_n_accuracy"]["value"] == pytest.approx(IOR_EXPECTED["top_n_accuracy"])
    assert g["top_n_accuracy"]["definition"] == DEFINITIONS["top_n_accuracy_ior"]
    assert [p["value"] for p in g["position_given_correct_top_n"]["positions"]] == \
        pytest.approx(IOR_EXPECTED["given"])
    assert [p["value"] for p in g["most_similar_among_present"]["positions"]] == \
        pytest.approx(IOR_EXPECTED["present"])
    assert [p["count"] for p in g["most_similar_among_present"]["positions"]] == [1, 3, 1]
    assert "position_of_top1" not in g
    for key in ("mean_precision", "mean_recall", "mean_f1", "map", "ndcg"):
        assert g[key]["value"] == pytest.approx(IOR_EXPECTED[key]), key
    assert [v["value"] for v in g["precision_at_k"]["values"]] == pytest.approx(IOR_EXPECTED["p_at"])
    assert [v["value"] for v in g["recall_at_k"]["values"]] == pytest.approx(IOR_EXPECTED["r_at"])
    ior_rows = [r for r in rows if r["task"] == "clip-oscope-ior"]
    assert ior_rows[4]["top_n"] == ["pizza", "apple", "car"] and ior_rows[4]["top_n_correct"] is False


def test_ior_object_order_by_size_reverses_the_positions(tmp_path):
    path, encoder = _ior_dataset(tmp_path)
    result = evaluate_comco(path, encoder, ["ior"], options={"ior": {"protocol": "both", "object_order": "size"}},
                            progress=False)
    g = result["metrics"]["clip_oscope"]["ior"]["by_num_objects"]["3"]
    # size rank is the mention order reversed, so each per-position figure is reversed
    assert [p["value"] for p in g["most_similar_among_present"]["positions"]] == pytest.approx([1 / 5, 3 / 5, 1 / 5])
    assert [p["value"] for p in g["position_given_correct_top_n"]["positions"]] == pytest.approx([1 / 2, 1 / 2, 0])
    assert "ior" in result["metrics"] and result["settings"]["object_order"] == "size"


def test_ordered_objects():
    objects = [obj(1, "a", {}, size_rank=2, mention=2), obj(2, "b", {}, size_rank=3, mention=0),
               obj(3, "c", {}, size_rank=1, mention=1)]  # b is not mentioned: last
    assert [o.category for o in ordered_objects(objects, "mention")] == ["c", "a", "b"]
    assert [o.category for o in ordered_objects(objects, "size")] == ["c", "a", "b"]
    objects[1] = obj(2, "b", {}, size_rank=1, mention=0)
    assert [o.category for o in ordered_objects(objects, "size")] == ["b", "c", "a"]  # rank tie: by index
    with pytest.raises(BadInput, match="object_order 'x'"):
        ordered_objects(objects, "x")


# -------------------------------------------------------------------------------------------------- matching
def test_matching_captions_with_the_biased_object_second_of_four():
    names = ["apple", "pizza", "desk", "car"]
    plan = matching_captions_at(names, ["carrot", "cup"], 2)
    # front = pizza swapped into the first place; back = pizza swapped into the last place
    assert plan["scenario_1"] == ("pizza and apple and desk and car",
                                  ["carrot and apple and desk and car", "cup and apple and desk and car"])
    assert plan["scenario_2"] == ("apple and car and desk and pizza",
                                  ["pizza and apple and desk and carrot", "pizza and apple and desk and cup"])
    with pytest.raises(BadInput, match="bias_position 5"):
        matching_captions_at(names, [], 5)


MATCH_VOCAB = ["car", "carrot", "apple", "pizza", "desk", "cup"]
# text -> cosine with the scene image (e_0); fillers e_1.. keep each text a unit vector
MATCH_SCORES = {
    "pizza and apple and desk and car": 0.5,        # scenario 1 correct
    "carrot and apple and desk and car": 0.4,       # below 0.5: passes
    "cup and apple and desk and car": 0.6,          # above: fails
    "apple and car and desk and pizza": 0.3,        # scenario 2 correct
    "pizza and apple and desk and carrot": 0.2,     # passes
    "pizza and apple and desk and cup": 0.3,        # tie: fails (strict >)
}


def test_matching_at_position_2_of_4_with_every_absent_category(tmp_path):
    dim = 16
    texts = {name: unit(dim, 8 + j) for j, name in enumerate(MATCH_VOCAB)}
    for k, (text, s) in enumerate(MATCH_SCORES.items(), start=1):
        texts[text] = (s * unit(dim, 0) + math.sqrt(1 - s * s) * unit(dim, k)).astype(np.float32)
    order = ["apple", "pizza", "desk", "car"]  # mention order; size ranks put car first
    records = [obj(k, name, {}, size_rank=5 - k, mention=k) for k, name in enumerate(order, start=1)]
    texts[" and ".join(order)] = unit(dim, 15)
    images = {1: unit(dim, 0)}
    refs = []
    for j, name in enumerate(MATCH_VOCAB):
        images[100 + j] = unit(dim, 8 + j)
        refs.append(sample(j, 100 + j, name, [obj(1, name, {}, 1, 1)]))
    path = build(tmp_path, "match", SpecGenerator({"scenes": [sample(0, 1, " and ".join(order), records)],
                                                   "references": refs}, name="comco", attribute_names=[]))
    rows: list = []
    result = evaluate_comco(path, FakeEncoder(dim, texts, images), ["matching"],
                            options={"matching": {"bias_position": 2, "matching_negatives": None}}, progress=False,
                            rows=rows)
    validate(result, "eval_result", "result")
    m = result["metrics"]["matching"]
    assert (m["scenario_1"]["all"]["correct"], m["scenario_1"]["all"]["total"]) == (1, 2)
    assert (m["scenario_2"]["all"]["correct"], m["scenario_2"]["all"]["total"]) == (1, 2)
    wrong = sorted(r["wrong_caption"] for r in rows)
    assert wrong == sorted(t for t, _ in list(MATCH_SCORES.items()) if t not in
                           ("pizza and apple and desk and car", "apple and car and desk and pizza"))
    assert result["settings"]["matching_bias_position"] == 2
    assert result["settings"]["matching_scenes_without_position"] == 0
    with pytest.raises(BadInput, match="bias_position 0"):
        evaluate_comco(path, FakeEncoder(dim, texts, images), ["matching"], options={"matching": {"bias_position": 0}},
                       progress=False)


# ----------------------------------------------------------------------------------------- captions and names
def test_combination_captions_keep_list_order_and_names_files(tmp_path):
    assert combination_captions(["a", "b", "c", "d"], 2) == [["a", "b"], ["a", "c"], ["a", "d"], ["b", "c"],
                                                             ["b", "d"], ["c", "d"]]
    assert read_names("simco18")[:4] == ["cube", "sphere", "cylinder", "mug"]
    assert len(read_names("comco72")) == 72
    coco = read_names("coco")  # the 80 COCO instance categories in id order
    assert len(coco) == 80 and coco[:3] == ["person", "bicycle", "car"] and coco[-1] == "toothbrush"
    with pytest.raises(BadInput, match="objects 5"):
        combination_captions(["a", "b", "c"], 5)
    with pytest.raises(BadInput, match="combinations, more than"):
        combination_captions(read_names("comco72"), 4)  # C(72, 4) = 1,028,790
    names = tmp_path / "names.txt"
    names.write_text("car\n\ncarrot\napple\n")
    assert read_names(names) == ["car", "carrot", "apple"]
    (tmp_path / "twice.txt").write_text("car\ncar\n")
    with pytest.raises(BadInput, match="listed twice"):
        read_names(tmp_path / "twice.txt")
    captions = tmp_path / "captions.txt"
    captions.write_text("car and carrot\n\napple and car and carrot\n")
    assert read_caption_file(captions, ["car", "carrot", "apple"]) == [["car", "carrot"],
                                                                        ["apple", "car", "carrot"]]
    captions.write_text("car and carrot\ncar and dog\n")
    with pytest.raises(BadInput, match="line 2: 'dog'"):
        read_caption_file(captions, ["car", "carrot", "apple"])


# ------------------------------------------------------------------------------------------------- the CLI
@pytest.fixture
def fake_tor_model():
    encoder = _tor_encoder()
    kind = register_encoder(EncoderKind("handset:", lambda m: m.startswith("handset:"), lambda m, p, **o: encoder))
    yield "handset:tor"
    registry._REGISTERED.remove(kind)


def _write_inputs(tmp_path):
    names, captions = tmp_path / "names.txt", tmp_path / "captions.txt"
    names.write_text("\n".join(NAMES) + "\n")
    captions.write_text("\n".join(c[0] for c in TOR_CASES) + "\n")
    return names, captions


def test_cli_tor_protocol_both_writes_both_blocks(tmp_path, fake_tor_model):
    names, captions = _write_inputs(tmp_path)
    out = tmp_path / "r.json"
    r = CliRunner().invoke(comco, ["eval", "--tasks", "tor", "--protocol", "both", "--captions", str(captions),
                                   "--names", str(names), "--model", fake_tor_model, "--no-cache", "--quiet",
                                   "--out", str(out)])
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    validate(result, "eval_result", "result")
    assert "tor" in result["metrics"] and "tor" in result["metrics"]["clip_oscope"]
    _check_tor(result["metrics"]["clip_oscope"]["tor"])
    assert "Top-2 Accuracy: 0.8333" in r.output and "Word 2 Accuracy in Correct Top-2 (all captions): 0.5000" \
        in r.output and "TOR  (top-1 among 5 candidates" in r.output
    # bindscope collect lays the figures out in percent
    figures = collect([out])["rows"][0]["figures"]
    assert figures["clip-oscope/tor/2obj/top2"]["value"] == pytest.approx(100 * 5 / 6)
    assert figures["clip-oscope/tor/2obj/pos2/all"]["value"] == pytest.approx(50.0)
    assert figures["clip-oscope/tor/2obj/R@1"]["value"] == pytest.approx(100 * 5 / 12)
    assert figures["clip-oscope/tor/2obj/ndcg"]["value"] == pytest.approx(100 * TOR_EXPECTED["ndcg"])
    assert figures["tor/2obj/pos2/uncond"]["value"] == pytest.approx(50.0)  # bindscope's C2, C4, C5 of 6


def _bad(args, *needles):
    r = CliRunner().invoke(comco, args)
    lines = [line for line in r.output.splitlines() if line.strip() and not line.startswith(("Usage: ", "Try '"))]
    assert r.exit_code == 2, r.output
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_cli_refuses_bad_oscope_options(tmp_path, fake_tor_model):
    names, captions = _write_inputs(tmp_path)
    base = ["eval", "--model", fake_tor_model, "--no-cache", "--quiet", "--out", str(tmp_path / "x.json")]
    _bad(base + ["--captions", str(captions), "--names", str(names), "--vocab", "simco18"], "--vocab 'simco18'")
    _bad(base + ["--captions", str(captions), "--names", str(names), "-n", "5"], "-n 5")
    _bad(base + ["--names", str(names)], "--names", "captions")
    _bad(base + ["--captions", str(tmp_path / "none.txt")], "--captions", "none.txt")
    _bad(base + ["--captions", "combinations", "--objects", "9", "--names", str(names)], "--objects 9", "2..5")
    _bad(base + ["--bias-position", "2"], "--bias-position", "DATA")
    _bad(base + ["--protocol", "paper"], "paper")
    _bad(base + ["--tasks", "toc", "--head-epochs", "0"], "--head-epochs 0")
    assert not (tmp_path / "x.json").exists()
