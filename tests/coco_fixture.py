"""A tiny COCO split written in the published layout (instances + captions JSON, an image folder), for the COCO
importer, caption-bias and COCO evaluation tests. Nothing is downloaded."""

from __future__ import annotations

import copy
import json

import numpy as np
from PIL import Image


def rect(x0, y0, x1, y1):
    """A COCO polygon for the rectangle [x0, x1) x [y0, y1): pycocotools fills exactly those pixels."""
    return [x0, y0, x1, y0, x1, y1, x0, y1]


CATEGORIES = [{"id": 1, "name": "person", "supercategory": "person"},
              {"id": 3, "name": "car", "supercategory": "vehicle"},
              {"id": 17, "name": "cat", "supercategory": "animal"},
              {"id": 18, "name": "dog", "supercategory": "animal"},
              {"id": 63, "name": "couch", "supercategory": "furniture"}]

# Image 7 (40x40): person 20x30 = 600 px, dog 10x10 = 100 px on top of it (person visible 500 px), a crowd band.
# Image 9 (60x30, letterboxed to 40x20 at y offset 10): car rectangle, cat rectangle.
# Image 12 (40x40): three objects: couch 400 px, person 300 px, dog 100 px (largest < 2x second).
IMAGES = [{"id": 7, "file_name": "000000000007.png", "width": 40, "height": 40},
          {"id": 9, "file_name": "000000000009.png", "width": 60, "height": 30},
          {"id": 12, "file_name": "000000000012.png", "width": 40, "height": 40}]


def crowd_rle(height, width, rows):
    """Uncompressed (column-major) RLE of full-width rows ``rows`` = (r0, r1) of an image."""
    mask = np.zeros((height, width), np.uint8)
    mask[rows[0]:rows[1]] = 1
    flat = mask.flatten(order="F")
    counts, value, run = [], 0, 0
    for v in flat:
        if v == value:
            run += 1
        else:
            counts.append(run)
            value, run = v, 1
    counts.append(run)
    return {"size": [height, width], "counts": counts}


ANNOTATIONS = [
    {"id": 101, "image_id": 7, "category_id": 1, "segmentation": [rect(2, 2, 22, 32)], "area": 600.0, "iscrowd": 0,
     "bbox": [2, 2, 20, 30]},
    {"id": 102, "image_id": 7, "category_id": 18, "segmentation": [rect(10, 10, 20, 20)], "area": 100.0,
     "iscrowd": 0, "bbox": [10, 10, 10, 10]},
    {"id": 103, "image_id": 7, "category_id": 1, "segmentation": crowd_rle(40, 40, (35, 38)), "area": 120.0,
     "iscrowd": 1, "bbox": [0, 35, 40, 3]},
    {"id": 201, "image_id": 9, "category_id": 3, "segmentation": [rect(0, 0, 30, 30)], "area": 900.0, "iscrowd": 0,
     "bbox": [0, 0, 30, 30]},
    {"id": 202, "image_id": 9, "category_id": 17, "segmentation": [rect(30, 0, 45, 15)], "area": 225.0,
     "iscrowd": 0, "bbox": [30, 0, 15, 15]},
    {"id": 301, "image_id": 12, "category_id": 63, "segmentation": [rect(0, 0, 20, 20)], "area": 400.0,
     "iscrowd": 0, "bbox": [0, 0, 20, 20]},
    {"id": 302, "image_id": 12, "category_id": 1, "segmentation": [rect(20, 0, 35, 20)], "area": 300.0,
     "iscrowd": 0, "bbox": [20, 0, 15, 20]},
    {"id": 303, "image_id": 12, "category_id": 18, "segmentation": [rect(0, 25, 10, 35)], "area": 100.0,
     "iscrowd": 0, "bbox": [0, 25, 10, 10]},
]

CAPTIONS = [
    {"id": 1001, "image_id": 7, "caption": "A man with his dog."},                    # person 1, dog 2
    {"id": 1002, "image_id": 7, "caption": "A dog and a woman on a sofa."},           # dog 1, person 2; couch unmatched
    {"id": 1003, "image_id": 7, "caption": "Two people standing outside."},          # person 1
    {"id": 1004, "image_id": 7, "caption": "A scenic view."},                          # nothing
    {"id": 2001, "image_id": 9, "caption": "A kitten sitting next to a parked car."},  # cat 1, car 2
    {"id": 2002, "image_id": 9, "caption": "A red car and a cat."},                    # car 1, cat 2
    {"id": 3001, "image_id": 12, "caption": "A person sits on a couch near a dog."},   # person 1, couch 2, dog 3
]


def write_coco(root, images=None, annotations=None, captions=None, categories=None, skip_files=()):
    """Write the fixture under ``root``: ``images/`` (PNG; pixel [0, 0, 0] = image id), ``instances.json`` and
    ``captions.json``. Arguments replace the module's lists (for broken variants). Returns (images, inst, caps)."""
    images = copy.deepcopy(IMAGES if images is None else images)
    folder = root / "images"
    folder.mkdir(parents=True, exist_ok=True)
    for info in images:
        if info["file_name"] in skip_files:
            continue
        rng = np.random.default_rng(info["id"])
        pixels = rng.integers(0, 256, size=(info["height"], info["width"], 3), dtype=np.uint8)
        pixels[0, 0, 0] = info["id"]
        Image.fromarray(pixels).save(folder / info["file_name"])
    instances = {"info": {"description": "bindscope test"}, "licenses": [], "images": images,
                 "annotations": copy.deepcopy(ANNOTATIONS if annotations is None else annotations),
                 "categories": copy.deepcopy(CATEGORIES if categories is None else categories)}
    caps = {"info": {}, "licenses": [], "images": images,
            "annotations": copy.deepcopy(CAPTIONS if captions is None else captions)}
    (root / "instances.json").write_text(json.dumps(instances))
    (root / "captions.json").write_text(json.dumps(caps))
    return folder, root / "instances.json", root / "captions.json"
