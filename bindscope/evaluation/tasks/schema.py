"""The schema of an evaluation result: ``bindscope/schemas/eval_result.json`` (the envelope and the shared
``$defs``) with, per result kind, a ``metrics`` object whose blocks are the registered tasks' schemas."""

from __future__ import annotations

import copy

from bindscope.evaluation.tasks.registry import KINDS, tasks

_CACHE: dict[tuple, dict] = {}


def _metrics_schema(kind: str) -> dict:
    """The ``metrics`` schema of ``kind``: an object of the tasks' blocks (nested paths as nested objects, none
    other allowed), or the whole-metrics schema of its tasks (one of them)."""
    whole = [t.schema[""] for t in tasks(kind) if "" in t.schema]
    if whole:
        return whole[0] if len(whole) == 1 else {"oneOf": whole}
    root: dict = {"type": "object", "minProperties": 1, "additionalProperties": False, "properties": {}}
    for task in tasks(kind):
        for path, block in task.schema.items():
            node = root
            *parents, leaf = path.split("/")
            for part in parents:
                node = node["properties"].setdefault(part, {"type": "object", "minProperties": 1,
                                                            "additionalProperties": False, "properties": {}})
            node["properties"][leaf] = block
    return root


def result_schema() -> dict:
    """``eval_result.json`` with each kind's ``metrics`` schema composed from the registered tasks (a new dict;
    kept while the registry is unchanged)."""
    from bindscope.schemas import load_schema

    key = tuple((t.kind, t.name, id(t)) for kind in KINDS for t in tasks(kind))
    if key not in _CACHE:
        schema = copy.deepcopy(load_schema("eval_result"))
        schema["allOf"] = [{"if": {"properties": {"kind": {"const": kind}}},
                            "then": {"properties": {"metrics": _metrics_schema(kind)}}} for kind in KINDS]
        _CACHE.clear()
        _CACHE[key] = schema
    return _CACHE[key]


def validate_result(result: dict, what: str, error: type[Exception] | None = None) -> None:
    """Validate an evaluation result against :func:`result_schema`.

    Raises:
        ``error`` (default :class:`~bindscope.errors.BadInput`) naming ``what``, the path and the reason.
    """
    from bindscope.errors import BadInput
    from bindscope.schemas import validate

    validate(result, "eval_result", what, error=error or BadInput, schema=result_schema())
