"""Images per second of MADMAN generation: local ``--jobs 2`` (joblib) vs a 2-worker Dask LocalCluster.

Makes the same dataset three ways in one process and checks the outputs are byte-identical:

1. ``--backend local --jobs 2`` (the reference);
2. ``--backend dask --jobs 2``: bindscope starts a LocalCluster of 2 worker processes (1 thread each) for the
   run and closes it — what a user of ``--backend dask`` without ``--scheduler`` gets, startup included;
3. ``--backend dask --scheduler ADDRESS`` on an already running 2-worker LocalCluster (steady state).

Prints the machine (platform, CPU count, load average), the images per second of each run, and the ratio of
each Dask run's time to the local run's time (> 1 = Dask is slower). The MADMAN morphometry table is built
(or loaded from its cache) once, before any timing.

Usage::

    .venv/bin/python benchmarks/scale_out.py [--train 20000] [--test 4000] [--shard-size 500] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=20000, help="train images [20000]")
    parser.add_argument("--test", type=int, default=4000, help="test images [4000]")
    parser.add_argument("--shard-size", type=int, default=500, help="samples per shard [500]")
    parser.add_argument("--repeats", type=int, default=1, help="timed repeats of each run; the best is kept [1]")
    args = parser.parse_args()

    from distributed import LocalCluster

    from bindscope.build.builder import build_dataset
    from bindscope.generators.madman import config as madman_config
    from bindscope.generators.madman.generator import MadmanGenerator

    config = madman_config.resolve(flags={"splits": {"train": args.train, "test": args.test},
                                          "shard_size": args.shard_size})
    t0 = time.perf_counter()
    generator = MadmanGenerator.create(config, seed=0)
    setup = time.perf_counter() - t0
    images = args.train + args.test
    shards = sum(-(-n // args.shard_size) for n in generator.splits.values())
    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"dataset: MADMAN default config, {images} images of {generator.image_size[0]}x{generator.image_size[1]} "
          f"px in {shards} shards of {args.shard_size}; generator set-up {setup:.1f} s (not timed below)")

    work = Path(tempfile.mkdtemp(prefix="bindscope-bench-"))
    results: dict[str, float] = {}
    outputs: dict[str, dict] = {}

    def timed(label: str, **kwargs) -> None:
        best = float("inf")
        for repeat in range(args.repeats):
            out = work / f"{label.split()[0]}-{repeat}"
            t = time.perf_counter()
            build_dataset(generator, out, progress=False, **kwargs)
            best = min(best, time.perf_counter() - t)
            outputs[label] = _files(out)
            shutil.rmtree(out)
        results[label] = best
        print(f"{label:<52} {best:8.2f} s  {images / best:9.1f} images/s", flush=True)

    try:
        timed("local --jobs 2", jobs=2)
        timed("dask --jobs 2 (LocalCluster started per run)", backend="dask", jobs=2)
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
            timed("dask --scheduler (running 2-worker LocalCluster)", backend="dask",
                  scheduler=cluster.scheduler_address)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    reference = outputs["local --jobs 2"]
    same = all(files == reference for files in outputs.values())
    print(f"outputs byte-identical across the three runs: {same}")
    local = results["local --jobs 2"]
    for label, seconds in results.items():
        if label != "local --jobs 2":
            print(f"overhead ratio (time / local --jobs 2 time), {label}: {seconds / local:.2f}")
    if not same:
        raise SystemExit("outputs differ")


if __name__ == "__main__":
    main()
