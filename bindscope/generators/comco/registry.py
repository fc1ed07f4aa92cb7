"""Object registries for ComCO and SimCO: which categories a scene can hold, and what is known about each.

Three kinds of set (the ``--set`` value of ``comco render``):

- ``"comco72"``: 72 of the 80 COCO object categories (``bindscope/assets/comco72.json``) with their COCO
  category id, the size class of Abbasi et al. (CVPR 2025, "CLIP Under the Microscope", text-side study: *large* =
  bigger than a car, *medium* = between a school bag and a car, *small* = smaller than a school bag) and a
  nominal real-world size. Which 8 COCO categories are left out and why: ``docs/comco-assets.md``.
- ``"simco18"``: the 18 simple shapes named in the ComCO/SimCO authors' code (``bindscope/assets/simco18.json``),
  ids 0..17, size class ``"shape"``, drawn in CLEVR-like colours and materials (:data:`SIMCO_COLOURS`,
  :data:`SIMCO_MATERIALS`).
- a path to a folder written by ``comco assets import`` / ``comco assets fetch``: its ``registry.json``.

This module is pure Python (it never imports bpy), so planning code can use it anywhere.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from bindscope.errors import BadInput, check_text

BUILTIN_SETS = ("comco72", "simco18")
NAME_SETS = (*BUILTIN_SETS, "coco")
"""Name lists :func:`read_names` knows by name: the built-in sets and ``coco`` (the 80 COCO instance categories)."""
JOIN = " and "
"""What joins object names in a ComCO caption or prompt (so no name may contain it)."""
SIZE_CLASSES = ("large", "medium", "small")
"""Size classes of Abbasi et al. (CVPR 2025): large > a car; medium between a school bag and a car; small < a school
bag."""

# Nominal sizes (largest real-world dimension, metres) at the class boundaries, used to assign size classes:
# a category is "large" if its nominal size exceeds CAR_SIZE_M, "small" if below SCHOOL_BAG_SIZE_M.
CAR_SIZE_M = 4.5
SCHOOL_BAG_SIZE_M = 0.45

REGISTRY_FILE = "registry.json"
"""Name of the registry file inside an asset folder written by ``comco assets import``/``fetch``."""
ASSET_FORMAT = "bindscope-comco-assets"
ASSET_FORMAT_VERSION = 1

# CLEVR colour palette (Johnson et al., CVPR 2017, "CLEVR"; the values of its rendering code), 8-bit sRGB.
SIMCO_COLOURS: dict[str, tuple[int, int, int]] = {
    "gray": (87, 87, 87),
    "red": (173, 35, 35),
    "blue": (42, 75, 215),
    "green": (29, 105, 20),
    "brown": (129, 74, 25),
    "purple": (129, 38, 192),
    "cyan": (41, 208, 208),
    "yellow": (255, 238, 51),
}
"""SimCO colour names -> 8-bit sRGB triples (the CLEVR palette)."""

SIMCO_MATERIALS: dict[str, dict[str, float]] = {
    "rubber": {"metallic": 0.0, "roughness": 0.7},
    "metal": {"metallic": 1.0, "roughness": 0.25},
}
"""SimCO materials (CLEVR's two): Principled BSDF metallic (0..1) and roughness (0..1)."""


@dataclass(frozen=True)
class Category:
    """One object category of a set.

    Attributes:
        name: caption word(s), e.g. ``"pizza"``, ``"traffic light"``, ``"cube"``.
        id: COCO category id (1..90) for comco72; 0..17 for simco18; a running number (0-based, in name
            order) for a user asset folder.
        size_class: ``"large"``, ``"medium"`` or ``"small"`` (Abbasi et al.'s classes); ``"shape"`` for simco18.
        nominal_size_m: largest real-world dimension in metres (simco18: 1.0).
        source: ``"procedural"`` or the imported file path / Objaverse uid.
        licence: e.g. ``"CC0-1.0 (procedural, bindscope)"`` or the imported model's licence.
    """

    name: str
    id: int
    size_class: str
    nominal_size_m: float
    source: str
    licence: str

    def to_dict(self) -> dict:
        """The fields as a JSON-serialisable dict."""
        return asdict(self)


def size_class_for(nominal_size_m: float) -> str:
    """Size class of a real-world size in metres: ``"large"`` if > 4.5 (a car), ``"small"`` if < 0.45
    (a school bag), else ``"medium"`` (Abbasi et al., CVPR 2025; the boundaries are this project's)."""
    if nominal_size_m > CAR_SIZE_M:
        return "large"
    if nominal_size_m < SCHOOL_BAG_SIZE_M:
        return "small"
    return "medium"


@lru_cache(maxsize=None)
def _builtin_json(set_name: str) -> dict:
    text = resources.files("bindscope.assets").joinpath(f"{set_name}.json").read_text(encoding="utf-8")
    return json.loads(text)


def builtin_entries(set_name: str) -> list[dict]:
    """The raw entries of a built-in set (``"comco72"`` or ``"simco18"``), including model-only fields
    such as a SimCO shape's default ``colour`` and ``material``. Raises BadInput for another name."""
    if set_name not in BUILTIN_SETS:
        raise BadInput(f"set {set_name!r}: not a built-in set; allowed: {', '.join(BUILTIN_SETS)}")
    return _builtin_json(set_name)["categories"]


def _from_entry(entry: dict) -> Category:
    return Category(name=entry["name"], id=int(entry["id"]), size_class=entry["size_class"],
                    nominal_size_m=float(entry["nominal_size_m"]), source=entry["source"],
                    licence=entry["licence"])


def read_folder_registry(folder: str | os.PathLike) -> dict:
    """Load ``<folder>/registry.json`` of an asset folder.

    Returns the dict ``{"format", "version", "categories": [entry, ...]}``; each entry holds the
    :class:`Category` fields plus ``file`` (path of the normalised model relative to the folder).

    Raises:
        BadInput: the folder has no registry, it is not valid JSON, or it is not a bindscope asset registry.
    """
    folder = Path(folder)
    path = folder / REGISTRY_FILE
    if not path.is_file():
        raise BadInput(f"set {str(folder)!r}: not an asset folder (no {REGISTRY_FILE}; make one with "
                       f"`comco assets import`); allowed: {', '.join(BUILTIN_SETS)} or such a folder", param="set")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != ASSET_FORMAT or not isinstance(data.get("categories"), list):
        raise BadInput(f"{path}: not a bindscope asset registry (expected format {ASSET_FORMAT!r})")
    return data


def load_set(spec: str) -> list[Category]:
    """The categories of a set, in registry order.

    Args:
        spec: ``"comco72"``, ``"simco18"``, or the path of a folder written by ``comco assets import``.

    Returns:
        72, 18, or the folder's categories (at least one).

    Raises:
        BadInput: ``spec`` is neither a built-in set name nor an asset folder, or the folder is empty/broken.
    """
    if spec in BUILTIN_SETS:
        return [_from_entry(e) for e in builtin_entries(spec)]
    if not spec or not Path(spec).is_dir():
        raise BadInput(f"set {spec!r}: unknown set; allowed: {', '.join(BUILTIN_SETS)} or a folder made by "
                       "`comco assets import`", param="set")
    data = read_folder_registry(spec)
    categories = []
    for entry in data["categories"]:
        try:
            categories.append(_from_entry(entry))
        except (KeyError, TypeError, ValueError) as exc:
            raise BadInput(f"{Path(spec) / REGISTRY_FILE}: broken entry {entry!r} ({exc})") from None
    if not categories:
        raise BadInput(f"set {spec!r}: the asset folder holds no categories (run `comco assets import`)",
                       param="set")
    return categories


def read_names(spec: str | os.PathLike, param: str = "names") -> list[str]:
    """A name list: ``comco72`` / ``simco18`` (registry order, :func:`load_set`), ``coco`` (the 80 COCO instance
    categories in COCO id order, the keys of ``bindscope/assets/coco_mentions.json``), an asset folder (its
    registry), or a UTF-8 text file with one name per line (blank lines skipped).

    The ComCO authors' TOR list (``TOR_ComCO_CLIP.py``) holds 90 names in COCO id order; ``comco72`` is the
    72 of them bindscope renders, in the same order; their SimCO list is ``simco18`` in the same order.

    Args:
        spec: the set name, folder or file. param: the parameter named in messages (``names``).

    Raises:
        BadInput: an unknown set, an unreadable or empty file, a name used twice or containing ``" and "``.
    """
    text = str(spec)
    if text == "coco":
        from bindscope.importers.mentions import mention_table

        return list(mention_table())
    if text in BUILTIN_SETS or os.path.isdir(text):
        try:
            return [c.name for c in load_set(text)]
        except BadInput as exc:
            raise BadInput(f"{param} {text!r}: {exc}", param=param) from None
    path = Path(text)
    if not path.is_file():
        raise BadInput(f"{param} {text!r}: not {', '.join(NAME_SETS)}, an asset folder or a file of names (one per "
                       "line)", param=param)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{param} {text!r}: cannot read the file ({exc})", param=param) from None
    names = [line.strip() for line in lines if line.strip()]
    if not names:
        raise BadInput(f"{param} {text!r}: the file holds no name; write one name per line", param=param)
    seen = set()
    for name in names:
        check_text(f"{param} {text!r}: name {name!r}", name, name=True, param=param)
        if JOIN in f" {name} ":
            raise BadInput(f"{param} {text!r}: name {name!r} contains ' and ', which separates objects in a "
                           "caption; rename it", param=param)
        if name in seen:
            raise BadInput(f"{param} {text!r}: name {name!r} is listed twice; each name once", param=param)
        seen.add(name)
    return names


def category_by_name(spec: str, name: str) -> Category:
    """The category called ``name`` in set ``spec``. Raises BadInput naming the allowed names."""
    categories = load_set(spec)
    for category in categories:
        if category.name == name:
            return category
    raise BadInput(f"category {name!r} is not in set {spec!r}; allowed: {', '.join(c.name for c in categories)}")
