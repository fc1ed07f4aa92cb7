"""Model folders and Hub models load as data, never as code.

``transformers`` and ``sentence-transformers`` can import Python code shipped with a model: a ``config.json`` or
``tokenizer_config.json`` whose ``auto_map`` names a class in a ``.py`` file of the folder, or a
sentence-transformers ``modules.json`` naming a module outside the ``sentence_transformers`` package. Asked
whether to run it (``trust_remote_code`` left unset), ``transformers`` reads the answer from standard input.
bindscope never runs such code:

- every load passes ``trust_remote_code=False`` and runs under :func:`no_prompts`, so standard input is never
  read (a prompt would see end of file and refuse);
- a local folder is inspected first (:func:`check_model_folder`): a Python file anywhere in it, or an
  ``auto_map`` in any of its ``*config*.json``, is refused with :class:`~bindscope.errors.BadInput`, and so is a
  sentence-transformers ``modules.json`` naming another module type or a module path outside the folder
  (:func:`check_sentence_transformers_modules`), before ``transformers`` reads a byte of it; so are weight
  files bindscope's reader refuses (:mod:`bindscope.io.weights`: a safetensors header that does not fit its
  file, a ``pytorch_model.bin`` that is not a state dict of finite tensors).

:func:`check_model_folder` also returns the sha256 of every file, so that a cache key covers the tokenizer,
configuration and pooling files as well as the weights.
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
ST_PACKAGE = "sentence_transformers."
# A sentence-transformers module config (sentence_bert_config.json and its legacy names): the keys it may hold,
# and the keys its keyword-argument dicts may hold. Anything else (tokenizer_name_or_path, trust_remote_code,
# cache_dir, revision, token, subfolder, ...) would read from elsewhere or change how code is trusted.
ST_MODULE_KEYS = frozenset({"max_seq_length", "do_lower_case", "transformer_task", "backend", "modality_config",
                            "module_output_name", "unpad_inputs", "query_length", "document_length",
                            "model_args", "model_kwargs", "tokenizer_args", "processor_kwargs", "config_args",
                            "config_kwargs"})
ST_KWARGS_KEYS = frozenset({"model_max_length", "do_lower_case", "torch_dtype", "dtype", "attn_implementation",
                            "add_pooling_layer", "use_fast", "padding_side", "truncation_side",
                            "clean_up_tokenization_spaces", "add_prefix_space", "strip_accents",
                            "tokenize_chinese_chars", "low_cpu_mem_usage"})


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


def _refuse(model: str, why: str) -> BadInput:
    return BadInput(f"model {model!r}: {why}; bindscope never runs code shipped with a model: give a model of "
                    "a standard architecture without custom code", param="model")


def _read_json(path: Path, model: str):
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise BadInput(f"model {model!r}: {path} is larger than {MAX_CONFIG_BYTES >> 20} MiB", param="model")
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"model {model!r}: {path} is not valid JSON ({exc})", param="model") from None


def check_model_folder(folder: str | os.PathLike, model: str, hash_files: bool = True) -> dict[str, str]:
    """Refuse a model folder that holds code; return the sha256 of each of its files.

    Args:
        folder: a local ``transformers`` or sentence-transformers model folder.
        model: the ``--model`` value, for messages.
        hash_files: compute the hashes (False: only check, every value ``""``).

    Returns:
        ``{relative path (POSIX): hex sha256}`` of every file (links to files followed; linked folders and hidden
        folders such as ``.git`` or ``.cache`` are not entered: ``transformers`` never looks in them).

    Raises:
        BadInput: a Python or compiled-extension file anywhere in the folder, a ``*config*.json`` that is not
            JSON or whose top level has ``auto_map`` (custom classes), anything but a regular file (a FIFO, a
            device), more than :data:`MAX_FILES` files, or a weight file bindscope's reader refuses.
    """
    from bindscope.io.canonical import sha256_file

    root = Path(folder)
    files: dict[str, str] = {}
    for here, dirs, names in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # .git, .cache: never read by transformers
        for name in sorted(names):
            path = Path(here) / name
            relative = path.relative_to(root).as_posix()
            if name.lower().endswith(CODE_SUFFIXES):
                raise _refuse(model, f"{path} is Python code")
            if len(files) >= MAX_FILES:
                raise BadInput(f"model {model!r}: {root} holds more than {MAX_FILES} files; give a model folder",
                               param="model")
            try:
                info = os.stat(path)
            except OSError:
                continue  # a dangling link: nothing to read
            if not stat.S_ISREG(info.st_mode):
                raise BadInput(f"model {model!r}: {path} is not a regular file", param="model")
            if name.endswith(".json") and "config" in name:
                config = _read_json(path, model)
                if isinstance(config, dict) and "auto_map" in config:
                    raise _refuse(model, f"{path} names custom code (auto_map: {json.dumps(config['auto_map'])[:120]})")
            files[relative] = sha256_file(path) if hash_files else ""
    _check_weight_files(root, files, model)
    return files


def _check_weight_files(root: Path, files: dict[str, str], model: str) -> None:
    """The weight files of a model folder, checked by bindscope's reader (:mod:`bindscope.io.weights`) before
    ``transformers`` or sentence-transformers reads them: every ``*.safetensors`` file's header (against the
    file's size, nothing allocated), and every ``pytorch_model*.bin`` in a folder without safetensors weights
    (read whole: a state dict of finite tensors). Their own loaders would end in a traceback on such a file."""
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
            raise BadInput(f"model {model!r}: weights file {exc}", param="model") from None


def check_sentence_transformers_modules(folder: str | os.PathLike, model: str) -> None:
    """Refuse a sentence-transformers folder whose ``modules.json`` names a module type outside the
    ``sentence_transformers`` package (custom code) or a module path outside the folder or in a hidden folder
    (one :func:`check_model_folder` does not inspect), or whose module configs (``sentence_*_config.json``) hold
    keys beyond the known ones (:data:`ST_MODULE_KEYS`, and :data:`ST_KWARGS_KEYS` in their keyword-argument
    dicts): sentence-transformers hands those dicts to ``transformers``.

    Raises:
        BadInput: naming the module entry (or the malformed file).
    """
    path = Path(folder) / "modules.json"
    if not path.is_file():
        return
    modules = _read_json(path, model)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise BadInput(f"model {model!r}: {path} is not a list of modules", param="model")
    for entry in modules:
        kind, where = entry.get("type"), entry.get("path", "")
        if not isinstance(kind, str) or not kind.startswith(ST_PACKAGE):
            raise _refuse(model, f"{path} names the module type {kind!r}, which is not part of sentence-transformers")
        if not isinstance(where, str) or PurePosixPath(where.replace("\\", "/")).is_absolute() \
                or os.path.isabs(where) or any(p.startswith(".") for p in PurePosixPath(where.replace("\\", "/")).parts):
            raise BadInput(f"model {model!r}: {path} names the module path {where!r}, outside the model folder "
                           "(or in a hidden folder)", param="model")
        for config in sorted((Path(folder) / where).glob("sentence_*_config.json")):
            _check_module_config(config, model)


def _check_module_config(path: Path, model: str) -> None:
    """Refuse a module config holding a key outside :data:`ST_MODULE_KEYS` or a keyword-argument dict with a key
    outside :data:`ST_KWARGS_KEYS`, naming the key."""
    config = _read_json(path, model)
    if not isinstance(config, dict):
        raise BadInput(f"model {model!r}: {path} is not a JSON object", param="model")
    for key, value in config.items():
        if key not in ST_MODULE_KEYS:
            raise _refuse(model, f"{path} holds the key {key!r} (allowed: {', '.join(sorted(ST_MODULE_KEYS))})")
        if key.endswith(("_args", "_kwargs")):
            if not isinstance(value, dict):
                raise BadInput(f"model {model!r}: {path}: {key!r} is not a JSON object", param="model")
            for sub in value:
                if sub not in ST_KWARGS_KEYS:
                    raise _refuse(model, f"{path} holds {key}.{sub} (allowed in {key}: "
                                  f"{', '.join(sorted(ST_KWARGS_KEYS))})")


def weights_fingerprint(files: dict[str, str], weight_files: tuple[str, ...], folder: Path, model: str) -> str:
    """``"<name>=<sha256>,..."`` of the weight files present at the top of the folder (from
    :func:`check_model_folder`'s hashes). Raises BadInput when there are none."""
    found = [f"{name}={files[name]}" for name in weight_files if name in files]
    if not found:
        raise BadInput(f"model {model!r}: {folder} holds no {' or '.join(weight_files)}; give a transformers "
                       "model folder (config.json and weights) or a Hub repository id", param="model")
    return ",".join(found)


def files_digest(files: dict[str, str]) -> str:
    """One hex sha256 over every file's relative path and sha256 (the folder's content, for a cache key)."""
    import hashlib

    text = "\n".join(f"{name}\0{sha}" for name, sha in sorted(files.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def model_source(source: str, model: str, weight_files: tuple[str, ...]) -> tuple[str, str, bool]:
    """Where a ``transformers`` model is read from, and what identifies it in a cache key.

    Args:
        source: a Hub repository id or a local folder. model: the ``--model`` value, for messages.
        weight_files: the weight file names a local folder may hold (:func:`weights_fingerprint`).

    Returns:
        ``(source, identity, local)``: for a folder its resolved path, ``"<path>|<weights>|files=<digest>"`` (after
        :func:`check_model_folder` refused code in it) and True; for a repository id the id twice and False.

    Raises:
        BadInput: ``source`` is a file, the folder holds code or no weight file (see the functions above).
    """
    local = Path(source)
    if local.is_dir():
        local = local.resolve()
        files = check_model_folder(local, model)
        return (str(local), f"{local}|{weights_fingerprint(files, weight_files, local, model)}|"
                f"files={files_digest(files)}", True)
    if local.exists():
        raise BadInput(f"model {model!r}: {source!r} is a file; give a model folder or a repository id",
                       param="model")
    return source, source, False
