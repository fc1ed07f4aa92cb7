"""The one config layer of both generators: layers merged in order, validated once by a JSON Schema.

Precedence (lowest to highest): the generator's embedded defaults, a preset (MADMAN's ``--preset``), a config
file (``--config FILE.yaml``, or the same mapping passed to the Python API), explicit overrides (command-line
flags or keyword arguments). Nested mappings merge key by key; lists and scalars are replaced; a *table*
(a mapping of named entries, such as ComCO's ``colours``) given in a layer replaces the earlier one whole.
:func:`resolve_config` does the merge and the one schema validation; ``generators/madman/config.py`` and
``generators/comco/config.py`` add their cross-key checks on the result.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path

import yaml

from bindscope.errors import BadInput, check_text
from bindscope.schemas import validate


def _is_table(path: tuple[str, ...], tables: tuple[str, ...]) -> bool:
    """True when the key ``path`` matches a dotted table pattern (``*`` matches any one key)."""
    return any(len(parts) == len(path) and all(p in ("*", k) for p, k in zip(parts, path))
               for parts in (t.split(".") for t in tables))


def deep_merge(base: dict, override: dict, tables: tuple[str, ...] = (), _path: tuple[str, ...] = ()) -> dict:
    """Return a copy of ``base`` with ``override`` merged in: mappings merged recursively, other values
    replaced, and a mapping at a key matching a pattern of ``tables`` (dotted, ``*`` = any key, e.g.
    ``"attributes.*"``) replaced whole."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        path = (*_path, str(key))
        if isinstance(value, dict) and isinstance(merged.get(key), dict) and not _is_table(path, tables):
            merged[key] = deep_merge(merged[key], value, tables, path)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def yaml_error_line(exc: Exception) -> str:
    """A PyYAML error as one line: the problem and its 1-based line and column, e.g.
    ``"expected the node content, but found '<stream end>' at line 2, column 1"``."""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow (NUL, other controls)
        where = f" at character {exc.position}"
    return " ".join(f"{problem}{where}".split())


MAX_YAML_BYTES = 1 << 20   # a config file is a few kB; 1 MiB leaves room and refuses a blown-up file early
MAX_YAML_NODES = 100_000   # scalars + collections after expanding every alias (a billion-laughs file has 10^9)
MAX_YAML_DEPTH = 64        # nesting of mappings/sequences (configs use fewer than 6 levels)


class _LimitedLoader(yaml.SafeLoader):
    """PyYAML's safe loader (no Python tags) that refuses nesting deeper than :data:`MAX_YAML_DEPTH`."""

    _depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.YAMLError(f"nested more than {MAX_YAML_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _expanded_size(node, sizes: dict[int, int | None]) -> int:
    """Nodes of ``node`` once every alias is expanded (memoised: shared nodes are counted per use, computed
    once); raises YAMLError past :data:`MAX_YAML_NODES` or for an alias inside its own anchor."""
    key = id(node)
    if key in sizes:
        if sizes[key] is None:
            raise yaml.YAMLError("an alias refers to the collection that contains it (a recursive anchor)")
        return sizes[key]
    sizes[key] = None
    if isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, sizes) + _expanded_size(v, sizes) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(item, sizes) for item in node.value)
    else:
        size = 1
    if size > MAX_YAML_NODES:
        raise yaml.YAMLError(f"expands to more than {MAX_YAML_NODES:,} values (aliases of anchors multiply "
                             "them); write the config out without such aliases")
    sizes[key] = size
    return size


def load_yaml(text: str, where: str):
    """Parse YAML ``text`` safely and within bounds: PyYAML's safe loader (``!!python`` tags refused), at most
    :data:`MAX_YAML_BYTES` bytes, :data:`MAX_YAML_DEPTH` levels and :data:`MAX_YAML_NODES` values after alias
    expansion (a "billion laughs" file is refused at once instead of expanding without end).

    Raises:
        BadInput: ``"<where>: not valid YAML (<problem> at line L, column C)"`` or the bound exceeded.
    """
    if len(text.encode("utf-8", errors="replace")) > MAX_YAML_BYTES:
        raise BadInput(f"{where}: larger than {MAX_YAML_BYTES >> 20} MiB; a config is a few kB")
    loader = None
    try:
        loader = _LimitedLoader(text)  # the reader refuses NUL and other control characters here
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, {})
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise BadInput(f"{where}: not valid YAML ({yaml_error_line(exc)})") from None
    except RecursionError:
        raise BadInput(f"{where}: not valid YAML (nested too deeply)") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_yaml(path: str | os.PathLike, param: str = "config") -> dict:
    """Read a YAML mapping with :func:`load_yaml`'s bounds; messages start with ``param`` (the parameter that
    named the file).

    Raises:
        BadInput: the file is missing, unreadable, too large, not YAML, beyond the bounds, or not a mapping.
    """
    path = Path(path)
    where = f"{param} {str(path)!r}"
    if not path.is_file():
        raise BadInput(f"{where}: no such file", param=param)
    try:
        if path.stat().st_size > MAX_YAML_BYTES:
            raise BadInput(f"{where}: larger than {MAX_YAML_BYTES >> 20} MiB; a config is a few kB", param=param)
        data = load_yaml(path.read_text(encoding="utf-8"), where)
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{where}: not readable ({exc.__class__.__name__}: {exc})", param=param) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BadInput(f"{where}: must hold a mapping of config keys, got {type(data).__name__}", param=param)
    return data


def config_layer(config: str | os.PathLike | Mapping | None) -> dict | None:
    """A config layer from a YAML file path (read by :func:`read_yaml`, with its bounds) or a mapping (copied);
    None stays None.

    Raises:
        BadInput: see :func:`read_yaml`; ``config`` of another type.
    """
    if config is None:
        return None
    if isinstance(config, Mapping):
        return copy.deepcopy(dict(config))
    if isinstance(config, (str, os.PathLike)):
        return read_yaml(config)
    raise BadInput(f"config must be a YAML file path or a mapping, got {type(config).__name__}", param="config")


def check_config_text(config, what: str = "config") -> None:
    """Raise :class:`BadInput` if a key or string value anywhere in ``config`` (mappings and lists, walked
    without recursion) holds a NUL, another control character (tab and line breaks are allowed) or a lone
    surrogate; the message names the key path as the schema check does (``config: ood.holdout.0 holds U+0000
    (a NUL character) ...``)."""
    stack: list[tuple[tuple, object]] = [((), config)]
    while stack:
        path, value = stack.pop()
        where = f"{what}: {'.'.join(str(p) for p in path) or '(top level)'}"
        param = str(path[0]) if path else None
        if isinstance(value, str):
            check_text(where, value, param=param)
        elif isinstance(value, Mapping):
            for key, item in reversed(list(value.items())):
                under = f" under {'.'.join(str(p) for p in path)}" if path else ""
                check_text(f"{what}: key {key!r}{under}", key, param=param)
                stack.append(((*path, key), item))
        elif isinstance(value, (list, tuple)):
            stack.extend(((*path, k), item) for k, item in reversed(list(enumerate(value))))


def resolve_config(schema: str, *layers: dict | None, tables: tuple[str, ...] = ()) -> dict:
    """Merge ``layers`` in order (later wins; ``None`` or empty layers skipped; see the module docstring) and
    validate the result once against ``schema`` (``bindscope/schemas/<schema>.json``).

    Args:
        tables: dotted key patterns (``*`` = any one key; e.g. ``"colours"``, ``"attributes.*"``) whose
            mapping, when a layer gives one, replaces the earlier layers' whole.

    Raises:
        BadInput: the merged config violates the schema, or a key or text holds a control character or lone
            surrogate (:func:`check_config_text`); the message names the key and the bad value.
    """
    config: dict = {}
    for layer in layers:
        if layer:
            config = deep_merge(config, layer, tables)
    check_config_text(config)
    validate(config, schema, "config")
    return config
