"""Caption bias on image-caption pairs without annotations (WebDataset shards, Parquet, a folder, as img2dataset
writes them): hand-computed shares from planted detector boxes and segmenter masks, the same from every layout; the
tiny random-weight OWLv2 and SAM end to end; bad input is one Error line."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pytest
from cli_support import refused
from click.testing import CliRunner
from t2i_support import tiny_detector, tiny_segmenter

from bindscope.cli.main import bindscope
from bindscope.errors import BadInput
from bindscope.evaluation.caption_bias import caption_bias_pairs, objects_finder
from bindscope.evaluation.detection import query
from bindscope.importers.image_captions import open_pairs

# image id (pixel (0, 0, 0)), caption, {object: (score, box x0, y0, x1, y1)}
PAIRS = [
    (1, "A dog sitting next to a cat.", {"dog": (0.9, (0, 0, 10, 10)), "cat": (0.8, (5, 5, 25, 25))}),
    (2, "a car parked by a person and a dog", {"car": (0.9, (0, 0, 30, 30)), "person": (0.9, (0, 0, 10, 10)),
                                               "dog": (0.05, (0, 0, 50, 50))}),
    (3, "an apple", {"apple": (0.5, (2, 2, 7, 7))}),
    (4, "a view of the sky", {}),
    (5, "a pizza and a cup", {"pizza": (0.05, (0, 0, 9, 9)), "cup": (0.01, (0, 0, 9, 9))}),
    (6, "two cats and a dog", {"cat": (0.9, (0, 0, 10, 10)), "dog": (0.9, (10, 10, 20, 20))}),
]
# masks a segmenter draws in the found boxes: image id -> {box: area}
MASKS = {1: {(0, 0, 10, 10): 90, (5, 5, 25, 25): 40}, 2: {(0, 0, 30, 30): 10, (0, 0, 10, 10): 500},
         3: {(2, 2, 7, 7): 20}, 6: {(0, 0, 10, 10): 300, (10, 10, 20, 20): 200}}


def _png(value: int) -> bytes:
    from PIL import Image

    pixels = np.zeros((32, 32, 3), np.uint8)
    pixels[0, 0, 0] = value
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _add(archive, name, data: bytes):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def write_webdataset(folder):
    """Two shards as img2dataset's webdataset output writes them (metadata Parquet files beside them), plus an image
    without caption and an unreadable image."""
    folder.mkdir(parents=True)
    for shard, chunk in ((0, PAIRS[:3]), (1, PAIRS[3:])):
        with tarfile.open(folder / f"{shard:05d}.tar", "w") as archive:
            for value, caption, _ in chunk:
                key = f"{shard:05d}{value:04d}"
                _add(archive, f"{key}.png", _png(value))
                _add(archive, f"{key}.txt", caption.encode())
                _add(archive, f"{key}.json", json.dumps({"caption": caption}).encode())
            if shard == 1:
                _add(archive, "000010007.png", _png(7))  # no caption
                _add(archive, "000010008.jpg", b"not an image")
                _add(archive, "000010008.txt", b"a broken dog")
        (folder / f"{shard:05d}.parquet").write_bytes(b"metadata, not read")
    return folder


def write_parquet(path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [(f"{v:09d}", caption, _png(v)) for v, caption, _ in PAIRS] + [("000000009", "a cat", None)]
    table = pa.table({"key": [r[0] for r in rows], "caption": [r[1] for r in rows], "jpg": [r[2] for r in rows],
                      "status": ["success"] * 6 + ["failed_to_download"]})
    pq.write_table(table, path)
    return path


def write_folder(folder):
    (folder / "00000").mkdir(parents=True)
    for value, caption, _ in PAIRS:
        (folder / "00000" / f"{value:09d}.png").write_bytes(_png(value))
        (folder / "00000" / f"{value:09d}.txt").write_text(caption)
    return folder


class PlantedDetector:
    def __init__(self):
        self.table = {(v, query(name)): found for v, _, objects in PAIRS for name, found in objects.items()}

    def info(self):
        return {"name": "planted", "identity": "planted", "family": "owlv2"}

    def detect(self, images, queries):
        out = []
        for image, texts in zip(images, queries):
            found = [self.table[(int(image[0, 0, 0]), t)] for t in texts]
            out.append((np.array([f[0] for f in found]), np.array([f[1] for f in found], float)))
        return out


class PlantedSegmenter:
    def info(self):
        return {"name": "planted-sam", "identity": "planted", "family": "sam"}

    def areas(self, image, boxes):
        return np.array([MASKS[int(image[0, 0, 0])][tuple(int(v) for v in box)] for box in boxes])


def _shares(result):
    return {k: (b["count"], b["of"]) for k, b in result["positions"].items()}


@pytest.mark.parametrize("layout", ["webdataset", "parquet", "folder"])
def test_planted_boxes_give_hand_computed_shares(tmp_path, layout):
    path = {"webdataset": lambda: write_webdataset(tmp_path / "wds"),
            "parquet": lambda: write_parquet(tmp_path / "pairs.parquet"),
            "folder": lambda: write_folder(tmp_path / "files")}[layout]()
    pairs = open_pairs(path)
    rows = []
    result = caption_bias_pairs(pairs, PlantedDetector(), threshold=0.5, progress=False, rows=rows)
    # found objects and box areas: 1: dog 100, cat 400 -> the largest is 2nd of 2; 2: car 900, person 100 (dog's
    # score is below the threshold) -> 1st of 2; 3: apple -> 1st of 1; 6: cat 100, dog 100 (equal: the earlier
    # mention) -> 1st of 2. Caption 4 names no category, caption 5 none the detector finds.
    assert pairs.layout == layout and result["dataset"]["layout"] == layout
    assert (result["num_captions"], result["num_images"]) == (4, 4)
    assert result["largest_first_share"] == pytest.approx(3 / 4)
    assert _shares(result) == {"1": (3, 4), "2": (1, 4), "not_mentioned": (0, 4)}
    by_num = result["by_num_mentioned"]
    assert {m: b["captions"] for m, b in by_num.items()} == {"1": 1, "2": 3}
    assert [(b["count"], b["of"]) for b in by_num["2"]["positions"].values()] == [(2, 3), (1, 3), (0, 3)]
    skipped = {"webdataset": {"images_without_caption": 1, "unreadable_images": 1, "pairs_without_image": 0},
               "parquet": {"images_without_caption": 0, "unreadable_images": 0, "pairs_without_image": 1},
               "folder": {"images_without_caption": 0, "unreadable_images": 0, "pairs_without_image": 0}}[layout]
    assert result["skipped"] == {"captions_without_objects": 1, "captions_without_found_objects": 1, **skipped,
                                 "samples": 2 + sum(skipped.values())}
    assert result["method"]["areas"] == "the detector's best box (pixels)" and result["method"]["segmenter"] is None
    assert result["method"]["objects"].startswith("lexicon: ") and result["method"]["names"] == "coco"
    assert [r["position"] for r in rows] == [2, 1, 1, 0, 1]  # caption 4 names nothing: no row
    assert rows[1]["objects"][2] == {"name": "dog", "phrase": "dog", "score": 0.05, "box": [0.0, 0.0, 50.0, 50.0],
                                     "area": 2500.0, "found": False}


def test_segmenter_masks_replace_the_box_areas(tmp_path):
    pairs = open_pairs(write_folder(tmp_path / "files"))
    result = caption_bias_pairs(pairs, PlantedDetector(), PlantedSegmenter(), threshold=0.5, progress=False)
    # mask areas: 1: dog 90 > cat 40 -> 1st; 2: car 10 < person 500 -> 2nd; 3: 1st; 6: cat 300 > dog 200 -> 1st
    assert _shares(result) == {"1": (3, 4), "2": (1, 4), "not_mentioned": (0, 4)}
    assert [b["count"] for b in result["by_num_mentioned"]["2"]["positions"].values()] == [2, 1, 0]
    assert result["method"]["segmenter"]["name"] == "planted-sam" and "segmenter" in result["method"]["areas"]


def test_caption_objects_from_the_lexicon_and_from_noun_chunks():
    from spacy.lang.en import English
    from spacy.tokens import Doc

    lexicon = objects_finder("lexicon", "coco")
    assert lexicon("Two men and a hot dog next to a dog and a man") == [("person", "men"), ("hot dog", "hot dog"),
                                                                        ("dog", "dog")]
    vocab = English().vocab

    def parsed(caption):  # what a parser gives for "a brown dog chases two cats in it"
        words = ["a", "brown", "dog", "chases", "two", "cats", "in", "it"]
        return Doc(vocab, words=words, pos=["DET", "ADJ", "NOUN", "VERB", "NUM", "NOUN", "ADP", "PRON"],
                   deps=["det", "amod", "nsubj", "ROOT", "nummod", "dobj", "prep", "pobj"],
                   heads=[2, 2, 3, 3, 5, 3, 3, 6], lemmas=["a", "brown", "dog", "chase", "two", "cat", "in", "it"])
    assert objects_finder("spacy", nlp=parsed)("ignored") == [("dog", "a brown dog"), ("cat", "two cats")]
    with pytest.raises(BadInput, match="caption_objects 'llm' is not allowed; use one of lexicon, spacy"):
        objects_finder("llm")


def test_tiny_detector_and_segmenter_run_end_to_end(tmp_path):
    data = write_webdataset(tmp_path / "wds")
    out = tmp_path / "bias.json"
    result = CliRunner().invoke(bindscope, ["caption-bias", str(data), "--detector", str(tiny_detector("owlv2")),
                                            "--segmenter", str(tiny_segmenter()), "--threshold", "0", "--device",
                                            "cpu", "--out", str(out), "--plot", str(tmp_path / "bias.png"),
                                            "--quiet"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    written = json.loads(out.read_text())
    # threshold 0: every named object is found; captions 1, 2, 3, 5, 6 name 2, 3, 1, 2, 2 objects
    assert written["num_captions"] == 5 and set(written["by_num_mentioned"]) == {"1", "2", "3"}
    assert written["method"]["detector"]["family"] == "owlv2" and written["method"]["segmenter"]["family"] == "sam"
    assert len((tmp_path / "bias.samples.jsonl").read_text().splitlines()) == 5
    assert (tmp_path / "bias.png").is_file()


def _bad(root, args, *needles):
    return refused(bindscope, ["caption-bias", *args], root, *needles)


def test_bad_input_is_one_error_line(tmp_path):
    from coco_fixture import write_coco

    from bindscope.importers.coco import import_coco

    work = tmp_path / "work"
    write_webdataset(work / "wds")
    _bad(work, ["wds", "--out", "r.json"], "--detector", "image-caption pairs without annotations")
    _bad(work, ["wds", "--detector", str(tiny_detector())], "--out is needed for image-caption pairs")
    _bad(work, ["wds", "--detector", "google/owlv2-base-patch16-ensemble", "--out", "r.json", "--device", "cpu"],
         "--detector 'google/owlv2-base-patch16-ensemble' could not be loaded", "offline")
    _bad(work, ["wds", "--detector", str(tiny_detector()), "--segmenter", str(tiny_detector()), "--out", "r.json",
                "--device", "cpu"], "--segmenter", "is a owlv2 model; use one of the families sam")
    _bad(work, ["nowhere", "--detector", str(tiny_detector()), "--out", "r.json"], "'nowhere' does not exist")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"url": ["http://x"], "caption": ["a dog"]}), work / "meta.parquet")
    _bad(work, ["meta.parquet", "--detector", str(tiny_detector()), "--out", "r.json"],
         "needs a 'caption' column and the image bytes")
    files = write_coco(tmp_path / "src")
    import_coco(*files, work / "coco", image_size=40, progress=False)
    _bad(work, ["coco", "--detector", str(tiny_detector())], "--detector applies to image-caption pairs",
         "is a bindscope dataset")


def test_spacy_without_its_model_is_one_error_line(tmp_path):
    import importlib.util

    if importlib.util.find_spec("en_core_web_sm") is not None:
        pytest.skip("en_core_web_sm is installed here")
    write_folder(tmp_path / "files")
    _bad(tmp_path, ["files", "--detector", str(tiny_detector()), "--caption-objects", "spacy", "--out", "r.json"],
         "--caption-objects 'spacy'", "python -m spacy download en_core_web_sm")
