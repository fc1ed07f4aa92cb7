"""Import CLEVR v1.0 (rendered images and scene JSON) as a bindscope dataset (generator name ``clevr``).

Input: the CLEVR v1.0 layout (Johnson et al., CVPR 2017; https://cs.stanford.edu/people/jcjohns/clevr/):
``CLEVR_v1.0/images/<split>/CLEVR_<split>_NNNNNN.png`` and ``CLEVR_v1.0/scenes/CLEVR_<split>_scenes.json``, a JSON
object ``{"info": {...}, "scenes": [...]}`` whose scenes are ``{"image_index", "image_filename", "split",
"objects": [{"color", "size", "shape", "material", "3d_coords", "pixel_coords", "rotation"}, ...],
"relationships": {"left"|"right"|"front"|"behind": [[object positions], ...]}, "directions": {...}}``. CLEVR v1.0
publishes scenes for ``train`` and ``val`` (not for ``test``); renders of the same generator (CLEVR-CoGenT, the
LABCLIP authors' 2-10 object scenes) have the same layout.

What one sample holds (one per scene, in ``image_index`` order):

- ``image``: the render letterboxed into ``image_size`` x ``image_size`` pixels (as a COCO import,
  :func:`bindscope.importers.coco.letterbox_image`; CLEVR's 480x320 images get black bars above and below);
  ``spec["scale"]`` / ``spec["offset"]`` give the transform (stored x = x * scale_x + offset_x);
- the objects in the scene's order: category = ``shape`` (``category_id`` its index in :data:`SHAPES`),
  attributes ``colour``, ``material``, ``size`` (CLEVR's ``color``, ``material``, ``size``), extras
  ``pixel_x``, ``pixel_y`` (the object's centre, CLEVR's ``pixel_coords``, in stored pixels), ``pixel_depth``
  (CLEVR's third pixel coordinate: distance from the camera), ``x``, ``y``, ``z`` (``3d_coords``) and
  ``rotation`` (degrees). CLEVR has no masks and no boxes: objects have no mask (see
  :mod:`bindscope.importers.scenes`); their centres are the extras;
- ``caption``: the LABCLIP rule (:mod:`bindscope.importers.scenes`): ``"red cube and blue sphere and gray
  cylinder"`` from the attributes ``attributes`` (default ``["colour"]``, the paper's; any of size, colour,
  material, always in that word order: ``"large red metal cube"``), with recognition and binding negatives;
- ``spec``: ``clevr_image_index``, ``image_filename``, ``original_size`` ``[height, width]``, ``scale``, ``offset``,
  ``relationships`` and ``directions`` as the scene file gives them (object positions 0-based, as in CLEVR).

Checks (all before anything is written; one :class:`~bindscope.errors.BadInput` naming the scene and what is
allowed): the file is bounded JSON (:func:`bindscope.io.json_input.load_json`), every scene has a unique integer
``image_index``, the same ``split``, 1..255 objects whose values are CLEVR's (:data:`VOCABULARY`) and whose
coordinates are finite numbers, relationships that name objects of the scene, and an image file inside
``images`` that is a readable image (header read; at most :data:`bindscope.io.image_input.MAX_IMAGE_PIXELS`
pixels).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from bindscope.errors import BadInput, check_text, check_utf8_path, with_changes
from bindscope.importers.coco import MAX_OBJECTS, letterbox, letterbox_image
from bindscope.importers.scenes import SceneImporter, check_split_name, finish_import
from bindscope.importers.settings import ImportSettings
from bindscope.io.canonical import sha256_file
from bindscope.io.image_input import image_size
from bindscope.io.inside import file_inside
from bindscope.io.json_input import load_json

NAME = "clevr"
VERSION = "1"  # the importer's version in the manifest; changes whenever the same input would give other bytes
# https://cs.stanford.edu/people/jcjohns/clevr/
CLEVR_LICENCE = "CLEVR v1.0 (images and scenes): Creative Commons Attribution 4.0 (CC BY 4.0), " \
                "https://cs.stanford.edu/people/jcjohns/clevr/"
SHAPES = ("cube", "sphere", "cylinder")
VOCABULARY = {"colour": ["gray", "red", "blue", "green", "brown", "purple", "cyan", "yellow"],
              "material": ["rubber", "metal"], "size": ["large", "small"]}
"""CLEVR's values (its generator's ``properties.json``), in that file's order; ``colour`` is CLEVR's ``color``."""
ATTRIBUTES = ["colour", "material", "size"]
CAPTION_ORDER = ["size", "colour", "material"]  # CLEVR's own word order ("large red metal cube")
SOURCE_KEYS = {"colour": "color", "material": "material", "size": "size"}
EXTRAS = ["pixel_x", "pixel_y", "pixel_depth", "x", "y", "z", "rotation"]
RELATIONS = ("left", "right", "front", "behind")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _numbers(value, count: int) -> bool:
    return isinstance(value, list) and len(value) == count and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)


def caption_attributes(attributes) -> list[str]:
    """The attributes a CLEVR caption gives, in CLEVR's word order (size, colour, material).

    Args:
        attributes: a list of names, or one comma-separated string (``"colour"``, ``"size,colour"``).

    Raises:
        BadInput: an empty list, a repeated name, or one that is not size, colour or material.
    """
    names = [a.strip() for a in attributes.split(",")] if isinstance(attributes, str) else list(attributes or [])
    unknown = [a for a in names if a not in CAPTION_ORDER]
    if not names or unknown or len(set(names)) != len(names):
        raise BadInput(f"attributes {attributes!r} are not allowed; name one or more of size, colour, material, "
                       "each once (the LABCLIP paper's captions give colour)", param="attributes")
    return [a for a in CAPTION_ORDER if a in names]


def _object(obj, where: str) -> dict:
    if not isinstance(obj, dict):
        raise BadInput(f"{where} is not a JSON object", param="scenes")
    attributes = {}
    for name, key in SOURCE_KEYS.items():
        if obj.get(key) not in VOCABULARY[name]:
            raise BadInput(f"{where}: {key} {obj.get(key)!r} is not a CLEVR value; allowed: "
                           f"{', '.join(VOCABULARY[name])}", param="scenes")
        attributes[name] = obj[key]
    if obj.get("shape") not in SHAPES:
        raise BadInput(f"{where}: shape {obj.get('shape')!r} is not a CLEVR shape; allowed: {', '.join(SHAPES)}",
                       param="scenes")
    for key in ("3d_coords", "pixel_coords"):
        if not _numbers(obj.get(key), 3):
            raise BadInput(f"{where}: {key} must be a list of 3 finite numbers, got {obj.get(key)!r}",
                           param="scenes")
    if not _numbers([obj.get("rotation")], 1):
        raise BadInput(f"{where}: rotation must be a finite number, got {obj.get('rotation')!r}", param="scenes")
    return {"category": obj["shape"], "category_id": SHAPES.index(obj["shape"]), "attributes": attributes,
            "pixel": [float(v) for v in obj["pixel_coords"]], "coords": [float(v) for v in obj["3d_coords"]],
            "rotation": float(obj["rotation"])}


def _relationships(value, count: int, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise BadInput(f"{where}: relationships must be a JSON object of relation -> lists", param="scenes")
    for relation, rows in value.items():
        check_text(f"{where}: relationship name", relation, name=True, param="scenes")
        if (not isinstance(rows, list) or len(rows) != count or not all(
                isinstance(row, list) and all(_is_int(k) and 0 <= k < count for k in row) for row in rows)):
            raise BadInput(f"{where}: relationships[{relation!r}] must hold one list per object ({count}) of object "
                           f"positions 0..{count - 1}", param="scenes")
    return value


def _directions(value, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and _numbers(v, 3) for k, v in value.items()):
        raise BadInput(f"{where}: directions must map names to lists of 3 finite numbers", param="scenes")
    return {k: [float(x) for x in v] for k, v in value.items()}


def read_clevr(images: str | os.PathLike, scenes: str | os.PathLike, limit: int | None = None) -> dict:
    """Read and check a CLEVR scene file and its images; return the import plan (plain JSON-serialisable data).

    Args:
        images: the folder of the split's images (``CLEVR_v1.0/images/val``).
        scenes: the split's scene file (``CLEVR_v1.0/scenes/CLEVR_val_scenes.json``).
        limit: keep only the first ``limit`` scenes by ``image_index``; None = all.

    Returns:
        ``{"split": the scenes' split, "scenes": [{"image_index", "image_filename", "width", "height",
        "objects": [...], "relationships", "directions"}, ...], "vocabulary": VOCABULARY, "counts":
        {"scenes_in_file", "scenes_selected", "objects_selected"}}``, scenes sorted by ``image_index``.

    Raises:
        BadInput: the first problem, naming the file, the scene (its index in the file and ``image_index``) and
            what is allowed (see the module docstring).
    """
    if limit is not None and limit < 1:
        raise BadInput(f"limit {limit} is not allowed; use an integer >= 1", param="limit")
    images = Path(images)
    if not images.is_dir():
        raise BadInput(f"images {str(images)!r} is not a folder", param="images")
    data = load_json(scenes, "scenes", param="scenes")
    if not isinstance(data, dict) or not isinstance(data.get("scenes"), list) or not data["scenes"]:
        raise BadInput(f"scenes {str(scenes)!r} is not a CLEVR scene file: it needs a non-empty 'scenes' list",
                       param="scenes")
    plan, seen, splits = [], set(), set()
    for k, scene in enumerate(data["scenes"]):
        if not isinstance(scene, dict) or not _is_int(scene.get("image_index")) or scene["image_index"] < 0:
            raise BadInput(f"scenes: scenes[{k}] needs an integer image_index >= 0", param="scenes")
        where = f"scenes: scenes[{k}] (image_index {scene['image_index']})"
        if scene["image_index"] in seen:
            raise BadInput(f"{where}: image_index appears twice", param="scenes")
        seen.add(scene["image_index"])
        for key in ("image_filename", "split"):
            if not isinstance(scene.get(key), str) or not scene[key]:
                raise BadInput(f"{where} needs a non-empty string {key}", param="scenes")
            check_text(f"{where}.{key}", scene[key], name=True, param="scenes")
        splits.add(scene["split"])
        objects = scene.get("objects")
        if not isinstance(objects, list) or not 1 <= len(objects) <= MAX_OBJECTS:
            raise BadInput(f"{where}: objects must be a list of 1..{MAX_OBJECTS} objects", param="scenes")
        plan.append({"image_index": scene["image_index"], "image_filename": scene["image_filename"],
                     "objects": [_object(o, f"{where}.objects[{j}]") for j, o in enumerate(objects)],
                     "relationships": _relationships(scene.get("relationships"), len(objects), where),
                     "directions": _directions(scene.get("directions"), where)})
    if len(splits) > 1:
        raise BadInput(f"scenes {str(scenes)!r} mixes the splits {sorted(splits)}; a scene file holds one split",
                       param="scenes")
    plan.sort(key=lambda s: s["image_index"])
    selected = plan[:limit] if limit is not None else plan
    for scene in selected:
        where = f"scenes: image_index {scene['image_index']} (image_filename {scene['image_filename']!r})"
        path = file_inside(images, scene["image_filename"], f"image (scene image_index {scene['image_index']})")
        scene["width"], scene["height"] = image_size(path, f"images: {where}:", param="images")
    return {"split": splits.pop(), "scenes": selected, "vocabulary": VOCABULARY,
            "counts": {"scenes_in_file": len(plan), "scenes_selected": len(selected),
                       "objects_selected": sum(len(s["objects"]) for s in selected)}}


class ClevrImporter(SceneImporter):
    """A :class:`bindscope.build.builder.Generator` that realises a plan from :func:`read_clevr`.

    Args:
        plan: the dict from :func:`read_clevr`. images: the images folder. caption_attributes: from
        :func:`caption_attributes`. The rest as :class:`~bindscope.importers.scenes.SceneImporter`.
    """

    name = NAME
    version = VERSION
    attribute_names = ATTRIBUTES
    extra_names = EXTRAS

    def __init__(self, plan: dict, images: str | os.PathLike, split: str, image_size: int, config: dict,
                 caption_attributes: list[str], seed: int = 0, shard_size: int = 256):
        super().__init__(plan, split, image_size, config, seed, shard_size)
        self.images = str(images)
        self.caption_attributes = list(caption_attributes)

    def provenance(self) -> dict:
        """Title and sources for the manifest: the CLEVR split and its licence."""
        return {"title": f"CLEVR {self.split} (bindscope import)", "sources": [CLEVR_LICENCE]}

    def _transform(self, scene: dict) -> tuple[list[float], list[int]]:
        new_w, new_h, ox, oy = letterbox(scene["width"], scene["height"], self.image_size[0])
        return [new_w / scene["width"], new_h / scene["height"]], [ox, oy]

    def _images(self, scenes: list[dict]) -> list[np.ndarray]:
        return [letterbox_image(Path(self.images) / s["image_filename"], self.image_size[0]) for s in scenes]

    def _extras(self, scene: dict, obj: dict) -> dict[str, float]:
        (sx, sy), (ox, oy) = self._transform(scene)
        values = [obj["pixel"][0] * sx + ox, obj["pixel"][1] * sy + oy, obj["pixel"][2], *obj["coords"],
                  obj["rotation"]]
        return dict(zip(EXTRAS, (float(v) for v in values)))

    def _spec(self, scene: dict) -> dict:
        scale, offset = self._transform(scene)
        return {"clevr_image_index": scene["image_index"], "image_filename": scene["image_filename"],
                "original_size": [scene["height"], scene["width"]], "scale": scale, "offset": offset,
                "relationships": scene["relationships"], "directions": scene["directions"]}

    def card(self, manifest: dict) -> str:
        return (f"# CLEVR {self.split} (bindscope import)\n\n"
                f"{self.card_counts(manifest)}, imported by `bindscope import clevr` (bindscope.importers.clevr) "
                f"from `{self.config['scenes']}`.\n\n"
                f"- Captions: the LABCLIP rule, each object as its {', '.join(self.caption_attributes)} and shape, "
                "joined with ' and ' in the scene's object order.\n"
                f"- Images letterboxed to {self.image_size[0]}x{self.image_size[0]} pixels. CLEVR has no masks: "
                "objects have none (area 0); their centres (CLEVR's pixel coordinates, in stored pixels) and 3D "
                "coordinates are the object extras.\n\n"
                f"Licence: {CLEVR_LICENCE}.\n")


def import_clevr(images: str | os.PathLike, scenes: str | os.PathLike, out: str | os.PathLike,
                 split: str | None = None, attributes=("colour",), settings: ImportSettings | None = None,
                 overwrite: bool = False, progress: bool = True, **changes) -> dict:
    """Import a CLEVR split (images and scene file) into the bindscope dataset ``out``; return its manifest.

    See the module docstring for what a sample holds. Resumable and atomic like every build
    (:func:`bindscope.build.builder.build_dataset`); the finished dataset is verified.

    Args:
        images: the split's image folder (``CLEVR_v1.0/images/val``). scenes: its scene file
            (``CLEVR_v1.0/scenes/CLEVR_val_scenes.json``).
        out: output folder (new, empty, or an unfinished run of the same import).
        split: the dataset's split name (letters, digits, ``_``); default: the scenes' own ``split``.
        attributes: the attributes captions give (:func:`caption_attributes`; default colour, the paper's).
        settings: an :class:`~bindscope.importers.settings.ImportSettings`: ``image_size`` (side of the stored
            square images, 32..2048 pixels), ``limit`` (only the first ``limit`` scenes, by ``image_index``),
            ``seed`` (of the recognition negatives' replacement values), ``shard_size`` (scenes per shard), ``jobs``;
            default: its defaults.
        overwrite: replace a dataset in ``out``. progress: tqdm bar.
        **changes: fields of ``settings`` in place of its values (``image_size=96``, ``seed=1``).

    Raises:
        BadInput: bad arguments, a path that is not UTF-8, an unusable ``out``, or a scene file or image that
            fails :func:`read_clevr`'s checks; nothing is written then.
        DiskFull: the disk filled up (as :func:`bindscope.importers.coco.import_coco`).
        RuntimeError: the written dataset fails verification (a bug).
    """
    from bindscope.io.ownership import check_output_location

    settings = with_changes(settings or ImportSettings(), changes, "an import setting")
    words = caption_attributes(attributes)
    if split is not None:
        check_split_name(split)
    for param, path in (("images", images), ("scenes", scenes), ("out", out)):
        check_utf8_path(param, path)
    check_output_location("out", out)
    plan = read_clevr(images, scenes, settings.limit)
    split = split or plan["split"]
    check_split_name(split)
    config = {"source": NAME, "split": split, "image_size": settings.image_size, "limit": settings.limit,
              "shard_size": settings.shard_size,
              "attributes": words, "scenes": Path(scenes).name, "scenes_sha256": sha256_file(scenes),
              "letterbox": "longer side scaled to image_size, centred, black padding",
              "caption": "LABCLIP: attribute values then shape per object, joined with ' and ', scene order"}
    importer = ClevrImporter(plan, images, split, settings.image_size, config, words, settings.seed,
                             settings.shard_size)
    return finish_import(importer, out, settings.jobs, overwrite, progress)
