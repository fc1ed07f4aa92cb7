"""Exceptions shared by every part of bindscope.

The CLI turns :class:`BadInput` into one ``Error: ...`` line and exit status 2 (a ``param`` becomes the
command's flag, e.g. ``jobs`` -> ``--jobs``) and :class:`GenerationError` (among them :class:`DiskFull`, a full
disk: an error of the machine, not of the input) into one ``Error: ...`` line and exit status 1 (see
:mod:`bindscope.cli.main`).
"""

from __future__ import annotations


class BadInput(ValueError):
    """A user-supplied value is not allowed. The message names the value and what is allowed.

    Attributes:
        param: the library parameter at fault (e.g. ``"jobs"``), or None. A message about a parameter starts
            with its name, so that the CLI can put the flag (``--jobs``) in its place.
    """

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param

    def __reduce__(self):  # keeps ``param`` when raised in a worker process and re-raised here
        return type(self), (str(self), self.param)


class DatasetError(BadInput):
    """A dataset directory is missing, incomplete, corrupt, or of the wrong generator."""


class GenerationError(RuntimeError):
    """Generation failed after writing began (the input was valid, e.g. a ComCO scene found no acceptable
    render). Finished shards are kept: after changing the config, a rerun into a new folder starts afresh;
    the same command resumes."""


class DiskFull(OSError, GenerationError):
    """A write failed because the file system is full (``ENOSPC``) or the disk quota is spent (``EDQUOT``); the
    input was valid. An :class:`OSError` (``errno``, ``strerror``, ``filename``: the file being written) and a
    :class:`GenerationError`: the CLI prints one ``Error: No space left on device: ...`` line, exit status 1.
    The temporary file is removed and finished files are kept: after freeing space the same command resumes.

    Build one with :func:`bindscope.io.atomic.disk_full` (or ``DiskFull(errno, os.strerror(errno), path)``).
    """

    def __str__(self) -> str:
        return (f"{self.strerror}: could not write {self.filename!r}; free space there and repeat the command "
                "(what was finished is kept)")


def check_int(param: str, value, low: int, high: int | None = None, what: str = "") -> int:
    """``value`` as an int if it is an integer (not a bool, not a float) in ``low..high`` (no upper bound when
    ``high`` is None); otherwise :class:`BadInput` naming ``param``, the value and the allowed range (``what``:
    the unit, e.g. ``"pixels"``)."""
    import numbers

    if isinstance(value, numbers.Integral) and not isinstance(value, bool) \
            and low <= value and (high is None or value <= high):
        return int(value)
    allowed = f"an integer >= {low}" if high is None else f"an integer in {low}..{high}"
    raise BadInput(f"{param} {value!r} is not allowed; use {allowed}{' ' + what if what else ''}", param=param)


def check_number(param: str, value, low: float = 0.0, *, inclusive: bool = False) -> float:
    """``value`` as a float if it is a finite real number above ``low`` (or equal to it with ``inclusive``);
    otherwise :class:`BadInput` naming ``param``, the value and what is allowed."""
    import math
    import numbers

    if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) \
            and (value >= low if inclusive else value > low):
        return float(value)
    raise BadInput(f"{param} {value!r} is not allowed; use a finite number {'>=' if inclusive else '>'} {low:g}",
                   param=param)


def name_list(param: str, value) -> list[str] | None:
    """A list-of-names parameter (``splits``, ``eval_splits``, ``attributes``): None stays None, a single string
    is one name (``"test"`` -> ``["test"]``), a list or tuple of strings is kept; anything else is
    :class:`BadInput` naming ``param``."""
    if value is None:
        return None
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise BadInput(f"{param} {value!r} is not allowed; give a name or a list of names", param=param)
    return list(names)


def with_changes(settings, changes: dict, what: str):
    """The frozen settings dataclass instance ``settings`` with ``changes`` (its fields by keyword, as a library
    call's keyword arguments give them) in place, checked again by its class (:func:`dataclasses.replace`).

    Raises:
        BadInput: a keyword that is not one of its fields (``param`` names it; the message says it is not
            ``what``, e.g. ``"an audit option"``, and lists the fields), or a value the class refuses.
    """
    import dataclasses

    names = [f.name for f in dataclasses.fields(settings)]
    unknown = [k for k in changes if k not in names]
    if unknown:
        raise BadInput(f"{unknown[0]} is not {what}; allowed: {', '.join(names)}", param=unknown[0])
    return dataclasses.replace(settings, **changes) if changes else settings


PRECISIONS = ("fp32", "bf16", "fp16")  # encoder and training precisions, every command spells them so
PRECISION_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
"""Each precision's torch dtype name (``getattr(torch, PRECISION_DTYPES[precision])``)."""
DEVICE_GRAMMAR = "auto | cpu | cuda | cuda:N"
"""The one ``--device`` grammar of every command (encoders, training and the Cycles renderer)."""


def check_device(device) -> str:
    """``device`` if it is ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (N a GPU index >= 0).

    Raises:
        BadInput: anything else (the message names the value and the grammar).
    """
    if isinstance(device, str) and (device in ("auto", "cpu", "cuda") or
                                    (device.startswith("cuda:") and device[5:].isdigit())):
        return device
    raise BadInput(f"device {device!r} is not allowed; use {DEVICE_GRAMMAR}", param="device")


def check_precision(precision) -> str:
    """``precision`` if it is one of :data:`PRECISIONS`; BadInput naming them otherwise."""
    if precision not in PRECISIONS:
        raise BadInput(f"precision {precision!r} is not allowed; use one of {', '.join(PRECISIONS)}",
                       param="precision")
    return precision



def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``; the others as given (imports torch).

    Raises:
        BadInput: a value outside the grammar (:func:`check_device`), or ``cuda`` / ``cuda:N`` where torch sees no
            GPU.
    """
    import torch

    check_device(device)
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise BadInput(f"device {device!r}: torch sees no CUDA GPU on this machine; use device='cpu'",
                       param="device")
    return device

_FORBIDDEN_IN_TEXT = "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]"
_FORBIDDEN_IN_NAME = "[\x00-\x1f\x7f-\x9f\ud800-\udfff]"


def bad_character(value: str, name: bool = False) -> tuple[int, str] | None:
    """The first character of ``value`` that user text may not hold, as ``(index, description)``, or None.

    Never allowed: control characters (U+0000..U+001F, U+007F..U+009F) and lone surrogates (U+D800..U+DFFF:
    what an invalid ``\\ud800`` escape, or bytes that are not UTF-8 read with ``surrogateescape``, leave in a
    string). Free text (``name=False``: captions, config values) may hold tab, line feed and carriage return;
    a name (``name=True``: categories, file names, labels) none of them.
    """
    import re

    match = re.search(_FORBIDDEN_IN_NAME if name else _FORBIDDEN_IN_TEXT, value)
    if match is None:
        return None
    code = ord(match.group())
    if code == 0:
        kind = "a NUL character"
    elif 0xD800 <= code <= 0xDFFF:
        kind = "a lone surrogate"
    else:
        kind = "a control character"
    return match.start(), f"U+{code:04X} ({kind})"


def check_text(field: str, value, name: bool = False, param: str | None = None) -> None:
    """Raise :class:`BadInput` if the string ``value`` holds a character :func:`bad_character` refuses.

    The message names ``field`` (e.g. ``"instances: categories[3].name"``), the character (``U+0000``) and its
    position, and what is allowed. Values that are not strings are left to the caller's own checks.
    """
    if not isinstance(value, str):
        return
    found = bad_character(value, name)
    if found is not None:
        index, character = found
        allowed = ("a name without control characters (tab and line breaks included)" if name
                   else "text without control characters (tab and line breaks are fine)")
        raise BadInput(f"{field} holds {character} at character {index}; allowed: {allowed} and without lone "
                       "surrogates (what bytes that are not UTF-8 become)", param=param)


def check_utf8_path(param: str, path) -> None:
    """Raise :class:`BadInput` if the path ``path`` (a str or path-like) is not UTF-8: on POSIX, bytes that are
    not UTF-8 reach Python as lone surrogates (``surrogateescape``), and bindscope writes paths and file names
    into UTF-8 files (manifests, results) and onto the terminal. The message shows the path's bytes."""
    import os

    if path is None or isinstance(path, bytes):
        return
    text = os.fspath(path)
    if not isinstance(text, str):
        return
    found = bad_character(text, name=False)
    if found is not None and found[1].startswith("U+D"):
        raw = os.fsencode(text)
        raise BadInput(f"{param} {raw!r} holds bytes that are not UTF-8; bindscope writes paths and names into "
                       "UTF-8 files: rename it or choose another", param=param)
