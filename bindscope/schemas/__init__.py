"""JSON Schemas (draft 2020-12) shipped with bindscope, and validation helpers.

Schemas: ``manifest`` (dataset directories), ``madman_config`` (``madman generate``), ``comco_config``
(``comco render``), ``eval_result`` (evaluation outputs).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

import jsonschema

from bindscope.errors import BadInput


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict:
    """Return the schema ``bindscope/schemas/<name>.json`` as a dict. Raises FileNotFoundError if absent."""
    text = resources.files("bindscope.schemas").joinpath(f"{name}.json").read_text()
    return json.loads(text)


def validate(instance: object, name: str, what: str, error: type[Exception] = BadInput) -> None:
    """Validate ``instance`` against schema ``name``.

    Raises ``error`` (default :class:`BadInput`) whose message is ``"<what>: <path>: <reason>"`` for the
    most relevant violation, e.g. ``"config: multi_object_captions: 1.5 is greater than the maximum of 1"``.
    """
    validator = jsonschema.Draft202012Validator(load_schema(name))
    best = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if best is not None:
        where = ".".join(str(p) for p in best.absolute_path) or "(top level)"
        raise error(f"{what}: {where}: {best.message}")
