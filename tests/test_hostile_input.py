"""Hostile files in the user's folders, through the command line: decompression bombs (a few hundred bytes that
declare 60000 x 60000 pixels), JSON nested 100,000 levels deep, bytes that are not UTF-8, NUL bytes, control
characters and lone surrogates in captions, names, file names and config values, and a path that is not UTF-8.
Each ends in exit status 2, exactly one ``Error:`` line naming the file or field and what is allowed, and
nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from attack_matrix import bomb_png
from cli_support import invoke_in, snapshot
from coco_fixture import write_coco
from test_bench import save_image, sugarcrepe_fixture

from bindscope.cli.main import bindscope, comco, madman
from bindscope.errors import BadInput, bad_character, check_text
from bindscope.importers.coco import import_coco, read_coco
from bindscope.io.image_input import MAX_IMAGE_PIXELS, image_size, read_rgb
from bindscope.io.json_input import MAX_JSON_DEPTH, load_json, nesting_depth

MODEL = ["--model", "ViT-B-32", "--pretrained", "none"]  # never loaded: every case fails before


def deep_json(levels: int = 100_000, key: str | None = None) -> str:
    body = "[" * levels + "]" * levels
    return json.dumps({key: "@"}).replace('"@"', body) if key else body


def one_error(root: Path, group, args) -> str:
    """Invoke in ``root``; assert exit status 2, exactly one output line, starting with ``Error:``, and nothing
    written under ``root``; return that line."""
    before = snapshot(root)
    result = invoke_in(root, group, args)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert snapshot(root) == before, "something was written"
    return lines[0]


# --------------------------------------------------------------------------------------------- the helpers


def test_bomb_header_is_refused_with_its_size(tmp_path):
    path = bomb_png(tmp_path / "bomb.png")
    assert path.stat().st_size < 200
    with pytest.raises(BadInput) as info:
        image_size(path, "image")
    assert str(info.value) == (f"image {str(path)!r} declares 60000x60000 pixels (3,600,000,000); at most "
                               "89,478,485 pixels are allowed (an image this large is refused as a possible "
                               "decompression bomb)")
    # Just above the limit (PIL would only warn) and just below it (accepted, header only).
    side = int(MAX_IMAGE_PIXELS ** 0.5)
    with pytest.raises(BadInput, match=f"declares {side + 1}x{side + 1} pixels"):
        image_size(bomb_png(tmp_path / "above.png", side + 1, side + 1))
    assert image_size(bomb_png(tmp_path / "below.png", side, side)) == (side, side)
    with pytest.raises(BadInput, match="is not a readable image .*truncated"):
        read_rgb(tmp_path / "below.png")  # the pixel data is a token: decoding fails cleanly
    (tmp_path / "text.png").write_text("not an image")
    with pytest.raises(BadInput, match="'.*text.png' is not a readable image"):
        read_rgb(tmp_path / "text.png")


def test_json_depth_measured_before_parsing(tmp_path):
    assert nesting_depth(b'{"a": [1, {"b": "]]]"}], "c\\\\": "\\"[["}') == 3
    assert nesting_depth(b"7") == 0 and nesting_depth(deep_json(100_000).encode()) == 100_000
    path = tmp_path / "deep.json"
    path.write_text(deep_json(MAX_JSON_DEPTH))
    assert load_json(path, "f") == json.loads(deep_json(MAX_JSON_DEPTH))
    path.write_text(deep_json(MAX_JSON_DEPTH + 1))
    with pytest.raises(BadInput, match=f"^f '.*deep.json' is nested {MAX_JSON_DEPTH + 1} levels deep; at most 64"):
        load_json(path, "f")
    for data, needle in [(b'{"a": "\xff"}', "is not UTF-8 text (byte 0xff at offset 7"),
                         (b'{"a": NaN}', "is not valid JSON (NaN is not a JSON value)"),
                         (b'{"a": 1,}', "is not valid JSON (Expecting property name enclosed in double quotes at "
                                        "line 1, column 9)"),
                         (b"[" + b"9" * 5000 + b"]", "is not valid JSON (Exceeds the limit (4300 digits)")]:
        path.write_bytes(data)
        with pytest.raises(BadInput) as info:
            load_json(path, "f")
        assert needle in str(info.value)
    path.write_bytes(b'\xef\xbb\xbf{"a": "\xc3\xa9"}')  # a byte-order mark, then UTF-8
    assert load_json(path, "f") == {"a": "\u00e9"}


def test_character_rules():
    assert bad_character("A man\twith a dog.\r\n") is None and bad_character("caf\u00e9 \u4e2d\u6587") is None
    assert bad_character("a\tb", name=True) == (1, "U+0009 (a control character)")
    assert bad_character("ab\x00") == (2, "U+0000 (a NUL character)")
    assert bad_character("x\x1b[31m") == (1, "U+001B (a control character)")
    assert bad_character("\x85") == (0, "U+0085 (a control character)")
    assert bad_character("ok\ud800") == (2, "U+D800 (a lone surrogate)")
    with pytest.raises(BadInput, match=r"^categories\[3\].name holds U\+0000 \(a NUL character\) at character 1; "
                                       "allowed: a name without control characters"):
        check_text("categories[3].name", "a\x00", name=True)


# --------------------------------------------------------------------------------------------- COCO import


def _coco(root: Path):
    return write_coco(root / "src")


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))  # ensure_ascii: a NUL or lone surrogate becomes an escape (\u0000, \ud800)


def _import_args(files, out="out"):
    images, instances, captions = files
    return ["import", "coco", "--images", images, "--instances", instances, "--captions", captions, "--out", out,
            "--image-size", 32, "--quiet"]


@pytest.mark.parametrize("case", ["bomb", "deep", "not utf-8", "invalid", "nul name", "surrogate caption",
                                  "escape file name", "nul supercategory", "deep captions"])
def test_coco_import_refuses(tmp_path, case):
    files = _coco(tmp_path)
    images, instances, captions = files
    if case == "bomb":  # the instances file agrees with the header: only the pixel limit stops it
        bomb_png(images / "000000000012.png")
        _edit(instances, lambda d: d["images"][2].update(width=60000, height=60000))
        needles = ["--images: image id 12 (file_name '000000000012.png'):", "000000000012.png' declares "
                   "60000x60000 pixels (3,600,000,000); at most 89,478,485 pixels are allowed"]
    elif case == "deep":
        instances.write_text(deep_json(key="annotations"))
        needles = ["--instances '", "instances.json' is nested 100001 levels deep; at most 64 levels"]
    elif case == "deep captions":
        captions.write_text(deep_json(key="annotations"))
        needles = ["--captions '", "captions.json' is nested 100001 levels deep"]
    elif case == "not utf-8":
        instances.write_bytes(instances.read_bytes().replace(b'"bindscope test"', b'"bindscope \xff test"'))
        needles = ["--instances '", "instances.json' is not UTF-8 text (byte 0xff at offset"]
    elif case == "invalid":
        instances.write_text(instances.read_text()[:-1])
        needles = ["instances.json' is not valid JSON (Expecting ',' delimiter at line 1, column"]
    elif case == "nul name":
        _edit(instances, lambda d: d["categories"][3].update(name="d\x00og"))
        needles = ["Error: --instances: categories[3].name (category id 18) holds U+0000 (a NUL character) at "
                   "character 1; allowed: a name without control characters"]
    elif case == "nul supercategory":
        _edit(instances, lambda d: d["categories"][0].update(supercategory="\x00"))
        needles = ["instances: categories[0].supercategory (category id 1) holds U+0000"]
    elif case == "surrogate caption":
        _edit(captions, lambda d: d["annotations"][4].update(caption="A kitten \ud800 next to a car."))
        needles = ["Error: --captions: annotations[4].caption (caption id 2001) holds U+D800 (a lone surrogate) at "
                   "character 9; allowed: text without control characters (tab and line breaks are fine)"]
    else:  # a terminal escape sequence in a file name
        _edit(instances, lambda d: d["images"][1].update(file_name="\x1b[2J.png"))
        needles = ["instances: images[1].file_name (image id 9) holds U+001B (a control character) at character 0"]
    line = one_error(tmp_path, bindscope, _import_args(files))
    assert "\x1b" not in line and "\x00" not in line
    for needle in needles:
        assert needle in line, (needle, line)
    assert not (tmp_path / "out").exists()


def test_coco_captions_keep_tabs_and_line_breaks(tmp_path):
    files = _coco(tmp_path)
    _edit(files[2], lambda d: d["annotations"][0].update(caption="A man\twith his\ndog.\r\n"))
    plan = read_coco(*files)
    assert plan["images"][0]["captions"][0] == {"id": 1001, "caption": "A man\twith his\ndog."}


def test_coco_out_path_not_utf8(tmp_path):
    files = _coco(tmp_path)
    line = one_error(tmp_path, bindscope, _import_args(files, out="out\udcff"))
    assert line == ("Error: --out b'out\\xff' holds bytes that are not UTF-8; bindscope writes paths and names into "
                    "UTF-8 files: rename it or choose another")
    with pytest.raises(BadInput, match="^instances b'.*inst\\\\xffances.json' holds bytes that are not UTF-8"):
        import_coco(files[0], str(files[1]).replace("inst", "inst\udcff"), files[2], tmp_path / "o", progress=False)


# --------------------------------------------------------------------------------------------- ARO / SugarCrepe


def _bench_args(data, images, out="result.json"):
    return ["bench", "sugarcrepe", "--data", data, "--images", images, *MODEL, "--out", out, "--quiet"]


@pytest.mark.parametrize("case", ["bomb", "deep", "nul caption", "control file name", "not utf-8"])
def test_sugarcrepe_refuses(tmp_path, case):
    data, images, _ = sugarcrepe_fixture(tmp_path)
    subset = data / "add_att.json"
    entries = json.loads(subset.read_text())
    if case == "bomb":
        bomb_png(images / "000000000002.jpg")  # PIL reads the format from the bytes, not the name
        needles = ["sugarcrepe add_att.json item '7': image '", "000000000002.jpg' declares 60000x60000 pixels "
                   "(3,600,000,000); at most 89,478,485"]
    elif case == "deep":
        subset.write_text(deep_json(key="0"))
        needles = ["Error: sugarcrepe add_att: '", "add_att.json' is nested 100001 levels deep; at most 64"]
    elif case == "nul caption":
        entries["7"]["negative_caption"] = "a big\x00dog"
        needles = ["Error: sugarcrepe add_att.json item '7': negative_caption holds U+0000 (a NUL character) at "
                   "character 5"]
    elif case == "control file name":
        entries["0"]["filename"] = "000000000001.jpg\x07"
        needles = ["sugarcrepe add_att.json item '0': filename holds U+0007 (a control character) at character 16"]
    else:
        subset.write_bytes(subset.read_bytes().replace(b"a red bus", b"a r\xe9d bus", 1))  # Latin-1, not UTF-8
        needles = ["add_att.json' is not UTF-8 text (byte 0xe9 at offset"]
    if case in ("nul caption", "control file name"):
        subset.write_text(json.dumps(entries))
    line = one_error(tmp_path, bindscope, _bench_args(data, images))
    for needle in needles:
        assert needle in line, (needle, line)


def test_aro_refuses(tmp_path):
    data = tmp_path / "aro"
    save_image(data / "images" / "1.jpg", 1)
    item = {"image_path": "1.jpg", "bbox_x": 0, "bbox_y": 0, "bbox_w": 10, "bbox_h": 10,
            "true_caption": "the cup is on the table", "false_caption": "the table is on the cup",
            "relation_name": "on"}
    args = ["bench", "aro", "--data", data, "--subsets", "vg_relation", *MODEL, "--out", "r.json", "--quiet"]
    relation = data / "visual_genome_relation.json"
    relation.write_text(deep_json())
    line = one_error(tmp_path, bindscope, args)
    assert "visual_genome_relation.json' is nested 100000 levels deep; at most 64" in line
    relation.write_text(json.dumps([item, dict(item, relation_name="o\nn")]))
    line = one_error(tmp_path, bindscope, args)
    assert line.startswith("Error: aro visual_genome_relation.json item 1: relation_name holds U+000A (a control "
                           "character) at character 1; allowed: a name without control characters")
    relation.write_text(json.dumps([dict(item, true_caption="the cup\udfff")]))
    line = one_error(tmp_path, bindscope, args)
    assert line.startswith("Error: aro visual_genome_relation.json item 0: true_caption holds U+DFFF (a lone "
                           "surrogate) at character 7")
    bomb_png(data / "images" / "1.jpg", 20000, 20000)
    relation.write_text(json.dumps([item]))
    line = one_error(tmp_path, bindscope, args)
    assert "item 0: image '" in line and "1.jpg' declares 20000x20000 pixels (400,000,000); at most 89,478,485" in line


def test_bench_out_path_not_utf8(tmp_path):
    data, images, _ = sugarcrepe_fixture(tmp_path)
    line = one_error(tmp_path, bindscope, _bench_args(data, images, out="r\udcff.json"))
    assert line.startswith("Error: --out b'r\\xff.json' holds bytes that are not UTF-8")


# --------------------------------------------------------------------------------------------- IOR references


@pytest.fixture(scope="module")
def coco_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("ior")
    import_coco(*write_coco(root / "src"), root / "coco", image_size=32, progress=False)
    return root / "coco"


def test_reference_images_refused(tmp_path, coco_dataset):
    refs = tmp_path / "refs"
    save_image(refs / "dog" / "dog_000.png", 3)
    bomb_png(refs / "person" / "person_000.png")
    args = ["eval", coco_dataset, "--tasks", "ior", "--reference-images", refs, *MODEL, "--out", "r.json",
            "--quiet"]
    line = one_error(tmp_path, comco, args)
    assert "Error: reference image '" in line and ("person_000.png' declares 60000x60000 pixels (3,600,000,000); "
                                                   "at most 89,478,485 pixels") in line
    (refs / "person" / "person_000.png").unlink()
    (tmp_path / "map.json").write_text(json.dumps({"couch": "@"}).replace('"@"', deep_json(200)))
    line = one_error(tmp_path, comco, args + ["--category-map", tmp_path / "map.json"])
    assert line.startswith("Error: --category-map '") and "map.json' is nested 201 levels deep; at most 64" in line
    (tmp_path / "map.json").write_text(json.dumps({"couch": "so\x00fa"}))
    line = one_error(tmp_path, comco, args + ["--category-map", tmp_path / "map.json"])
    assert "map.json': entry 'couch' holds U+0000 (a NUL character) at character 2" in line


# --------------------------------------------------------------------------------------------- generator configs


@pytest.mark.parametrize("text, needles", [
    ('ood: {holdout: ["zero", "o\\0ne"]}\n', ["config: ood.holdout.1 holds U+0000 (a NUL character) at character 1"]),
    ('ood: {holdout: ["\\ud800"]}\n', ["config: ood.holdout.0 holds U+D800 (a lone surrogate) at character 0"]),
    ('ood: {"hold\\x1bout": []}\n', ["config: key 'hold\\x1bout' under ood holds U+001B (a control character)"]),
])
def test_madman_config_text_refused(tmp_path, text, needles):
    (tmp_path / "c.yaml").write_text(text)
    line = one_error(tmp_path, madman, ["generate", "-n", 4, "--config", "c.yaml", "--out", "out", "--quiet"])
    for needle in needles:
        assert needle in line, (needle, line)


@pytest.mark.parametrize("raw, code", [(b"\x00", "#x0000"), (b"\x1b", "#x001b")])
def test_raw_control_byte_in_a_yaml_file(tmp_path, raw, code):
    (tmp_path / "c.yaml").write_bytes(b'ood: {holdout: ["a' + raw + b'b"]}\n')
    line = one_error(tmp_path, madman, ["generate", "-n", 4, "--config", "c.yaml", "--out", "out", "--quiet"])
    assert line == (f"Error: config 'c.yaml': not valid YAML (unacceptable character {code}: special characters "
                    "are not allowed at character 18)")


def test_comco_config_text_refused(tmp_path):
    (tmp_path / "c.yaml").write_text('caption: {joiner: "and\\0", templates: ["{objects}"], order: size}\n')
    line = one_error(tmp_path, comco, ["render", "-n", 2, "--config", "c.yaml", "--out", "out"])
    assert "config: caption.joiner holds U+0000 (a NUL character) at character 3" in line


def test_generator_out_path_not_utf8(tmp_path):
    line = one_error(tmp_path, madman, ["generate", "-n", 4, "--out", "o\udcffut", "--quiet"])
    assert line == ("Error: --out b'o\\xffut' holds bytes that are not UTF-8; bindscope writes paths and names "
                    "into UTF-8 files: rename it or choose another")
