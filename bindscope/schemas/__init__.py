"""JSON Schemas (draft 2020-12) shipped with bindscope, and validation helpers.

Schemas: ``manifest`` (dataset directories), ``madman_config`` (``madman generate``), ``comco_config``
(``comco render``), ``eval_result`` (evaluation outputs), ``audit_result`` (``madman audit``),
``alignment_result`` (probes, LABCLIP), ``caption_bias_result`` (``bindscope caption-bias``), ``t2i_result``
(``comco t2i-score``).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources

from bindscope.errors import BadInput


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict:
    """Return the schema ``bindscope/schemas/<name>.json`` as a dict. Raises FileNotFoundError if absent."""
    text = resources.files("bindscope.schemas").joinpath(f"{name}.json").read_text()
    return json.loads(text)


def validate(instance: object, name: str, what: str, error: type[Exception] = BadInput,
             schema: dict | None = None) -> None:
    """Validate ``instance`` against schema ``name`` (or the schema dict ``schema``, e.g. one composed from
    ``name``'s).

    Raises ``error`` (default :class:`BadInput`; its ``param``: the top-level key at fault) whose message is
    ``"<what>: <path>: <reason>"`` (unknown keys: followed by the allowed ones) for the most relevant violation,
    e.g. ``"config: multi_object_captions: 1.5 is greater than the maximum of 1"``.
    In the ``*_config`` schemas NaN and infinities are never valid (JSON Schema's ``minimum``/``maximum`` let
    NaN through, since every comparison with NaN is false): ``"config: saliency_bias: nan is not a finite
    number; allowed: 0..1"``. There, a whole number written as a float (``3.0``, as YAML reads ``3.0`` or
    ``3e0``) where the schema wants an integer is turned into the ``int`` *in place*, so code downstream never
    meets ``range(3.0)``.
    """
    import jsonschema  # imported on first use: ``import bindscope`` stays light

    schema = load_schema(name) if schema is None else schema
    if name.endswith("_config"):
        _check_finite(instance, schema, (), what, error)
        _whole_floats_to_int(instance, schema, schema)
    validator = jsonschema.Draft202012Validator(schema)
    best = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if best is not None:
        where = ".".join(str(p) for p in best.absolute_path) or "(top level)"
        message = f"{what}: {where}: {best.message}"
        if best.validator == "additionalProperties" and isinstance(best.schema.get("properties"), dict):
            message += f"; allowed: {', '.join(best.schema['properties'])}"
        if issubclass(error, BadInput):  # param: the top-level key at fault (a keyword of the library call)
            raise error(message, param=str(best.absolute_path[0]) if best.absolute_path else None)
        raise error(message)


def _resolve_ref(schema: dict | None, root: dict) -> dict | None:
    """Follow a local ``$ref`` (``#/$defs/name``) to its schema."""
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#/"):
        target = root
        for part in schema["$ref"][2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        schema = target
    return schema


def _wants_integer(schema: dict | None) -> bool:
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    return "integer" in kinds and "number" not in kinds


def _whole_floats_to_int(instance: object, schema: dict | None, root: dict) -> None:
    """Replace, inside ``instance`` (dicts and lists, in place), every float with a whole value whose schema
    wants an integer by the ``int``; ``anyOf``/``oneOf`` branches count when they all want an integer."""
    schema = _resolve_ref(schema, root)
    if not isinstance(schema, dict) or not isinstance(instance, (dict, list)):
        return
    keys = instance.keys() if isinstance(instance, dict) else range(len(instance))
    for key in keys:
        sub = _resolve_ref(_subschema(schema, key), root)
        branches = [_resolve_ref(b, root) for b in (sub or {}).get("anyOf", (sub or {}).get("oneOf", []))]
        value = instance[key]
        if isinstance(value, float) and math.isfinite(value) and value.is_integer() and (
                _wants_integer(sub) or (branches and all(_wants_integer(b) for b in branches
                                                         if b.get("type") != "null"))):
            instance[key] = int(value)
        else:
            for branch in [sub] + [b for b in branches if isinstance(value, (dict, list))]:
                _whole_floats_to_int(value, branch, root)


def _subschema(schema: dict | None, key) -> dict | None:
    """The schema that applies to ``instance[key]`` (``properties``, ``additionalProperties`` or ``items``)."""
    if not isinstance(schema, dict):
        return None
    if isinstance(key, int):
        items = schema.get("items")
        return items if isinstance(items, dict) else None
    sub = schema.get("properties", {}).get(key)
    if sub is None and isinstance(schema.get("additionalProperties"), dict):
        sub = schema["additionalProperties"]
    return sub


def _allowed_range(schema: dict | None) -> str:
    if not isinstance(schema, dict):
        return "a finite number"
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    if low is None and high is None:
        return "a finite number"
    if high is None:
        return f"a finite number {'>' if 'exclusiveMinimum' in schema else '>='} {low}"
    if low is None:
        return f"a finite number {'<' if 'exclusiveMaximum' in schema else '<='} {high}"
    return f"{low}..{high}" + (" (bounds excluded)" if "exclusiveMinimum" in schema or "exclusiveMaximum" in schema
                               else "")


def _check_finite(instance: object, schema: dict | None, path: tuple, what: str, error: type[Exception]) -> None:
    """Raise ``error`` naming the first NaN or infinite float in ``instance`` and the range its schema allows."""
    if isinstance(instance, float) and not math.isfinite(instance):
        where = ".".join(str(p) for p in path) or "(top level)"
        raise error(f"{what}: {where}: {instance} is not a finite number; allowed: {_allowed_range(schema)}")
    if isinstance(instance, dict):
        for key, value in instance.items():
            _check_finite(value, _subschema(schema, key), path + (key,), what, error)
    elif isinstance(instance, (list, tuple)):
        for index, value in enumerate(instance):
            _check_finite(value, _subschema(schema, index), path + (index,), what, error)
