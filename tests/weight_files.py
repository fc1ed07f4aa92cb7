"""Bad weight files, each written by a few lines here: what a ``--pretrained`` file, a model folder's weights or a
checkpoint may hold that bindscope's reader (bindscope.io.weights) must refuse, with the phrase its message holds.

Shared by tests/test_weights_files.py (the library, exact messages) and the ``weights:`` rows of
tests/attack_matrix.py (every command that loads weights: exit 2, one ``Error:`` line, nothing written).
"""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path
from typing import Callable

import torch


class Payload:
    """Unpickling this would create the file ``marker``: a stand-in for code a crafted pickle runs."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (Path(self.marker),)


def _saved(value) -> Callable[[Path], None]:
    return lambda path: torch.save(value() if callable(value) else value, path)


def _nan_at(name: str, value: float = float("nan")) -> dict:
    tensor = torch.ones(4, 3)
    tensor[2, 1] = value
    return {name: tensor}


def safetensors_bytes(header: dict, data: bytes = b"", length: int | None = None) -> bytes:
    """A safetensors file: the header length (``length``, or the header's true length), the JSON header, the data."""
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


def _safetensors(header: dict, data: bytes = b"", length: int | None = None) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(safetensors_bytes(header, data, length))


def _compressed(path: Path) -> None:
    """A torch file whose zip entries are deflated: 4 MiB of zeros in a file of a few KiB."""
    plain = path.with_suffix(".plain")
    torch.save({"w": torch.zeros(1 << 20)}, plain)
    with zipfile.ZipFile(plain) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as packed:
        for info in source.infolist():
            packed.writestr(info.filename, source.read(info.filename))
    plain.unlink()


def _payload(path: Path) -> None:
    torch.save({"visual.proj": torch.zeros(2), "note": Payload(str(path.parent / "ran"))}, path)


F32 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
BAD = {
    # name: (file name, writer, phrase of the message)
    "list": ("w.pt", _saved([torch.zeros(2)]), "holds a list, not a state dict (a mapping of parameter names to "
                                               "tensors)"),
    "tensor": ("w.pt", _saved(torch.zeros(2)), "holds a tensor, not a state dict"),
    "int": ("w.pt", _saved(3), "holds an int, not a state dict"),
    "dict-of-ints": ("w.pt", _saved({"a": 1, "b": 2}), "tensor 'a' is an int, not a tensor"),
    "state-dict-none": ("w.pt", _saved({"state_dict": None, "epoch": 1}),
                        "its 'state_dict' entry is None, not a state dict"),
    "empty": ("w.pt", _saved({}), "holds no tensors (an empty state dict)"),
    "state-dict-empty": ("w.pt", _saved({"state_dict": {}}), "holds no tensors (an empty state dict)"),
    "nan": ("w.pt", _saved(lambda: _nan_at("visual.proj")),
            "tensor 'visual.proj' holds NaN or infinite values; weights must be finite"),
    "inf-in-open-clip-train-layout": ("w.pt", _saved(lambda: {"state_dict": _nan_at("module.logit_scale",
                                                                                   float("-inf"))}),
                                      "tensor 'module.logit_scale' holds NaN or infinite values"),
    "complex": ("w.pt", _saved({"visual.proj": torch.zeros(2, dtype=torch.complex64)}),
                "tensor 'visual.proj' has dtype torch.complex64; allowed: float16"),
    "garbage": ("w.pt", lambda path: path.write_text("garbage"), "is not readable as a torch file"),
    "pickle-payload": ("w.pt", _payload, "holds objects other than tensors and plain values ("),
    "compressed": ("w.pt", _compressed, "has compressed entries (w/data.pkl, w/.format_version, "),
    "safetensors-nan": ("w.safetensors",
                        _safetensors({"visual.proj": F32}, struct.pack("<2f", 1.0, float("nan"))),
                        "tensor 'visual.proj' holds NaN or infinite values"),
    "safetensors-huge-tensor": ("w.safetensors", _safetensors(
        {"w": {"dtype": "F32", "shape": [1_000_000, 1_000_000], "data_offsets": [0, 4_000_000_000_000]}}, b"\0" * 8),
        "tensor 'w' ends at byte 4000000000000 of the data, but the file holds 8 bytes of data"),
    "safetensors-shape-beyond-data": ("w.safetensors", _safetensors(
        {"w": {"dtype": "F32", "shape": [1_000_000_000], "data_offsets": [0, 8]}}, b"\0" * 8),
        "tensor 'w' declares the shape (1000000000,) of F32 (4000000000 bytes) but 8 bytes of data"),
    "safetensors-huge-header": ("w.safetensors", _safetensors({}, length=10**15),
                                "declares a 1000000000000000-byte safetensors header; at most 100000000 bytes"),
    "safetensors-header-past-end": ("w.safetensors", _safetensors({"w": F32}, b"\0" * 8, length=4096),
                                    "declares a 4096-byte safetensors header but holds only"),
    "safetensors-header-not-json": ("w.safetensors", lambda path: path.write_bytes(struct.pack("<Q", 4) + b"nope"),
                                    "the safetensors header is not valid JSON"),
    "safetensors-overlap": ("w.safetensors", _safetensors({"a": F32, "b": F32}, b"\0" * 8),
                            "starts at byte 0 of the data; the tensors before it end at byte 8"),
    "safetensors-metadata-not-texts": ("w.safetensors", _safetensors({"__metadata__": {"format": 1}, "w": F32},
                                                                      b"\0" * 8),
                                       "has a safetensors __metadata__ entry that is not an object of texts"),
    "safetensors-too-short": ("w.safetensors", lambda path: path.write_bytes(b"\x05"),
                              "is 1 bytes, too short for a safetensors file"),
}
"""Files no weights reader may accept, whatever the model."""

FOREIGN = ("w.pt", _saved({"weight": torch.zeros(2, 2), "bias": torch.zeros(2)}),
           "the state dict does not fit open_clip 'ViT-B-32' (missing ln_final.bias, ln_final.weight, logit_scale, "
           "positional_embedding, text_projection and 297 more; unexpected 'bias', 'weight')")
"""A sound state dict of another architecture, given for a ViT-B-32."""


def write(kind: tuple, folder: Path) -> Path:
    """Write the bad file of ``kind`` (an entry of :data:`BAD`, or :data:`FOREIGN`) into ``folder``."""
    name, writer, _ = kind
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    writer(path)
    return path
