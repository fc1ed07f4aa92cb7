"""Local weight files of open_clip models: read and checked by bindscope, never handed to open_clip's loader.

A ``pretrained`` file (``madman eval --model ViT-B-32 --pretrained FILE``, an open_clip model config with its
checkpoint, ``bindscope train --init ViT-B-32 --pretrained FILE``) is read by
:func:`bindscope.io.weights.read_state_dict` (a torch file or a safetensors file; a plain state dict or an
``open_clip_train`` checkpoint; bounded sizes, finite tensors), then compared, name by name and shape by shape,
with the model open_clip builds for that name (built on torch's ``meta`` device: nothing allocated, nothing
initialised). The model is then built with random weights and the state dict copied in (``load_state_dict``,
strict). Entries for buffers the model computes itself (non-persistent buffers such as position ids) are dropped.
open_clip's conversions of foreign layouts (MobileCLIP's originals, big_vision ``.npz`` files, positional
embeddings of another input size) are not applied: such files are refused as not fitting the model.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from typing import Iterator

from bindscope.io.weights import check_tensors, read_state_dict


class _NotRandom(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "No pretrained weights loaded" not in record.getMessage()


@contextmanager
def no_random_init_warning() -> Iterator[None]:
    """Without open_clip's warning that a model built with ``pretrained=None`` is "initialized randomly" (it
    logs it on the root logger), for a model whose weights follow from a file or a checkpoint or are random on
    purpose (seeded): printed before an ``Error:`` line, it would make two lines."""
    root, hush = logging.getLogger(), _NotRandom()
    root.addFilter(hush)
    try:
        yield
    finally:
        root.removeFilter(hush)


def _meta_model(name: str):
    import open_clip
    import torch

    with torch.device("meta"), no_random_init_warning():
        return open_clip.create_model(name, pretrained=None, pretrained_text=False, device="meta")


def read_open_clip_weights(name: str, file: str | os.PathLike, param: str | None = "pretrained") -> dict:
    """The state dict in ``file`` for the open_clip model ``name`` (a name ``open_clip.list_models()`` knows or
    a registered config), checked against that model before any weights are allocated for it.

    Returns:
        ``{parameter name: tensor}`` on the CPU, in the file's dtypes (``load_state_dict`` converts them).

    Raises:
        BadInput: naming the file and (with ``param``) the parameter: what
            :func:`~bindscope.io.weights.read_state_dict` refuses, or a state dict of another architecture
            (missing or unexpected names, a shape, or integer where floating point is needed, listed).
    """
    state = read_state_dict(file, param=param)
    net = _meta_model(name)
    computed = {f"{module}.{buffer}".lstrip(".") for module, sub in net.named_modules()
                for buffer in getattr(sub, "_non_persistent_buffers_set", ())}
    state = {key: tensor for key, tensor in state.items() if key not in computed}
    expected = {key: (tuple(tensor.shape), tensor.dtype) for key, tensor in net.state_dict().items()}
    check_tensors(file, "the state dict", state, expected, model=f"open_clip {name!r}", exact_dtype=False,
                  finite=False, param=param)
    return state


def load_open_clip_file(name: str, file: str, precision: str, device: str):
    """open_clip's model ``name`` (``precision``, on ``device``) with the weights of ``file``, read by
    :func:`read_open_clip_weights` first (a file it refuses never reaches open_clip)."""
    import open_clip

    state = read_open_clip_weights(name, file)
    with no_random_init_warning():
        net = open_clip.create_model(name, pretrained=None, pretrained_text=False, precision=precision,
                                     device=device)
    net.load_state_dict(state)
    return net
