"""Planning for ``comco assets import|fetch`` (pure Python: never imports bpy).

- :func:`plan_import` finds the model files of a folder (glTF/GLB, OBJ, FBX, .blend), assigns each to a
  category (by file name, or through a YAML/JSON mapping file), and checks everything before anything is
  written.
- :func:`select_objaverse` picks, for each ComCO category, Objaverse-LVIS objects whose licence is CC-BY or
  CC0 (Deitke et al., CVPR 2023, "Objaverse"; LVIS categories: Gupta et al., CVPR 2019), from the
  annotations that the ``objaverse`` package loads. The LVIS -> ComCO mapping is data:
  ``bindscope/assets/objaverse_lvis.yaml``.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from urllib.parse import unquote

import yaml

from bindscope.config import load_yaml
from bindscope.errors import BadInput
from bindscope.generators.comco.registry import SIZE_CLASSES, builtin_entries, size_class_for
from bindscope.io.canonical import sha256_file

MODEL_SUFFIXES = {".glb": "gltf", ".gltf": "gltf", ".obj": "obj", ".fbx": "fbx", ".blend": "blend"}
"""File suffix -> importer (bpy.ops.import_scene.gltf, bpy.ops.wm.obj_import, bpy.ops.import_scene.fbx, append)."""
MAPPING_NAMES = ("mapping.yaml", "mapping.yml", "mapping.json")
"""Mapping files picked up from the model folder when no ``mapping_file`` is given."""
AXES = ("X", "Y", "Z", "-X", "-Y", "-Z")
UNKNOWN_LICENCE = "unknown (not recorded)"

OBJAVERSE_LICENCES = {"by": "CC-BY-4.0", "cc0": "CC0-1.0"}
"""Objaverse (Sketchfab) licence labels that ``comco assets fetch`` keeps -> SPDX identifier. All other
labels (by-sa, by-nd, by-nc, by-nc-sa, by-nc-nd, free, st, ...) are dropped."""


@dataclass(frozen=True)
class ImportItem:
    """One model file to import, with everything needed to normalise and record it.

    Attributes:
        path: the model file.
        kind: ``"gltf"``, ``"obj"``, ``"fbx"`` or ``"blend"``.
        category: category (caption) name.
        licence: licence text recorded in the registry.
        source: where the model came from (the file name, or e.g. ``"objaverse:<uid>"``).
        up: the file's up axis after Blender's importer (``"Z"`` = already upright, the default).
        front: the axis the model's front faces after import (default ``"-Y"``, the glTF convention).
        size_class, nominal_size_m: from the mapping (a nominal size alone gives its size class through
            :func:`registry.size_class_for`), else from comco72 when the name matches, else ``"medium"``, 1.0 m.
        sha256: hex digest of the file's bytes.
    """

    path: Path
    kind: str
    category: str
    licence: str
    source: str
    up: str = "Z"
    front: str = "-Y"
    size_class: str = "medium"
    nominal_size_m: float = 1.0
    sha256: str = ""


def category_from_filename(path: Path) -> str:
    """Category name from a file name: stem, ``_`` and ``-`` become spaces, lower case
    (``Traffic_Light.glb`` -> ``"traffic light"``)."""
    return re.sub(r"\s+", " ", re.sub(r"[_\-]+", " ", path.stem)).strip().lower()


def read_mapping(path: Path) -> dict:
    """Read a mapping file: ``{file name: category}`` or ``{file name: {category, licence, source, up, front,
    size_class, nominal_size_m}}``. Raises BadInput naming the file for unreadable or malformed content."""
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else load_yaml(text, f"mapping file {str(path)!r}")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"mapping file {str(path)!r}: cannot be read ({exc})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BadInput(f"mapping file {str(path)!r}: must map file names to categories, got {type(data).__name__}")
    mapping = {}
    allowed = {"category", "licence", "license", "source", "up", "front", "size_class", "nominal_size_m"}
    for name, value in data.items():
        entry = {"category": value} if isinstance(value, str) else value
        if not isinstance(entry, dict) or not isinstance(entry.get("category"), str) or not entry["category"].strip():
            raise BadInput(f"mapping file {str(path)!r}: entry {name!r} needs a category name, got {value!r}")
        unknown = set(entry) - allowed
        if unknown:
            raise BadInput(f"mapping file {str(path)!r}: entry {name!r} has unknown key(s) {sorted(unknown)}; "
                           f"allowed: {', '.join(sorted(allowed))}")
        for key in ("up", "front"):
            if key in entry and str(entry[key]).upper() not in AXES:
                raise BadInput(f"mapping file {str(path)!r}: entry {name!r}: {key} {entry[key]!r}; "
                               f"allowed: {', '.join(AXES)}")
        if "size_class" in entry and entry["size_class"] not in SIZE_CLASSES:
            raise BadInput(f"mapping file {str(path)!r}: entry {name!r}: size_class {entry['size_class']!r}; "
                           f"allowed: {', '.join(SIZE_CLASSES)}")
        if "nominal_size_m" in entry:
            size = entry["nominal_size_m"]
            if not isinstance(size, (int, float)) or isinstance(size, bool) or size <= 0:
                raise BadInput(f"mapping file {str(path)!r}: entry {name!r}: nominal_size_m {size!r} must be a "
                               "positive number (metres)")
        mapping[str(name)] = entry
    return mapping


def slug(name: str) -> str:
    """File-system name of a category: lower case, runs of other characters become ``_``."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "model"


# .mtl statements whose last word names a texture file (Wavefront MTL; Blender's OBJ importer reads them all).
_MTL_FILE_KEYS = {"map_ka", "map_kd", "map_ks", "map_ke", "map_ns", "map_d", "map_bump", "bump", "disp", "decal",
                  "refl", "norm", "map_pr", "map_pm", "map_ps", "map_refl"}


def _gltf_json(path: Path) -> dict:
    """The JSON part of a .gltf file or of a .glb container (glTF 2.0 binary: 12-byte header, then chunks)."""
    data = path.read_bytes()
    if path.suffix.lower() == ".glb":
        if len(data) < 20 or data[:4] != b"glTF":
            raise ValueError("not a GLB container")
        length, kind = struct.unpack_from("<I4s", data, 12)
        if kind != b"JSON":
            raise ValueError("the first GLB chunk is not JSON")
        data = data[20:20 + length]
    document = json.loads(data.decode("utf-8"))
    if not isinstance(document, dict):
        raise ValueError("not a glTF JSON object")
    return document


def referenced_files(path: Path, kind: str) -> list[str]:
    """The external files a model file refers to, as written in it: for OBJ its ``mtllib`` files and, in those,
    every texture statement (``map_Kd``, ``map_Bump``, ``bump``, ...); for glTF/GLB the ``uri`` of every image and
    buffer that is not embedded (``data:`` URIs are). FBX and .blend files are not inspected.

    Raises:
        BadInput: a glTF/GLB file whose JSON cannot be read (the message names the file).
    """
    refs: list[str] = []
    if kind == "obj":
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            words = line.split()
            if words and words[0] == "mtllib":
                for name in words[1:]:
                    refs.append(name)
                    mtl = path.parent / name
                    if mtl.is_file() and _inside(mtl, path.parent):
                        for mline in mtl.read_text(encoding="utf-8", errors="replace").splitlines():
                            mwords = mline.split()
                            if len(mwords) >= 2 and mwords[0].lower() in _MTL_FILE_KEYS:
                                refs.append(mwords[-1])
    elif kind == "gltf":
        try:
            document = _gltf_json(path)
        except (OSError, ValueError, struct.error, UnicodeDecodeError) as exc:
            raise BadInput(f"{path}: broken glTF file ({type(exc).__name__}: {exc})") from None
        for key in ("images", "buffers"):
            for entry in document.get(key) or []:
                uri = entry.get("uri") if isinstance(entry, dict) else None
                if isinstance(uri, str) and not uri.startswith("data:"):
                    refs.append(unquote(uri))
    return refs


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def check_references(path: Path, kind: str) -> None:
    """Refuse a model file that refers to a file outside its folder (``../``, an absolute path, a URL, or a
    symbolic link leading out) or to a file that is missing: Blender would pack such a file into the asset.

    Raises:
        BadInput: naming the model file and the reference.
    """
    folder = path.parent
    for ref in referenced_files(path, kind):
        if "://" in ref or os.path.isabs(ref) or not _inside(folder / ref, folder):
            raise BadInput(f"{path}: refers to {ref!r}, outside the model folder {str(folder)!r}; copy the file "
                           "into the folder and refer to it by a relative name")
        if not (folder / ref).is_file():
            raise BadInput(f"{path}: refers to {ref!r}, which is not in {str(folder)!r}")


def plan_import(folder: str | os.PathLike, mapping_file: str | os.PathLike | None = None,
                licence: str | None = None) -> list[ImportItem]:
    """Find and check the models of ``folder`` (top level only) without importing anything.

    A file is imported if its suffix is one of :data:`MODEL_SUFFIXES`. Its category is the mapping entry
    for its file name (or stem), else :func:`category_from_filename`. A mapping entry may also give the
    licence, source, up/front axes, size class and nominal size; ``licence`` is the default licence.

    Returns:
        the items in category-name order.

    Raises:
        BadInput: the folder is missing or holds no model file; the mapping names a file that is not there;
            two files give the same category, or categories that share a file name (:func:`slug`); a
            nominal size that is not a positive finite number; a model that refers to a file outside the
            folder or to a missing one (:func:`check_references`); the mapping file is malformed.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise BadInput(f"model folder {str(folder)!r} does not exist")
    if mapping_file is None:
        mapping_file = next((folder / n for n in MAPPING_NAMES if (folder / n).is_file()), None)
    elif not Path(mapping_file).is_file():
        raise BadInput(f"mapping_file {str(mapping_file)!r}: no such file", param="mapping_file")
    mapping = read_mapping(Path(mapping_file)) if mapping_file is not None else {}
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in MODEL_SUFFIXES)
    names = {p.name for p in files} | {p.stem for p in files}
    missing = sorted(k for k in mapping if k not in names)
    if missing:
        raise BadInput(f"mapping names file(s) not in {str(folder)!r}: {', '.join(missing)}")
    if not files:
        raise BadInput(f"model folder {str(folder)!r} holds no model file; allowed: "
                       f"{', '.join(sorted(MODEL_SUFFIXES))}")
    comco = {e["name"]: e for e in builtin_entries("comco72")}
    items: dict[str, ImportItem] = {}
    slugs: dict[str, str] = {}
    for path in files:
        entry = mapping.get(path.name) or mapping.get(path.stem) or {}
        category = entry.get("category", category_from_filename(path)).strip()
        if category in items:
            raise BadInput(f"category {category!r} comes from two files: {items[category].path.name!r} and "
                           f"{path.name!r}; keep one or map one to another category")
        if slug(category) in slugs:
            raise BadInput(f"categories {slugs[slug(category)]!r} and {category!r} would both be saved as "
                           f"models/{slug(category)}.blend; rename one in the mapping")
        slugs[slug(category)] = category
        if "nominal_size_m" in entry:
            size = entry["nominal_size_m"]
            if isinstance(size, bool) or not isinstance(size, (int, float)) or not math.isfinite(size) or size <= 0:
                raise BadInput(f"mapping entry {path.name!r}: nominal_size_m {size!r} must be a positive finite "
                               "number of metres")
        check_references(path, MODEL_SUFFIXES[path.suffix.lower()])
        known = comco.get(category, {})
        items[category] = ImportItem(
            path=path, kind=MODEL_SUFFIXES[path.suffix.lower()], category=category,
            licence=str(entry.get("licence", entry.get("license", licence or UNKNOWN_LICENCE))),
            source=str(entry.get("source", path.name)),
            up=str(entry.get("up", "Z")).upper(), front=str(entry.get("front", "-Y")).upper(),
            size_class=entry.get("size_class", size_class_for(float(entry["nominal_size_m"])) if "nominal_size_m"
                                 in entry else known.get("size_class", "medium")),
            nominal_size_m=float(entry.get("nominal_size_m", known.get("nominal_size_m", 1.0))),
            sha256=sha256_file(path))
    return [items[k] for k in sorted(items)]


# ----------------------------------------------------------------------------------------------- Objaverse


def lvis_mapping() -> dict[str, list[str]]:
    """ComCO category -> Objaverse-LVIS category names (``bindscope/assets/objaverse_lvis.yaml``)."""
    text = resources.files("bindscope.assets").joinpath("objaverse_lvis.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)["comco72"]


def objaverse_licence(annotation: dict) -> str | None:
    """SPDX id of an Objaverse annotation's licence if it is CC-BY or CC0 (:data:`OBJAVERSE_LICENCES`), else None."""
    label = str(annotation.get("license", "")).strip().lower()
    return OBJAVERSE_LICENCES.get(label)


def select_objaverse(lvis: dict[str, list[str]], annotations: dict[str, dict],
                     categories: list[str], mapping: dict[str, list[str]] | None = None) -> dict[str, dict]:
    """Choose one CC-BY/CC0 Objaverse object per ComCO category.

    Args:
        lvis: LVIS category -> list of uids (``objaverse.load_lvis_annotations()``).
        annotations: uid -> annotation dict with at least ``license`` (``objaverse.load_annotations(uids)``);
            ``likeCount``, ``name``, ``user.username`` and ``viewerUrl`` are used when present.
        categories: ComCO category names to fetch.
        mapping: ComCO category -> LVIS names (default :func:`lvis_mapping`).

    Returns:
        category -> ``{"uid", "licence", "source", "lvis"}`` for every category that has a usable object;
        the object with the most likes wins, ties broken by uid (deterministic).

    Raises:
        BadInput: a category that the mapping does not know.
    """
    mapping = lvis_mapping() if mapping is None else mapping
    chosen = {}
    for category in categories:
        if category not in mapping:
            raise BadInput(f"category {category!r} has no Objaverse-LVIS mapping; allowed: {', '.join(mapping)}")
        candidates = []
        for lvis_name in mapping[category]:
            for uid in lvis.get(lvis_name, []):
                annotation = annotations.get(uid)
                if annotation is None:
                    continue
                spdx = objaverse_licence(annotation)
                if spdx is None:
                    continue
                candidates.append((-int(annotation.get("likeCount", 0) or 0), uid, lvis_name, spdx, annotation))
        if not candidates:
            continue
        # compare (likes, uid, LVIS name, licence) only: a duplicate candidate must not reach the dict
        _, uid, lvis_name, spdx, annotation = min(candidates, key=lambda c: c[:4])
        author = (annotation.get("user") or {}).get("username", "unknown author")
        url = annotation.get("viewerUrl", f"https://sketchfab.com/3d-models/{uid}")
        title = annotation.get("name", uid)
        chosen[category] = {"uid": uid, "lvis": lvis_name, "licence": f"{spdx} ({title!r} by {author}, {url})",
                            "source": f"objaverse:{uid}"}
    return chosen


def candidate_uids(lvis: dict[str, list[str]], categories: list[str],
                   mapping: dict[str, list[str]] | None = None) -> list[str]:
    """All uids that :func:`select_objaverse` may consider for ``categories`` (to load only their annotations)."""
    mapping = lvis_mapping() if mapping is None else mapping
    uids = {uid for c in categories for name in mapping.get(c, []) for uid in lvis.get(name, [])}
    return sorted(uids)
