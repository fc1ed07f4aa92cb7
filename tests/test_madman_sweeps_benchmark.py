"""benchmarks/madman_sweeps.py --quick end to end (records, tables, paired tests, plots, skipping recorded points),
its points against ``madman sweep``'s, and the paired tests of benchmarks/paired_tests.py on hand-made outcomes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "madman_sweeps.py"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import madman_sweeps
    import paired_tests

    yield madman_sweeps, paired_tests
    sys.path.remove(str(ROOT / "benchmarks"))


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    work = tmp_path_factory.mktemp("sweeps")
    done = run("--quick", "--work", str(work), "--json", str(work / "out.json"))
    assert done.returncode == 0, done.stderr[-3000:]
    return work, done, json.loads((work / "out.json").read_text())


def test_quick_records_every_point_with_its_outcomes(quick, bench):
    madman_sweeps, paired_tests = bench
    work, done, result = quick
    # five points (the shared base and one other value per curve) x two seeds
    names = sorted(p.relative_to(work / "results").as_posix() for p in (work / "results").rglob("*.json"))
    points = ["attribute_density=0.5", "base", "multi_object_captions=0.25", "multi_object_images=0.25",
              "saliency_bias=1"]
    assert names == [f"{p}/seed-{s}.json" for p in points for s in (0, 1)]
    assert result["recorded"] == result["planned"] == 10 and len(result["trained"]) == 10
    s = madman_sweeps.settings("cpu", True)
    for path in (work / "results").rglob("*.json"):
        record = json.loads(path.read_text())
        assert record["identity"] == madman_sweeps.identity(s, record["point"], record["seed"])
        assert list(record["evals"]) == ["full", "base"]
        for ev, blocks in record["evals"].items():
            assert list(blocks) == ["colour", "size", "thickness"]
        for block in [*record["evals"]["full"].values(), *record["evals"]["base"].values()]:
            passed = paired_tests.unpack(block["passed"], block["comparisons"])
            counted = paired_tests.unpack(block["counted_bits"], block["comparisons"])
            assert counted.sum() == block["counted"]
            if block["counted"]:
                assert block["binding"] == (passed & counted).sum() / counted.sum()
    # every record is scored on the same comparisons of each evaluation set
    keys = {json.dumps({ev: {a: b["key"] for a, b in blocks.items()}
                        for ev, blocks in json.loads(p.read_text())["evals"].items()})
            for p in (work / "results").rglob("*.json")}
    assert len(keys) == 1
    # "full" names all three attributes for both digits of every image: one binding comparison per attribute whose
    # two values differ; "base" names one or two, so it holds fewer
    record = json.loads((work / "results" / "base" / "seed-0.json").read_text())
    full, base = (sum(b["comparisons"] for b in record["evals"][ev].values()) for ev in ("full", "base"))
    assert 0 < base < full <= 3 * 40


def test_quick_curves_tests_and_plots(quick):
    work, done, result = quick
    assert list(result["curves"]) == ["multi-object-images", "multi-object-captions", "attribute-density",
                                      "saliency-bias"]
    for curve in result["curves"].values():
        assert [row["seeds"] for row in curve["rows"]] == [[0, 1], [0, 1]]
        assert [(t["eval"], t["kind"], t["attributes"]) for t in curve["tests"]] == [
            (ev, kind, group) for ev in ("full", "base") for kind in ("neighbours", "ends") for group in ("all", "colour")]
        for test in curve["tests"]:
            assert test["seeds"] == 2 and len(test["per_seed_difference"]) == 2
            assert test["first_only"] + test["second_only"] <= test["n"] and 0 <= test["p"] <= 1
    assert result["curves"]["saliency-bias"]["rows"][0]["point"] == "base"
    density = result["curves"]["attribute-density"]
    assert [row["paper_value"] for row in density["rows"]] == [1.0, 3.5] and density["turning"] == 1.75
    for path in result["plots"].values():
        assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(result["plots"]) == 4
    assert "saliency-bias (saliency_bias), evaluation set 'base' (1.75 attributes named per digit)" in done.stdout


def test_rerun_skips_recorded_points(quick):
    work, done, result = quick
    before = {p: p.stat().st_mtime_ns for p in (work / "results").rglob("*.json")}
    again = run("--quick", "--work", str(work), "--json", str(work / "again.json"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "10 points (10 recorded, 0 to train)" in again.stdout
    assert {p: p.stat().st_mtime_ns for p in (work / "results").rglob("*.json")} == before
    assert json.loads((work / "again.json").read_text())["curves"] == result["curves"]


def test_points_are_madman_sweep_points(bench, tmp_path):
    from bindscope.training.sweep import Sweep, SweepConfig

    madman_sweeps, _ = bench
    s = madman_sweeps.settings("cpu", False)
    layer = tmp_path / "cpu.yaml"
    layer.write_text(json.dumps(s["config"]))  # JSON is YAML
    sweep = Sweep(SweepConfig(property="saliency-bias", values="0.75,0.9", out=str(tmp_path / "sweep"),
                              base_preset="ideal", num_train=s["num_train"], num_test=s["num_test"],
                              generator_config=str(layer)))
    from bindscope.generators.madman import config as madman_config

    for value in (0.75, 0.9):
        flags = madman_sweeps.data_flags(s, f"saliency_bias={value:g}", s["num_train"])
        assert madman_config.resolve("ideal", s["config"], flags, 0) == sweep.point_configs[value]
    assert madman_config.resolve("ideal", s["config"], madman_sweeps.eval_flags(s, "full"), 0) == sweep.eval_config
    resolved = sweep.eval_config
    assert madman_config.resolve("ideal", s["config"], madman_sweeps.eval_flags(s, "base"), 0) == {
        **resolved, "eval_attribute_density": 1.75}
    assert resolved["caption_order"] == ["size", "colour", "thickness"] and resolved["attribute_density"] == 1.75
    assert {a: list(v) for a, v in resolved["attributes"].items() if len(v) == 1} == {
        "rotation": ["upright"], "swelling": ["unswollen"], "fracture": ["intact"]}
    # the ideal value of every curve is the shared base point
    for key in madman_sweeps.SWEEPS.values():
        assert "base" in [p for _, p in madman_sweeps.curve_points(s, key)]
    assert len(madman_sweeps.plan(s, list(madman_sweeps.SWEEPS))) == 3 * (1 + 3 + 3 + 4 + 3)
    # the half-captions variant: the saliency curve over the same layer with half the captions of one digit; its
    # training sets are the cpu grid's at the same settings (multi-object captions 0.5 is its base point)
    half = madman_sweeps.settings("cpu-half-captions", False)
    assert half["sweeps"] == ["saliency-bias"] and len(madman_sweeps.plan(half, half["sweeps"])) == 3 * 4
    for value in (0.75, 1.0):
        flags = madman_sweeps.data_flags(half, f"saliency_bias={value:g}", half["num_train"])
        assert madman_config.resolve("ideal", half["config"], flags, 0) == {
            **madman_config.resolve("ideal", s["config"], flags, 0), "multi_object_captions": 0.5}
    assert madman_config.resolve("ideal", half["config"], madman_sweeps.data_flags(half, "base", 20000), 0) == \
        madman_config.resolve("ideal", s["config"], madman_sweeps.data_flags(s, "multi_object_captions=0.5", 20000), 0)


def test_mcnemar_and_bootstrap_by_hand(bench):
    _, paired_tests = bench
    a = np.array([1, 1, 1, 1, 1, 0, 1, 0], bool)
    b = np.array([0, 0, 0, 0, 0, 0, 1, 0], bool)
    test = paired_tests.mcnemar([(a, b)])
    # 5 discordant pairs, all for the first model: p = 2 * 0.5**5
    assert (test["first_only"], test["second_only"], test["n"]) == (5, 0, 8)
    assert test["p"] == pytest.approx(0.0625) and test["difference"] == pytest.approx(-5 / 8)
    pooled = paired_tests.mcnemar([(a, b), (b, a)])
    assert (pooled["first_only"], pooled["second_only"], pooled["p"]) == (5, 5, 1.0)
    assert paired_tests.mcnemar([(a, a)])["p"] == 1.0
    bits = np.array([1, 0, 1, 1, 0, 0, 0, 1, 1, 0], bool)
    assert paired_tests.pack(bits) == "sYA="  # 10110001 10000000
    assert paired_tests.unpack("sYA=", 10).tolist() == bits.tolist()
    with pytest.raises(ValueError):
        paired_tests.unpack("sYA=", 20)
    boot = paired_tests.paired_bootstrap([0.0] * 50 + [1.0] * 50, [1.0] * 100)
    # every resample's difference is positive: p = 2 * (1 + 0) / (2000 + 1), the library's smallest
    assert boot["difference"] == 0.5 and boot["p"] == pytest.approx(2 / 2001) and boot["ci95"][0] > 0.3
    interval = paired_tests.seed_interval([0.6, 0.7, 0.8])
    # t(0.975, 2) = 4.3027; sd = 0.1; half width 4.3027 * 0.1 / sqrt(3) = 0.2484
    assert interval["mean"] == pytest.approx(0.7) and interval["ci95"][1] == pytest.approx(0.9484, abs=1e-4)
    assert (interval["min"], interval["max"], interval["n"]) == (0.6, 0.8, 3)
    # a share's interval stops at 1: 0.7 + 0.2484 is clipped, the lower end is not
    clipped = paired_tests.seed_interval([0.6, 0.7, 0.8], (0.0, 0.9))
    assert clipped["ci95"][1] == 0.9 and clipped["ci95"][0] == pytest.approx(0.4516, abs=1e-4)


def test_identity_leaves_out_only_what_no_image_shows(bench, monkeypatch):
    madman_sweeps, _ = bench
    from bindscope.generators.madman import config as madman_config

    resolve = madman_config.resolve

    def with_gap(gap):
        def patched(*args, **kwargs):
            out = resolve(*args, **kwargs)
            return {**out, "morpho": {**out["morpho"], "fracture_gap": gap}}
        return patched

    identities = {}
    for scale in ("cpu", "gpu"):
        s = madman_sweeps.settings(scale, False)
        for gap in (0.07, 0.12):
            monkeypatch.setattr(madman_config, "resolve", with_gap(gap))
            identities[scale, gap] = madman_sweeps.identity(s, "base", 0)
    # every digit is intact at the cpu scale: the cut width changes no image, nor the identity; at the gpu scale
    # digits are cut, so it does
    assert identities["cpu", 0.07] == identities["cpu", 0.12]
    assert identities["gpu", 0.07] != identities["gpu", 0.12]
    monkeypatch.setattr(madman_config, "resolve", resolve)
    s = madman_sweeps.settings("cpu", False)
    assert madman_sweeps.identity(s, "base", 0) != madman_sweeps.identity(s, "base", 1)
    assert madman_sweeps.identity(s, "base", 0) != madman_sweeps.identity(s, "saliency_bias=0.75", 0)


@pytest.mark.parametrize("args, message", [
    (["--seeds", "0,x"], "argument --seeds: '0,x': 'x' is not allowed; use an integer in 0..4294967295"),
    (["--seeds", "1,1"], "argument --seeds: '1,1' is not allowed; use distinct comma-separated seeds"),
    (["--jobs", "0"], "argument --jobs: '0' is not allowed; use an integer in 1..256"),
])
def test_bad_arguments_are_one_usage_error_before_any_work(tmp_path, args, message):
    done = run("--no-train", "--work", str(tmp_path / "work"), "--plots", str(tmp_path / "plots"), *args)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "work").exists() and not (tmp_path / "plots").exists()
