"""CPU ms per ``bindscope train`` step on a SimCO render with ``--negatives none``, ``stored`` and ``shuffled``.

Usage::

    .venv/bin/python benchmarks/train_negatives.py [--work runs/train-negatives] [--scenes 96] [--steps 40]
        [--batch-size 32] [--per-sample 2] [--threads 1]

Renders (or reuses, in ``--work``) a SimCO dataset of ``--scenes`` scenes of 2-4 shapes at 64 px with colour and
material (``comco render --set simco18 --attributes colour,material --samples 1``: binding negatives stored), then
trains the same small model (ViT, D 64, both towers width 64 x 2 blocks, patch 8, word tokenizer, context 24) for
``--steps`` steps once per negatives mode, ``--per-sample`` negatives per sample, one process, ``--threads`` torch
threads, and prints, per mode, the mean process CPU time per step over the steps after the first ten (``cpu_s`` of
``log.jsonl``: batch building included), the final loss, and the machine's load average.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="runs/train-negatives")
    parser.add_argument("--scenes", type=int, default=96)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--per-sample", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.steps <= 10:
        parser.error("--steps must be more than 10 (the first ten are left out)")

    import bindscope

    work = Path(args.work)
    data = work / "simco"
    if not (data / "manifest.json").is_file():
        work.mkdir(parents=True, exist_ok=True)
        (work / "tiny.yaml").write_text("visibility: {min_pixels: 6}\ndenoise: false\n")
        subprocess.run([str(Path(sys.executable).parent / "comco"), "render", "--set", "simco18", "--objects", "2-4",
                        "-n", str(args.scenes), "--resolution", "64", "--samples", "1", "--seed", "3",
                        "--device", "cpu", "--quiet", "--attributes", "colour,material",
                        "--config", str(work / "tiny.yaml"), "--out", str(data)], check=True)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    for mode in ("none", "stored", "shuffled"):
        out = work / f"run-{mode}"
        summary = bindscope.train(
            data, out, negatives=mode, negatives_per_sample=args.per_sample, steps=args.steps,
            batch_size=args.batch_size, warmup_steps=5, embed_dim=64, vision_width=64, vision_layers=2, patch_size=8,
            text_width=64, text_layers=2, head_width=32, tokenizer="word", context_length=24, device="cpu",
            threads=args.threads, log_every=1, checkpoint_every=10 * args.steps, progress=False, overwrite=True,
            eval_tasks="tor,matching")
        lines = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines() if '"loss"' in line]
        cpu_ms = (lines[-1]["cpu_s"] - lines[9]["cpu_s"]) / (len(lines) - 10) * 1000
        print(f"--negatives {mode:<8} CPU {cpu_ms:5.0f} ms/step  final loss {summary['final_loss']:.3f}  "
              f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
