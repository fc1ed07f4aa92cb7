"""Per-object colour/material, scene ground truth and conjunctive-search scenes on real Cycles renders (tiny)."""

from __future__ import annotations

import colorsys
import copy
import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from comco_support import render_cli
from scipy import ndimage

from bindscope.build.builder import RUN_STATE
from bindscope.cli.main import comco
from bindscope.config import resolve_config
from bindscope.format.reader import Dataset
from bindscope.generators.comco import attributes as A
from bindscope.generators.comco import scene
from bindscope.generators.comco.config import DEFAULT_CONFIG
from bindscope.generators.comco.registry import load_set
from bindscope.io.ownership import write_marker
from bindscope.publish.verify import verify_dataset

pytestmark = pytest.mark.blender

NAMES = [c.name for c in load_set("simco18")]
TINY = {"visibility": {"min_pixels": 6}, "shard_size": 3, "denoise": False}
ARGS = ["render", "--set", "simco18", "--objects", "2-3", "-n", "6", "--resolution", "96", "--samples", "4",
        "--seed", "5", "--device", "cpu", "--quiet", "--no-references", "--depth"]


def _render(folder, *extra: str, config: dict | None = None):
    return render_cli(folder, {**TINY, **(config or {})}, ARGS, *extra)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return _render(tmp_path_factory.mktemp("attr-jobs1"), "--attributes", "size,colour,material", "--jobs", "1",
                   "--threads", "2")


def _scenes(path):
    with Dataset(path) as ds:
        return list(ds.split("scenes")), ds.manifest


def _hue_sat(rgb8) -> tuple[float, float]:
    h, s, _ = colorsys.rgb_to_hsv(*(np.asarray(rgb8, float) / 255))
    return h * 360, s


def _interior(mask: np.ndarray, index: int) -> np.ndarray:
    inner = ndimage.binary_erosion(mask == index)
    return inner if inner.sum() >= 3 else mask == index


def _assert_colour(image: np.ndarray, region: np.ndarray, colour: str) -> None:
    """Mean colour inside the region has the planned colour's hue (gray: low saturation)."""
    hue, sat = _hue_sat(image[region].mean(axis=0))
    if colour == "gray":
        assert sat < 0.15, (colour, hue, sat)
        return
    chromatic = {n: _hue_sat(v)[0] for n, v in A.CLEVR_COLOURS_SRGB8.items() if n != "gray"}
    distance = {n: min(abs(hue - h), 360 - abs(hue - h)) for n, h in chromatic.items()}
    assert min(distance, key=distance.get) == colour and distance[colour] < 12 and sat > 0.3, (colour, hue, sat)


SYMMETRIC = ("sphere", "cube", "cylinder", "torus")
"""Shapes whose silhouette centroid is the projection of their 3D box centre (within a few pixels)."""


def _back_project(k, w2c, xs, ys, depth) -> np.ndarray:
    """(n, 3) world points seen through pixel centres (xs + 0.5, ys + 0.5) at camera-axis ``depth`` (metres)."""
    rays = np.linalg.inv(k) @ np.stack([xs + 0.5, ys + 0.5, np.ones(len(xs))])
    return (np.linalg.inv(w2c) @ np.vstack([rays * depth, np.ones(len(xs))]))[:3].T


def test_pixels_match_colour_and_table_matches_caption(dataset):
    assert verify_dataset(dataset) == []
    scenes, manifest = _scenes(dataset)
    assert manifest["format_version"] == 2
    assert manifest["object_attributes"] == ["size_class", "size", "colour", "material"]
    cfg = manifest["config"]
    for s in scenes:
        for o in s.objects:
            _assert_colour(s.image, _interior(s.mask, o.index), o.attributes["colour"])
            assert o.attributes["material"] in ("rubber", "metal")
        # the caption parses back to the object table, in mention order
        ordered = sorted(s.objects, key=lambda o: o.mention_position)
        assert A.parse_caption(s.caption, cfg, NAMES) == [
            {"size": o.attributes["size"], "colour": o.attributes["colour"],
             "material": o.attributes["material"], "category": o.category} for o in ordered]
        # negatives: every binding negative swaps two objects' values and differs from the caption
        by_index = {o.index: o for o in s.objects}
        binding = [n for n in s.negatives if n.kind == "binding"]
        pairs = sum(by_index[p].attributes[a] != by_index[q].attributes[a]
                    for a in ("size", "colour", "material") for p in by_index for q in by_index if p < q)
        assert len(binding) == pairs
        for n in s.negatives:
            assert n.caption != s.caption
            parsed = {d["category"]: d for d in A.parse_caption(n.caption, cfg, NAMES)}
            for k, new in zip(n.objects, n.replacement.split("|")):
                assert parsed[by_index[k].category][n.attribute] == new != by_index[k].attributes[n.attribute]
        assert len([n for n in s.negatives if n.kind == "recognition"]) == 3 * len(s.objects)


def test_metal_shows_a_specular_highlight_and_rubber_does_not():
    """Two spheres of one colour, metal and rubber, side by side: highlight contrast (99th percentile of luma
    over its median inside the mask) is clearly higher for metal, for every CLEVR colour."""
    from bindscope.generators.comco.blender.session import get_session

    cfg = resolve_config("comco_config", DEFAULT_CONFIG,
                         {"set": "simco18", "attributes": ["colour", "material"], "resolution": 96, "samples": 8,
                          "denoise": True, "objects": {"min": 2, "max": 2}, "size_mode": "equal"})
    base = scene.plan_scene(cfg, load_set("simco18"), 0, 0)
    session = get_session("simco18", 2, "cpu")
    for colour in A.DEFAULT_COLOURS:
        spec = copy.deepcopy(base)
        for entry, material in zip(spec["objects"], ("metal", "rubber")):  # the planned, framed layout
            entry.update(category="sphere", colour=colour, material=material,
                         look=A.resolved_look(cfg, colour, material))
        out = session.render(spec)
        contrast = {}
        for entry in spec["objects"]:
            region = out.mask == entry["index"]
            luma = out.image[region].astype(float) @ [0.2126, 0.7152, 0.0722]
            contrast[entry["material"]] = np.percentile(luma, 99) / np.median(luma)
            _assert_colour(out.image, _interior(out.mask, entry["index"]), colour)
        assert contrast["metal"] > 1.25 and contrast["metal"] > contrast["rubber"] + 0.15, (colour, contrast)


def test_camera_matrices_project_each_object_onto_its_mask(dataset):
    scenes, manifest = _scenes(dataset)
    assert manifest["sample_arrays"] == {"camera_K": {"shape": [3, 3], "dtype": "float32"},
                                         "world_to_camera": {"shape": [4, 4], "dtype": "float32"},
                                         "depth": {"shape": [96, 96], "dtype": "float16"}}
    checked = 0
    for s in scenes:
        k, w2c = s.arrays["camera_K"].astype(float), s.arrays["world_to_camera"].astype(float)
        lens = s.spec["camera"]  # 36 mm sensor width; Blender's shift is in units of the image width
        assert [k[0, 0], k[1, 1]] == pytest.approx([lens["focal_mm"] / 36 * 96] * 2, rel=1e-5)
        assert k[:2, 2] == pytest.approx([48 - lens.get("shift_x", 0) * 96, 48 + lens.get("shift_y", 0) * 96],
                                         abs=1e-3)
        assert np.allclose(w2c[:3, :3] @ w2c[:3, :3].T, np.eye(3), atol=1e-5)  # a rotation
        for o in s.objects:
            e = o.extras
            centre = np.array([e["bbox3d_cx"], e["bbox3d_cy"], e["bbox3d_cz"], 1.0])
            cam = w2c @ centre
            u, v = (k @ cam[:3])[:2] / cam[2]
            assert (u, v) == pytest.approx((e["proj_cx"], e["proj_cy"]), abs=1e-3)
            assert e["z"] == 0.0 and e["bbox3d_cz"] == pytest.approx(e["bbox3d_dz"] / 2, abs=1e-4)
            assert max(e["bbox3d_dx"], e["bbox3d_dy"], e["bbox3d_dz"]) == pytest.approx(e["scale"], rel=1e-4)
            ys, xs = np.nonzero(s.mask == o.index)
            if e["occlusion"] == 0 and o.category in SYMMETRIC:  # silhouette centroid = projected box centre
                assert np.hypot(u - xs.mean() - 0.5, v - ys.mean() - 0.5) < 3.0, (o.category, u, v)
                checked += 1
            # every mask pixel, back-projected with its depth, lands inside the object's yawed 3D box
            points = _back_project(k, w2c, xs, ys, s.arrays["depth"][ys, xs].astype(float))
            yaw = np.radians(e["yaw_deg"])
            rot = np.array([[np.cos(yaw), -np.sin(yaw), 0], [np.sin(yaw), np.cos(yaw), 0], [0, 0, 1]])
            local = (points - centre[:3]) @ rot  # coordinates along the object's axes
            half = np.array([e["bbox3d_dx"], e["bbox3d_dy"], e["bbox3d_dz"]]) / 2
            assert np.all(np.abs(local) <= half + 0.03), (o.category, np.abs(local).max(axis=0), half)
        # backdrop pixels back-project onto the floor z = 0 or above it (the seamless backdrop curves up behind
        # the objects), and the floor is seen (float16 depth: ~0.01 m steps at 8-16 m)
        ys, xs = np.nonzero(s.mask == 0)
        backdrop = _back_project(k, w2c, xs, ys, s.arrays["depth"][ys, xs].astype(float))
        assert backdrop[:, 2].min() > -0.05 and np.mean(np.abs(backdrop[:, 2]) < 0.05) > 0.2
    assert checked >= 3


def test_same_bytes_for_any_jobs_and_after_resume(dataset, tmp_path):
    (tmp_path / "b").mkdir()
    other = _render(tmp_path / "b", "--attributes", "size,colour,material", "--jobs", "2", "--threads", "1")
    manifest = json.loads((dataset / "manifest.json").read_text())
    files = [e["file"] for e in manifest["splits"]["scenes"]["shards"]] + ["manifest.json", "README.md"]
    assert len(files) == 4
    for name in files:
        assert (dataset / name).read_bytes() == (other / name).read_bytes()
    # an interrupted run (its marker and run state, one of the two shards, no manifest yet): the same command
    # finishes it
    resumed = tmp_path / "c"
    (resumed / "data" / "shards").mkdir(parents=True)
    first = manifest["splits"]["scenes"]["shards"][0]["file"]
    shutil.copy(dataset / first, resumed / "data" / first)
    (resumed / "data" / RUN_STATE).write_text(json.dumps({"run_id": manifest["config_sha256"],
                                                          "generator": "comco"}))
    write_marker(resumed / "data", "dataset", manifest["config_sha256"])
    _render(resumed, "--attributes", "size,colour,material")
    for name in files:
        assert (dataset / name).read_bytes() == (resumed / "data" / name).read_bytes()


@pytest.fixture(scope="module")
def conjunctive(tmp_path_factory):
    return _render(tmp_path_factory.mktemp("conjunctive"), "--attributes", "colour", "--task", "conjunctive-search",
                   "--size-mode", "equal", "-n", "8",
                   config={"scale": {"large": 1.5, "small": 0.75, "equal": 1.1, "reference": 1.5}})


def test_conjunctive_search_scenes_hold_exactly_the_planned_objects(conjunctive):
    assert verify_dataset(conjunctive) == []
    scenes, _ = _scenes(conjunctive)
    assert [s.spec["conjunctive_search"]["present"] for s in scenes] == [True, True, False, False] * 2
    for s in scenes:
        planned = [(e["category"], e["colour"]) for e in s.spec["objects"]]
        assert [(o.category, o.attributes["colour"]) for o in s.objects] == planned
        assert set(np.unique(s.mask).tolist()) - {0} == set(range(1, len(planned) + 1))
        assert (("sphere", "red") in planned) == s.spec["conjunctive_search"]["present"]
        for o in s.objects:
            _assert_colour(s.image, _interior(s.mask, o.index), o.attributes["colour"])


def test_alignment_tables_read_the_attribute_captions_and_stored_negatives(dataset):
    from bindscope.alignment.data import load_table
    from bindscope.alignment.pairs import labclip_items

    with Dataset(dataset) as ds:
        table = load_table(ds, "scenes")
        scenes = list(ds.split("scenes"))
    assert table.composed == []  # the captions already give the attributes: nothing is recomposed
    for i, s in enumerate(scenes):
        assert table.captions[i] == s.caption and table.negatives[i] == s.negatives
        assert table.described[i] == {o.index: {"size", "colour", "material"} for o in s.objects}
    assert len(labclip_items(table)) == len(scenes)


def test_conjunctive_search_cli_matches_a_direct_computation(conjunctive, dataset, tmp_path):
    from bindscope.alignment.conjunctive import run_conjunctive_search
    from bindscope.alignment.probes import ProbeSettings
    from bindscope.alignment.data import encode_split_images, load_table, make_embedder
    from bindscope.cli.main import bindscope
    from bindscope.encoders.registry import load_adapter
    from bindscope.schemas import validate

    out = tmp_path / "cs.json"
    model = ["--model", "ViT-B-32", "--pretrained", "none", "--device", "cpu"]
    r = CliRunner().invoke(bindscope, ["probe", str(conjunctive), "--task", "conjunctive-search", *model,
                                       "--no-cache", "--steps", "30", "--out", str(out)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    validate(result, "alignment_result", "result")
    metrics = result["metrics"]
    assert metrics["target"] == {"category": "sphere", "colour": "red"} and "red sphere" in r.output
    with Dataset(conjunctive) as ds:
        table = load_table(ds, "scenes", build_swaps=False, compose=None)
        adapter = load_adapter("ViT-B-32", "none", device="cpu")
        images = encode_split_images(make_embedder(adapter, use_cache=False), ds, "scenes", range(len(table)))
    direct = run_conjunctive_search(table, images, metrics["target"], ProbeSettings(steps=30))
    assert metrics["accuracy"]["correct"] == direct["accuracy"]["correct"]
    assert metrics["n_train"] + metrics["n_val"] + metrics["n_test"] == 8
    r = CliRunner().invoke(bindscope, ["probe", str(dataset), "--task", "conjunctive-search", *model,
                                       "--out", str(tmp_path / "none.json")])
    assert r.exit_code == 2 and "--task conjunctive-search" in r.output and not (tmp_path / "none.json").exists()


def test_comco_eval_scores_recognition_and_binding_on_the_stored_negatives(dataset, tmp_path):
    from bindscope.schemas import validate

    out = tmp_path / "eval.json"
    r = CliRunner().invoke(comco, ["eval", str(dataset), "--tasks", "tor,binding", "--model", "ViT-B-32",
                                   "--pretrained", "none", "--device", "cpu", "--no-cache", "--quiet",
                                   "--out", str(out)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    validate(result, "eval_result", "result")
    block = result["metrics"]["binding"]
    scenes, _ = _scenes(dataset)
    assert block["num_scored"] == len(scenes)
    for kind, key in (("recognition", "recognition"), ("binding", "binding_unconditional")):
        for a in ("size", "colour", "material"):
            stored = sum(n.kind == kind and n.attribute == a for s in scenes for n in s.negatives)
            assert block[key]["per_attribute"][a]["total"] == stored
    assert "recognition and binding on 6 scenes" in r.output
    from bindscope.evaluation.collect import collect

    figures = collect([out])["rows"][0]["figures"]  # the binding figures are columns of the table
    for name, key in (("recognition", "recognition"), ("binding", "binding"), ("binding_all", "binding_unconditional")):
        for a in ("size", "colour", "material"):
            accuracy = block[key]["per_attribute"][a]["accuracy"]  # None: no negative of that kind
            assert figures[f"{name}/{a}"]["value"] == (None if accuracy is None else pytest.approx(100 * accuracy))
        micro = block[key]["average"]["micro"]["accuracy"]
        assert figures[f"{name}/micro"]["value"] == (None if micro is None else pytest.approx(100 * micro))
    assert figures["recognition/micro"]["value"] is not None


def test_colour_tints_the_main_material_of_textured_comco_models():
    """ComCO-72 models with two-colour patterns (zebra stripes, giraffe cells, cow spots) and a plain one (car):
    the colour recolours the pattern / base colour of the main material, so the mask's mean hue is the colour."""
    from bindscope.generators.comco.blender.session import get_session

    cats = load_set("comco72")
    cfg = resolve_config("comco_config", DEFAULT_CONFIG,
                         {"set": "comco72", "attributes": ["colour", "material"], "resolution": 64, "samples": 4,
                          "denoise": True})
    session = get_session("comco72", 2, "cpu")
    names = [c.name for c in cats]
    for name in ("zebra", "giraffe", "cow", "car"):
        for colour in ("red", "blue", "yellow"):
            spec = scene.plan_reference(cfg, cats, 0, names.index(name))
            spec["objects"][0]["look"] = A.resolved_look(cfg, colour, "rubber")
            out = session.render(spec)
            _assert_colour(out.image, out.mask == 1, colour)
