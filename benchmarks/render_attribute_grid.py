"""Render the SimCO attribute grid: every SimCO-18 shape (rows) in every colour of the `colours` table
(columns), rubber (left half) and metal (right half), with the renderer that `comco render --attributes` uses.

Usage:
    .venv/bin/python benchmarks/render_attribute_grid.py  # -> docs/images/simco-attributes-grid.png
    .venv/bin/python benchmarks/render_attribute_grid.py --size 64 --samples 8 --out /tmp/grid.png

Each tile is the reference spec of the shape (``scene.plan_reference``: alone at the origin, yaw 0, the
camera framed on it) with the object's look set from the config's ``colours`` and ``materials`` tables. Prints the
render time and the machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

from PIL import Image, ImageDraw

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    from bindscope.config import resolve_config
    from bindscope.generators.comco import attributes, scene
    from bindscope.generators.comco.blender.session import get_session
    from bindscope.generators.comco.config import DEFAULT_CONFIG
    from bindscope.generators.comco.registry import load_set

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "images" / "simco-attributes-grid.png"))
    parser.add_argument("--size", type=int, default=72, help="tile side, pixels")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    config = resolve_config("comco_config", DEFAULT_CONFIG,
                            {"set": "simco18", "resolution": args.size, "samples": args.samples,
                             "attributes": ["colour", "material"]})
    shapes = load_set("simco18")
    colours, materials = list(config["colours"]), list(config["materials"])
    session = get_session("simco18", args.threads, "cpu")
    label_w, label_h = 80, 30
    columns = len(colours) * len(materials)
    grid = Image.new("RGB", (label_w + columns * args.size, label_h + len(shapes) * args.size), "white")
    draw = ImageDraw.Draw(grid)
    for m, material in enumerate(materials):
        draw.text((label_w + m * len(colours) * args.size + 2, 2), material, fill="black")
        for c, colour in enumerate(colours):
            draw.text((label_w + (m * len(colours) + c) * args.size + 2, 16), colour, fill="black")
    start = time.perf_counter()
    for row, shape in enumerate(shapes):
        draw.text((2, label_h + row * args.size + args.size // 2 - 6), shape.name, fill="black")
        spec = scene.plan_reference(config, shapes, 0, row)
        for m, material in enumerate(materials):
            for c, colour in enumerate(colours):
                spec["objects"][0]["look"] = attributes.resolved_look(config, colour, material)
                image = session.render(spec, masks=False).image
                grid.paste(Image.fromarray(image),
                           (label_w + (m * len(colours) + c) * args.size, label_h + row * args.size))
    seconds = time.perf_counter() - start
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    grid.save(args.out)
    tiles = len(shapes) * columns
    print(f"wrote {args.out}: {tiles} tiles of {args.size} px, {args.samples} samples, {seconds:.1f} s "
          f"({seconds / tiles:.3f} s per tile); {platform.platform()}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
