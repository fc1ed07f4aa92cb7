"""Peak memory of a ``bindscope train`` process on MADMAN training splits of growing size, and the step time of
batches streamed from the shards against the split held in memory.

Usage::

    .venv/bin/python benchmarks/train_scale.py [--work runs/train-scale] [--sizes 10000,100000,400000]
        [--steps 20] [--ratio-steps 40] [--batch-size 128] [--loader-jobs 2] [--model small|default]
        [--threads 1] [--device cpu] [--out result.json]

1. Data: for each size N of ``--sizes``, a MADMAN dataset of N training images of 96 px and 200 test images
   (``bindscope.madman.generate``, seed 0, one job per core, shards of 500), made in ``--work`` or reused; its
   images/s.
2. Memory: ``bindscope train`` on each, streamed (the default), ``--loader-jobs`` workers, ``--steps`` steps, run as
   a subprocess in a fresh run folder. Its peak RSS: the training process's own (``ru_maxrss``, read in it when it
   ends), and, where psutil is installed, the largest PSS summed over the process and its reader workers, sampled
   every 0.2 s (PSS divides the pages a worker shares with the process it was forked from between them, so the
   sum is the memory of all of them; a worker's RSS would count those pages again).
3. Speed, on the smallest size: the median step time (``step_s`` of ``log.jsonl``, a line per step, the first 5
   steps left out) streamed and with ``--data-in-memory``, each twice, alternating, ``--ratio-steps`` steps;
   ``ratio`` = in-memory / streamed step time (1: streaming as fast; the goal is at least 0.9). Also the peak RSS of
   the in-memory runs.
4. Feed: images/s the training batches arrive at without a model (the streamed split's
   :class:`~bindscope.training.batches.BatchSource` in a DataLoader with ``--loader-jobs`` workers, moved to
   ``--device``), against the images/s of the model's steps (3.).

``--model small`` (the default here, for a CPU) trains a light CNN image tower and a one-block text tower (word
tokenizer); ``--model default`` the table's small CLIP (ViT width 128, 4 blocks, BPE). Prints one JSON object and
writes it to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_IMAGES = 200
MODELS = {"small": ["--vision", "cnn", "--vision-width", "32", "--vision-layers", "1", "--embed-dim", "32",
                    "--text-width", "64", "--text-layers", "1", "--head-width", "32", "--tokenizer", "word",
                    "--context-length", "24"],
          "default": []}
# Runs `bindscope ARGS...` and writes the process's peak RSS (KB) to $RUSAGE_FILE.
WRAPPER = """
import json, os, resource, sys
from bindscope.cli.main import bindscope
try:
    bindscope.main(sys.argv[1:], prog_name="bindscope")
except SystemExit as exc:
    code = exc.code
with open(os.environ["RUSAGE_FILE"], "w") as f:
    json.dump({"self_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}, f)
sys.exit(code)
"""


def dataset(work: Path, size: int) -> tuple[Path, float | None]:
    """The MADMAN dataset of ``size`` training images in ``work`` (made now, or reused: images/s None)."""
    out = work / f"madman-{size}"
    if (out / "manifest.json").is_file():
        return out, None
    import bindscope

    start = time.perf_counter()
    bindscope.madman.generate(out, seed=0, jobs=os.cpu_count() or 1, progress=False,
                              splits={"train": size, "test": TEST_IMAGES, "ood": 0})
    return out, (size + TEST_IMAGES) / (time.perf_counter() - start)


def _sample_tree(pid: int, peak: list[float], done: threading.Event) -> None:
    """The largest PSS sum (MB) over process ``pid`` and its descendants, sampled every 0.2 s, into ``peak[0]``."""
    import psutil

    try:
        root = psutil.Process(pid)
        while not done.is_set():
            total = 0
            for process in [root, *root.children(recursive=True)]:
                try:
                    total += process.memory_full_info().pss
                except psutil.Error:
                    pass
            peak[0] = max(peak[0], total / 2**20)
            time.sleep(0.2)
    except psutil.Error:
        pass


def train(data: Path, out: Path, steps: int, args, in_memory: bool = False, timeout: float | None = None) -> dict:
    """One ``bindscope train`` subprocess in a fresh run folder ``out`` (killed after ``timeout`` seconds; None:
    never): its peak RSS (MB) and the median step time of its log."""
    shutil.rmtree(out, ignore_errors=True)  # the same run again would only report its result
    rusage = out.with_suffix(".rusage.json")
    command = [sys.executable, "-c", WRAPPER, "train", str(data), "--out", str(out),
               "--steps", str(steps), "--batch-size", str(args.batch_size), "--warmup", "5", "--log-every", "1",
               "--checkpoint-every", str(10 * steps), "--loader-jobs", str(args.loader_jobs), "--threads",
               str(args.threads), "--device", args.device, "--eval-split", "test", "--quiet", *MODELS[args.model],
               *(["--data-in-memory"] if in_memory else [])]
    env = {**os.environ, "RUSAGE_FILE": str(rusage), "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak, done = [0.0], threading.Event()
    try:
        import psutil  # noqa: F401

        sampler = threading.Thread(target=_sample_tree, args=(process.pid, peak, done), daemon=True)
        sampler.start()
    except ImportError:
        sampler = None
    try:
        _, stderr = process.communicate(timeout=timeout)
    except BaseException:  # its timeout, or the caller's (a step limit's alarm), Ctrl-C: the run ends with us
        process.kill()
        process.communicate()
        raise
    finally:
        done.set()
    if process.returncode:
        raise RuntimeError(f"bindscope train failed ({process.returncode}): {stderr[-2000:]}")
    usage = json.loads(rusage.read_text())
    lines = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    step_s = [r["step_s"] for r in lines if "step_s" in r][5:]
    return {"peak_rss_mb": round(usage["self_kb"] / 1024, 1),
            "peak_tree_pss_mb": round(peak[0], 1) if sampler is not None else None,
            "median_step_s": statistics.median(step_s) if step_s else None, "steps": steps,
            "wall_s": round(time.perf_counter() - start, 1)}


def feed_rate(data: Path, args) -> float:
    """Images/s the streamed training batches arrive at in this process, without a model (the first batch, which
    waits for the workers to start, left out)."""
    import torch

    from bindscope.format.reader import Dataset
    from bindscope.training.batches import BatchSource
    from bindscope.training.data import StreamedSplit, read_tables
    from bindscope.training.model import ModelConfig

    words = args.model == "small"
    with Dataset(data) as ds:
        tables = read_tables(ds, words=words)
        streamed = StreamedSplit(ds, tables)
    model = ModelConfig(image_size=96, tokenizer="word", vocabulary=tables.words, context_length=24) if words else \
        ModelConfig(image_size=96)
    source = BatchSource(streamed, args.batch_size, seed=0, model=model)
    cuda = args.device.startswith("cuda")
    loader = torch.utils.data.DataLoader(source, batch_size=None, sampler=range(args.ratio_steps),
                                         num_workers=args.loader_jobs, pin_memory=cuda)
    count, start = 0, None
    for batch in loader:
        images = batch["images"].to(args.device, non_blocking=True)
        if start is None:
            start = time.perf_counter()
            continue
        count += len(images)
    if cuda:
        torch.cuda.synchronize()
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="runs/train-scale")
    parser.add_argument("--sizes", default="10000,100000,400000")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--ratio-steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--loader-jobs", type=int, default=2)
    parser.add_argument("--model", choices=sorted(MODELS), default="small")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if args.ratio_steps <= 6 or args.steps < 1:
        parser.error("--ratio-steps must be more than 6 (the first 5 are left out) and --steps at least 1")
    work = Path(args.work)
    result = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "settings": vars(args), "sizes": {},
              "load_start": round(os.getloadavg()[0], 1)}

    def report() -> None:
        text = json.dumps(result, indent=1)
        if args.out:
            Path(args.out).write_text(text + "\n")

    for size in sizes:
        data, rate = dataset(work, size)
        entry = result["sizes"][str(size)] = {"generate_images_per_s": None if rate is None else round(rate, 1)}
        entry["streamed"] = train(data, work / f"run-{size}-streamed", args.steps, args)
        entry["load"] = round(os.getloadavg()[0], 1)
        print(f"{size} images: {entry}", file=sys.stderr, flush=True)
        report()
    smallest, _ = dataset(work, sizes[0])
    timed: dict[str, list[dict]] = {"memory": [], "streamed": []}
    for turn in range(2):
        for mode in ("memory", "streamed"):
            timed[mode].append(train(smallest, work / f"ratio-{mode}-{turn}", args.ratio_steps, args,
                                     in_memory=mode == "memory"))
    step = {mode: statistics.median(r["median_step_s"] for r in runs) for mode, runs in timed.items()}
    feed = feed_rate(smallest, args)
    result["speed"] = {"size": sizes[0], "runs": timed, "median_step_s": step,
                       "ratio": round(step["memory"] / step["streamed"], 3),
                       "feed_images_per_s": round(feed, 1),
                       "model_images_per_s": round(args.batch_size / step["streamed"], 1),
                       "load": round(os.getloadavg()[0], 1)}
    report()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
