"""Render a preview grid of every procedural model of a set (Cycles on CPU) and print the time it took.

Usage:
    .venv/bin/python benchmarks/render_model_grids.py                  # both sets -> docs/images/*.png
    .venv/bin/python benchmarks/render_model_grids.py --set simco18 --out /tmp/s.png --size 128 --samples 16
    .venv/bin/python benchmarks/render_model_grids.py --only pizza,car --out /tmp/x.png

Each model is built with ``build_model`` (normalised to a largest dimension of 1.0, resting on z = 0, front
towards -Y), placed on a light-grey ground, lit by a sun and a grey world, and seen by a camera on the -Y
side, 25 degrees above the horizon. Tiles are labelled with the category name and composed with Pillow.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def setup_scene(size: int, samples: int):
    import bpy

    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.render.engine = "CYCLES"
    scene.cycles.device = "CPU"
    scene.cycles.samples = samples
    scene.cycles.use_denoising = True
    scene.render.resolution_x = scene.render.resolution_y = size
    scene.render.resolution_percentage = 100
    scene.render.image_settings.file_format = "PNG"
    scene.render.threads_mode = "FIXED"
    scene.render.threads = os.cpu_count() or 1
    world = bpy.data.worlds.new("world")
    world.color = (0.35, 0.35, 0.38)
    tree = world.node_tree
    tree.nodes["Background"].inputs["Color"].default_value = (0.42, 0.44, 0.48, 1.0)
    tree.nodes["Background"].inputs["Strength"].default_value = 1.0
    scene.world = world
    ground_mesh = bpy.data.meshes.new("ground")
    import bmesh

    bm = bmesh.new()
    bmesh.ops.create_grid(bm, x_segments=1, y_segments=1, size=20.0)
    bm.to_mesh(ground_mesh)
    bm.free()
    ground_mat = bpy.data.materials.new("ground")
    ground_mat.node_tree.nodes["Principled BSDF"].inputs["Base Color"].default_value = (0.55, 0.55, 0.55, 1)
    ground_mat.node_tree.nodes["Principled BSDF"].inputs["Roughness"].default_value = 0.9
    ground_mesh.materials.append(ground_mat)
    scene.collection.objects.link(bpy.data.objects.new("ground", ground_mesh))
    sun = bpy.data.lights.new("sun", "SUN")
    sun.energy = 3.0
    sun.angle = math.radians(10)
    sun_obj = bpy.data.objects.new("sun", sun)
    sun_obj.rotation_euler = (math.radians(40), math.radians(10), math.radians(-30))
    scene.collection.objects.link(sun_obj)
    cam = bpy.data.cameras.new("camera")
    cam.lens = 50
    cam_obj = bpy.data.objects.new("camera", cam)
    elevation = math.radians(25)
    distance = 2.4
    cam_obj.location = (0.0, -distance * math.cos(elevation), 0.42 + distance * math.sin(elevation))
    cam_obj.rotation_euler = (math.radians(90) - elevation, 0.0, 0.0)
    scene.collection.objects.link(cam_obj)
    scene.camera = cam_obj
    return scene


def render_tile(set_name: str, category, scene, path: str) -> None:
    import bpy

    from bindscope.generators.comco.blender.models import build_model

    obj = build_model(category, set_name)
    scene.render.filepath = path
    bpy.ops.render.render(write_still=True)
    bpy.data.objects.remove(obj)
    bpy.data.orphans_purge(do_recursive=True)


def render_grid(set_name: str, out: str, size: int, samples: int, only: list[str] | None, columns: int) -> float:
    from bindscope.generators.comco.registry import load_set

    categories = [c for c in load_set(set_name) if not only or c.name in only]
    scene = setup_scene(size, samples)
    start = time.perf_counter()
    tiles = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, category in enumerate(categories):
            path = os.path.join(tmp, f"{i:03d}.png")
            render_tile(set_name, category, scene, path)
            tiles.append((category.name, Image.open(path).convert("RGB")))
    seconds = time.perf_counter() - start
    columns = min(columns, len(tiles))
    rows = math.ceil(len(tiles) / columns)
    label_h = max(12, size // 9)
    grid = Image.new("RGB", (columns * size, rows * (size + label_h)), "white")
    draw = ImageDraw.Draw(grid)
    font = ImageFont.load_default(size=max(10, label_h - 3))
    for k, (name, tile) in enumerate(tiles):
        x, y = (k % columns) * size, (k // columns) * (size + label_h)
        grid.paste(tile, (x, y))
        draw.text((x + size / 2, y + size + label_h / 2), name, fill="black", font=font, anchor="mm")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    grid.save(out)
    return seconds / max(1, len(tiles))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=["comco72", "simco18", "both"], default="both")
    parser.add_argument("--out", help="output PNG (default docs/images/<set>_grid.png)")
    parser.add_argument("--size", type=int, default=160, help="tile size in pixels")
    parser.add_argument("--samples", type=int, default=16, help="Cycles samples per pixel")
    parser.add_argument("--columns", type=int, default=9)
    parser.add_argument("--only", help="comma-separated category names")
    args = parser.parse_args()
    only = args.only.split(",") if args.only else None
    sets = ["comco72", "simco18"] if args.set == "both" else [args.set]
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    for set_name in sets:
        out = args.out or str(ROOT / "docs" / "images" / f"{set_name}_grid.png")
        per_tile = render_grid(set_name, out, args.size, args.samples, only, args.columns)
        print(f"{set_name}: {out}  {per_tile:.2f} s per {args.size}x{args.size} tile at {args.samples} samples "
              "(Cycles CPU, build + render)")


if __name__ == "__main__":
    main()
