"""Model folders load as data, never as code: the checks every model loader runs on a local folder first.

``transformers``, ``sentence-transformers`` and ``diffusers`` can import Python code shipped with a model: a
``config.json`` or ``tokenizer_config.json`` whose ``auto_map`` names a class in a ``.py`` file of the folder, a
diffusers ``model_index.json`` naming a pipeline or component defined in such a file. Asked whether to run it
(``trust_remote_code`` left unset), ``transformers`` reads the answer from standard input. bindscope never runs
such code:

- every load passes ``trust_remote_code=False`` and runs under :func:`no_prompts`, so standard input is never
  read (a prompt would see end of file and refuse);
- a local folder is inspected first (:func:`check_model_folder`): a Python file anywhere in it, or an
  ``auto_map`` in any of its ``*config*.json``, is refused with :class:`~bindscope.errors.BadInput` before a
  library reads a byte of it; so are weight files bindscope's reader refuses (:mod:`bindscope.io.weights`: a
  safetensors header that does not fit its file, a ``pytorch_model.bin`` that is not a state dict of finite
  tensors).

:func:`check_model_folder` also returns the sha256 of every file, so that a cache key or a dataset's config covers
the tokenizer, configuration and scheduler files as well as the weights (:func:`files_digest`). The loaders of each
kind of model add their own checks (:mod:`bindscope.encoders.model_folder` for sentence-transformers modules,
:mod:`bindscope.generators.t2i.pipeline` for diffusers pipelines).
"""

from __future__ import annotations

import io
import json
import os
import stat
import sys
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Iterator

from bindscope.errors import BadInput

CODE_SUFFIXES = (".py", ".pyc", ".pyo", ".pyd", ".pyw", ".so")
MAX_FILES = 10_000           # files in a model folder (a Hub snapshot holds tens)
MAX_CONFIG_BYTES = 64 << 20  # a *config*.json read to look for auto_map


@contextmanager
def no_prompts() -> Iterator[None]:
    """Run the block with an empty standard input: a library that asks a question (``transformers``'
    "Do you wish to run the custom code? [y/N]") reads end of file and refuses, whatever the real stdin holds."""
    saved = sys.stdin
    sys.stdin = io.StringIO("")
    try:
        yield
    finally:
        sys.stdin = saved


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' progress bars and warnings off while a model loads (the command line prints one line per
    outcome: a bar before an ``Error:`` line would make two); the previous verbosity is restored."""
    from transformers.utils import logging

    level, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(level)
        if bars:
            logging.enable_progress_bar()


def refuse_code(model: str, why: str, param: str = "model") -> BadInput:
    """The one refusal of a model that holds or names code: ``<param> '<model>': <why>; bindscope never runs
    code ...``."""
    return BadInput(f"{param} {model!r}: {why}; bindscope never runs code shipped with a model: give a model of "
                    "a standard architecture without custom code", param=param)


def read_config_json(path: Path, model: str, param: str = "model"):
    """The parsed JSON file ``path`` of a model folder (at most :data:`MAX_CONFIG_BYTES`).

    Raises:
        BadInput: a larger file, or one that is not UTF-8 JSON (naming ``param``, the model and the file).
    """
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise BadInput(f"{param} {model!r}: {path} is larger than {MAX_CONFIG_BYTES >> 20} MiB", param=param)
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"{param} {model!r}: {path} is not valid JSON ({exc})", param=param) from None


def check_model_folder(folder: str | os.PathLike, model: str, hash_files: bool = True,
                       param: str = "model") -> dict[str, str]:
    """Refuse a model folder that holds code; return the sha256 of each of its files.

    Args:
        folder: a local ``transformers``, sentence-transformers or ``diffusers`` model folder.
        model: the value the user gave (``--model``, ``--pipeline``, ...), for messages.
        hash_files: compute the hashes (False: only check, every value ``""``).
        param: the parameter named in messages (``model``, ``pipeline``, ``detector``, ``segmenter``).

    Returns:
        ``{relative path (POSIX): hex sha256}`` of every file (links to files followed; linked folders and hidden
        folders such as ``.git`` or ``.cache`` are not entered: the libraries never look in them).

    Raises:
        BadInput: a Python or compiled-extension file anywhere in the folder, a ``*config*.json`` that is not
            JSON or whose top level has ``auto_map`` (custom classes), anything but a regular file (a FIFO, a
            device), more than :data:`MAX_FILES` files, or a weight file bindscope's reader refuses.
    """
    from bindscope.io.canonical import sha256_file

    root = Path(folder)
    files: dict[str, str] = {}
    for here, dirs, names in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # .git, .cache: never read by the libraries
        for name in sorted(names):
            path = Path(here) / name
            relative = path.relative_to(root).as_posix()
            if name.lower().endswith(CODE_SUFFIXES):
                raise refuse_code(model, f"{path} is Python code", param)
            if len(files) >= MAX_FILES:
                raise BadInput(f"{param} {model!r}: {root} holds more than {MAX_FILES} files; give a model folder",
                               param=param)
            try:
                info = os.stat(path)
            except OSError:
                continue  # a dangling link: nothing to read
            if not stat.S_ISREG(info.st_mode):
                raise BadInput(f"{param} {model!r}: {path} is not a regular file", param=param)
            if name.endswith(".json") and "config" in name:
                config = read_config_json(path, model, param)
                if isinstance(config, dict) and "auto_map" in config:
                    raise refuse_code(model, f"{path} names custom code (auto_map: "
                                      f"{json.dumps(config['auto_map'])[:120]})", param)
            files[relative] = sha256_file(path) if hash_files else ""
    _check_weight_files(root, files, model, param)
    return files


def _check_weight_files(root: Path, files: dict[str, str], model: str, param: str) -> None:
    """The weight files of a model folder, checked by bindscope's reader (:mod:`bindscope.io.weights`) before
    a library reads them: every ``*.safetensors`` file's header (against the file's size, nothing allocated), and
    every ``pytorch_model*.bin`` in a folder without safetensors weights (read whole: a state dict of finite
    tensors). Their own loaders would end in a traceback on such a file."""
    from bindscope.io.weights import read_state_dict, safetensors_header

    safe_folders = {PurePosixPath(r).parent for r in files if r.endswith(".safetensors")}
    for relative in files:
        posix = PurePosixPath(relative)
        try:
            if relative.endswith(".safetensors"):
                safetensors_header(root / relative)
            elif posix.name.startswith("pytorch_model") and posix.suffix == ".bin" and posix.parent not in safe_folders:
                read_state_dict(root / relative)
        except BadInput as exc:
            raise BadInput(f"{param} {model!r}: weights file {exc}", param=param) from None


def files_digest(files: dict[str, str]) -> str:
    """One hex sha256 over every file's relative path and sha256 (the folder's content, for a cache key)."""
    import hashlib

    text = "\n".join(f"{name}\0{sha}" for name, sha in sorted(files.items()))
    return hashlib.sha256(text.encode()).hexdigest()
