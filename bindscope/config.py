"""Configs: YAML file + command-line overrides, validated by a JSON Schema, resolved to one plain dict.

Precedence (lowest to highest): the generator's embedded defaults, a ``--preset``, ``--config FILE.yaml``,
explicit command-line flags. Nested keys are merged key by key.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import yaml

from bindscope.errors import BadInput
from bindscope.schemas import validate


def deep_merge(base: dict, override: dict) -> dict:
    """Return a copy of ``base`` with ``override`` merged in (dicts merged recursively, other values replaced)."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def yaml_error_line(exc: Exception) -> str:
    """A PyYAML error as one line: the problem and its 1-based line and column, e.g.
    ``"expected the node content, but found '<stream end>' at line 2, column 1"``."""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return " ".join(f"{problem}{where}".split())


def read_yaml(path: str | os.PathLike) -> dict:
    """Read a YAML mapping. Raises BadInput if the file is missing, not YAML, or not a mapping."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"--config {str(path)!r}: no such file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise BadInput(f"--config {str(path)!r}: not valid YAML ({yaml_error_line(exc)})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"--config {str(path)!r}: not readable ({exc.__class__.__name__}: {exc})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BadInput(f"--config {str(path)!r}: must hold a mapping of config keys, got {type(data).__name__}")
    return data


def resolve_config(schema: str, *layers: dict | None) -> dict:
    """Merge ``layers`` in order (later wins; ``None`` layers skipped) and validate against ``schema``.

    Raises:
        BadInput: the merged config violates the schema; the message names the key and the bad value.
    """
    config: dict = {}
    for layer in layers:
        if layer:
            config = deep_merge(config, layer)
    validate(config, schema, "config")
    return config
