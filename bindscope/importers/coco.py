"""Import COCO (images, instance annotations, captions) as a bindscope dataset (generator name ``coco``).

The dataset goes through the same shard writer, manifest and verification as the generators
(:func:`bindscope.build.builder.build_dataset`), so evaluation, caption-bias analysis, ``bindscope verify`` and
``bindscope release`` read it like a MADMAN or ComCO dataset. Format of the inputs: the COCO 2017 annotation files
(https://cocodataset.org/#format-data): ``instances_<split>.json`` (``images``, ``annotations``, ``categories``)
and ``captions_<split>.json`` (``annotations`` with ``image_id`` and ``caption``).

What one sample holds (one per image):

- ``image``: the photo letterboxed into ``image_size`` x ``image_size`` pixels: scaled by
  ``image_size / max(width, height)`` (bicubic; no scaling when that is 1) and centred on black padding.
  ``spec["scale"]`` and ``spec["offset"]`` give the transform (stored x = x * scale_x + offset_x).
- ``mask``: the non-crowd instances, rasterised with pycocotools at the stored resolution (polygons scaled by the
  same transform; RLE masks decoded and resized nearest-neighbour). Instances are painted from the largest full
  area to the smallest, so where instances overlap the smaller one is on top (COCO masks overlap; the dataset
  format keeps one label per pixel). Object ``k`` is the ``k``-th non-crowd annotation by annotation id.
- the object table: category name and COCO id, ``attributes["supercategory"]``, visible bbox and area (pixels of
  the mask), size rank by visible area (1 = largest), ``salient`` = size rank 1, and extras ``annotation_id``,
  ``coco_area`` (the annotation's ``area``, original pixels) and ``full_area`` (the instance's own rasterised
  pixels before overlap, stored resolution). Polygons of fewer than 3 points (no area; a few exist in COCO) are
  left out of the rasterisation and counted (``degenerate_polygons``).
- crowd regions (``iscrowd = 1``) are kept apart: not objects and not in the mask, but listed in
  ``spec["crowd"]`` with category and a pycocotools compressed RLE at the stored resolution.
- ``caption``: the image's first caption (lowest caption id); ``mention_position`` of the objects refers to it.
  Every caption is in ``spec["captions"]``: ``{"id", "text", "mentions": {category: position}, "phrases":
  {category: phrase}, "unmatched": [[category, phrase], ...]}`` (see :mod:`bindscope.importers.mentions`). A
  category's mention is carried, in the object table, by its largest visible instance, so that the mentioned
  objects' positions are 1..m as in every bindscope dataset.

Subsets (:class:`CocoSubset`) select images on the annotation file alone, before anything is read: the number of
non-crowd objects and how clearly the largest one (by the annotation's ``area``) dominates.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bindscope.build.builder import build_dataset
from bindscope.errors import BadInput, check_text, check_utf8_path, with_changes
from bindscope.format.records import ObjectRecord, Sample, mask_bbox_area, size_ranks
from bindscope.importers.mentions import MentionFinder
from bindscope.importers.settings import ImportSettings
from bindscope.io.atomic import reporting_disk_full
from bindscope.io.canonical import sha256_file
from bindscope.io.image_input import image_size, read_rgb
from bindscope.io.json_input import load_json
from bindscope.limits import MAX_OBJECTS

NAME = "coco"
# https://cocodataset.org/#termsofuse
COCO_LICENCE = ("COCO annotations (captions, instances): Creative Commons Attribution 4.0 (CC BY 4.0), "
                "https://cocodataset.org/#termsofuse; COCO images: Flickr terms of use, each image under the "
                "licence named in the instances file's `licenses`")
VERSION = "2"  # the importer's version in the manifest; changes whenever the same input would give other bytes
POLYGON_TOLERANCE = 1.0  # pixels a polygon vertex may lie outside the image (COCO rounds vertices)
ATTRIBUTES = ["supercategory"]
EXTRAS = ["annotation_id", "coco_area", "full_area"]


@dataclass(frozen=True)
class CocoSubset:
    """Which images to import, decided from the annotation file.

    Attributes:
        min_objects / max_objects: bounds (inclusive) on the number of non-crowd annotations; ``max_objects``
            None = no upper bound.
        largest_ratio: keep only images whose largest annotation ``area`` is at least this many times the second
            largest (one object *clearly* the largest); None = no such condition. Needs ``min_objects >= 2``.
    """

    min_objects: int = 0
    max_objects: int | None = None
    largest_ratio: float | None = None

    def check(self) -> None:
        """Raise BadInput naming a bad bound."""
        if self.min_objects < 0:
            raise BadInput(f"min_objects {self.min_objects} is not allowed; use an integer >= 0", param="min_objects")
        if self.max_objects is not None and not self.min_objects <= self.max_objects <= MAX_OBJECTS:
            raise BadInput(f"max_objects {self.max_objects} is not allowed; use {self.min_objects}..{MAX_OBJECTS}",
                           param="max_objects")
        if self.largest_ratio is not None:
            if not (math.isfinite(self.largest_ratio) and self.largest_ratio >= 1):
                raise BadInput(f"largest_ratio {self.largest_ratio} is not allowed; use a finite number >= 1",
                               param="largest_ratio")
            if self.min_objects < 2:
                raise BadInput("largest_ratio compares the two largest objects; it needs min_objects=2 or more",
                               param="largest_ratio")

    def keeps(self, areas: list[float]) -> bool:
        """Whether an image with these non-crowd annotation areas is in the subset."""
        if len(areas) < self.min_objects or (self.max_objects is not None and len(areas) > self.max_objects):
            return False
        if self.largest_ratio is not None:
            first, second = sorted(areas, reverse=True)[:2]
            return first >= self.largest_ratio * second
        return True


# The image-side subsets of the ComCO paper's COCO experiments (Abbasi et al., CVPR 2025, Tables 3-4): images with
# 2-5 annotated objects, one clearly the largest. "Clearly" is not quantified in the paper: at least twice the area
# of the second largest is this project's choice.
SUBSETS = {"all": CocoSubset(), "image-side": CocoSubset(2, 5, 2.0)}


# --------------------------------------------------------------------------------------------- reading inputs


def _load_json(path: Path, param: str) -> dict:
    data = load_json(path, param, param=param)
    if not isinstance(data, dict) or not isinstance(data.get("annotations"), list):
        raise BadInput(f"{param} {str(path)!r} is not a COCO annotation file: it needs an 'annotations' list",
                       param=param)
    return data


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_num(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _entry(kind: str, item) -> str:
    return f"{kind} id {item.get('id')!r}" if isinstance(item, dict) else f"{kind} {item!r}"


def _check_segmentation(ann: dict, image: dict, where: str) -> None:
    seg = ann.get("segmentation")
    width, height = image["width"], image["height"]
    if isinstance(seg, dict):
        size = seg.get("size")
        if size != [height, width] or not isinstance(seg.get("counts"), (list, str)):
            raise BadInput(f"{where}: RLE segmentation must have size [{height}, {width}] (the image's height, "
                           f"width) and counts; got size {size!r}", param="instances")
        return
    if not isinstance(seg, list) or not seg:
        raise BadInput(f"{where}: segmentation must be a non-empty list of polygons or an RLE dict", param="instances")
    for polygon in seg:
        if (not isinstance(polygon, list) or not polygon or len(polygon) % 2
                or not all(_is_num(v) for v in polygon)):
            raise BadInput(f"{where}: a polygon must be a flat list of (x, y) number pairs", param="instances")
        xs, ys = polygon[0::2], polygon[1::2]
        if (min(xs) < -POLYGON_TOLERANCE or max(xs) > width + POLYGON_TOLERANCE or min(ys) < -POLYGON_TOLERANCE
                or max(ys) > height + POLYGON_TOLERANCE):
            raise BadInput(f"{where}: polygon outside the image ({width}x{height} pixels): x spans "
                           f"{min(xs)}..{max(xs)}, y spans {min(ys)}..{max(ys)} (allowed 0..width, 0..height, "
                           f"±{POLYGON_TOLERANCE:g} px)", param="instances")


def read_coco(images_dir: str | os.PathLike, instances: str | os.PathLike, captions: str | os.PathLike,
              subset: CocoSubset = SUBSETS["all"], limit: int | None = None) -> dict:
    """Read and cross-check the COCO files; return the import plan (plain JSON-serialisable data).

    Every check runs here, before anything is written: structure of both files, unique ids, every annotation's
    image and category exist, segmentations are polygons inside the image (±1 px) or RLEs of the image's size,
    every caption's image exists, every selected image file exists under ``images_dir`` (no ``..``), is readable
    and has the size the instances file gives.

    Args:
        images_dir: folder of the images (e.g. ``val2017/``).
        instances / captions: the COCO instances and captions JSON files.
        subset: which images to keep (:class:`CocoSubset`).
        limit: keep only the first ``limit`` selected images (by image id); None = all.

    Returns:
        ``{"categories": {id: {"name", "supercategory"}}, "images": [{"id", "file_name", "width", "height",
        "objects": [annotation...], "crowd": [annotation...], "captions": [{"id", "caption"}...]}...],
        "counts": {...}}`` with images sorted by id and annotations/captions by id.

    Raises:
        BadInput: the first problem found, naming the file, the entry (annotation/image/caption id) and what
            is allowed.
    """
    subset.check()
    if limit is not None and limit < 1:
        raise BadInput(f"limit {limit} is not allowed; use an integer >= 1", param="limit")
    images_dir = Path(images_dir)
    if not images_dir.is_dir():
        raise BadInput(f"images {str(images_dir)!r} is not a folder", param="images")
    inst = _load_json(Path(instances), "instances")
    caps = _load_json(Path(captions), "captions")
    for key in ("images", "categories"):
        if not isinstance(inst.get(key), list):
            raise BadInput(f"instances {str(instances)!r} is not a COCO instances file: it needs an {key!r} list",
                           param="instances")

    categories: dict[int, dict] = {}
    for k, cat in enumerate(inst["categories"]):
        if not isinstance(cat, dict) or not _is_int(cat.get("id")) or not isinstance(cat.get("name"), str):
            raise BadInput(f"instances: {_entry('category', cat)} needs an integer id and a string name",
                           param="instances")
        for key in ("name", "supercategory"):
            check_text(f"instances: categories[{k}].{key} (category id {cat['id']})", cat.get(key), name=True,
                       param="instances")
        if cat["id"] in categories:
            raise BadInput(f"instances: category id {cat['id']} appears twice", param="instances")
        categories[cat["id"]] = {"name": cat["name"], "supercategory": str(cat.get("supercategory", ""))}
    names = [c["name"] for c in categories.values()]
    if len(set(names)) != len(names):
        raise BadInput("instances: two categories share a name; names must be unique", param="instances")

    images: dict[int, dict] = {}
    for k, img in enumerate(inst["images"]):
        if (not isinstance(img, dict) or not _is_int(img.get("id")) or not isinstance(img.get("file_name"), str)
                or not _is_int(img.get("width")) or not _is_int(img.get("height"))
                or img["width"] < 1 or img["height"] < 1):
            raise BadInput(f"instances: {_entry('image', img)} needs an integer id, a file_name and positive "
                           "integer width and height", param="instances")
        if img["id"] in images:
            raise BadInput(f"instances: image id {img['id']} appears twice", param="instances")
        check_text(f"instances: images[{k}].file_name (image id {img['id']})", img["file_name"], name=True,
                   param="instances")
        images[img["id"]] = {"id": img["id"], "file_name": img["file_name"], "width": img["width"],
                             "height": img["height"], "objects": [], "crowd": [], "captions": []}

    seen: set[int] = set()
    for ann in inst["annotations"]:
        if not isinstance(ann, dict) or not _is_int(ann.get("id")):
            raise BadInput(f"instances: {_entry('annotation', ann)} needs an integer id", param="instances")
        where = f"instances: annotation id {ann['id']}"
        if ann["id"] in seen:
            raise BadInput(f"{where} appears twice", param="instances")
        seen.add(ann["id"])
        if ann.get("image_id") not in images:
            raise BadInput(f"{where} refers to image id {ann.get('image_id')!r}, which is not in 'images'",
                           param="instances")
        if ann.get("category_id") not in categories:
            raise BadInput(f"{where} has unknown category id {ann.get('category_id')!r}; the file's categories "
                           f"are ids {sorted(categories)}", param="instances")
        if ann.get("iscrowd", 0) not in (0, 1):
            raise BadInput(f"{where}: iscrowd must be 0 or 1, got {ann.get('iscrowd')!r}", param="instances")
        if not _is_num(ann.get("area", 0)) or ann.get("area", 0) < 0:
            raise BadInput(f"{where}: area must be a number >= 0, got {ann.get('area')!r}", param="instances")
        image = images[ann["image_id"]]
        _check_segmentation(ann, image, where)
        entry = {"id": ann["id"], "category_id": ann["category_id"], "segmentation": ann["segmentation"],
                 "area": float(ann.get("area", 0))}
        image["crowd" if ann.get("iscrowd", 0) else "objects"].append(entry)

    seen.clear()
    for k, cap in enumerate(caps["annotations"]):
        if not isinstance(cap, dict) or not _is_int(cap.get("id")) or not isinstance(cap.get("caption"), str):
            raise BadInput(f"captions: {_entry('caption', cap)} needs an integer id and a caption string",
                           param="captions")
        check_text(f"captions: annotations[{k}].caption (caption id {cap['id']})", cap["caption"], param="captions")
        if cap["id"] in seen:
            raise BadInput(f"captions: caption id {cap['id']} appears twice", param="captions")
        seen.add(cap["id"])
        if cap.get("image_id") not in images:
            raise BadInput(f"captions: caption id {cap['id']} refers to image id {cap.get('image_id')!r}, which "
                           "is not in the instances file's 'images' (are both files of the same split?)",
                           param="captions")
        images[cap["image_id"]]["captions"].append({"id": cap["id"], "caption": cap["caption"].strip()})

    selected = []
    for image_id in sorted(images):
        image = images[image_id]
        if subset.keeps([a["area"] for a in image["objects"]]):
            selected.append(image)
    if limit is not None:
        selected = selected[:limit]
    if not selected:
        raise BadInput(f"no image of {str(instances)!r} is in the subset {asdict(subset)}; nothing to import")
    root = images_dir.resolve()
    for image in selected:
        if len(image["objects"]) > MAX_OBJECTS:
            raise BadInput(f"instances: image id {image['id']} has {len(image['objects'])} objects; at most "
                           f"{MAX_OBJECTS} fit the dataset format (choose a subset with max_objects)",
                           param="instances")
        for key in ("objects", "crowd", "captions"):
            image[key].sort(key=lambda a: a["id"])
        path = (images_dir / image["file_name"]).resolve()
        where = f"image id {image['id']} (file_name {image['file_name']!r})"
        if root not in path.parents:
            raise BadInput(f"instances: {where} points outside images {str(images_dir)!r}", param="instances")
        if not path.is_file():
            raise BadInput(f"images {str(images_dir)!r}: {where} is missing", param="images")
        size = image_size(path, f"images: {where}:", param="images")
        if size != (image["width"], image["height"]):
            raise BadInput(f"{where} is {size[0]}x{size[1]} pixels, but the instances file says "
                           f"{image['width']}x{image['height']}", param="instances")
    counts = {"images_in_file": len(images), "images_selected": len(selected),
              "images_without_captions": sum(not i["captions"] for i in selected)}
    return {"categories": categories, "images": selected, "counts": counts}


# --------------------------------------------------------------------------------------------- realising


def letterbox(width: int, height: int, size: int) -> tuple[int, int, int, int]:
    """``(new_width, new_height, offset_x, offset_y)`` of a ``width`` x ``height`` image scaled to fit a
    ``size`` x ``size`` square (longer side = ``size``) and centred; all in pixels."""
    scale = size / max(width, height)
    new_w, new_h = max(1, round(width * scale)), max(1, round(height * scale))
    return new_w, new_h, (size - new_w) // 2, (size - new_h) // 2


def letterbox_image(path: str | os.PathLike | bytes, size: int, crop: tuple[float, float, float, float] | None = None,
                    what: str = "image", name: str | None = None) -> np.ndarray:
    """The image file ``path`` (or the file's bytes) as ``(size, size, 3)`` uint8 RGB: optionally cropped to
    ``crop = (x, y, w, h)`` (pixels), then scaled (bicubic) so that its longer side is ``size`` pixels and centred
    on black padding (:func:`letterbox`). ``what`` names the file in messages (``"image"``, ``"reference
    image"``); ``name`` is shown instead of the path (bytes from a Parquet cell).

    Raises:
        BadInput: the file is not a readable image, or declares more pixels than
            :data:`bindscope.io.image_input.MAX_IMAGE_PIXELS` (see :func:`bindscope.io.image_input.read_rgb`).
    """
    from PIL import Image

    rgb = read_rgb(path, what, name=name)
    if crop is not None:
        x, y, w, h = crop
        rgb = rgb.crop((x, y, x + w, y + h))
    new_w, new_h, ox, oy = letterbox(rgb.width, rgb.height, size)
    if (new_w, new_h) != rgb.size:
        rgb = rgb.resize((new_w, new_h), Image.BICUBIC)
    out = np.zeros((size, size, 3), np.uint8)
    out[oy:oy + new_h, ox:ox + new_w] = np.asarray(rgb)
    return out


def instance_mask(segmentation, width: int, height: int, size: int) -> np.ndarray:
    """Rasterise one COCO segmentation into the letterboxed ``(size, size)`` frame (uint8 0/1, pycocotools).

    Polygons are mapped by the letterbox transform (x * new_w / width + offset_x, same for y) and rasterised at
    the stored resolution; an RLE (compressed or not) is decoded at the original size and resized
    nearest-neighbour.
    """
    from PIL import Image
    from pycocotools import mask as mask_utils

    new_w, new_h, ox, oy = letterbox(width, height, size)
    if isinstance(segmentation, list):
        sx, sy = new_w / width, new_h / height
        # A polygon of fewer than 3 points covers no area (a few exist in COCO); pycocotools would read a
        # 4-number one as a box, so such polygons are left out (counted as degenerate_polygons).
        polygons = [[v * sx + ox if k % 2 == 0 else v * sy + oy for k, v in enumerate(p)]
                    for p in segmentation if len(p) >= 6]
        if not polygons:
            return np.zeros((size, size), np.uint8)
        rle = mask_utils.merge(mask_utils.frPyObjects(polygons, size, size))
        return mask_utils.decode(rle).astype(np.uint8)
    rle = segmentation
    if isinstance(rle["counts"], list):
        rle = mask_utils.frPyObjects(rle, height, width)
    full = mask_utils.decode(rle).astype(np.uint8)
    out = np.zeros((size, size), np.uint8)
    if (new_w, new_h) != (width, height):
        full = np.asarray(Image.fromarray(full).resize((new_w, new_h), Image.NEAREST))
    out[oy:oy + new_h, ox:ox + new_w] = full
    return out


def _rle_string(mask: np.ndarray) -> dict:
    from pycocotools import mask as mask_utils

    rle = mask_utils.encode(np.asfortranarray(mask))
    return {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}


class CocoImporter:
    """A :class:`bindscope.build.builder.Generator` that realises an import plan from :func:`read_coco`.

    Args:
        plan: the dict from :func:`read_coco`.
        images_dir: the images folder. split: the dataset's split name. image_size: stored side in pixels.
        config: the resolved config recorded in the manifest. shard_size: samples per shard.
    """

    name = NAME
    version = VERSION
    seed = 0
    attribute_names = ATTRIBUTES
    extra_names = EXTRAS

    def __init__(self, plan: dict, images_dir: str | os.PathLike, split: str, image_size: int, config: dict,
                 shard_size: int = 256):
        self.plan = plan
        self.images_dir = str(images_dir)
        self.split = split
        self.image_size = (image_size, image_size)
        self.config = config
        self.shard_size = shard_size
        self.splits = {split: len(plan["images"])}
        self._finder = MentionFinder([c["name"] for c in plan["categories"].values()])

    def provenance(self) -> dict:
        """Title and sources for the manifest: the COCO split and the COCO licences."""
        return {"title": f"COCO {self.split} (bindscope import)", "sources": [COCO_LICENCE]}

    def _sample(self, index: int, info: dict) -> Sample:
        size = self.image_size[0]
        categories = self.plan["categories"]
        full = [instance_mask(a["segmentation"], info["width"], info["height"], size) for a in info["objects"]]
        full_areas = [int(m.sum()) for m in full]
        mask = np.zeros((size, size), np.uint8)
        for k in sorted(range(len(full)), key=lambda k: (-full_areas[k], k)):  # largest first: smaller on top
            mask[full[k] > 0] = k + 1
        boxes = [mask_bbox_area(mask, k + 1) for k in range(len(full))]
        ranks = size_ranks([area for _, area in boxes])
        annotated = {categories[a["category_id"]]["name"] for a in info["objects"]}
        captions = []
        for cap in info["captions"]:
            positions, phrases, unmatched = self._finder.positions(cap["caption"], annotated)
            captions.append({"id": cap["id"], "text": cap["caption"], "mentions": positions, "phrases": phrases,
                             "unmatched": unmatched})
        first = captions[0]["mentions"] if captions else {}
        carrier = {}  # category -> object index carrying its mention: the largest visible instance
        for k, a in sorted(enumerate(info["objects"]), key=lambda item: ranks[item[0]]):
            carrier.setdefault(categories[a["category_id"]]["name"], k)
        objects = []
        for k, ann in enumerate(info["objects"]):
            category = categories[ann["category_id"]]
            mention = first.get(category["name"], 0) if carrier[category["name"]] == k else 0
            objects.append(ObjectRecord(
                index=k + 1, category=category["name"], category_id=ann["category_id"],
                attributes={"supercategory": category["supercategory"]}, bbox=boxes[k][0], area=boxes[k][1],
                size_rank=ranks[k], salient=ranks[k] == 1, mention_position=mention,
                extras={"annotation_id": float(ann["id"]), "coco_area": ann["area"],
                        "full_area": float(full_areas[k])}))
        crowd = [{"annotation_id": a["id"], "category": categories[a["category_id"]]["name"],
                  "category_id": a["category_id"],
                  "rle": _rle_string(instance_mask(a["segmentation"], info["width"], info["height"], size))}
                 for a in info["crowd"]]
        new_w, new_h, ox, oy = letterbox(info["width"], info["height"], size)
        spec = {"coco_image_id": info["id"], "file_name": info["file_name"],
                "original_size": [info["height"], info["width"]],
                "scale": [new_w / info["width"], new_h / info["height"]], "offset": [ox, oy],
                "captions": captions, "crowd": crowd,
                "degenerate_polygons": sum(len(p) < 6 for a in info["objects"] + info["crowd"]
                                           if isinstance(a["segmentation"], list) for p in a["segmentation"])}
        return Sample(index=index, image=letterbox_image(Path(self.images_dir) / info["file_name"], size), mask=mask,
                      caption=captions[0]["text"] if captions else "", objects=objects, spec=spec)

    def make_samples(self, split: str, start: int, count: int) -> list[Sample]:
        return [self._sample(i, self.plan["images"][i]) for i in range(start, start + count)]

    def shard_statistics(self, split: str, samples: list[Sample]) -> dict[str, float]:
        counts = {"images": len(samples), "objects": 0, "crowd_regions": 0, "captions": 0, "degenerate_polygons": 0,
                  "captions_without_mention": 0, "mentions": 0, "unmatched_mentions": 0}
        for s in samples:
            counts["objects"] += len(s.objects)
            counts["crowd_regions"] += len(s.spec["crowd"])
            counts["degenerate_polygons"] += s.spec["degenerate_polygons"]
            for cap in s.spec["captions"]:
                counts["captions"] += 1
                counts["mentions"] += len(cap["mentions"])
                counts["unmatched_mentions"] += len(cap["unmatched"])
                counts["captions_without_mention"] += not cap["mentions"]
        return counts

    def statistics(self, counts: dict[str, dict[str, float]]) -> dict:
        return {"source": dict(self.plan["counts"]), "splits": {s: dict(c) for s, c in counts.items()}}

    def card(self, manifest: dict) -> str:
        stats = manifest["statistics"]["splits"].get(self.split, {})
        subset = self.config["subset"]
        return (f"# COCO {self.split} (bindscope import)\n\n"
                f"{stats.get('images', 0)} images with {stats.get('objects', 0)} annotated objects, "
                f"{stats.get('crowd_regions', 0)} crowd regions and {stats.get('captions', 0)} captions, imported "
                f"by `bindscope import coco` (bindscope.importers.coco) from `{self.config['instances']}` and "
                f"`{self.config['captions']}`.\n\n"
                f"- Subset: {subset['min_objects']}..{subset['max_objects'] or 'any'} non-crowd objects"
                + (f", largest annotation area at least {subset['largest_ratio']:g}x the second"
                   if subset["largest_ratio"] else "") + "\n"
                f"- Images letterboxed to {self.image_size[0]}x{self.image_size[0]} pixels; masks rasterised with "
                "pycocotools; crowd regions kept apart (sample spec).\n"
                f"- Caption mentions: {stats.get('mentions', 0)} matched, {stats.get('unmatched_mentions', 0)} "
                "mentions of categories not annotated in the image (synonym table: "
                "bindscope/assets/coco_mentions.json).\n\n"
                f"Licence: {COCO_LICENCE}.\n")


def import_coco(images: str | os.PathLike, instances: str | os.PathLike, captions: str | os.PathLike,
                out: str | os.PathLike, split: str = "val2017", subset: CocoSubset | str = "all",
                settings: ImportSettings | None = None, overwrite: bool = False, progress: bool = True,
                **changes) -> dict:
    """Import COCO images, instances and captions into the bindscope dataset ``out``; return its manifest.

    See the module docstring for what a sample holds. The run is resumable and atomic like every build
    (:func:`bindscope.build.builder.build_dataset`); the finished dataset is checked with
    :func:`bindscope.publish.verify.verify_dataset`.

    Args:
        images: folder holding the images (``file_name`` of the instances file is relative to it).
        instances / captions: COCO ``instances_<split>.json`` and ``captions_<split>.json``.
        out: output folder (new, empty, or an unfinished run of the same import).
        split: the dataset's split name (letters, digits, ``_``), e.g. ``val2017``.
        subset: a :class:`CocoSubset` or a preset name (``all``, ``image-side``: 2-5 objects, largest area at
            least twice the second, the ComCO paper's COCO image experiments).
        settings: an :class:`~bindscope.importers.settings.ImportSettings`: ``image_size`` (side of the stored
            square images, 32..2048 pixels), ``limit`` (only the first ``limit`` selected images, by image id),
            ``shard_size``, ``jobs`` (``seed`` is not read: COCO imports store no negatives); default: its defaults.
        overwrite: replace a dataset in ``out``. progress: tqdm bar.
        **changes: fields of ``settings`` in place of its values (``image_size=96``, ``limit=100``).

    Raises:
        BadInput: bad arguments, a path that is not UTF-8, an unusable ``out``, or an inconsistent annotation
            file (see :func:`read_coco`); nothing is written then.
        DiskFull: the disk filled up while writing (exit status 1 on the command line): what is unfinished is
            removed, finished shards are kept, and the same call resumes once there is space.
        RuntimeError: the written dataset fails verification (a bug).
    """
    from bindscope.publish.verify import verify_dataset

    settings = with_changes(settings or ImportSettings(), changes, "an import setting")
    size, limit, shard_size = settings.image_size, settings.limit, settings.shard_size
    if isinstance(subset, str):
        if subset not in SUBSETS:
            raise BadInput(f"unknown subset {subset!r}; allowed: {', '.join(SUBSETS)}")
        subset = SUBSETS[subset]
    if not re.fullmatch(r"[A-Za-z0-9_]+", split):
        raise BadInput(f"split {split!r} is not allowed; use letters, digits and '_' (e.g. val2017)", param="split")
    from bindscope.io.ownership import check_output_location

    for param, path in (("images", images), ("instances", instances), ("captions", captions), ("out", out)):
        check_utf8_path(param, path)
    check_output_location("out", out)
    plan = read_coco(images, instances, captions, subset, limit)
    config = {"source": "coco", "split": split, "image_size": size, "subset": asdict(subset),
              "limit": limit, "shard_size": shard_size, "instances": Path(instances).name,
              "instances_sha256": sha256_file(instances), "captions": Path(captions).name,
              "captions_sha256": sha256_file(captions), "letterbox": "longer side scaled to image_size, centred, "
              "black padding", "mention_table_sha256": _mention_table_hash()}
    importer = CocoImporter(plan, images, split, size, config, shard_size)
    with reporting_disk_full(out):  # the shards and records are atomic writes; this covers the rest (markers)
        manifest = build_dataset(importer, out, jobs=settings.jobs, overwrite=overwrite, progress=progress)
    problems = verify_dataset(out)
    if problems:
        raise RuntimeError(f"internal error: the imported dataset fails verification: {problems[0]}")
    return manifest


def _mention_table_hash() -> str:
    from bindscope.importers.mentions import mention_table

    return hashlib.sha256(json.dumps(mention_table(), sort_keys=True).encode()).hexdigest()
