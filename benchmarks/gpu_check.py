"""One prepared check of the evaluation and training feed on a machine with a CUDA GPU; prints ONE JSON object.

Run it through ``bash benchmarks/gpu_check.sh`` (which finds a Python with torch and installs what is missing).
On the GPU, in this order, each step under its own time limit (an error is recorded and the rest still runs):

1. ``benchmarks/eval_ceiling.py``'s stages on ``cuda`` in fp32: raw reads, the torch reader (0 and 2 workers),
   ``bindscope.evaluate`` with a zero-cost encoder (MADMAN 96 px and ComCO-style 224 px; the reader workers
   chosen automatically, and once more with none, to check that choice) and with a random-weight ViT-B-32;
2. the ViT-B-32 stage again in bf16;
3. the largest absolute difference between bf16 and fp32 embeddings (unit-norm rows) of the same images and
   texts, and the smallest cosine between the two;
4. a short ``madman train --device cuda`` (a few hundred steps) on a generated MADMAN training split: steps/s;
   then the training feed (``benchmarks/train_scale.py``) on 10,000 MADMAN images: the images/s the streamed
   batches arrive at on the GPU without a model (one reader worker per 2 CPUs, at most 8) against the images/s of
   the table's small CLIP's steps, streamed and with ``--data-in-memory`` (their ratio), and each run's peak RSS;
5. the CLS attention analysis (:func:`bindscope.evaluation.attention.cls_attention_by_size`, every block, with
   rollout) of a random-weight ViT-B-32 on ``cuda`` over 64 ComCO-style scenes: scenes/s and the attention mass
   on the largest object;
6. a tiny ``comco render --device cuda`` (2 scenes, no references) with the Python that imports Blender's
   ``bpy`` (``$BLENDER_PYTHON``, else this one): the command line, bpy's version and the wall seconds. The
   bpy 5.0.1 wheel is for Python 3.11 only, so on a machine without such a Python the step records that as its
   error;
7. the text-to-image step (``benchmarks/t2i_check.py``): ``comco t2i`` with ``stabilityai/sd-turbo``, ``comco
   t2i-score`` with ``google/owlv2-base-patch16-ensemble`` (and a CLIP) and ``bindscope caption-bias`` on the
   images as WebDataset pairs with ``facebook/sam-vit-base``, when diffusers and those weights are in place (the
   Hugging Face cache; nothing is downloaded), else recorded as skipped with the reason;
8. the MADMAN reproduction (``benchmarks/madman_reproduction.py``: the same CLIP trained on ``ideal`` and on
   ``realistic`` data, binding on one held-out set) at the paper's "larger model and batch" scale (both towers
   width 256, 6 blocks, batch 512, bf16), with as many steps as the time left allows: a 50-step probe run of
   both presets measures steps/s and the fixed cost (generation, evaluation, diagnostics), then the real run
   gets ``steps = steps/s x (time left - fixed cost - margin)``, in hundreds (at most 8,000, the paper's). The
   binding table of both presets, steps, steps/s and minutes.

The whole check keeps within ``--budget`` seconds (default 540): each step's limit is cut to the time left,
and a step with under 20 s left is recorded as not run. ``--budget 0`` sets no time limit at all (every step and
subprocess runs to its end): what a test of the script's behaviour uses, so that a busy machine slows it down
without failing it. The JSON object (stdout; progress goes to stderr) has the keys ``device``, ``torch``, ``cuda``,
``cpus``, ``dry_run``, ``rates_fp32``, ``rates_bf16``, ``ratios``, ``bf16_vs_fp32``, ``train``, ``feed``,
``attention``, ``render``, ``t2i``, ``reproduction``, ``wall_s`` and ``errors`` (step name -> message; empty when all
ran); ``--out`` is rewritten after every step, so an interrupted check leaves what it measured. ``--dry-run`` runs the same steps on the CPU with tiny sizes (a few hundred images, a few training
steps, 4 attention scenes, the render at 64 px with 4 samples on ``--device cpu``, the text-to-image step skipped,
a reproduction of 256 images and 3 steps at width 32) to check the script itself.

    python benchmarks/gpu_check.py [--dry-run] [--work DIR] [--out FILE] [--budget SECONDS | --budget 0]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SIZES = {False: {"images": 10000, "comco": 2000, "vit": 10000, "digits": None, "steps": 300, "diff": 512,
                 "attention": 64, "feed_train": 10000, "feed_steps": 60, "feed_batch": 256},
         True: {"images": 200, "comco": 24, "vit": 4, "digits": 16, "steps": 3, "diff": 4, "attention": 4,
                "feed_train": 256, "feed_steps": 8, "feed_batch": 16}}
LIMITS = {False: {"fp32": 150, "bf16": 60, "diff": 60, "train": 90, "feed": 120, "attention": 60, "workers0": 40,
                  "render": 90, "t2i": 150, "reproduction": 420},
          True: {"fp32": 240, "bf16": 120, "diff": 60, "train": 120, "feed": 240, "attention": 60, "workers0": 60,
                 "render": 120, "t2i": 60, "reproduction": 240}}
# the reproduction's model: the paper's "larger model and batch" on a GPU, a toy in a dry run
REPRODUCTION = {False: {"width": 256, "layers": 6, "batch_size": 512, "num_train": 60000, "num_test": 3000,
                        "precision": "bf16", "probe_steps": 50, "max_steps": 8000},
                True: {"width": 32, "layers": 1, "batch_size": 16, "num_train": 256, "num_test": 100,
                       "precision": "fp32", "probe_steps": 2, "max_steps": 3}}
STEP_MIN_S = 20  # a step with less time left is not started


@contextlib.contextmanager
def time_limit(seconds: int | None):
    """Raise TimeoutError in this (main) thread after ``seconds`` (None: never)."""
    if seconds is None:
        yield
        return

    def stop(signum, frame):
        raise TimeoutError(f"over its {seconds} s limit")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def embedding_difference(data: Path, count: int, device: str) -> dict:
    """bf16 against fp32 embeddings of the first ``count`` images and texts of the MADMAN test split."""
    import numpy as np

    from eval_ceiling import vit_adapter

    from bindscope.format.reader import Dataset

    with Dataset(data, validate=False) as ds:
        split = ds.split("test")
        images = split.read_images(range(min(count, len(split))))
        reader = split.shard(0)
        texts = (reader.captions + reader.negative_column("caption"))[:count]
    out = {}
    emb = {p: vit_adapter(device=device, precision=p) for p in ("fp32", "bf16")}  # those of the stages
    for name, encode in (("image", lambda a: a.encode_images(images)), ("text", lambda a: a.encode_texts(texts))):
        full, half = encode(emb["fp32"]), encode(emb["bf16"])
        out[f"max_abs_diff_{name}"] = float(np.abs(full - half).max())
        out[f"min_cosine_{name}"] = float((full * half).sum(1).min())
    out["count"] = len(images)
    return out


def train_check(work: Path, steps: int, device: str, digits: int | None, dry: bool, timeout: int | None) -> dict:
    """``madman train`` on a generated training split (a subprocess stopped after ``timeout`` seconds; None: never):
    steps, steps/s (from its report) and wall seconds."""
    from eval_ceiling import madman_dataset

    data = madman_dataset(work, 200 if dry else 500, train=256 if dry else 4000, digits_per_class=digits)
    run = work / f"train-run-{'dry' if dry else 'gpu'}"
    args = ["train", str(data), "--out", str(run), "--overwrite", "--steps", str(steps), "--device", device,
            "--quiet"]
    if dry:
        args += ["--embed-dim", "16", "--image-size", "32", "--vision-width", "32", "--vision-layers", "1",
                 "--text-width", "32", "--text-layers", "1", "--batch-size", "16", "--warmup", "1"]
    code = "import sys; from bindscope.cli.main import madman; sys.exit(madman())"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"madman train exited {done.returncode}: {(done.stdout + done.stderr)[-600:]}")
    found = re.search(r"([0-9.]+) steps/s", done.stdout)
    return {"steps": steps, "steps_per_s": float(found.group(1)) if found else None, "wall_s": round(wall, 1)}


def feed_check(work: Path, device: str, dry: bool, timeout: int | None) -> dict:
    """The training feed on ``device`` (:mod:`train_scale`): images/s of the streamed batches without a model,
    and of the small CLIP's steps streamed and in memory (each run a subprocess stopped after ``timeout``
    seconds; None: never)."""
    import train_scale
    from eval_ceiling import madman_dataset

    size = SIZES[dry]
    data = madman_dataset(work, 200, train=size["feed_train"], digits_per_class=size["digits"])
    args = argparse.Namespace(batch_size=size["feed_batch"], loader_jobs=min(8, max(1, (os.cpu_count() or 2) // 2)),
                              model="small" if dry else "default", threads=0, device=device,
                              ratio_steps=size["feed_steps"])
    feed = train_scale.feed_rate(data, args)
    runs = {mode: train_scale.train(data, work / f"feed-{mode}", size["feed_steps"], args, in_memory=mode == "memory",
                                    timeout=timeout) for mode in ("streamed", "memory")}
    model = {mode: args.batch_size / run["median_step_s"] for mode, run in runs.items()}
    return {"train_images": size["feed_train"], "batch_size": args.batch_size, "loader_jobs": args.loader_jobs,
            "feed_images_per_s": round(feed, 1), "model_images_per_s": {m: round(r, 1) for m, r in model.items()},
            "ratio": round(runs["memory"]["median_step_s"] / runs["streamed"]["median_step_s"], 3), "runs": runs}


def attention_check(data: Path, count: int, device: str) -> dict:
    """The CLS attention analysis (every block, with rollout) of a random-weight ViT-B-32 on ``device`` over the
    first ``count`` scenes of ``data``: scenes/s (model loading not timed) and the attention mass of the last
    block on the largest object (size rank 1)."""
    from bindscope.encoders.registry import load_adapter
    from bindscope.evaluation.attention import cls_attention_by_size

    adapter = load_adapter("ViT-B-32", "none", device=device)
    start = time.perf_counter()
    result = cls_attention_by_size(data, adapter, layers="all", use_rollout=True, limit=count, progress=False)
    wall = time.perf_counter() - start
    layers = result["metrics"]["layers"]
    last = layers[max(layers, key=int)]["all"][0]
    return {"scenes": count, "scenes_per_s": round(count / wall, 2), "wall_s": round(wall, 1),
            "blocks": len(layers), "largest_object_mass": last["mass"]["mean"]}


def steps_that_fit(steps_per_s: float, seconds: float, most: int) -> int:
    """Training steps that ``seconds`` hold at ``steps_per_s``, in whole hundreds, at most ``most``."""
    return int(min(most, max(0.0, steps_per_s * seconds)) // 100 * 100)


def reproduction_check(work: Path, device: str, dry: bool, seconds_left) -> dict:
    """The MADMAN reproduction at the "larger model and batch" scale (:data:`REPRODUCTION`): a probe run of
    ``probe_steps`` steps, then a run with the steps that fit ``seconds_left()`` (see the module docstring).
    Returns the steps, the probe's steps/s and fixed seconds, the run's wall minutes and its binding and
    recognition per attribute and preset (%, conditional on recognition as in the paper) with n. Each run is a
    subprocess stopped when ``seconds_left()`` runs out (never when it is infinite)."""
    size = REPRODUCTION[dry]
    script = Path(__file__).resolve().parent / "madman_reproduction.py"
    common = ["--work", str(work / "reproduction"), "--device", device, "--width", str(size["width"]),
              "--layers", str(size["layers"]), "--batch-size", str(size["batch_size"]),
              "--num-train", str(size["num_train"]), "--num-test", str(size["num_test"]), "--patch-size", "8",
              "--precision", size["precision"], "--jobs", str(os.cpu_count() or 1), "--warmup", "100"]

    def run(steps: int, name: str) -> tuple[dict, float]:
        out = work / f"reproduction-{name}.json"
        start = time.perf_counter()
        left = seconds_left()
        done = subprocess.run([sys.executable, str(script), "--out", str(out), "--steps", str(steps), *common],
                              capture_output=True, text=True, timeout=None if math.isinf(left) else max(1, int(left)))
        if done.returncode != 0:
            raise RuntimeError(f"madman_reproduction.py exited {done.returncode}: "
                               f"{(done.stdout + done.stderr)[-600:]}")
        return json.loads(out.read_text()), time.perf_counter() - start

    probe, probe_wall = run(size["probe_steps"], "probe")
    rates = [probe["presets"][p]["steps_per_s"] for p in ("ideal", "realistic")]
    rate = min(r for r in rates if r) if all(rates) else None  # the two runs train at once: the slower one
    train_s = size["probe_steps"] / rate if rate else probe_wall
    fixed = max(0.0, probe_wall - train_s - 60 * probe["generation_minutes"])  # evaluation, diagnostics, start
    spare = seconds_left() - fixed - 15
    steps = size["max_steps"] if dry else steps_that_fit(rate or 0.0, spare, size["max_steps"])
    if steps < 100 and not dry:
        raise RuntimeError(f"{spare:.0f} s left after the probe, at {rate} steps/s: too few for 100 steps")
    report, wall = run(steps, "run")
    table = {preset: {kind: report["presets"][preset][kind] for kind in ("binding", "recognition", "n",
                                                                           "binding_ci95")}
             for preset in ("ideal", "realistic")}
    return {"settings": {**size, "steps": steps}, "probe_steps_per_s": rate, "probe_fixed_s": round(fixed, 1),
            "wall_minutes": round(wall / 60, 2), "steps_per_s": {p: report["presets"][p]["steps_per_s"]
                                                                 for p in ("ideal", "realistic")},
            "target": report["target"], "presets": table}


def render_command(out: Path, dry: bool) -> list[str]:
    """The ``comco render`` arguments of the render step: 2 scenes of 2 objects, no references, on ``cuda``
    (``cpu`` at 64 px and 4 samples in a dry run)."""
    args = ["render", "--objects", "2", "-n", "2", "--no-references", "--out", str(out), "--overwrite", "--quiet",
            "--device", "cpu" if dry else "cuda"]
    return args + (["--resolution", "64", "--samples", "4"] if dry else [])


def render_check(work: Path, dry: bool, timeout: int | None) -> dict:
    """The render step: find a Python that imports ``bpy`` (``$BLENDER_PYTHON``, else this interpreter), run
    :func:`render_command` with it (stopped after ``timeout`` seconds; None: never) and read the scene count back
    from the dataset's manifest.

    Raises:
        RuntimeError: no such Python (naming what was tried), or the render exiting non-zero.
    """
    python = os.environ.get("BLENDER_PYTHON") or sys.executable
    probe = subprocess.run([python, "-c", "import bpy; print(bpy.app.version_string)"], capture_output=True,
                           text=True, timeout=60)
    if probe.returncode != 0:
        raise RuntimeError(f"no Blender: {python} cannot import bpy (bpy==5.0.1 needs Python 3.11; set "
                           f"BLENDER_PYTHON to one that has it): {probe.stderr.strip()[-300:]}")
    out = work / f"render-{'dry' if dry else 'gpu'}"
    args = render_command(out, dry)
    code = "import sys; from bindscope.cli.main import comco; sys.exit(comco())"
    start = time.perf_counter()
    done = subprocess.run([python, "-c", code, *args], capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"comco render exited {done.returncode}: {(done.stdout + done.stderr)[-600:]}")
    manifest = json.loads((out / "manifest.json").read_text())
    return {"command": ["comco", *args], "python": python, "bpy": probe.stdout.strip().splitlines()[-1],
            "scenes": manifest["splits"]["scenes"]["num_samples"], "wall_s": round(wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="the same steps on the CPU with tiny sizes")
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "bindscope-gpu-check"))
    parser.add_argument("--out", default=None, help="also write the JSON object to this file (after every step)")
    parser.add_argument("--budget", type=int, default=540, help="seconds for the whole check (0: no time limits)")
    args = parser.parse_args()
    dry = args.dry_run
    unlimited = args.budget == 0
    start = time.perf_counter()

    def seconds_left() -> float:
        return math.inf if unlimited else args.budget - (time.perf_counter() - start)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    size = SIZES[dry]
    limit = {name: None if unlimited else seconds for name, seconds in LIMITS[dry].items()}
    report: dict = {"device": None, "torch": None, "cuda": None, "cpus": os.cpu_count(), "dry_run": dry,
                    "rates_fp32": {}, "rates_bf16": {}, "ratios": {}, "bf16_vs_fp32": {}, "train": {}, "feed": {},
                    "attention": {}, "render": {}, "t2i": {}, "reproduction": {}, "wall_s": None, "errors": {}}

    def save() -> None:
        report["wall_s"] = round(time.perf_counter() - start, 1)
        if args.out:
            Path(args.out).write_text(json.dumps(report, sort_keys=True) + "\n")

    def step(name: str, seconds: int | None, work_fn):
        if seconds is not None:
            seconds = int(min(seconds, seconds_left()))
        if seconds is not None and seconds < STEP_MIN_S:
            report["errors"][name] = f"not run: {max(seconds, 0)} s of the {args.budget} s budget left"
            save()
            return None
        print(f"[gpu_check] {name} (limit {seconds or 'none'} s)", file=sys.stderr, flush=True)
        try:
            with time_limit(seconds), contextlib.redirect_stdout(sys.stderr):
                return work_fn()
        except Exception as exc:  # recorded; the other steps still run
            report["errors"][name] = f"{type(exc).__name__}: {exc}"[:800]
            return None
        finally:
            save()

    try:
        import torch

        report["torch"] = torch.__version__
        report["cuda"] = torch.version.cuda
        device = "cpu" if dry else "cuda"
        if not dry and not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA GPU (use --dry-run on a CPU)")
        report["device"] = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
        import eval_ceiling

        common = {"images": size["images"], "comco_images": size["comco"], "vit_images": size["vit"],
                  "device": device, "work": str(work), "digits_per_class": size["digits"]}
        fp32 = step("eval_ceiling fp32", limit["fp32"], lambda: eval_ceiling.run(precision="fp32", **common))
        if fp32:
            report["rates_fp32"], report["ratios"] = fp32["rates"], fp32["ratios"]
        bf16 = step("eval_ceiling bf16", limit["bf16"], lambda: eval_ceiling.run(precision="bf16", stages="ad",
                                                                                  **common))
        if bf16:
            report["rates_bf16"] = bf16["rates"]
            report["ratios"]["evaluate_vit_madman_bf16/raw"] = bf16["ratios"].get("evaluate_vit_madman/raw")
        data = eval_ceiling.madman_dataset(work, size["images"], digits_per_class=size["digits"])

        def no_workers():
            from bindscope.encoders.registry import load_adapter
            from bindscope.evaluation.madman import evaluate_madman

            t0 = time.perf_counter()
            evaluate_madman(data, load_adapter("zero:"), progress=False, workers=0)
            return size["images"] / (time.perf_counter() - t0)

        rate = step("evaluate zero-cost, no reader workers", limit["workers0"], no_workers)
        if rate:
            report["rates_fp32"]["evaluate_zero_madman_0_workers"] = round(rate, 1)
        diff = step("bf16 vs fp32 embeddings", limit["diff"], lambda: embedding_difference(data, size["diff"],
                                                                                             device))
        report["bf16_vs_fp32"] = diff or {}
        trained = step("madman train", limit["train"] and limit["train"] + 30,
                       lambda: train_check(work, size["steps"], device, size["digits"], dry, limit["train"]))
        report["train"] = trained or {}
        fed = step("training feed", limit["feed"], lambda: feed_check(work, device, dry, limit["feed"]))
        report["feed"] = fed or {}
        scenes = eval_ceiling.comco_dataset(work, size["comco"])
        attended = step("attention", limit["attention"], lambda: attention_check(scenes, size["attention"], device))
        report["attention"] = attended or {}
        rendered = step("comco render", limit["render"] and limit["render"] + 70,
                        lambda: render_check(work, dry, limit["render"]))
        report["render"] = rendered or {}
        import t2i_check

        made = step("t2i", limit["t2i"], lambda: t2i_check.run(work, device, dry))
        report["t2i"] = made or {}
        reproduced = step("madman reproduction", limit["reproduction"],
                          lambda: reproduction_check(work, device, dry, lambda: seconds_left() - 5))
        report["reproduction"] = reproduced or {}
    except Exception as exc:
        report["errors"]["setup"] = f"{type(exc).__name__}: {exc}"[:800]
    save()
    print(json.dumps(report, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
