"""The ``comco render`` config (pure Python, never imports bpy): every default (:data:`DEFAULT_CONFIG`), the
parsing of its text values (``objects``, ``attributes``), the merge of defaults, config file or mapping and
overrides into one validated dict (:func:`resolve_render_config`), and every cross-key check.

Cross-key checks (those the ``comco_config`` schema cannot express): ``objects`` (:func:`check_objects`, on
resolving), then before planning the attribute and placement keys (:func:`check_cross_keys`), and for each
object count the set's size (:func:`check_category_count`) and the grid's (:func:`check_grid_slots`). Whether
the objects fit on the ground is a question of the layout (``layout.check_capacity``).
"""

from __future__ import annotations

import os
import re

from bindscope.errors import BadInput
from bindscope.generators.comco import attributes as attrs


DEFAULT_CONFIG: dict = {
    "set": "comco72",
    "n": 1000,
    "objects": {"min": 2, "max": 5, "weights": None},
    "size_mode": "one-large",
    "scale": {"large": 1.5, "small": 0.7, "equal": 1.0, "reference": 1.0},
    "sizes": {"min_area_ratio": 3.0, "equal_ratio": 1.5, "corrections": 3},
    "resolution": 224,
    "samples": None,
    "denoise": True,
    "render": {"quality": "default"},
    "shard_size": 64,
    "references": True,
    "depth": False,
    "ground": {"size": [5.0, 5.0], "colour": [0.55, 0.55, 0.55]},
    "backdrop": {"kind": "seamless", "gap": 1.0, "radius": 1.5},
    "background": [0.65, 0.67, 0.72],
    "placement": {"mode": "row", "min_gap": 0.15, "grid": [3, 3], "slot_jitter": 0.3,
                  "yaw_jitter_deg": 20.0, "max_tries": 100, "stagger": 0.5, "large_slot": "any",
                  "slots": None},
    "camera": {"elevation_deg": 12.0, "focal_mm": 50.0, "margin": 0.05, "reference_fill": 0.72,
               "jitter": {"elevation_deg": 3.0, "azimuth_deg": 5.0}},
    "light": {"elevation_deg": 50.0, "azimuth_deg": -35.0, "strength": 3.0, "ambient": 0.6,
              "jitter": {"elevation_deg": 8.0, "azimuth_deg": 25.0, "strength": 0.5}},
    "visibility": {"min_fraction": 0.004, "min_pixels": 16, "in_frame": True, "max_tries": 12},
    "caption": {"joiner": " and ", "templates": [], "order": ["size", "colour", "material"]},
    **attrs.DEFAULT_ATTRIBUTE_CONFIG,
}
"""Defaults of every ``comco render`` config key (see bindscope/schemas/comco_config.json and docs/comco.md).

Units: scales, sizes, gaps and distances in metres (Blender units); angles in degrees; ``resolution`` in
pixels (square images); ``light.strength`` in W/m^2 of a Blender sun; ``light.ambient`` is the world
background strength; colours are linear RGB in 0..1; ``camera.margin`` and ``camera.reference_fill`` are
fractions of the image side, ``visibility.min_fraction`` of the image area, ``placement.stagger`` of two
neighbours' summed half-widths; ``sizes`` ratios compare visible pixel areas."""


def parse_objects(text: str) -> tuple[int, int]:
    """Parse ``objects``: ``"3"`` -> ``(3, 3)``, ``"2-5"`` -> ``(2, 5)``. Counts must lie in 1..5.

    Raises:
        BadInput: not a count or range, out of 1..5, or min > max.
    """
    match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", str(text))
    if not match:
        raise BadInput(f"objects {text!r}: expected a count like 3 or a range like 2-5 (counts 1..5)",
                       param="objects")
    low = int(match.group(1))
    high = int(match.group(2)) if match.group(2) else low
    if not 1 <= low <= high <= 5:
        raise BadInput(f"objects {text!r}: counts must satisfy 1 <= min <= max <= 5", param="objects")
    return low, high


def resolve_render_config(config: str | os.PathLike | dict | None = None, overrides: dict | None = None) -> dict:
    """Defaults (:data:`DEFAULT_CONFIG`) < ``config`` (a YAML file path or a mapping) < ``overrides``,
    validated once by the ``comco_config`` schema plus :func:`check_objects`.

    ``overrides`` holds config keys (``None`` values = not given), nested mappings merge key by key;
    ``objects`` may also be text, a count (``"3"``) or a range (``"2-5"``, :func:`parse_objects`), and
    ``attributes`` comma-separated text (``"colour,material"``). The tables ``colours`` and ``materials``, when
    given, replace the earlier tables as a whole (they are not merged name by name). The merge and the schema
    check are :func:`bindscope.config.resolve_config`'s, shared with MADMAN. The checks that need the set
    (:func:`check_cross_keys`, :func:`check_category_count`) run before planning.

    Raises:
        BadInput: a schema violation, ``objects.min > objects.max``, ``objects.weights`` whose length is not
            the number of counts, or a mention-order key that does not apply (:func:`check_saliency`).
    """
    from bindscope.config import config_layer, resolve_config

    layer = {key: value for key, value in (overrides or {}).items() if value is not None}
    if isinstance(layer.get("objects"), str):
        low, high = parse_objects(layer["objects"])
        layer["objects"] = {"min": low, "max": high}
    if isinstance(layer.get("attributes"), str):
        layer["attributes"] = attrs.parse_attributes(layer["attributes"])
    config = resolve_config("comco_config", DEFAULT_CONFIG, config_layer(config), layer,
                            tables=("colours", "materials"))
    check_objects(config)
    check_saliency(config)
    return config


def check_saliency(config: dict) -> None:
    """Normalise and check the mention-order keys (:mod:`.captions`): ``saliency: none`` is dropped (the default
    is the key's absence, so default configs keep their hash and datasets their bytes).

    Raises:
        BadInput: ``saliency_bias`` without ``saliency``, or ``saliency: size`` with ``size_mode: equal`` (no
            object is planned larger than the others).
    """
    if config.get("saliency") == "none":
        del config["saliency"]
    if "saliency_bias" in config and "saliency" not in config:
        raise BadInput(f"saliency_bias {config['saliency_bias']} needs saliency size or position (without it the "
                       "mention order is uniform)", param="saliency_bias")
    if config.get("saliency") == "size" and config["size_mode"] == "equal":
        raise BadInput("saliency 'size' needs size_mode one-large or random (in 'equal' mode no object is planned "
                       "larger than the others); allowed: saliency position or none", param="saliency")


def check_objects(config: dict) -> None:
    """Check ``objects``: ``min <= max`` and, when given, one non-negative weight per count with a positive sum.

    Raises:
        BadInput: ``objects.min > objects.max``, or ``objects.weights`` whose length is not the number of counts
            or whose sum is not positive.
    """
    objects = config["objects"]
    if objects["min"] > objects["max"]:
        raise BadInput(f"config: objects: min {objects['min']} is greater than max {objects['max']}")
    weights = objects.get("weights")
    if weights is not None:
        k = objects["max"] - objects["min"] + 1
        if len(weights) != k or sum(weights) <= 0:
            raise BadInput(f"config: objects.weights {weights}: need {k} non-negative weights (one per count "
                           f"{objects['min']}..{objects['max']}) with a positive sum")


def check_cross_keys(config: dict, category_names: list[str]) -> None:
    """The cross-key checks of a resolved config before anything is planned, in this order: the attribute keys
    (``attributes``, ``combinations``, ``task``, ``conjunctive_search``; :func:`attributes.check_attribute_config`)
    and the placement keys: ``placement.large_slot`` and ``placement.slots`` need ``placement.mode: row``,
    ``large_slot`` needs ``size_mode: one-large``, and only one of the two may be given.

    Raises:
        BadInput: the first check that fails.
    """
    attrs.check_attribute_config(config, category_names)
    p = config["placement"]
    if p["mode"] != "row" and (p["large_slot"] != "any" or p["slots"]):
        raise BadInput(f"placement.large_slot / placement.slots need placement.mode 'row', not {p['mode']!r}")
    if p["large_slot"] != "any" and config["size_mode"] != "one-large":
        raise BadInput(f"placement.large_slot {p['large_slot']!r} needs size_mode 'one-large' (no object is "
                       f"planned large in {config['size_mode']!r} mode); use placement.slots")
    if p["large_slot"] != "any" and p["slots"]:
        raise BadInput("give placement.large_slot or placement.slots, not both (slots[0] is the large object)")


def object_counts(config: dict) -> list[int]:
    """The object counts ``objects.min .. objects.max`` of a config."""
    return list(range(config["objects"]["min"], config["objects"]["max"] + 1))


def check_category_count(config: dict, categories: list, count: int) -> None:
    """Check that the set (``categories``, its :class:`~bindscope.generators.comco.registry.Category` list)
    holds the ``count`` distinct categories a scene of ``count`` objects needs.

    Raises:
        BadInput: fewer categories than ``count`` (``param="set"``).
    """
    if count > len(categories):
        raise BadInput(f"set {config['set']!r} has {len(categories)} categories, fewer than the {count} "
                       "distinct objects a scene needs; lower objects", param="set")


def check_grid_slots(config: dict, count: int) -> None:
    """Check that ``placement.grid`` (``[cols, rows]``) has a slot for each of ``count`` objects; only in
    ``placement.mode: grid``.

    Raises:
        BadInput: fewer than ``count`` grid slots.
    """
    if config["placement"]["mode"] == "grid":
        cols, rows = config["placement"]["grid"]
        if count > cols * rows:
            raise BadInput(f"placement.grid {[cols, rows]} has {cols * rows} slots, fewer than {count} "
                           "objects; enlarge placement.grid or lower objects")
