"""Tiny CLEVR and PUG:SPAR sources written in their published layouts (a CLEVR v1.0 split folder with its scene
JSON; Hub Parquet files with an Image struct column; a labels CSV with image files), for the importer tests.
Nothing is downloaded.

Importing this module registers the ``clevr`` and ``pug`` importers under the names pyproject.toml declares for
them, when the installed package metadata predates those entry points (an editable install made before they were
added): what ``pip install -e .`` does, done in this process.
"""

from __future__ import annotations

import io
import json
import tomllib
from importlib import import_module
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
from PIL import Image

from bindscope.build.registry import ENTRY_POINT_GROUP, register_generator

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
DECLARED = tomllib.loads(PYPROJECT.read_text())["project"]["entry-points"][ENTRY_POINT_GROUP]
for _name in ("clevr", "pug"):
    if _name not in {point.name for point in entry_points(group=ENTRY_POINT_GROUP)}:
        _module, _, _attr = DECLARED[_name].partition(":")
        register_generator(getattr(import_module(_module), _attr), _name)


# ------------------------------------------------------------------------------------------------ CLEVR

# Six scenes of 2-3 objects (colour, shape), in scene order. With captions giving colour (the LABCLIP rule):
# recognition negatives = one per object = 14; binding negatives (colour swaps that change the bag of phrases):
# scene 0: 1, scene 1: 1, scene 2: 2 (green cylinder / green sphere share their colour), scene 3: 0 (blue cube and
# red cube swapped are the same two cubes), scene 4: 0 (both gray), scene 5: 3 -> 7.
CLEVR_SCENES = [
    [("red", "cube"), ("blue", "sphere")],
    [("red", "sphere"), ("blue", "cube")],
    [("green", "cylinder"), ("red", "cube"), ("green", "sphere")],
    [("blue", "cube"), ("red", "cube")],
    [("gray", "sphere"), ("gray", "cube")],
    [("yellow", "cylinder"), ("red", "sphere"), ("blue", "cube")],
]
CLEVR_CAPTIONS = ["red cube and blue sphere", "red sphere and blue cube",
                  "green cylinder and red cube and green sphere", "blue cube and red cube", "gray sphere and gray cube",
                  "yellow cylinder and red sphere and blue cube"]
CLEVR_SIZE = (48, 32)  # width, height: CLEVR's 480 x 320, ten times smaller


def clevr_object(colour, shape, k):
    """One object of a CLEVR scene file; the k-th of its scene (sizes and materials alternate)."""
    return {"color": colour, "shape": shape, "size": ("small", "large")[k % 2], "material": ("rubber", "metal")[k % 2],
            "3d_coords": [1.5 * k, -0.5, 0.35], "pixel_coords": [8 + 12 * k, 20, 11.5 + k], "rotation": 45.0 * k}


def write_clevr(root, scenes=None, split="val", mutate=None, skip_files=()):
    """``root/CLEVR_v1.0/images/<split>/`` (PNG, every pixel = 10 x the image index) and
    ``root/CLEVR_v1.0/scenes/CLEVR_<split>_scenes.json``. ``mutate(data)`` may change the scene file's data
    before it is written. Returns ``(images folder, scene file)``."""
    base = Path(root) / "CLEVR_v1.0"
    images, scene_dir = base / "images" / split, base / "scenes"
    images.mkdir(parents=True)
    scene_dir.mkdir(parents=True)
    data = {"info": {"split": split, "version": "1.0", "license": "Creative Commons Attribution (CC BY 4.0)"},
            "scenes": []}
    for i, objects in enumerate(CLEVR_SCENES if scenes is None else scenes):
        name = f"CLEVR_{split}_{i:06d}.png"
        if name not in skip_files:
            Image.fromarray(np.full((CLEVR_SIZE[1], CLEVR_SIZE[0], 4), (10 * i, 10 * i, 10 * i, 255), np.uint8),
                            "RGBA").save(images / name)
        n = len(objects)
        data["scenes"].append({
            "image_index": i, "image_filename": name, "split": split,
            "objects": [clevr_object(c, s, k) for k, (c, s) in enumerate(objects)],
            "relationships": {"left": [[j for j in range(k)] for k in range(n)],
                              "right": [[j for j in range(k + 1, n)] for k in range(n)],
                              "front": [[] for _ in range(n)], "behind": [[] for _ in range(n)]},
            "directions": {"left": [-0.65, 0.76, 0.0], "right": [0.65, -0.76, 0.0]}})
    if mutate is not None:
        mutate(data)
    scene_file = scene_dir / f"CLEVR_{split}_scenes.json"
    scene_file.write_text(json.dumps(data))
    return images, scene_file


# ------------------------------------------------------------------------------------------------ PUG:SPAR

# Eight rows (world, animal 1, animal 2, texture 1, texture 2): rows 1 (a blank animal), 2 (Default textures) and 4
# (the same animal twice) are left out by the LABCLIP authors' rule; five are kept: 10 objects, 5 captions,
# 10 recognition negatives (one per object), 5 binding negatives (every kept row swaps two different textures).
PUG_ROWS = [
    ("Desert", "Elephant", "Camel", "Blue", "Red"),
    ("Desert", "blank", "Camel", "Default", "Red"),
    ("Island", "Elephant", "Camel", "Default", "Default"),
    ("Island", "Camel", "Elephant", "Grass", "Stone"),
    ("Desert", "Lion", "Lion", "Blue", "Red"),
    ("Island", "Lion", "Camel", "Grass", "Stone"),
    ("Desert", "Camel", "Lion", "Blue", "Red"),
    ("Island", "Elephant", "Lion", "Grass", "Stone"),
]
PUG_KEPT = [0, 3, 5, 6, 7]
PUG_CAPTIONS = ["Blue Elephant and Red Camel", "Grass Camel and Stone Elephant", "Grass Lion and Stone Camel",
                "Blue Camel and Red Lion", "Grass Elephant and Stone Lion"]
COLUMNS = ("world_name", "character_name", "character2_name", "character_texture", "character2_texture")


def pug_png(row: int) -> bytes:
    """A 20 x 20 PNG whose every pixel is 20 x the row number."""
    buffer = io.BytesIO()
    Image.fromarray(np.full((20, 20, 3), 20 * row, np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def _positions(k):
    return ("left", "right") if k % 2 == 0 else ("below", "above")


def pug_table(rows, start=0, image_cells=None):
    """A pyarrow table in the Hub's layout (the card's columns; ``image`` = struct {bytes, path})."""
    import pyarrow as pa

    cells = image_cells or [{"bytes": pug_png(start + k), "path": f"{start + k:05d}.png"} for k in range(len(rows))]
    columns = {"image": pa.array(cells, pa.struct([("bytes", pa.binary()), ("path", pa.string())]))}
    for j, name in enumerate(COLUMNS):
        columns[name] = [r[j] for r in rows]
    columns["character1_pos"] = [_positions(start + k)[0] for k in range(len(rows))]
    columns["character2_pos"] = [_positions(start + k)[1] for k in range(len(rows))]
    return pa.table(columns)


def write_pug_parquet(root):
    """``root/data/train-0000K-of-00002.parquet``: rows 0-4 and 5-7, row groups of 2 rows. Returns ``root/data``."""
    import pyarrow.parquet as pq

    data = Path(root) / "data"
    data.mkdir(parents=True)
    pq.write_table(pug_table(PUG_ROWS[:5]), data / "train-00000-of-00002.parquet", row_group_size=2)
    pq.write_table(pug_table(PUG_ROWS[5:], start=5), data / "train-00001-of-00002.parquet", row_group_size=2)
    return data


def write_pug_csv(root, variant="spar", rows=None):
    """A labels CSV (``labels.csv``, or ``PUG_SPARE.csv`` for ``spare``) and its PNGs (SPARE: under the world's
    folder, as the LABCLIP authors' loader reads them). Returns the CSV's path."""
    root = Path(root)
    root.mkdir(parents=True)
    lines = ["filename,world_name,character_name,character2_name,character1_pos,character2_pos,character_texture,"
             "character2_texture"]
    for k, (world, a, b, ta, tb) in enumerate(rows or PUG_ROWS):
        name = f"{k:05d}.png"
        folder = root / world if variant == "spare" else root
        folder.mkdir(exist_ok=True)
        (folder / name).write_bytes(pug_png(k))
        lines.append(",".join([name, world, a, b, *_positions(k), ta, tb]))
    labels = root / ("PUG_SPARE.csv" if variant == "spare" else "labels.csv")
    labels.write_text("\n".join(lines) + "\n")
    return labels
