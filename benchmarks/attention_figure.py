"""The two figures of docs/evaluation.md: CLS attention by size rank, and binding over training checkpoints.

1. ``comco render`` a small SimCO dataset (one large object, 2–5 objects), then
   :func:`bindscope.evaluation.attention.cls_attention_by_size` with ``--model`` (default: random-weight
   ViT-B-32, offline; ``--pretrained openai`` on a connected machine gives the paper's comparison) ->
   ``docs/images/attention_by_size.png``;
2. ``madman generate`` (ideal preset), ``madman train --eval-every --keep-checkpoints``, ``madman eval`` on the
   checkpoint glob, ``bindscope collect --plot`` -> ``docs/images/collect_curve.png``.

Prints the machine, the time of each step, the attention table and the collected table.

    .venv/bin/python benchmarks/attention_figure.py --workdir /tmp/attention-figure
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(cmd: list[str]) -> float:
    print("$ " + " ".join(cmd), flush=True)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="/tmp/attention-figure")
    parser.add_argument("--scenes", type=int, default=24)
    parser.add_argument("--model", default="ViT-B-32")
    parser.add_argument("--pretrained", default="none")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--images", default=str(ROOT / "docs" / "images"), help="where the two PNGs go")
    args = parser.parse_args()
    bin_dir = Path(sys.executable).parent
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")

    scenes = work / "simco"
    seconds = run([str(bin_dir / "comco"), "render", "--set", "simco18", "--objects", "2-5", "-n", str(args.scenes),
                   "--no-references", "--out", str(scenes)])
    print(f"render: {seconds:.1f} s")
    attention = work / "attention.json"
    attention.unlink(missing_ok=True)
    seconds = run([str(bin_dir / "comco"), "attention", str(scenes), "--model", args.model, "--pretrained",
                   args.pretrained, "--device", "cpu", "--out", str(attention), "--plot",
                   str(Path(args.images) / "attention_by_size.png"), "--overwrite", "--quiet"])
    print(f"attention: {seconds:.1f} s")

    data = work / "ideal"
    run([str(bin_dir / "madman"), "generate", "--preset", "ideal", "--out", str(data), "-n", "2000",
         "--quiet"])
    runs = work / "run"
    seconds = run([str(bin_dir / "madman"), "train", str(data), "--out", str(runs), "--steps", str(args.steps),
                   "--eval-every", str(args.eval_every), "--keep-checkpoints", "--batch-size", "64",
                   "--embed-dim", "32", "--vision-width", "64", "--vision-layers", "2", "--text-width", "64",
                   "--text-layers", "2", "--threads", "1", "--device", "cpu", "--quiet"])
    print(f"train: {seconds:.1f} s")
    evals = work / "evals"
    shutil.rmtree(evals, ignore_errors=True)
    run([str(bin_dir / "madman"), "eval", str(data), "--model", str(runs / "checkpoints" / "*.pt"), "--device",
         "cpu", "--no-cache", "--quiet", "--out", str(evals)])
    run([str(bin_dir / "bindscope"), "collect", str(evals), "--out", str(work / "curve.md"), "--overwrite",
         "--plot", str(Path(args.images) / "collect_curve.png"), "--columns",
         "test/binding/colour,test/recognition/colour,test/binding/micro,test/recognition/micro"])


if __name__ == "__main__":
    main()
