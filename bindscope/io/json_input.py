"""The one reader of JSON files the user gives (COCO annotations, ARO/SugarCrepe items, category maps).

:func:`load_json` refuses, with one :class:`~bindscope.errors.BadInput` naming the file, what Python's ``json``
would turn into a traceback or accept although it is not JSON: bytes that are not UTF-8, nesting deeper than
:data:`MAX_JSON_DEPTH` (measured on the bytes before parsing: a 100,000-deep array would otherwise end in
``RecursionError``), ``NaN``/``Infinity``, integers beyond Python's digit limit, and invalid JSON (with line
and column).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from bindscope.errors import BadInput

MAX_JSON_DEPTH = 64  # nested arrays/objects; COCO annotation files use 5 levels, ARO and SugarCrepe 3
_CHUNK = 1 << 22  # bytes of brackets and quotes scanned at a time
_KEPT = b'"[]{}'
_DROPPED = bytes(b for b in range(256) if b not in _KEPT)


def nesting_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in the JSON text ``data`` (``1`` for ``[1, 2]``, ``0`` for a
    bare number), brackets inside strings not counted. Linear time, a few C-speed passes over the bytes.

    Escaped backslashes and escaped quotes are removed first (``\\\\`` pairs, then ``\\"``: JSON reads escapes
    from left to right, as :meth:`bytes.replace` does), so the quotes left delimit the strings; then only
    quotes and brackets are kept, and the depth is a running sum over the brackets outside strings. In UTF-8
    no byte of a multi-byte character is a quote, backslash or bracket. On text that is not valid JSON the
    number is meaningless but finite (the parser then reports the error).
    """
    import numpy as np

    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    kept = np.frombuffer(data.translate(None, _DROPPED), np.uint8)
    inside, level, deepest = 0, 0, 0
    for start in range(0, len(kept), _CHUNK):
        part = kept[start:start + _CHUNK]
        quote = part == ord('"')
        outside = ((np.cumsum(quote, dtype=np.int64) + inside) & 1) == 0  # a quote itself is no bracket
        step = np.zeros(len(part), np.int8)
        step[((part == ord("[")) | (part == ord("{"))) & outside] = 1
        step[((part == ord("]")) | (part == ord("}"))) & outside] = -1
        run = np.cumsum(step, dtype=np.int64) + level
        deepest, level = max(deepest, int(run.max())), int(run[-1])
        inside = (inside + int(quote.sum())) & 1
    return deepest


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON value")


def parse_json(data: bytes, where: str, param: str | None = None):
    """Parse the UTF-8 JSON text ``data`` (see the module docstring); ``where`` names it in messages, e.g.
    ``"instances '/data/instances_val2017.json'"``.

    Raises:
        BadInput: ``"<where> is not valid JSON (...)"``, ``"<where> is not UTF-8 text (...)"`` or ``"<where>
            is nested more than 64 levels deep ..."``.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{where} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start} cannot be "
                       "decoded); save it as UTF-8", param=param) from None
    text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
    depth = nesting_depth(data)
    if depth > MAX_JSON_DEPTH:
        raise BadInput(f"{where} is nested {depth} levels deep; at most {MAX_JSON_DEPTH} levels of arrays and "
                       "objects are allowed", param=param)
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{where} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})",
                       param=param) from None
    except ValueError as exc:  # NaN/Infinity, an integer of more digits than Python converts
        reason = " ".join(str(exc).split(";")[0].split())  # not Python's advice on sys.set_int_max_str_digits
        raise BadInput(f"{where} is not valid JSON ({reason})", param=param) from None
    except RecursionError:  # not reached within MAX_JSON_DEPTH; kept so that no deep file ends in a traceback
        raise BadInput(f"{where} is nested too deeply", param=param) from None


def load_json(path: str | os.PathLike, what: str, param: str | None = None):
    """Read and parse the JSON file ``path`` the user gave (see the module docstring).

    Args:
        path: the file. what: how messages name it, followed by the path (``"instances"`` ->
            ``"instances '/data/instances_val2017.json' ..."``). param: the parameter at fault (CLI flag).

    Raises:
        BadInput: the file is missing, not a regular file, unreadable, not UTF-8, too deeply nested or not
            valid JSON; the message names the file.
    """
    path = Path(path)
    where = f"{what} {str(path)!r}"
    if not path.is_file():
        raise BadInput(f"{where} does not exist or is not a file", param=param)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"{where} is not readable ({exc.strerror or exc})", param=param) from None
    return parse_json(data, where, param)
