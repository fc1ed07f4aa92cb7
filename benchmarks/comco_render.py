"""Benchmark of the ComCO / SimCO renderer (one Blender worker session in this process).

Prints:
1. seconds per image at 224 x 224, 16 Cycles samples (RGB + exact masks + occlusion), over --timed scenes;
2. the extra cost of the masks as a ratio to an image-only render of the same specs in the same run
   (masks = the flat id render, the cropped solo id renders for possibly occluded objects and the vertex
   projection); measured both as (full - image-only) / image-only wall time and from the per-stage timings;
3. memory over --memory-scenes scenes in one worker: resident set size (RSS) after scene 20 and after the last,
   the peak RSS (ru_maxrss) and the Blender data-block counts, which must stay flat (orphans are purged).

Targets: masks under 10 % extra, memory flat within 10 %, at least one 224 x 224 image per second on
a 2-core machine. Example::

    python benchmarks/comco_render.py --set simco18 --timed 16 --memory-scenes 200
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import time


def rss_mib() -> float:
    """Current resident set size of this process in MiB (Linux /proc; falls back to the peak elsewhere)."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="simco18", help="object set (comco72, simco18 or an asset folder)")
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timed", type=int, default=16, help="scenes timed for seconds/image and mask cost")
    parser.add_argument("--memory-scenes", type=int, default=200, help="scenes rendered for the memory figure")
    args = parser.parse_args()

    from bindscope.config import resolve_config
    from bindscope.generators.comco import scene
    from bindscope.generators.comco.config import DEFAULT_CONFIG
    from bindscope.generators.comco.generator import ComcoGenerator

    config = resolve_config("comco_config", DEFAULT_CONFIG,
                            {"set": args.set, "resolution": args.resolution, "samples": args.samples,
                             "n": max(args.timed, args.memory_scenes)})
    gen = ComcoGenerator(config, seed=0, threads=args.threads, device="cpu")
    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    print(f"config: set {args.set}, {args.resolution}x{args.resolution} px, {args.samples} samples, "
          f"denoise {config['denoise']}, {args.threads} Cycles threads, size mode {config['size_mode']}, "
          f"{config['objects']['min']}-{config['objects']['max']} objects")

    t = time.perf_counter()
    session = gen._session()
    specs = [scene.plan_scene(config, gen.categories, 0, i) for i in range(args.timed)]
    for spec in specs:  # warm-up: build every model once so neither timing pays for model construction
        session.build(spec)
    print(f"session start + model build: {time.perf_counter() - t:.1f} s")

    image_only = full = 0.0
    stages = {"build": 0.0, "rgb": 0.0, "ids": 0.0, "solo": 0.0}
    for spec in specs:  # interleaved, so load changes hit both alike
        t = time.perf_counter()
        session.render(spec, masks=False)
        image_only += time.perf_counter() - t
        t = time.perf_counter()
        out = session.render(spec, masks=True)
        full += time.perf_counter() - t
        for key in stages:
            stages[key] += out.timings.get(key, 0.0)
    n = len(specs)
    print(f"seconds per image (RGB + masks + occlusion), {n} scenes: {full / n:.3f} s "
          f"({n / full:.2f} images/s)")
    print(f"seconds per image, image only: {image_only / n:.3f} s")
    print(f"mask cost ratio (full - image only) / image only: {(full - image_only) / image_only:.3f}")
    print(f"mask cost ratio from stage timings (ids + solo) / (build + rgb): "
          f"{(stages['ids'] + stages['solo']) / (stages['build'] + stages['rgb']):.3f} "
          f"[per image: rgb {stages['rgb'] / n:.3f} s, id render {stages['ids'] / n:.3f} s, "
          f"solo renders + projection {stages['solo'] / n:.3f} s]")

    if args.memory_scenes:
        t = time.perf_counter()
        marks = {}
        for i in range(args.memory_scenes):
            gen.render_scene(i)
            if i + 1 in (1, 20, 50, 100, args.memory_scenes):
                marks[i + 1] = (rss_mib(), session.memory_counts())
        elapsed = time.perf_counter() - t
        for k, (rss, counts) in marks.items():
            print(f"after scene {k:4d}: RSS {rss:7.1f} MiB, Blender data {counts}")
        base = marks[min(20, args.memory_scenes)][0]
        last = marks[args.memory_scenes][0]
        print(f"RSS growth from scene {min(20, args.memory_scenes)} to {args.memory_scenes}: "
              f"{(last - base) / base * 100:+.1f} %")
        print(f"peak RSS (ru_maxrss): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MiB")
        print(f"{args.memory_scenes} scenes with re-planning in {elapsed:.1f} s "
              f"({elapsed / args.memory_scenes:.3f} s per accepted scene)")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
