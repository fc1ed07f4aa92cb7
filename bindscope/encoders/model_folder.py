"""Model folders and Hub models load as data, never as code: the encoders' part.

The checks every loader runs (no Python file, no ``auto_map``, weight files bindscope's reader accepts, no question
on standard input) are in :mod:`bindscope.io.model_folder`. Here: what is particular to the encoders.

- sentence-transformers can import any module a ``modules.json`` names: a module type outside the
  ``sentence_transformers`` package, or a module path outside the folder, is refused
  (:func:`check_sentence_transformers_modules`), and so are module configs holding keys beyond the known ones;
- :func:`model_source` says where a ``transformers`` model is read from (a folder, checked first, or a Hub
  repository id) and what identifies it in a cache key (:func:`weights_fingerprint`).
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from bindscope.errors import BadInput
from bindscope.io.model_folder import check_model_folder, files_digest, read_config_json, refuse_code

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
    modules = read_config_json(path, model)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise BadInput(f"model {model!r}: {path} is not a list of modules", param="model")
    for entry in modules:
        kind, where = entry.get("type"), entry.get("path", "")
        if not isinstance(kind, str) or not kind.startswith(ST_PACKAGE):
            raise refuse_code(model, f"{path} names the module type {kind!r}, which is not part of sentence-transformers")
        if not isinstance(where, str) or PurePosixPath(where.replace("\\", "/")).is_absolute() \
                or os.path.isabs(where) or any(p.startswith(".") for p in PurePosixPath(where.replace("\\", "/")).parts):
            raise BadInput(f"model {model!r}: {path} names the module path {where!r}, outside the model folder "
                           "(or in a hidden folder)", param="model")
        for config in sorted((Path(folder) / where).glob("sentence_*_config.json")):
            _check_module_config(config, model)


def _check_module_config(path: Path, model: str) -> None:
    """Refuse a module config holding a key outside :data:`ST_MODULE_KEYS` or a keyword-argument dict with a key
    outside :data:`ST_KWARGS_KEYS`, naming the key."""
    config = read_config_json(path, model)
    if not isinstance(config, dict):
        raise BadInput(f"model {model!r}: {path} is not a JSON object", param="model")
    for key, value in config.items():
        if key not in ST_MODULE_KEYS:
            raise refuse_code(model, f"{path} holds the key {key!r} (allowed: {', '.join(sorted(ST_MODULE_KEYS))})")
        if key.endswith(("_args", "_kwargs")):
            if not isinstance(value, dict):
                raise BadInput(f"model {model!r}: {path}: {key!r} is not a JSON object", param="model")
            for sub in value:
                if sub not in ST_KWARGS_KEYS:
                    raise refuse_code(model, f"{path} holds {key}.{sub} (allowed in {key}: "
                                  f"{', '.join(sorted(ST_KWARGS_KEYS))})")


def weights_fingerprint(files: dict[str, str], weight_files: tuple[str, ...], folder: Path, model: str,
                        param: str = "model") -> str:
    """``"<name>=<sha256>,..."`` of the weight files present at the top of the folder (from
    :func:`check_model_folder`'s hashes). Raises BadInput (naming ``param``) when there are none."""
    found = [f"{name}={files[name]}" for name in weight_files if name in files]
    if not found:
        raise BadInput(f"{param} {model!r}: {folder} holds no {' or '.join(weight_files)}; give a transformers "
                       "model folder (config.json and weights) or a Hub repository id", param=param)
    return ",".join(found)


def model_source(source: str, model: str, weight_files: tuple[str, ...],
                 param: str = "model") -> tuple[str, str, bool]:
    """Where a ``transformers`` model is read from, and what identifies it in a cache key.

    Args:
        source: a Hub repository id or a local folder. model: the value the user gave, for messages.
        weight_files: the weight file names a local folder may hold (:func:`weights_fingerprint`).
        param: the parameter named in messages (``model``, ``detector``, ``segmenter``).

    Returns:
        ``(source, identity, local)``: for a folder its resolved path, ``"<path>|<weights>|files=<digest>"`` (after
        :func:`check_model_folder` refused code in it) and True; for a repository id the id twice and False.

    Raises:
        BadInput: ``source`` is a file, the folder holds code or no weight file (see the functions above).
    """
    local = Path(source)
    if local.is_dir():
        local = local.resolve()
        files = check_model_folder(local, model, param=param)
        return (str(local), f"{local}|{weights_fingerprint(files, weight_files, local, model, param)}|"
                f"files={files_digest(files)}", True)
    if local.exists():
        raise BadInput(f"{param} {model!r}: {source!r} is a file; give a model folder or a repository id",
                       param=param)
    return source, source, False
