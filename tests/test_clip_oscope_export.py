"""bindscope export clip-oscope: the ComCO authors' folder layout (references/<class>.png,
<n>-objects/<obj1>_..._<objn>.png) written from a tiny ComCO-format dataset built here."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
from click.testing import CliRunner
from eval_fakes import SpecGenerator, build, comco_fixture, image, obj
from PIL import Image

from bindscope.cli.main import bindscope
from bindscope.format.reader import Dataset
from bindscope.format.records import Sample

# comco_fixture scenes (category, size rank, mention position), see tests/eval_fakes.py
MENTION = {"2-objects": ["apple_car.png"],
           "3-objects": ["apple_pizza_car.png", "car_pizza_apple.png", "desk_car_pizza.png", "pizza_apple_desk.png"]}
SIZE = {"2-objects": ["apple_car.png"],
        "3-objects": ["apple_pizza_desk.png", "car_desk_pizza.png", "car_pizza_apple.png", "pizza_car_apple.png"]}
REFERENCES = ["apple.png", "car.png", "desk.png", "pizza.png"]


def _export(data, out, *extra):
    return CliRunner().invoke(bindscope, ["export", "clip-oscope", str(data), "--out", str(out), *extra])


def _listing(out):
    return {p.name: sorted(q.name for q in p.iterdir()) for p in sorted(out.iterdir()) if p.is_dir()}


def test_file_names_in_both_orders_and_the_pixels(tmp_path):
    data, _ = comco_fixture(tmp_path)
    for order, expected in (("mention", MENTION), ("size", SIZE)):
        out = tmp_path / f"export-{order}"
        result = _export(data, out, "--object-order", order)
        assert result.exit_code == 0, result.output
        assert _listing(out) == {**expected, "references": REFERENCES}
        assert sorted(p.name for p in out.iterdir() if p.is_file()) == [".bindscope.json", "clip-oscope.json"]
        index = json.loads((out / "clip-oscope.json").read_text())
        assert index["object_order"] == order and index["split"] == "scenes"
        with Dataset(data) as ds:
            scenes, refs = ds.split("scenes"), ds.split("references")
            for path, number in index["scenes"].items():
                assert np.array_equal(np.asarray(Image.open(out / path)), scenes[number].image)
            for path, number in index["references"].items():
                assert np.array_equal(np.asarray(Image.open(out / path)), refs[number].image)
                assert path == f"references/{refs[number].objects[0].category}.png"
    # scene A (sample 0): pizza m1 rank 2, apple m2 rank 1, desk m3 rank 3
    assert json.loads((tmp_path / "export-mention" / "clip-oscope.json").read_text())["scenes"][
        "3-objects/pizza_apple_desk.png"] == 0
    assert json.loads((tmp_path / "export-size" / "clip-oscope.json").read_text())["scenes"][
        "3-objects/apple_pizza_desk.png"] == 0
    again = tmp_path / "again"
    assert _export(data, again).exit_code == 0
    first = tmp_path / "export-mention"
    assert {p.relative_to(again): p.read_bytes() for p in again.rglob("*") if p.is_file()} == \
        {p.relative_to(first): p.read_bytes() for p in first.rglob("*") if p.is_file()}  # the same bytes


def _clashing(tmp_path):
    """Two scenes that name pizza then apple; pizza is the larger one in scene 0 only."""
    scenes = [Sample(0, image(1), np.zeros((8, 8), np.uint8), "pizza and apple",
                     [obj(1, "pizza", {"size_class": "m"}, 1, 1, 9), obj(2, "apple", {"size_class": "m"}, 2, 2, 8)]),
              Sample(1, image(2), np.zeros((8, 8), np.uint8), "pizza and apple",
                     [obj(1, "pizza", {"size_class": "m"}, 2, 1, 8), obj(2, "apple", {"size_class": "m"}, 1, 2, 9)])]
    refs = [Sample(k, image(10 + k), np.zeros((8, 8), np.uint8), c, [obj(1, c, {"size_class": "m"}, 1, 1)])
            for k, c in enumerate(["pizza", "apple"])]
    return build(tmp_path, "clash", SpecGenerator({"scenes": scenes, "references": refs}, name="comco",
                                                  attribute_names=["size_class"]))


def test_two_scenes_with_one_file_name_are_refused_and_nothing_is_written(tmp_path):
    data = _clashing(tmp_path)
    out = tmp_path / "out"
    result = _export(data, out)
    assert result.exit_code == 2
    assert result.output.startswith("Error: scenes 0 and 1 would both be '2-objects/pizza_apple.png'"), result.output
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["clash"]
    result = _export(data, out, "--object-order", "size")  # in size order the names differ
    assert result.exit_code == 0, result.output
    assert _listing(out) == {"2-objects": ["apple_pizza.png", "pizza_apple.png"], "references": ["apple.png",
                                                                                                "pizza.png"]}
    assert _export(data, out, "--object-order", "size").exit_code == 2  # not empty, no --overwrite
    assert _export(data, out, "--overwrite").exit_code == 2  # the mention order still clashes
    assert _listing(out)["2-objects"] == ["apple_pizza.png", "pizza_apple.png"]


def _with_reference(tmp_path, category):
    """A scene of pizza and apple, and references of pizza, apple and ``category``."""
    scenes = [Sample(0, image(1), np.zeros((8, 8), np.uint8), "pizza and apple",
                     [obj(1, "pizza", {"size_class": "m"}, 1, 1, 9), obj(2, "apple", {"size_class": "m"}, 2, 2, 8)])]
    refs = [Sample(k, image(10 + k), np.zeros((8, 8), np.uint8), c, [obj(1, c, {"size_class": "m"}, 1, 1)])
            for k, c in enumerate(["pizza", "apple", category])]
    return build(tmp_path, "refs", SpecGenerator({"scenes": scenes, "references": refs}, name="comco",
                                                 attribute_names=["size_class"]))


def test_a_category_too_long_for_a_file_name_is_refused_and_nothing_is_written(tmp_path):
    data = _with_reference(tmp_path, "é" * 126)  # 252 bytes in UTF-8: "<category>.png" would be 256
    out = tmp_path / "out"
    result = _export(data, out)
    assert result.exit_code == 2, result.output
    assert result.output == (f"Error: references 2: category {'é' * 40!r}... is 252 bytes long (UTF-8); a file name "
                             "holds at most 255 bytes, so <category>.png allows at most 251\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["refs"]  # no export, no staging folder


def test_a_category_of_251_bytes_is_a_file_name(tmp_path):
    data = _with_reference(tmp_path, "é" * 125 + "x")  # 251 bytes: "<category>.png" is 255
    result = _export(data, tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert _listing(tmp_path / "out")["references"] == sorted(["apple.png", "pizza.png", "é" * 125 + "x.png"])


def test_the_export_folders_have_the_umask_permissions(tmp_path):
    data, _ = comco_fixture(tmp_path)
    out = tmp_path / "out"
    old = os.umask(0o027)
    try:
        result = _export(data, out)
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    modes = {str(p.relative_to(tmp_path)): stat.S_IMODE(p.stat().st_mode) for p in [out, *out.rglob("*")]}
    assert {name: mode for name, mode in modes.items() if (tmp_path / name).is_dir()} == {
        "out": 0o750, "out/references": 0o750, "out/2-objects": 0o750, "out/3-objects": 0o750}
    assert modes["out/clip-oscope.json"] == modes["out/references/apple.png"] == 0o640


def test_the_printed_commands_use_paths_relative_to_the_current_folder(tmp_path, monkeypatch):
    """The scripts open './<path>', so an absolute --out is printed relative to the folder the export ran in."""
    data, _ = comco_fixture(tmp_path)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    result = _export(data, tmp_path / "export")  # absolute
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "the authors' scripts read './<path>'; run these from this folder:" in lines
    assert "IOR.py --one_object_dataset_path ../export/references --many_objects_dataset_path "\
           "../export/3-objects:3" in lines
