"""ComCO / SimCO scene planning: pure Python, no Blender (fast)."""

from __future__ import annotations

import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from bindscope.cli.main import comco
from bindscope.config import resolve_config
from bindscope.errors import BadInput
from bindscope.generators.comco import camera, layout, scene
from bindscope.generators.comco.config import DEFAULT_CONFIG, parse_objects, resolve_render_config
from bindscope.generators.comco.registry import load_set


def config(**overrides) -> dict:
    return resolve_config("comco_config", DEFAULT_CONFIG, overrides)


@pytest.fixture(scope="module")
def comco72():
    return load_set("comco72")


def test_parse_objects():
    assert parse_objects("3") == (3, 3)
    assert parse_objects("2-5") == (2, 5)
    for bad in ("0", "6", "4-2", "two", "1-6", "2-"):
        with pytest.raises(BadInput, match="^objects "):
            parse_objects(bad)


def test_same_seed_same_specs_and_other_seed_differs(comco72):
    cfg = config()
    a = [scene.plan_scene(cfg, comco72, 7, i) for i in range(20)]
    b = [scene.plan_scene(cfg, comco72, 7, i) for i in range(20)]
    c = [scene.plan_scene(cfg, comco72, 8, i) for i in range(20)]
    assert a == b
    assert sum(x != y for x, y in zip(a, c)) == 20
    # a re-plan (attempt 1) is a different scene, and itself reproducible
    assert scene.plan_scene(cfg, comco72, 7, 3, attempt=1) != a[3]
    assert scene.plan_scene(cfg, comco72, 7, 3, attempt=1) == scene.plan_scene(cfg, comco72, 7, 3, 1)


def test_counts_spread_evenly_and_weighted(comco72):
    cfg = config(objects={"min": 2, "max": 5})
    counts = Counter(len(scene.plan_scene(cfg, comco72, 0, i)["objects"]) for i in range(40))
    assert counts == {2: 10, 3: 10, 4: 10, 5: 10}
    weighted = config(objects={"min": 2, "max": 3, "weights": [0, 1]})
    assert {len(scene.plan_scene(weighted, comco72, 0, i)["objects"]) for i in range(30)} == {3}


def test_one_large_scales_and_distinct_categories(comco72):
    cfg = config(objects={"min": 5, "max": 5})
    large_slots = Counter()
    for i in range(200):
        spec = scene.plan_scene(cfg, comco72, 1, i)
        objs = spec["objects"]
        assert [o["index"] for o in objs] == [1, 2, 3, 4, 5]
        assert len({o["category"] for o in objs}) == 5
        large = [o for o in objs if o["large"]]
        assert len(large) == 1 and large[0]["scale"] == 1.5
        assert all(o["scale"] == 0.7 for o in objs if not o["large"])
        large_slots[large[0]["index"]] += 1
    assert set(large_slots) == {1, 2, 3, 4, 5}  # the large object is not always the same slot
    equal = config(size_mode="equal", scale={"equal": 1.2})
    assert {o["scale"] for o in scene.plan_scene(equal, comco72, 0, 0)["objects"]} == {1.2}
    rnd = config(size_mode="random")
    scales = [o["scale"] for i in range(30) for o in scene.plan_scene(rnd, comco72, 0, i)["objects"]]
    assert min(scales) >= 0.7 and max(scales) <= 1.5 and len(set(scales)) == len(scales)


@pytest.mark.parametrize("mode", ["random", "grid"])
def test_footprints_disjoint_with_gap_and_inside_ground(comco72, mode):
    cfg = config(objects={"min": 4, "max": 5},
                 size_mode="equal", ground={"size": [6.0, 4.0]},
                 placement={"mode": mode, "min_gap": 0.3, "grid": [3, 2], "yaw_jitter_deg": 25.0, "slot_jitter": 0.0})
    half_w, half_d = (v / 2 for v in cfg["ground"]["size"])
    for i in range(100):
        objs = scene.plan_scene(cfg, comco72, 3, i)["objects"]
        for a in objs:
            r = a["scale"] * math.sqrt(0.5)
            assert abs(a["x"]) + r <= half_w + 1e-9 and abs(a["y"]) + r <= half_d + 1e-9
            assert -25 <= a["yaw_deg"] <= 25
            for b in objs:
                if a["index"] < b["index"]:
                    gap = math.dist((a["x"], a["y"]), (b["x"], b["y"])) - (a["scale"] + b["scale"]) * math.sqrt(0.5)
                    assert gap >= 0.3 - 1e-9
        if mode == "grid":  # no slot jitter: objects sit exactly on the 3 x 2 slot centres
            xs, ys = {-2.0, 0.0, 2.0}, {-1.0, 1.0}
            assert all(round(o["x"], 9) in xs and round(o["y"], 9) in ys for o in objs)


def test_caption_is_names_in_uniform_random_mention_order(comco72):
    cfg = config(objects={"min": 3, "max": 3})
    first = Counter()
    for i in range(1500):
        spec = scene.plan_scene(cfg, comco72, 0, i)
        objs = sorted(spec["objects"], key=lambda o: o["mention_position"])
        assert [o["mention_position"] for o in objs] == [1, 2, 3]
        assert spec["caption"] == " and ".join(o["category"] for o in objs)
        first[objs[0]["index"]] += 1
    # uniform over the three objects: 500 expected each; 4 binomial standard deviations is 73
    assert all(abs(v - 500) < 73 for v in first.values()), first
    templated = config(caption={"templates": ["a photo of {objects}.", "{objects} on a table"]})
    captions = {scene.plan_scene(templated, comco72, 0, i)["caption"] for i in range(20)}
    assert any(c.startswith("a photo of ") and c.endswith(".") for c in captions)
    assert any(c.endswith(" on a table") for c in captions)


def test_camera_and_light_jitter_bounds(comco72):
    cfg = config()
    for i in range(50):
        spec = scene.plan_scene(cfg, comco72, 0, i)
        cam, light = spec["camera"], spec["light"]
        assert 9 <= cam["elevation_deg"] <= 15 and -5 <= cam["azimuth_deg"] <= 5 and cam["focal_mm"] == 50
        assert 42 <= light["elevation_deg"] <= 58 and -60 <= light["azimuth_deg"] <= -10
        assert 2.5 <= light["strength"] <= 3.5
        assert spec["render"] == {**spec["render"], "resolution": 224, "samples": 16, "denoise": True}
        assert spec["world"]["backdrop"]["kind"] == "seamless"
    still = config(camera={"jitter": {"elevation_deg": 0, "azimuth_deg": 0}})
    assert scene.plan_scene(still, comco72, 0, 4)["camera"]["elevation_deg"] == 12.0


def _union(boxes):
    return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))


def test_camera_frames_the_planned_layout(comco72):
    """The objects' bounding cubes, projected (the renderer's mapping, checked against Blender in
    test_comco_render), fill 1 - 2 * margin of the image on the tighter axis, centred; the backdrop stands
    behind every object."""
    cfg = config(objects={"min": 1, "max": 5})
    for i in range(60):
        spec = scene.plan_scene(cfg, comco72, 2, i)
        x0, y0, x1, y1 = _union(camera.projected_boxes(spec))
        side = max(x1 - x0, y1 - y0)
        assert side == pytest.approx(0.9 * 224, abs=0.01)
        assert (x0 + x1) / 2 == pytest.approx(112, abs=0.01) and (y0 + y1) / 2 == pytest.approx(112, abs=0.01)
        rear = max(camera.object_corners(e)[:, 1].max() for e in spec["objects"])
        assert spec["world"]["backdrop"]["y"] == pytest.approx(rear + 1.0)
    # the projection: a point on the optical axis lands in the image centre (no shift), one 1 m to the right of
    # it at distance d lands 50/36/d image widths to the right
    cam = {"elevation_deg": 0.0, "azimuth_deg": 0.0, "focal_mm": 50.0, "look_at": [0.0, 0.0, 1.0],
           "distance": 10.0, "shift_x": 0.0, "shift_y": 0.0}
    xy = camera.project(cam, np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 1.0], [0.0, 0.0, 2.0]]), 100)
    assert xy.ravel().tolist() == pytest.approx([50, 50, 50 + 100 * 50 / 36 / 10, 50, 50, 50 - 100 * 50 / 36 / 10])


def test_row_layout_footprints_and_slots(comco72):
    for slot in ("left", "middle", "right"):
        cfg = config(objects={"min": 2, "max": 5}, placement={"large_slot": slot})
        for i in range(40):
            spec = scene.plan_scene(cfg, comco72, 5, i)
            objs = spec["objects"]
            (large,) = [o for o in objs if o["large"]]
            xs = sorted(o["x"] for o in objs)
            assert large["slot"] == slot and large["y"] > 0  # the large object stands in the back lane
            if slot == "left":
                assert large["x"] == xs[0]
            elif slot == "right":
                assert large["x"] == xs[-1]
            else:  # centred image: the camera looks along the large object's x without lens shift
                assert spec["camera"]["look_at"][0] == large["x"] and spec["camera"]["shift_x"] == 0.0
                assert len(objs) < 3 or xs[0] < large["x"] < xs[-1]
            for a in objs:  # yawed footprint squares never overlap
                for b in objs:
                    if a["index"] < b["index"]:
                        wa = layout.half_width(a["scale"], a["yaw_deg"])
                        wb = layout.half_width(b["scale"], b["yaw_deg"])
                        assert abs(a["x"] - b["x"]) >= wa + wb - 1e-9 or abs(a["y"] - b["y"]) >= wa + wb - 1e-9
    full = config(objects={"min": 3, "max": 3}, size_mode="equal", placement={"slots": ["right", "left", "middle"]})
    for i in range(10):
        objs = scene.plan_scene(full, comco72, 0, i)["objects"]
        assert [o["slot"] for o in objs] == ["right", "left", "middle"]
        assert objs[1]["x"] < objs[2]["x"] < objs[0]["x"]
    with pytest.raises(BadInput, match="large_slot"):
        scene.check_plannable(config(size_mode="equal", placement={"large_slot": "left"}), comco72, 0)
    with pytest.raises(BadInput, match="mode 'row'"):
        scene.check_plannable(config(placement={"mode": "grid", "slots": ["left"]}), comco72, 0)


def test_visibility_threshold_scales_with_the_image():
    assert scene.min_visible_pixels(config()) == math.ceil(0.004 * 224 * 224) == 201
    assert scene.min_visible_pixels(config(resolution=96)) == 37
    assert scene.min_visible_pixels(config(resolution=32)) == 16  # the pixel floor
    assert scene.min_visible_pixels(config(resolution=512)) == 1049


def test_reference_plan(comco72):
    cfg = config()
    spec = scene.plan_reference(cfg, comco72, 0, 5)
    (obj,) = spec["objects"]
    assert spec["caption"] == comco72[5].name == obj["category"]
    assert (obj["x"], obj["y"], obj["yaw_deg"], obj["scale"]) == (0.0, 0.0, 0.0, 1.0)
    box = camera.projected_boxes(spec)[0]
    assert max(box[2] - box[0], box[3] - box[1]) == pytest.approx(0.72 * 224, abs=0.01)
    assert spec["camera"]["elevation_deg"] == 12.0 and spec["light"]["strength"] == 3.0
    crop = scene.plan_reference(config(references="crop"), comco72, 0, 5)
    assert crop["kind"] == "crop" and crop["objects"][0]["category"] == comco72[5].name
    assert crop["objects"][0]["large"] and crop["caption"] == comco72[5].name
    # zoom_to_box: the box lands centred with side fill * resolution
    cam = camera.zoom_to_box(spec["camera"], (10, 20, 40, 80), 224, 0.5)
    moved = camera.zoom_to_box(cam, (56, 56, 168, 168), 224, 0.5)
    assert [moved[k] for k in ("focal_mm", "shift_x", "shift_y")] == pytest.approx(
        [cam[k] for k in ("focal_mm", "shift_x", "shift_y")])


def test_capacity_checks_hand_computed():
    # 5 objects of scale 1.6: footprint radius 1.131 m; with gap 0.15 their discs cover 5*pi*1.206^2 = 22.86 m^2,
    # more than pi/sqrt(12) * 4.15^2 = 15.62 m^2 on a 4 x 4 m ground
    cfg = config(size_mode="equal", scale={"equal": 1.6}, ground={"size": [4.0, 4.0]})
    with pytest.raises(BadInput, match="total area exceeds"):
        layout.check_capacity(cfg, [1.6] * 5)
    layout.check_capacity(cfg, [1.6] * 2)  # 9.14 m^2 fits
    with pytest.raises(BadInput, match="wider than the ground"):
        layout.check_capacity(config(ground={"size": [2.0, 2.0]}), [1.6])


def test_bounded_retries_give_clear_error(comco72):
    # capacity passes, but four 1 m objects almost never fit a 3 x 3 m ground at random
    cfg = config(objects={"min": 4, "max": 4}, size_mode="equal", ground={"size": [3.0, 3.0]},
                 placement={"mode": "random", "max_tries": 5})
    with pytest.raises(BadInput, match="no layout found in 5 tries"):
        scene.plan_scene(cfg, comco72, 0, 0)
    grid = config(objects={"min": 5, "max": 5}, placement={"mode": "grid", "grid": [2, 2]})
    with pytest.raises(BadInput, match="4 slots"):
        scene.check_plannable(grid, comco72, 0)


def test_impossible_layout_cli_exit_2_and_nothing_written(tmp_path):
    cfg = tmp_path / "tiny-ground.yaml"
    cfg.write_text(yaml.safe_dump({"size_mode": "equal", "scale": {"equal": 1.6}, "ground": {"size": [2.5, 2.5]},
                                   "placement": {"mode": "random"}}))
    out = tmp_path / "out"
    result = CliRunner().invoke(comco, ["render", "--objects", "5", "-n", "4", "--config", str(cfg),
                                        "--out", str(out), "--set", "simco18"])
    assert result.exit_code == 2, result.output
    assert "impossible layout: cannot place 5 objects of scale 1.6, 1.6, 1.6, 1.6, 1.6 m" in result.output
    assert "2.5 x 2.5 m ground" in result.output
    assert not out.exists()


def test_bad_config_values_name_the_key(tmp_path):
    with pytest.raises(BadInput, match="size_mode"):
        resolve_render_config(None, {"size_mode": "huge"})
    bad = tmp_path / "bad.yaml"
    bad.write_text("placement: {min_gap: -1}\n")
    with pytest.raises(BadInput, match="placement.min_gap: -1"):
        resolve_render_config(str(bad), {})
    typo = tmp_path / "typo.yaml"
    typo.write_text("camera: {distanse: 3}\n")
    with pytest.raises(BadInput, match="distanse"):
        resolve_render_config(str(typo), {})
    with pytest.raises(BadInput, match="weights"):
        resolve_render_config(_write(tmp_path, "objects: {min: 2, max: 3, weights: [1, 1, 1]}\n"), {})
    result = CliRunner().invoke(comco, ["render", "--set", "nosuchset", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "nosuchset" in result.output and "comco72" in result.output


def _write(folder: Path, text: str) -> str:
    path = folder / "c.yaml"
    path.write_text(text)
    return str(path)


def test_flags_override_config_file(tmp_path):
    cfg = resolve_render_config(_write(tmp_path, "resolution: 128\nsamples: 8\nn: 10\n"),
                                {"resolution": 64, "objects": "3", "set": "simco18"})
    assert (cfg["resolution"], cfg["samples"], cfg["n"], cfg["set"]) == (64, 8, 10, "simco18")
    assert cfg["objects"] == {"min": 3, "max": 3, "weights": None}


def test_planning_never_imports_bpy():
    code = ("import sys; import bindscope.generators.comco.config, bindscope.generators.comco.layout, "
            "bindscope.generators.comco.camera, bindscope.generators.comco.captions, "
            "bindscope.generators.comco.scene, bindscope.generators.comco.generator, bindscope.cli.comco; "
            "assert 'bpy' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


# sha256 of the canonical JSON of {config, the first 60 scene plans and every reference plan} for four configs,
# computed with the planner as it was before the mention-order keys existed: without them plans keep their bytes
DEFAULT_PLAN_DIGESTS = {
    "default": ({}, "43762d93691745cda92e83c7330b6c53b3ffa82b943479d5d6b98e8530fd7aa3"),
    "attributes": ({"set": "simco18", "attributes": "colour,material,size", "objects": "1-5"},
                   "ffce0a4712314d5b774fc5e85731a3561dda288b5fdf606d6143be8aa4f1a74d"),
    "crop": ({"set": "simco18", "size_mode": "random", "references": "crop",
              "caption": {"templates": ["a photo of {objects}."]}},
             "9ba38f0567234ba4afd8769e3503f1b3bd244848414ac0c88c996d6ac72e5fdd"),
    "equal-random": ({"size_mode": "equal", "placement": {"mode": "random"}},
                     "bb50674cb2db8279a109f3919e6a9b42a436e486a3baedf8d8c54e2e60470016"),
}


@pytest.mark.parametrize("name", sorted(DEFAULT_PLAN_DIGESTS))
def test_plans_without_saliency_keep_their_bytes(name):
    import hashlib

    from bindscope.io.canonical import canonical_json

    overrides, expected = DEFAULT_PLAN_DIGESTS[name]
    cfg = resolve_render_config(None, overrides)
    assert "saliency" not in cfg and "saliency_bias" not in cfg
    assert resolve_render_config(None, {**overrides, "saliency": "none"}) == cfg  # the explicit default
    categories = load_set(cfg["set"])
    specs = [scene.plan_scene(cfg, categories, 0, i) for i in range(60)]
    specs += [scene.plan_reference(cfg, categories, 0, i) for i in range(len(categories))]
    text = canonical_json({"config": cfg, "specs": specs})
    assert hashlib.sha256(text if isinstance(text, bytes) else text.encode()).hexdigest() == expected
    assert not any("salient" in s for s in specs)


def _binomial_range(n: int, p: float) -> tuple[int, int]:
    """Counts outside which a Binomial(n, p) count falls with probability below 1e-6 (both tails together)."""
    from scipy.stats import binom

    return int(binom.ppf(5e-7, n, p)), int(binom.isf(5e-7, n, p))


@pytest.mark.parametrize("mode,bias", [("size", 0.75), ("size", 0.0), ("position", 1.0), ("position", 0.4)])
def test_saliency_mention_order_share_within_its_binomial_range(comco72, mode, bias):
    """saliency_bias is the probability that the salient object is named first, whatever the object count: the
    realised share over 600 plans of 2-5 objects lies in its binomial range; the other objects are first in
    the remaining scenes, each about equally often; position orders the whole caption left to right."""
    cfg = resolve_render_config(None, {"objects": "2-5", "saliency": mode, "saliency_bias": bias})
    n = 600
    first, in_order, others_first = 0, 0, Counter()
    for i in range(n):
        spec = scene.plan_scene(cfg, comco72, 0, i)
        objs = spec["objects"]
        salient = objs[spec["salient"] - 1]
        mentioned = sorted(objs, key=lambda o: o["mention_position"])
        assert spec["caption"] == " and ".join(o["category"] for o in mentioned)
        xs = scene.image_x(spec["camera"], objs, cfg)
        if mode == "size":
            assert salient["large"]
        else:
            assert xs[spec["salient"] - 1] == min(xs)
        first += salient["mention_position"] == 1
        in_order += [o["index"] for o in mentioned] == [objs[k]["index"] for k in np.argsort(xs)]
        if salient["mention_position"] != 1:  # which of the others came first: its rank among them by x
            others = sorted((o for o in objs if o is not salient), key=lambda o: xs[o["index"] - 1])
            others_first[(len(objs), others.index(mentioned[0]))] += 1
    low, high = _binomial_range(n, bias)
    assert low <= first <= high, (first, low, high)
    if mode == "position":
        assert in_order == first  # left to right exactly when the leftmost is first
    for (count, _), seen in others_first.items():  # per count: each of the count - 1 others equally likely
        total = sum(v for (c, _), v in others_first.items() if c == count)
        assert _binomial_range(total, 1 / (count - 1))[0] <= seen <= _binomial_range(total, 1 / (count - 1))[1]


def test_saliency_images_do_not_depend_on_the_mention_order(comco72):
    """Only the caption changes: every other value of a plan (scales, positions, camera, light, Cycles seed) is
    the same with and without saliency, so the rendered images are too."""
    plain = config(objects={"min": 2, "max": 5})
    ordered = resolve_render_config(None, {"objects": "2-5", "saliency": "position", "saliency_bias": 0.5})
    for i in range(40):
        a, b = scene.plan_scene(plain, comco72, 0, i), scene.plan_scene(ordered, comco72, 0, i)
        strip = lambda s: {**{k: v for k, v in s.items() if k not in ("caption", "salient")},  # noqa: E731
                           "objects": [{k: v for k, v in o.items() if k != "mention_position"} for o in s["objects"]]}
        assert strip(a) == strip(b)


def test_saliency_keys_that_do_not_apply_are_refused(tmp_path):
    with pytest.raises(BadInput, match="^saliency_bias 0.5 needs saliency size or position"):
        resolve_render_config(None, {"saliency_bias": 0.5})
    with pytest.raises(BadInput, match="^saliency 'size' needs size_mode one-large or random"):
        resolve_render_config(None, {"saliency": "size", "size_mode": "equal"})
    with pytest.raises(BadInput, match="saliency_bias: 1.5 is greater than the maximum of 1"):
        resolve_render_config(None, {"saliency": "size", "saliency_bias": 1.5})
    out = tmp_path / "out"
    result = CliRunner().invoke(comco, ["render", "--set", "simco18", "--saliency", "left", "--out", str(out)])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert result.output.startswith("Error: ") and "'left' is not one of ['none', 'size', 'position']" in result.output
    assert not out.exists()
