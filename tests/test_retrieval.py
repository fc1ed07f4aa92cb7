"""Image-text retrieval R@k (bindscope.evaluation.retrieval): hand-computed ranks on hand-built similarity
matrices (a tie, two captions per image, an image without a caption), and `comco eval --tasks retrieval` on a
COCO import with a fake encoder, before and after a LABCLIP map."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from coco_fixture import write_coco
from eval_fakes import FakeEncoder, position_weighted_rule, unit

from bindscope.alignment.labclip import LabclipMap
from bindscope.cli.main import comco
from bindscope.errors import BadInput
from bindscope.evaluation.comco import evaluate_comco
from bindscope.evaluation.retrieval import best_match_ranks, format_retrieval, recall_at_k, retrieval_ranks
from bindscope.evaluation.stats import wilson_interval
from bindscope.importers.coco import import_coco

# captions x images; caption t describes image t. Caption 1 ties its own image (0.3) with image 2 (0.3): the
# tie counts against it (rank 3, not 2).
S = np.array([[0.9, 0.5, 0.1],
              [0.8, 0.3, 0.3],
              [0.2, 0.6, 0.4]], np.float32)


def _recall(block, direction):
    return {k: p["accuracy"] for k, p in block[direction]["recall"].items()}


def test_three_by_three_by_hand():
    # text->image: caption 0 rank 1; caption 1: 0.8 and the tied 0.3 before it -> 3; caption 2: 0.6 before -> 2
    # image->text: image 0: its caption 0.9 highest -> 1; image 1: 0.5, 0.6 before its 0.3 -> 3; image 2 -> 1
    t2i, i2t = retrieval_ranks(S, np.eye(3, dtype=np.float32), [0, 1, 2])
    assert t2i.tolist() == [1, 3, 2] and i2t.tolist() == [1, 3, 1]
    block = recall_at_k(S, np.eye(3, dtype=np.float32), [0, 1, 2], ks=(1, 2, 3))
    assert _recall(block, "text_to_image") == {"1": 1 / 3, "2": 2 / 3, "3": 1.0}
    assert _recall(block, "image_to_text") == {"1": 2 / 3, "2": 2 / 3, "3": 1.0}
    assert block["text_to_image"]["recall"]["1"]["ci95"] == wilson_interval(1, 3)
    assert block["image_to_text"]["recall"]["1"]["ci95"] == wilson_interval(2, 3)
    assert block["text_to_image"]["recall"]["1"]["clusters"] == 3
    assert (block["text_to_image"]["median_rank"], block["image_to_text"]["median_rank"]) == (2.0, 1.0)
    assert (block["images"], block["captions"], block["images_without_captions"]) == (3, 3, 0)


def test_two_captions_per_image_any_caption_counts():
    # captions 0, 1 -> image 0; captions 2, 3 -> image 1
    s = np.array([[0.2, 0.85],   # caption 0: image 1 before its own -> 2
                  [0.9, 0.1],    # caption 1 -> 1
                  [0.5, 0.5],    # caption 2: tie with image 0 -> 2
                  [0.1, 0.8]],   # caption 3 -> 1
                 np.float32)
    t2i, i2t = retrieval_ranks(s, np.eye(2, dtype=np.float32), [0, 0, 1, 1])
    # image 0: its best caption (1, 0.9) is first, although its caption 0 is last; image 1: its best caption
    # (3, 0.8) comes after caption 0 (0.85) -> 2
    assert t2i.tolist() == [2, 1, 2, 1] and i2t.tolist() == [1, 2]
    block = recall_at_k(s, np.eye(2, dtype=np.float32), [0, 0, 1, 1], ks=(1, 2))
    assert _recall(block, "text_to_image") == {"1": 0.5, "2": 1.0}
    assert _recall(block, "image_to_text") == {"1": 0.5, "2": 1.0}
    assert block["text_to_image"]["recall"]["1"]["clusters"] == 2
    assert block["text_to_image"]["queries"] == 4 and block["image_to_text"]["queries"] == 2


def test_an_image_without_a_caption_is_a_candidate_not_a_query():
    rows = []
    block = recall_at_k(S[:2], np.eye(3, dtype=np.float32), [0, 1], ks=(1,), rows=rows, image_ids=[7, 9, 12],
                        captions=["a", "b"])
    assert block["images_without_captions"] == 1 and block["image_to_text"]["queries"] == 2
    # image 1 against captions 0 and 1 only: 0.5 (caption 0) before its own 0.3 -> rank 2
    assert [r["rank"] for r in rows] == [1, 3, 1, 2]
    assert rows[1] == {"task": "retrieval-text-to-image", "sample": 9, "caption": "b", "rank": 3}
    assert rows[3] == {"task": "retrieval-image-to-text", "sample": 9, "rank": 2}


def test_bad_input():
    with pytest.raises(BadInput, match="at least one matching"):
        best_match_ranks(S, np.zeros((3, 3), bool))
    with pytest.raises(BadInput, match="image row"):
        retrieval_ranks(S, np.eye(3, dtype=np.float32), [0, 1, 3])
    with pytest.raises(BadInput, match="cut-offs"):
        recall_at_k(S, np.eye(3, dtype=np.float32), [0, 1, 2], ks=(0,))


NAMES = ["person", "car", "cat", "dog", "couch"]
DIM = 8
E = {n: unit(DIM, i) for i, n in enumerate(NAMES)}
CAPTION_VECTORS = {"A man with his dog.": "person", "A dog and a woman on a sofa.": "person",
                   "Two people standing outside.": "person", "A scenic view.": "dog",                 # image 7
                   "A kitten sitting next to a parked car.": "couch", "A red car and a cat.": "car",  # image 9
                   "A person sits on a couch near a dog.": "dog"}                                      # image 12
# image ids are pixel [0, 0, 0]; image 9 is letterboxed, its id pixel reads 0
IMAGE_VECTORS = {7: E["dog"], 0: E["car"], 12: 0.8 * E["person"] + 0.6 * E["couch"]}


def test_comco_eval_retrieval_on_coco_before_and_after_a_labclip_map(tmp_path):
    files = write_coco(tmp_path / "src")
    import_coco(*files, tmp_path / "coco", image_size=40, progress=False)
    texts = dict(E)
    texts.update({c: E[n] for c, n in CAPTION_VECTORS.items()})
    encoder = FakeEncoder(DIM, texts, IMAGE_VECTORS, text_rule=position_weighted_rule(NAMES, DIM))
    swap = np.eye(DIM, dtype=np.float32)[[3, 1, 2, 0, 4, 5, 6, 7]]  # the map exchanges person and dog
    rows = []
    result = evaluate_comco(tmp_path / "coco", encoder, ["retrieval"], text_transform=LabclipMap(swap),
                            progress=False, rows=rows)
    block = result["metrics"]["retrieval"]
    assert (block["images"], block["captions"]) == (3, 7)
    # Before: captions of image 7 are person, person, person, dog -> ranks 3, 3, 3, 1 (their own image scores 0,
    # tied with image 9); image 9's: couch (rank 3), car (1); image 12's: dog (3). Images: 7's best caption (dog,
    # 1.0) comes after image 12's dog caption -> 2; 9 -> 1; 12's only caption scores 0, last of 7.
    before = block["before_text_transform"]
    assert _recall(before, "text_to_image") == {"1": 2 / 7, "5": 1.0, "10": 1.0}
    assert _recall(before, "image_to_text") == {"1": 1 / 3, "5": 2 / 3, "10": 1.0}
    # After the map: person <-> dog. Captions: 1, 1, 1, 3 | 3, 1 | 1; images: 7 -> 1, 9 -> 1, 12: its caption
    # (now person, 0.8) ties with image 7's "A scenic view." (now person) -> 2.
    assert _recall(block, "text_to_image") == {"1": 5 / 7, "5": 1.0, "10": 1.0}
    assert _recall(block, "image_to_text") == {"1": 2 / 3, "5": 1.0, "10": 1.0}
    assert block["text_to_image"]["recall"]["1"]["clusters"] == 3
    assert [r["rank"] for r in rows if r["task"] == "retrieval-image-to-text"] == [1, 1, 2]
    assert "CLIP_benchmark" in result["settings"]["retrieval"]["definition"]
    lines = format_retrieval(result["metrics"])
    assert lines[1].startswith("  text->image (7 captions): R@1 71.4 [")
    assert lines[3].startswith("  before the text transform: text->image (7 captions): R@1 28.6 [")
    assert "before_text_transform" not in evaluate_comco(tmp_path / "coco", encoder, ["retrieval"],
                                                         progress=False)["metrics"]["retrieval"]


def test_the_task_list_names_retrieval(tmp_path):
    files = write_coco(tmp_path / "src")
    import_coco(*files, tmp_path / "coco", image_size=40, progress=False)
    r = CliRunner().invoke(comco, ["eval", str(tmp_path / "coco"), "--model", "hf:sentence-transformers/x",
                                   "--tasks", "retrieval,nonsense"])
    assert r.exit_code == 2 and "unknown task 'nonsense'" in r.output and "retrieval" in r.output


def test_collect_reads_the_retrieval_columns(tmp_path):
    import json

    from bindscope.evaluation.collect import collect

    files = write_coco(tmp_path / "src")
    import_coco(*files, tmp_path / "coco", image_size=40, progress=False)
    texts = dict(E)
    texts.update({c: E[n] for c, n in CAPTION_VECTORS.items()})
    encoder = FakeEncoder(DIM, texts, IMAGE_VECTORS, text_rule=position_weighted_rule(NAMES, DIM))
    swap = np.eye(DIM, dtype=np.float32)[[3, 1, 2, 0, 4, 5, 6, 7]]
    result = evaluate_comco(tmp_path / "coco", encoder, ["retrieval"], text_transform=LabclipMap(swap),
                            progress=False)
    (tmp_path / "r.json").write_text(json.dumps(result))
    table = collect([tmp_path / "r.json"])
    assert table["columns"] == [f"retrieval{b}/{d}/R@{k}" for b in ("", "/before")
                                for d in ("text-to-image", "image-to-text") for k in (1, 5, 10)]
    figures = table["rows"][0]["figures"]
    assert figures["retrieval/text-to-image/R@1"]["value"] == pytest.approx(100 * 5 / 7)
    assert figures["retrieval/text-to-image/R@1"]["interval"] == "img"
    assert figures["retrieval/before/image-to-text/R@1"]["value"] == pytest.approx(100 / 3)
    assert figures["retrieval/before/image-to-text/R@1"]["interval"] == "W"
