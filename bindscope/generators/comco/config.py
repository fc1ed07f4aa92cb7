"""The ``comco render`` config: embedded defaults, config file or mapping, overrides -> one validated dict."""

from __future__ import annotations

import os

from bindscope.errors import BadInput


def resolve_render_config(config: str | os.PathLike | dict | None = None, overrides: dict | None = None) -> dict:
    """Defaults (:data:`planning.DEFAULT_CONFIG`) < ``config`` (a YAML file path or a mapping) < ``overrides``,
    validated once by the ``comco_config`` schema plus cross-key checks.

    ``overrides`` holds config keys (``None`` values = not given), nested mappings merge key by key;
    ``objects`` may also be text, a count (``"3"``) or a range (``"2-5"``), and ``attributes`` comma-separated
    text (``"colour,material"``). The tables ``colours`` and ``materials``, when given, replace the earlier
    tables as a whole (they are not merged name by name). The merge and the schema check are
    :func:`bindscope.config.resolve_config`'s, shared with MADMAN.

    Raises:
        BadInput: a schema violation, ``objects.min > objects.max``, or ``objects.weights`` whose length is not
            the number of counts.
    """
    from bindscope.config import config_layer, resolve_config
    from bindscope.generators.comco.attributes import parse_attributes
    from bindscope.generators.comco.planning import DEFAULT_CONFIG, parse_objects

    layer = {key: value for key, value in (overrides or {}).items() if value is not None}
    if isinstance(layer.get("objects"), str):
        low, high = parse_objects(layer["objects"])
        layer["objects"] = {"min": low, "max": high}
    if isinstance(layer.get("attributes"), str):
        layer["attributes"] = parse_attributes(layer["attributes"])
    config = resolve_config("comco_config", DEFAULT_CONFIG, config_layer(config), layer,
                            tables=("colours", "materials"))
    objects = config["objects"]
    if objects["min"] > objects["max"]:
        raise BadInput(f"config: objects: min {objects['min']} is greater than max {objects['max']}")
    weights = objects.get("weights")
    if weights is not None:
        k = objects["max"] - objects["min"] + 1
        if len(weights) != k or sum(weights) <= 0:
            raise BadInput(f"config: objects.weights {weights}: need {k} non-negative weights (one per count "
                           f"{objects['min']}..{objects['max']}) with a positive sum")
    return config
