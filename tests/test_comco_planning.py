"""ComCO / SimCO scene planning: pure Python, no Blender (fast)."""

from __future__ import annotations

import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from bindscope.cli import comco
from bindscope.config import resolve_config
from bindscope.errors import BadInput
from bindscope.generators.comco import planning
from bindscope.generators.comco.commands import resolve_render_config
from bindscope.generators.comco.registry import load_set


def config(**overrides) -> dict:
    return resolve_config("comco_config", planning.DEFAULT_CONFIG, overrides)


@pytest.fixture(scope="module")
def comco72():
    return load_set("comco72")


def test_parse_objects():
    assert planning.parse_objects("3") == (3, 3)
    assert planning.parse_objects("2-5") == (2, 5)
    for bad in ("0", "6", "4-2", "two", "1-6", "2-"):
        with pytest.raises(BadInput, match="--objects"):
            planning.parse_objects(bad)


def test_same_seed_same_specs_and_other_seed_differs(comco72):
    cfg = config()
    a = [planning.plan_scene(cfg, comco72, 7, i) for i in range(20)]
    b = [planning.plan_scene(cfg, comco72, 7, i) for i in range(20)]
    c = [planning.plan_scene(cfg, comco72, 8, i) for i in range(20)]
    assert a == b
    assert sum(x != y for x, y in zip(a, c)) == 20
    # a re-plan (attempt 1) is a different scene, and itself reproducible
    assert planning.plan_scene(cfg, comco72, 7, 3, attempt=1) != a[3]
    assert planning.plan_scene(cfg, comco72, 7, 3, attempt=1) == planning.plan_scene(cfg, comco72, 7, 3, 1)


def test_counts_spread_evenly_and_weighted(comco72):
    cfg = config(objects={"min": 2, "max": 5})
    counts = Counter(len(planning.plan_scene(cfg, comco72, 0, i)["objects"]) for i in range(40))
    assert counts == {2: 10, 3: 10, 4: 10, 5: 10}
    weighted = config(objects={"min": 2, "max": 3, "weights": [0, 1]})
    assert {len(planning.plan_scene(weighted, comco72, 0, i)["objects"]) for i in range(30)} == {3}


def test_one_large_scales_and_distinct_categories(comco72):
    cfg = config(objects={"min": 5, "max": 5})
    large_slots = Counter()
    for i in range(200):
        spec = planning.plan_scene(cfg, comco72, 1, i)
        objs = spec["objects"]
        assert [o["index"] for o in objs] == [1, 2, 3, 4, 5]
        assert len({o["category"] for o in objs}) == 5
        large = [o for o in objs if o["large"]]
        assert len(large) == 1 and large[0]["scale"] == 1.5
        assert all(o["scale"] == 0.75 for o in objs if not o["large"])
        large_slots[large[0]["index"]] += 1
    assert set(large_slots) == {1, 2, 3, 4, 5}  # the large object is not always the same slot
    equal = config(size_mode="equal", scale={"equal": 1.2})
    assert {o["scale"] for o in planning.plan_scene(equal, comco72, 0, 0)["objects"]} == {1.2}
    rnd = config(size_mode="random")
    scales = [o["scale"] for i in range(30) for o in planning.plan_scene(rnd, comco72, 0, i)["objects"]]
    assert min(scales) >= 0.75 and max(scales) <= 1.5 and len(set(scales)) == len(scales)


@pytest.mark.parametrize("mode", ["random", "grid"])
def test_footprints_disjoint_with_gap_and_inside_ground(comco72, mode):
    cfg = config(objects={"min": 4, "max": 5}, placement={"mode": mode, "min_gap": 0.3, "grid": [3, 2]},
                 size_mode="equal", ground={"size": [6.0, 4.0]})
    half_w, half_d = (v / 2 for v in cfg["ground"]["size"])
    for i in range(100):
        objs = planning.plan_scene(cfg, comco72, 3, i)["objects"]
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
        spec = planning.plan_scene(cfg, comco72, 0, i)
        objs = sorted(spec["objects"], key=lambda o: o["mention_position"])
        assert [o["mention_position"] for o in objs] == [1, 2, 3]
        assert spec["caption"] == " and ".join(o["category"] for o in objs)
        first[objs[0]["index"]] += 1
    # uniform over the three objects: 500 expected each; 4 binomial standard deviations is 73
    assert all(abs(v - 500) < 73 for v in first.values()), first
    templated = config(caption={"templates": ["a photo of {objects}.", "{objects} on a table"]})
    captions = {planning.plan_scene(templated, comco72, 0, i)["caption"] for i in range(20)}
    assert any(c.startswith("a photo of ") and c.endswith(".") for c in captions)
    assert any(c.endswith(" on a table") for c in captions)


def test_camera_and_light_jitter_bounds(comco72):
    cfg = config()
    for i in range(50):
        spec = planning.plan_scene(cfg, comco72, 0, i)
        cam, light = spec["camera"], spec["light"]
        assert 9.5 <= cam["distance"] <= 10.5 and 37 <= cam["elevation_deg"] <= 43
        assert -5 <= cam["azimuth_deg"] <= 5 and cam["focal_mm"] == 50
        assert 42 <= light["elevation_deg"] <= 58 and -60 <= light["azimuth_deg"] <= -10
        assert 2.5 <= light["strength"] <= 3.5
        assert spec["render"] == {**spec["render"], "resolution": 224, "samples": 16, "denoise": True}
    still = config(camera={"jitter": {"distance": 0, "elevation_deg": 0, "azimuth_deg": 0}})
    assert planning.plan_scene(still, comco72, 0, 4)["camera"]["distance"] == 10.0


def test_reference_plan(comco72):
    cfg = config()
    spec = planning.plan_reference(cfg, comco72, 0, 5)
    (obj,) = spec["objects"]
    assert spec["caption"] == comco72[5].name == obj["category"]
    assert (obj["x"], obj["y"], obj["yaw_deg"], obj["scale"]) == (0.0, 0.0, 0.0, 1.5)
    assert spec["camera"] == {"distance": 10.0, "elevation_deg": 40.0, "azimuth_deg": 0.0, "focal_mm": 50.0,
                              "look_at": [0.0, 0.0, 0.3]}
    assert spec["light"]["strength"] == 3.0


def test_capacity_checks_hand_computed():
    # 5 objects of scale 1.6: footprint radius 1.131 m; with gap 0.15 their discs cover 5*pi*1.206^2 = 22.86 m^2,
    # more than pi/sqrt(12) * 4.15^2 = 15.62 m^2 on a 4 x 4 m ground
    cfg = config(size_mode="equal", scale={"equal": 1.6}, ground={"size": [4.0, 4.0]})
    with pytest.raises(BadInput, match="total area exceeds"):
        planning.check_capacity(cfg, [1.6] * 5)
    planning.check_capacity(cfg, [1.6] * 2)  # 9.14 m^2 fits
    with pytest.raises(BadInput, match="wider than the ground"):
        planning.check_capacity(config(ground={"size": [2.0, 2.0]}), [1.6])


def test_bounded_retries_give_clear_error(comco72):
    # capacity passes, but four 1 m objects almost never fit a 3 x 3 m ground at random
    cfg = config(objects={"min": 4, "max": 4}, size_mode="equal", ground={"size": [3.0, 3.0]},
                 placement={"max_tries": 5})
    with pytest.raises(BadInput, match="no layout found in 5 tries"):
        planning.plan_scene(cfg, comco72, 0, 0)
    grid = config(objects={"min": 5, "max": 5}, placement={"mode": "grid", "grid": [2, 2]})
    with pytest.raises(BadInput, match="4 slots"):
        planning.check_plannable(grid, comco72, 0)


def test_impossible_layout_cli_exit_2_and_nothing_written(tmp_path):
    cfg = tmp_path / "tiny-ground.yaml"
    cfg.write_text(yaml.safe_dump({"size_mode": "equal", "scale": {"equal": 1.6}, "ground": {"size": [2.5, 2.5]}}))
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
    code = ("import sys; import bindscope.generators.comco.planning, bindscope.generators.comco.generator, "
            "bindscope.generators.comco.commands; "
            "assert 'bpy' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
