"""CLEVR and PUG:SPAR imports: sources in their published layouts written here, imported, verified, counted by
hand; bad sources refused with one error and nothing written; probes, LABCLIP and conjunctive search run on the
imported datasets."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from scene_fixtures import (CLEVR_CAPTIONS, DECLARED, PUG_CAPTIONS, PUG_KEPT, PUG_ROWS, pug_table, write_clevr,
                            write_pug_csv, write_pug_parquet)

from bindscope.cli.main import bindscope, comco
from bindscope.errors import BadInput
from bindscope.format.reader import Dataset
from bindscope.importers.clevr import CLEVR_LICENCE, import_clevr
from bindscope.importers.pug import import_pug
from bindscope.publish.release import source_licences

HOLDS = frozenset({"attributes", "captions", "mentions", "negatives", "objects", "plans"})


def invoke(args):
    return CliRunner().invoke(bindscope, [str(a) for a in args])


def test_pyproject_declares_the_importers():
    assert DECLARED["clevr"] == "bindscope.importers.clevr:ClevrImporter"
    assert DECLARED["pug"] == "bindscope.importers.pug:PugImporter"


@pytest.fixture(scope="module")
def clevr(tmp_path_factory):
    root = tmp_path_factory.mktemp("clevr")
    images, scenes = write_clevr(root / "src")
    out = root / "clevr"
    r = invoke(["import", "clevr", "--images", images, "--scenes", scenes, "--out", out, "--image-size", 64,
                "--shard-size", 4, "--quiet"])
    assert r.exit_code == 0, r.output
    assert "6 samples" in r.output and "14 objects (no masks), 6 captions, 7 binding and 14 recognition" in r.output
    return out


def test_clevr_import_counts_by_hand(clevr):
    assert invoke(["verify", clevr]).exit_code == 0
    manifest = json.loads((clevr / "manifest.json").read_text())
    assert manifest["generator"]["name"] == "clevr" and source_licences(manifest) == [CLEVR_LICENCE]
    assert manifest["statistics"] == {
        "source": {"scenes_in_file": 6, "scenes_selected": 6, "objects_selected": 14},
        "splits": {"val": {"images": 6, "objects": 14, "captions": 6, "recognition_negatives": 14,
                           "binding_negatives": 7}}}
    assert manifest["object_attributes"] == ["colour", "material", "size"]
    with Dataset(clevr) as ds:
        assert ds.holds == HOLDS and ds.caption_attributes == ["colour"]  # no "masks": CLEVR has none
        samples = list(ds.split("val"))
    assert [s.caption for s in samples] == CLEVR_CAPTIONS
    assert [sum(n.kind == "binding" for n in s.negatives) for s in samples] == [1, 1, 2, 0, 0, 3]
    third = samples[2]
    assert sorted(n.caption for n in third.negatives if n.kind == "binding") == [
        "green cylinder and green cube and red sphere", "red cylinder and green cube and green sphere"]
    assert all(n.attribute == "colour" and n.caption != third.caption for n in third.negatives)
    assert [(o.index, o.category, o.category_id, o.attributes, o.mention_position, o.area, o.bbox)
            for o in third.objects] == [
        (1, "cylinder", 2, {"colour": "green", "material": "rubber", "size": "small"}, 1, 0, (0, 0, 0, 0)),
        (2, "cube", 0, {"colour": "red", "material": "metal", "size": "large"}, 2, 0, (0, 0, 0, 0)),
        (3, "sphere", 1, {"colour": "green", "material": "rubber", "size": "small"}, 3, 0, (0, 0, 0, 0))]
    # 48 x 32 letterboxed into 64 x 64: scale 4/3 across, 43/32 down, 10 rows of padding above.
    assert third.spec["scale"] == [4 / 3, 43 / 32] and third.spec["offset"] == [0, 10]
    assert third.objects[1].extras == pytest.approx({"pixel_x": 20 * 4 / 3, "pixel_y": 20 * 43 / 32 + 10,
                                                     "pixel_depth": 12.5, "x": 1.5, "y": -0.5, "z": 0.35,
                                                     "rotation": 45.0})
    assert third.spec["relationships"]["left"] == [[], [0], [0, 1]]
    assert not third.mask.any() and not third.image[:10].any() and (third.image[20:50] == 20).all()


def test_a_dataset_without_masks_refuses_the_tasks_that_need_them(clevr, tmp_path):
    r = CliRunner().invoke(comco, ["eval", str(clevr), "--tasks", "i2tor", "--model", "ViT-B-32", "--pretrained",
                                   "none", "--device", "cpu", "--out", str(tmp_path / "e.json")])
    assert r.exit_code == 2 and "task i2tor needs masks" in r.output, r.output
    assert not (tmp_path / "e.json").exists()


def test_clevr_captions_can_give_more_attributes(tmp_path):
    images, scenes = write_clevr(tmp_path / "src")
    manifest = import_clevr(images, scenes, tmp_path / "out", split="clevr_val", attributes="material,size,colour",
                            image_size=32, limit=2, progress=False)
    assert manifest["config"]["attributes"] == ["size", "colour", "material"]  # CLEVR's word order
    with Dataset(tmp_path / "out") as ds:
        first = ds.split("clevr_val")[0]
    assert first.caption == "small red rubber cube and large blue metal sphere"
    # three attributes, two objects: 3 x 2 recognition and 3 binding negatives (each attribute differs)
    assert [n.kind for n in first.negatives].count("binding") == 3 and len(first.negatives) == 9


@pytest.fixture(scope="module")
def pug(tmp_path_factory):
    root = tmp_path_factory.mktemp("pug")
    out = root / "pug"
    r = invoke(["import", "pug", "--parquet", write_pug_parquet(root / "hub"), "--out", out, "--image-size", 32,
                "--shard-size", 2, "--quiet"])
    assert r.exit_code == 0, r.output
    assert "rows: 8 read, 5 kept, 5 imported" in r.output
    return out


def test_pug_parquet_import_counts_by_hand(pug):
    assert invoke(["verify", pug]).exit_code == 0
    manifest = json.loads((pug / "manifest.json").read_text())
    assert manifest["statistics"] == {
        "source": {"rows": 8, "rows_kept": 5, "rows_without_two_animals": 1, "rows_with_one_animal_twice": 1,
                   "rows_with_an_untextured_animal": 1, "rows_selected": 5},
        "splits": {"train": {"images": 5, "objects": 10, "captions": 5, "recognition_negatives": 10,
                             "binding_negatives": 5}}}
    assert [f["file"] for f in manifest["config"]["inputs"]["files"]] == ["train-00000-of-00002.parquet",
                                                                          "train-00001-of-00002.parquet"]
    with Dataset(pug) as ds:
        assert ds.holds == HOLDS and ds.caption_attributes == ["texture"]
        samples = list(ds.split("train"))
    assert [s.caption for s in samples] == PUG_CAPTIONS
    assert [s.spec["pug_row"] for s in samples] == PUG_KEPT
    assert [(s.spec["parquet_file"][6:11], s.spec["parquet_row"]) for s in samples] == [
        ("00000", 0), ("00000", 3), ("00001", 0), ("00001", 1), ("00001", 2)]
    assert [int(s.image[16, 16, 0]) for s in samples] == [20 * k for k in PUG_KEPT]  # the right row's image
    first = samples[0]
    assert [(o.category, o.category_id, o.attributes) for o in first.objects] == [
        ("Elephant", 1, {"texture": "Blue", "position": "left"}), ("Camel", 0, {"texture": "Red", "position": "right"})]
    assert [n.caption for n in first.negatives if n.kind == "binding"] == ["Red Elephant and Blue Camel"]


def test_the_same_pug_import_with_two_jobs_gives_the_same_bytes(pug, tmp_path):
    manifest = import_pug(tmp_path / "out", parquet=write_pug_parquet(tmp_path / "hub"), image_size=32, shard_size=2,
                          jobs=2, progress=False)
    assert manifest["splits"] == json.loads((pug / "manifest.json").read_text())["splits"]  # shard sha256s included


@pytest.mark.parametrize("variant", ["spar", "spare"])
def test_pug_csv_layouts_give_the_same_scenes(tmp_path, variant, pug):
    labels = write_pug_csv(tmp_path / "src", variant)
    manifest = import_pug(tmp_path / "out", labels=labels, variant=variant, image_size=32, progress=False)
    assert manifest["statistics"]["splits"]["train"]["binding_negatives"] == 5
    with Dataset(tmp_path / "out") as ds, Dataset(pug) as hub:
        mine, theirs = list(ds.split("train")), list(hub.split("train"))
    assert [s.caption for s in mine] == PUG_CAPTIONS
    assert all(np.array_equal(a.image, b.image) and a.negatives == b.negatives for a, b in zip(mine, theirs))
    assert mine[1].spec["image_file"] == ("Island/00003.png" if variant == "spare" else "00003.png")


def test_a_repeated_or_interrupted_import_resumes(tmp_path, monkeypatch):
    from bindscope.importers.clevr import ClevrImporter

    images, scenes = write_clevr(tmp_path / "src")
    out = tmp_path / "out"
    real, calls = ClevrImporter._images, []

    def failing(self, chosen):
        calls.append(len(chosen))
        if len(calls) == 2:
            raise KeyboardInterrupt  # stopped after the first shard
        return real(self, chosen)

    monkeypatch.setattr(ClevrImporter, "_images", failing)
    with pytest.raises(KeyboardInterrupt):
        import_clevr(images, scenes, out, image_size=32, shard_size=4, progress=False)
    first = out / "shards" / "val-00000.h5"
    assert first.is_file() and not (out / "manifest.json").exists()
    stamp = first.stat().st_mtime_ns
    manifest = import_clevr(images, scenes, out, image_size=32, shard_size=4, progress=False)
    assert calls == [4, 2, 2] and first.stat().st_mtime_ns == stamp  # the finished shard was kept
    assert import_clevr(images, scenes, out, image_size=32, shard_size=4, progress=False) == manifest


def _clevr_case(case):
    def mutate(data):
        scene = data["scenes"][1]
        if case == "colour":
            scene["objects"][0]["color"] = "pink"
        elif case == "twice":
            scene["image_index"] = 0
        elif case == "outside":
            scene["image_filename"] = "../../escape.png"
        elif case == "relationship":
            scene["relationships"]["left"][0] = [7]
        elif case == "coords":
            scene["objects"][1]["pixel_coords"] = [1, 2]
        elif case == "split":
            scene["split"] = "train"
    return mutate


@pytest.mark.parametrize("case, needle", [
    ("colour", "scenes[1] (image_index 1).objects[0]: color 'pink' is not a CLEVR value; allowed: gray, red"),
    ("twice", "scenes[1] (image_index 0): image_index appears twice"),
    ("outside", "escape.png: image (scene image_index 1) name '../../escape.png' leads outside"),
    ("relationship", "relationships['left'] must hold one list per object (2) of object positions 0..1"),
    ("coords", "objects[1]: pixel_coords must be a list of 3 finite numbers"),
    ("split", "mixes the splits ['train', 'val']"),
    ("missing", "CLEVR_val_000004.png: image (scene image_index 4) missing"),
    ("json", "is not valid JSON"),
])
def test_bad_clevr_sources_are_one_error_and_nothing_is_written(tmp_path, case, needle):
    images, scenes = write_clevr(tmp_path / "src", mutate=_clevr_case(case),
                                 skip_files=("CLEVR_val_000004.png",) if case == "missing" else ())
    if case == "json":
        scenes.write_text(scenes.read_text()[:-20])
    r = invoke(["import", "clevr", "--images", images, "--scenes", scenes, "--out", tmp_path / "out", "--quiet"])
    assert r.exit_code == 2 and r.output.startswith("Error: ") and needle in r.output, r.output
    assert r.output.count("\n") == 1 and not (tmp_path / "out").exists()


def _pug_case(tmp_path, case):
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "hub"
    data.mkdir()
    if case == "column":
        pq.write_table(pug_table(PUG_ROWS).drop_columns(["character2_texture"]), data / "a.parquet")
    elif case == "garbage":
        (data / "a.parquet").write_bytes(b"PAR1 this is not a Parquet file PAR1")
    elif case == "no bytes":
        cells = [{"bytes": None, "path": "x.png"} for _ in PUG_ROWS]
        pq.write_table(pug_table(PUG_ROWS, image_cells=cells), data / "a.parquet")
    elif case == "not an image":
        cells = [{"bytes": b"not a png", "path": "x.png"} for _ in PUG_ROWS]
        pq.write_table(pug_table(PUG_ROWS, image_cells=cells), data / "a.parquet")
    elif case == "type":
        pq.write_table(pug_table(PUG_ROWS).set_column(1, "world_name", pa.array(range(8))), data / "a.parquet")
    return ["--parquet", data]


@pytest.mark.parametrize("case, needle", [
    ("column", "missing columns character2_texture; PUG needs string columns"),
    ("garbage", "is not a readable Parquet file"),
    ("no bytes", "row 0: the image cell holds no bytes"),
    ("not an image", "a.parquet' row 0 is not a readable image (cannot identify image file)"),
    ("type", "columns world_name are not strings"),
    ("ragged", "line 3: 7 fields, the header has 8"),
    ("utf8", "is not UTF-8 text"),
    ("both", "give either parquet"),
])
def test_bad_pug_sources_are_one_error_and_nothing_is_written(tmp_path, case, needle):
    if case in ("ragged", "utf8"):
        labels = write_pug_csv(tmp_path / "csv")
        lines = labels.read_text().splitlines()
        lines[2] = lines[2].rsplit(",", 1)[0] if case == "ragged" else lines[2]
        labels.write_bytes("\n".join(lines).encode() + (b"\xff\n" if case == "utf8" else b"\n"))
        args = ["--labels", labels]
    elif case == "both":
        args = ["--labels", write_pug_csv(tmp_path / "csv"), "--parquet", write_pug_parquet(tmp_path / "hub")]
    else:
        args = _pug_case(tmp_path, case)
    r = invoke(["import", "pug", *args, "--out", tmp_path / "out", "--quiet"])
    assert r.exit_code == 2 and r.output.startswith("Error: ") and needle in r.output, r.output
    assert r.output.count("\n") == 1 and not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------ the tools

MODEL = ["--model", "ViT-B-32", "--pretrained", "none", "--device", "cpu", "--no-cache", "--quiet"]


@pytest.mark.slow
@pytest.mark.parametrize("which", ["clevr", "pug"])
def test_probe_labclip_and_conjunctive_search_run_on_the_imports(which, clevr, pug, tmp_path):
    from bindscope.alignment.data import load_table
    from bindscope.alignment.labclip import load_labclip
    from bindscope.alignment.pairs import labclip_items
    from bindscope.schemas import validate

    data = {"clevr": clevr, "pug": pug}[which]
    probe = tmp_path / "probe.json"
    r = invoke(["probe", data, *MODEL, "--steps", 10, "--out", probe])
    assert r.exit_code == 0, r.output
    result = json.loads(probe.read_text())
    validate(result, "alignment_result", "result")
    assert result["metrics"]["n_samples"] == (6 if which == "clevr" else 5)
    attribute = "colour" if which == "clevr" else "texture"
    assert set(result["metrics"]["modalities"]) == {"image", "text"} and result["metrics"]["caption_attributes"] == []
    assert attribute in result["metrics"]["modalities"]["text"]

    labclip = tmp_path / "labclip.pt"
    r = invoke(["labclip", "fit", data, *MODEL, "--epochs", 2, "--holdout-fraction", 0.2, "--out", labclip])
    assert r.exit_code == 0, r.output
    meta = load_labclip(labclip).meta
    with Dataset(data) as ds:
        table = load_table(ds, ds.split_names[0])
    # the stored binding negatives are LABCLIP's: CLEVR scenes 0, 1, 2 and 5 have some; every PUG row does
    assert len(labclip_items(table)) == (4 if which == "clevr" else 5) and meta["negatives"] == "stored"
    assert meta["n_fit_samples"] + meta["n_held_out_samples"] == len(labclip_items(table))
    r = invoke(["labclip", "eval", data, *MODEL, "--labclip", labclip, "--out", tmp_path / "eval.json"])
    assert r.exit_code == 0, r.output

    target = "category=cube,colour=red" if which == "clevr" else "category=Camel,texture=Red"
    search = tmp_path / "search.json"
    r = invoke(["probe", data, "--task", "conjunctive-search", "--target", target, *MODEL, "--steps", 10,
                "--out", search])
    assert r.exit_code == 0, r.output
    metrics = json.loads(search.read_text())["metrics"]
    # CLEVR: a red cube in scenes 0, 2 and 3 of the 6; PUG: a Red Camel in the first of the 5 kept rows
    assert metrics["bags_matched"] is False and metrics["n_train"] + metrics["n_val"] + metrics["n_test"] == \
        (6 if which == "clevr" else 5)
    assert ("'red cube'" if which == "clevr" else "'Red Camel'") in r.output

    # comco eval scores the stored negatives (14 recognition, 7 binding on CLEVR; 10 and 5 on PUG) and TOR
    scores = tmp_path / "eval-scenes.json"
    r = CliRunner().invoke(comco, ["eval", str(data), "--tasks", "tor,binding", *MODEL, "--out", str(scores)])
    assert r.exit_code == 0, r.output
    block = json.loads(scores.read_text())["metrics"]["binding"]
    totals = (14, 7) if which == "clevr" else (10, 5)
    assert (block["recognition"]["per_attribute"][attribute]["total"],
            block["binding_unconditional"]["per_attribute"][attribute]["total"]) == totals


def test_conjunctive_search_needs_a_target_on_a_dataset_that_names_none(clevr, tmp_path):
    r = invoke(["probe", clevr, "--task", "conjunctive-search", *MODEL, "--out", tmp_path / "s.json"])
    assert r.exit_code == 2 and "--task conjunctive-search needs a target" in r.output, r.output
    r = invoke(["probe", clevr, "--task", "conjunctive-search", "--target", "category=cube,shade=red", *MODEL,
                "--out", tmp_path / "s.json"])
    assert r.exit_code == 2 and "target attribute 'shade'" in r.output, r.output
    r = invoke(["probe", clevr, "--target", "category=cube,colour=red", *MODEL, "--out", tmp_path / "s.json"])
    assert r.exit_code == 2 and "--target 'category=cube,colour=red' applies to --task 'conjunctive-search' only" \
        in r.output, r.output
    with pytest.raises(BadInput, match="give the category and one attribute value"):
        from bindscope.alignment.conjunctive import parse_target

        parse_target("cube")
    assert not (tmp_path / "s.json").exists()
