"""The one reader of weight files the user gives: torch files and safetensors files, checked before a model is built.

Every problem is one :class:`~bindscope.errors.BadInput` naming the file (and, where there is one, the tensor):

- a torch file (``.pt``, ``.pth``, ``.bin``, anything not ending in ``.safetensors``) is read with
  ``torch.load(weights_only=True)`` (:func:`read_torch_file`): objects other than tensors and plain values are
  refused unread (loading them could run code); so is a zip entry stored compressed (``torch.save`` never
  compresses; a compressed entry could expand to far more memory than the file's size);
- a safetensors file (:func:`read_safetensors`) has its header checked against the file's size before the
  ``safetensors`` library reads it: the header at most :data:`MAX_SAFETENSORS_HEADER_BYTES`, every tensor's
  offsets inside the data, its declared size equal to its shape times its item size, the tensors end to end, so
  a header declaring huge tensors allocates nothing;
- :func:`read_state_dict` takes what such a file holds as a state dict: a mapping of parameter names to tensors,
  or ``open_clip_train``'s layout (a mapping whose ``state_dict`` entry is that mapping; keys prefixed
  ``module.`` by DDP lose the prefix). A list, a tensor, a number, a mapping of numbers, ``{"state_dict":
  None}`` or an empty mapping are refused; every tensor must be dense, on the CPU, of a dtype in
  :data:`DTYPES`, and finite (NaN or infinity refused, naming the tensor);
- :func:`check_tensors` compares a state dict with what a model needs (``{name: (shape, dtype)}``): missing and
  unexpected names, the first entry of another shape or dtype, non-finite values;
- :func:`check_module_finite` checks a model that a library loaded itself (an open_clip tag, a Hugging Face
  model) for non-finite weights;
- :func:`check_plain` checks the plain values stored beside the tensors (a config, a record).

Bounds: a file of at most :data:`MAX_WEIGHTS_BYTES` bytes, at most :data:`MAX_TENSORS` tensors, plain values
nested at most :data:`MAX_PLAIN_DEPTH` deep and at most :data:`MAX_PLAIN_ITEMS` of them.
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

from bindscope.errors import BadInput

MAX_WEIGHTS_BYTES = 32 << 30  # 32 GiB: a ViT-bigG-14 in fp32 is about 10 GiB, an open_clip_train checkpoint 3x that
MAX_TENSORS = 100_000  # entries of a state dict (a ViT-bigG-14 has about 1,000)
MAX_SAFETENSORS_HEADER_BYTES = 100_000_000  # the safetensors library's own limit
DTYPES = ("float16", "bfloat16", "float32", "float64", "uint8", "int8", "int16", "int32", "int64", "bool")
"""The tensor dtypes a weight file may hold (torch names)."""
SAFETENSORS_DTYPES = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8, "U8": 1, "I8": 1, "I16": 2, "I32": 4, "I64": 8,
                      "BOOL": 1}
"""The safetensors dtype names of :data:`DTYPES`, with their item sizes in bytes."""
MAX_PLAIN_DEPTH = 32  # nesting of the plain values (configs, records) stored beside the tensors of a file
MAX_PLAIN_ITEMS = 1_000_000  # those values, counted as often as they are reached
SHOWN = 5  # names listed in a message before "and N more"


def weights_problem(file, problem: str, param: str | None = None, label: str | None = None) -> BadInput:
    """``BadInput("<label> '<file>': <problem>")``; ``label`` defaults to ``param`` (without either:
    ``"'<file>': <problem>"``)."""
    label = param if label is None else label
    return BadInput(f"{label + ' ' if label else ''}{str(file)!r}: {problem}", param=param)


def _kind(value) -> str:
    """``value``'s type for a message: ``"a list"``, ``"an int"``, ``"a tensor"``, ``"None"``."""
    import torch

    if value is None:
        return "None"
    name = "tensor" if isinstance(value, torch.Tensor) else type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _listed(names: list, quote: bool = False) -> str:
    shown = ", ".join(map(repr if quote else str, names[:SHOWN]))
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def _regular_file(file: Path, what: str, max_bytes: int, param: str | None, label: str | None = None) -> int:
    """The size of ``file``; BadInput unless it is a regular file of at most ``max_bytes`` bytes."""
    try:
        info = file.stat()
    except OSError as exc:
        raise weights_problem(file, f"cannot be read ({exc.strerror})", param, label) from None
    if not stat.S_ISREG(info.st_mode):
        raise weights_problem(file, f"is not a regular file; expected a {what}", param, label)
    if info.st_size > max_bytes:
        raise weights_problem(file, f"is {info.st_size} bytes; a {what} is at most {max_bytes} bytes", param, label)
    return info.st_size


def load_error(exc: Exception) -> str:
    """What a failed ``torch.load(..., weights_only=True)`` means, in one short phrase (torch's own message
    spans lines and suggests loading without ``weights_only``, which could run the file's code)."""
    import pickle

    text = str(exc)
    if isinstance(exc, pickle.UnpicklingError):
        refused = re.search(r"Unsupported global: GLOBAL (\S+)", text)
        if refused:
            return (f"holds objects other than tensors and plain values ({refused.group(1)}), refused unread: "
                    "loading them could run code")
        detail = re.search(r"WeightsUnpickler error:\s*([^\n]+)", text)
        return f"is not readable as a torch file ({detail.group(1).strip() if detail else 'not a pickle'})"
    first = (text.strip().splitlines() or [type(exc).__name__])[0][:200]
    return f"is not readable as a torch file ({type(exc).__name__}: {first})"


def read_torch_file(file: str | os.PathLike, what: str, max_bytes: int | None = None, param: str | None = None,
                    label: str | None = None):
    """``torch.load(file, map_location="cpu", weights_only=True)`` of a regular file of at most ``max_bytes``
    bytes (default :data:`MAX_WEIGHTS_BYTES`) whose zip entries, if it is a zip file (torch's format since 1.6),
    are all stored uncompressed. Returns whatever the file holds (tensors and plain values only).

    Args:
        what: the kind of file, for messages (``"map"``: ``"... a map is at most N bytes"``). param / label: see
            :func:`weights_problem` (``label="LABCLIP map"``: ``"LABCLIP map '<file>': ..."``).

    Raises:
        BadInput: naming ``file`` (after ``label``) and the problem: not a regular file, too large, a compressed
            entry, or not loadable with ``weights_only=True`` (a corrupt file, or one holding objects other than
            tensors and plain values, such as a pickled payload that could run code).
    """
    import zipfile

    import torch

    file = Path(file)
    _regular_file(file, what, MAX_WEIGHTS_BYTES if max_bytes is None else max_bytes, param, label)
    packed = []
    try:
        if zipfile.is_zipfile(file):
            with zipfile.ZipFile(file) as archive:
                packed = [i.filename for i in archive.infolist() if i.compress_type != zipfile.ZIP_STORED]
    except (OSError, zipfile.BadZipFile, ValueError) as exc:
        raise weights_problem(file, f"is not readable as a torch file (a broken zip archive: {exc})", param,
                              label) from None
    if packed:
        raise weights_problem(file, f"has compressed entries ({_listed(packed)}); torch.save stores every entry "
                                    "uncompressed, so this is not a file it wrote", param, label)
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a file that is not a torch file
        raise weights_problem(file, load_error(exc), param, label) from None


def safetensors_header(file: str | os.PathLike, max_bytes: int | None = None, param: str | None = None) -> dict:
    """The checked header of a safetensors file, ``{name: {"dtype", "shape", "data_offsets"}}`` (without
    ``__metadata__``), read without reading the tensors.

    Raises:
        BadInput: naming the file: not a regular file or larger than ``max_bytes`` (default
            :data:`MAX_WEIGHTS_BYTES`); a header length beyond :data:`MAX_SAFETENSORS_HEADER_BYTES` or the file's
            end; a header that is not a JSON object of tensor entries (and ``__metadata__``, an object of texts);
            more than :data:`MAX_TENSORS` tensors; a
            dtype outside :data:`SAFETENSORS_DTYPES`; a shape that is not a list of integers >= 0; offsets that
            are not ``[begin, end]`` inside the data, or whose length differs from the shape's size; tensors
            that overlap, leave gaps or do not cover the data (the safetensors format packs them end to end).
    """
    from bindscope.io.json_input import parse_json

    file = Path(file)
    size = _regular_file(file, "safetensors file", MAX_WEIGHTS_BYTES if max_bytes is None else max_bytes, param)
    if size < 8:
        raise weights_problem(file, f"is {size} bytes, too short for a safetensors file (an 8-byte header length "
                                    "first)", param)
    try:
        with open(file, "rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            if length > MAX_SAFETENSORS_HEADER_BYTES:
                raise weights_problem(file, f"declares a {length}-byte safetensors header; at most "
                                            f"{MAX_SAFETENSORS_HEADER_BYTES} bytes are allowed", param)
            if length > size - 8:
                raise weights_problem(file, f"declares a {length}-byte safetensors header but holds only "
                                            f"{size - 8} bytes after the header length", param)
            raw = handle.read(length)
    except OSError as exc:
        raise weights_problem(file, f"cannot be read ({exc.strerror})", param) from None
    header = parse_json(raw, f"{param + ' ' if param else ''}{str(file)!r}: the safetensors header", param)
    if not isinstance(header, dict):
        raise weights_problem(file, f"has a safetensors header that is {_kind(header)}, not an object "
                                    "of tensor entries", param)
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise weights_problem(file, "has a safetensors __metadata__ entry that is not an object of texts", param)
    if len(header) > MAX_TENSORS:
        raise weights_problem(file, f"declares {len(header)} tensors; at most {MAX_TENSORS} are allowed", param)
    data = size - 8 - length
    for name, entry in header.items():
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise weights_problem(file, f"tensor {name!r}: its header entry is not {{dtype, shape, data_offsets}}",
                                  param)
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in SAFETENSORS_DTYPES:
            raise weights_problem(file, f"tensor {name!r} has dtype {dtype!r}; allowed: "
                                        f"{', '.join(SAFETENSORS_DTYPES)}", param)
        if not isinstance(shape, list) or len(shape) > 64 or not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
            raise weights_problem(file, f"tensor {name!r} has the shape {str(shape)[:80]}, not a list of at most "
                                        "64 integers >= 0", param)
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(
                isinstance(n, int) and not isinstance(n, bool) for n in offsets) and 0 <= offsets[0] <= offsets[1]):
            raise weights_problem(file, f"tensor {name!r} has the data offsets {str(offsets)[:80]}, not [begin, "
                                        "end] with 0 <= begin <= end", param)
        if offsets[1] > data:
            raise weights_problem(file, f"tensor {name!r} ends at byte {offsets[1]} of the data, but the file holds "
                                        f"{data} bytes of data", param)
        need = math.prod(shape) * SAFETENSORS_DTYPES[dtype]
        if offsets[1] - offsets[0] != need:
            raise weights_problem(file, f"tensor {name!r} declares the shape {tuple(shape)} of {dtype} ({need} "
                                        f"bytes) but {offsets[1] - offsets[0]} bytes of data", param)
    end = 0
    for name, entry in sorted(header.items(), key=lambda item: item[1]["data_offsets"]):
        if entry["data_offsets"][0] != end:
            raise weights_problem(file, f"tensor {name!r} starts at byte {entry['data_offsets'][0]} of the data; "
                                        f"the tensors before it end at byte {end} (overlapping or with a gap)", param)
        end = entry["data_offsets"][1]
    if end != data:
        raise weights_problem(file, f"its tensors cover {end} bytes of data, but the file holds {data}", param)
    return header


def read_safetensors(file: str | os.PathLike, max_bytes: int | None = None, param: str | None = None) -> dict:
    """``{name: tensor}`` of a safetensors file, on the CPU, after :func:`safetensors_header` accepted its
    header (nothing is allocated before).

    Raises:
        BadInput: as :func:`safetensors_header`, or a file the ``safetensors`` library still refuses (a file
            changed meanwhile); the message names the file.
    """
    from safetensors.torch import load_file

    safetensors_header(file, max_bytes, param)
    try:
        return load_file(str(file), device="cpu")
    except Exception as exc:  # safetensors raises its own SafetensorError, and OSError
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise weights_problem(file, f"is not a readable safetensors file ({first})", param) from None


def all_finite(tensor) -> bool:
    """False when the tensor holds NaN or an infinity (True for a tensor that is not floating point or empty).
    One ``torch.aminmax`` pass on the tensor's device: NaN anywhere makes both ends NaN."""
    import torch

    if not tensor.is_floating_point() or not tensor.numel():
        return True
    low, high = torch.aminmax(tensor.detach())
    return math.isfinite(float(low)) and math.isfinite(float(high))


def check_tensor(file, where: str, tensor, param: str | None = None) -> None:
    """Raise BadInput (naming ``file`` and ``where``) unless ``tensor`` is a dense CPU tensor of a dtype in
    :data:`DTYPES` holding only finite numbers."""
    import torch

    if not isinstance(tensor, torch.Tensor):
        raise weights_problem(file, f"{where} is {_kind(tensor)}, not a tensor", param)
    if tensor.layout != torch.strided or tensor.is_quantized or tensor.device.type != "cpu":
        raise weights_problem(file, f"{where} is not a dense CPU tensor ({tensor.layout})", param)
    if str(tensor.dtype).removeprefix("torch.") not in DTYPES:
        raise weights_problem(file, f"{where} has dtype {tensor.dtype}; allowed: {', '.join(DTYPES)}", param)
    if not all_finite(tensor):
        raise weights_problem(file, f"{where} holds NaN or infinite values; weights must be finite", param)


def read_state_dict(file: str | os.PathLike, max_bytes: int | None = None, param: str | None = None) -> dict:
    """The state dict a weights file holds, checked (see the module docstring): ``{name: tensor}`` on the CPU,
    each tensor dense, of a dtype in :data:`DTYPES`, finite; at least one, at most :data:`MAX_TENSORS`.

    Args:
        file: a safetensors file (name ending ``.safetensors``) or a torch file (a state dict, or an
            ``open_clip_train`` checkpoint whose ``state_dict`` entry is one; a ``module.`` prefix on every key
            is removed).
        max_bytes: the largest file accepted (default :data:`MAX_WEIGHTS_BYTES`).
        param: the parameter the file was given as (``"pretrained"``), for messages and the CLI flag.

    Raises:
        BadInput: naming the file and the problem (and the tensor, where one is at fault).
    """
    file = Path(file)
    if file.name.endswith(".safetensors"):
        state = read_safetensors(file, max_bytes, param)
    else:
        state = read_torch_file(file, "weights file", max_bytes, param)
        wanted = "a state dict (a mapping of parameter names to tensors)"
        if not isinstance(state, dict):
            raise weights_problem(file, f"holds {_kind(state)}, not {wanted}", param)
        if "state_dict" in state:  # open_clip_train's checkpoint layout
            state = state["state_dict"]
            if not isinstance(state, dict):
                raise weights_problem(file, f"its 'state_dict' entry is {_kind(state)}, not {wanted}", param)
    if not state:
        raise weights_problem(file, "holds no tensors (an empty state dict)", param)
    if len(state) > MAX_TENSORS:
        raise weights_problem(file, f"holds {len(state)} entries; at most {MAX_TENSORS} are allowed", param)
    for name, tensor in state.items():
        if not isinstance(name, str):
            raise weights_problem(file, f"has the key {name!r}, not a parameter name (a string)", param)
        check_tensor(file, f"tensor {name!r}", tensor, param)
    if all(name.startswith("module.") for name in state):  # saved from a DistributedDataParallel model
        state = {name[len("module."):]: tensor for name, tensor in state.items()}
    return state


def check_tensors(file, where: str, tensors, expected: dict, *, model: str = "the model", exact_dtype: bool = True,
                  finite: bool = True, param: str | None = None) -> None:
    """Raise BadInput (naming ``file`` and the entry) unless ``tensors`` is a dict with exactly the names of
    ``expected`` (``{name: (shape, dtype)}``), each a dense CPU tensor of that shape, of that dtype
    (``exact_dtype``) or of the same kind (floating point or not: ``load_state_dict`` converts between float
    dtypes), and finite (unless ``finite`` is False: already checked). ``model`` names what needs them in
    messages (``"open_clip 'ViT-B-32'"``)."""
    import torch

    if not isinstance(tensors, dict):
        raise weights_problem(file, f"{where} is {_kind(tensors)}, not a mapping of names to tensors", param)
    missing = sorted(set(expected) - set(tensors), key=str)
    unexpected = sorted(set(tensors) - set(expected), key=str)
    if missing or unexpected:
        parts = [f"missing {_listed(missing)}" if missing else "",
                 f"unexpected {_listed(unexpected, quote=True)}" if unexpected else ""]
        raise weights_problem(file, f"{where} does not fit {model} ({'; '.join(p for p in parts if p)})", param)
    for name, (shape, dtype) in expected.items():
        tensor = tensors[name]
        if not isinstance(tensor, torch.Tensor):
            raise weights_problem(file, f"{where} entry {name!r} is {_kind(tensor)}, not a tensor", param)
        if tensor.layout != torch.strided or tensor.is_quantized or tensor.device.type != "cpu":
            raise weights_problem(file, f"{where} entry {name!r} is not a dense CPU tensor ({tensor.layout})", param)
        if exact_dtype and tensor.dtype != dtype:
            raise weights_problem(file, f"{where} entry {name!r} has dtype {tensor.dtype}; {model} needs {dtype}",
                                  param)
        if not exact_dtype and tensor.is_floating_point() != dtype.is_floating_point:
            raise weights_problem(file, f"{where} entry {name!r} has dtype {tensor.dtype}; {model} needs "
                                        f"{'a floating-point' if dtype.is_floating_point else 'an integer'} tensor",
                                  param)
        if tuple(tensor.shape) != tuple(shape):
            raise weights_problem(file, f"{where} entry {name!r} has shape {tuple(tensor.shape)}; {model} needs "
                                        f"{tuple(shape)}", param)
        if finite and not all_finite(tensor):
            raise weights_problem(file, f"{where} entry {name!r} holds NaN or infinite values", param)


def check_module_finite(module, source: str, param: str | None = None) -> None:
    """Raise BadInput (``"<source>: tensor '<name>' holds NaN ..."``) naming ``source`` and the first parameter or
    buffer of the torch module ``module`` (one a library loaded itself) that holds NaN or infinite values. Buffers
    left out of the state dict (an attention mask of ``-inf``) are not weights and are not checked."""
    for name, tensor in module.state_dict().items():
        if not all_finite(tensor):
            raise BadInput(f"{source}: tensor {name!r} holds NaN or infinite values; weights must be finite",
                           param=param)


def check_plain(value, where: str, fail: Callable[[str], BadInput]) -> None:
    """Raise ``fail(problem)`` unless ``value`` (read from a weights file beside its tensors: a config, a record)
    is JSON-like: str, finite number, bool, None, lists and string-keyed dicts of those (no tensor), nested at
    most :data:`MAX_PLAIN_DEPTH` deep, at most :data:`MAX_PLAIN_ITEMS` values in all. A pickle can share one list
    many times over (30 levels of ``[a, a]`` are 2**30 values in a few bytes), so values are counted each time
    they are reached. ``where`` names ``value`` in the problem (``"meta"`` -> ``"meta.loss[1] holds ..."``)."""
    pending, seen = [(value, where, 0)], 0
    while pending:
        value, here, depth = pending.pop()
        seen += 1 + (len(value) if isinstance(value, (list, tuple, dict)) else 0)
        if seen > MAX_PLAIN_ITEMS:
            raise fail(f"{where} holds more than {MAX_PLAIN_ITEMS} values")
        if depth > MAX_PLAIN_DEPTH:
            raise fail(f"{here} is nested too deep")
        if value is None or isinstance(value, (str, bool, int)):
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                raise fail(f"{here} holds the non-finite number {value!r}")
            continue
        if isinstance(value, (list, tuple)):
            pending.extend((item, f"{here}[{k}]", depth + 1) for k, item in reversed(list(enumerate(value))))
            continue
        if isinstance(value, dict):
            for key in value:
                if not isinstance(key, str):
                    raise fail(f"{here} has the key {key!r}, not a string")
            pending.extend((item, f"{here}.{key}", depth + 1) for key, item in reversed(list(value.items())))
            continue
        raise fail(f"{here} is a {type(value).__name__}, not a plain value")
