"""The prepared GPU check runs its steps on the CPU with tiny sizes (``--dry-run``) and prints one JSON object with
every figure it promises; the figures of the dry run are real, only small."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # a few minutes: datasets, a random-weight ViT-B-32 on the CPU, 3 training steps, 2 scenes, a
# toy reproduction
@pytest.mark.blender
def test_dry_run_prints_one_json_object_with_every_figure(tmp_path):
    # GPU_CHECK_LIMIT=0: no time budget, so a busy machine slows the dry run down without failing it (budgets are
    # the benchmark's business); the subprocess timeout only guards against a hang
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_WORK": str(tmp_path / "work"),
           "BINDSCOPE_CACHE": str(tmp_path / "cache"), "OUT": str(tmp_path), "GPU_CHECK_LIMIT": "0"}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--dry-run"], capture_output=True,
                          text=True, env=env, timeout=3000)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, done.stdout[-2000:]
    report = json.loads(lines[0])
    assert report == json.loads((tmp_path / "gpu_check.json").read_text())
    assert set(report) == {"device", "torch", "cuda", "cpus", "dry_run", "rates_fp32", "rates_bf16", "ratios",
                           "bf16_vs_fp32", "train", "feed", "attention", "render", "t2i", "reproduction", "wall_s",
                           "errors"}
    assert report["errors"] == {} and report["dry_run"] is True and report["device"] == "cpu"
    for key in ("raw_madman_1", "raw_comco_1", "torch_all_0_workers", "torch_all_2_workers", "torch_train_2_workers",
                "evaluate_zero_madman", "evaluate_zero_madman_0_workers", "evaluate_zero_comco",
                "evaluate_vit_madman"):
        assert report["rates_fp32"][key] > 0, key
    assert report["rates_bf16"]["evaluate_vit_madman"] > 0
    for key in ("torch_train_2_workers/raw", "evaluate_zero_madman/raw", "evaluate_zero_comco/raw",
                "evaluate_vit_madman/raw", "evaluate_vit_madman_bf16/raw"):
        assert 0 <= report["ratios"][key] < 10, key
    diff = report["bf16_vs_fp32"]
    assert 0 < diff["max_abs_diff_image"] < 0.05 and 0 < diff["max_abs_diff_text"] < 0.05
    assert diff["min_cosine_image"] > 0.99 and diff["count"] == 4
    assert report["train"]["steps"] == 3 and report["train"]["steps_per_s"] > 0
    feed = report["feed"]
    assert (feed["train_images"], feed["batch_size"]) == (256, 16) and feed["feed_images_per_s"] > 0
    assert set(feed["runs"]) == {"streamed", "memory"} and feed["ratio"] > 0
    assert all(run["peak_rss_mb"] > 0 and run["steps"] == 8 for run in feed["runs"].values())
    attention = report["attention"]
    assert (attention["scenes"], attention["blocks"]) == (4, 12) and 0 < attention["largest_object_mass"] < 1
    reproduction = report["reproduction"]
    assert reproduction["settings"]["steps"] == 3 and reproduction["settings"]["width"] == 32
    for preset in ("ideal", "realistic"):
        block = reproduction["presets"][preset]
        assert set(block["binding"]) == {"colour", "size", "thickness", "rotation", "swelling", "fracture"}
        assert set(block["recognition"]) == set(block["binding"]) and sum(block["n"].values()) > 0  # binding is
        # conditional on recognition: a 3-step toy model recognises some attributes for no image
    assert report["t2i"] == {"skipped": "dry run: the text-to-image step runs on a GPU only"}
    render = report["render"]
    assert render["scenes"] == 2 and render["bpy"].startswith("5.0") and render["wall_s"] > 0
    assert render["command"][:7] == ["comco", "render", "--objects", "2", "-n", "2", "--no-references"]
    assert render["command"][render["command"].index("--device") + 1] == "cpu"


def test_the_reproduction_gets_the_steps_that_fit_in_whole_hundreds():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from gpu_check import steps_that_fit
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert steps_that_fit(12.5, 200, 8000) == 2500  # 2,500 steps in 200 s
    assert steps_that_fit(12.5, 215, 8000) == 2600  # 2,687 steps: down to the hundred
    assert steps_that_fit(100.0, 200, 8000) == 8000 and steps_that_fit(0.4, 200, 8000) == 0
    assert steps_that_fit(10.0, -5, 8000) == 0


def test_the_render_step_renders_two_scenes_on_cuda_outside_a_dry_run():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from gpu_check import render_command
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    gpu = render_command(Path("scenes"), dry=False)
    assert gpu == ["render", "--objects", "2", "-n", "2", "--no-references", "--out", "scenes", "--overwrite",
                   "--quiet", "--device", "cuda"]
    assert render_command(Path("scenes"), dry=True) == gpu[:-1] + ["cpu", "--resolution", "64", "--samples", "4"]
