"""What every evaluation shares: opening and checking datasets, text transforms, the result envelope, writing.

A result is one JSON object validated by ``bindscope/schemas/eval_result.json`` with, per kind, the blocks of its
registered tasks (:func:`bindscope.evaluation.tasks.schema.result_schema`)::

    {"schema_version": 1, "kind": "madman-eval" | "comco-eval" | "comco-attention" | "bench",
     "model": {...}, "dataset": {...} | null, "settings": {...}, "metrics": {...},
     "counts": {...}, "versions": {...}}

Results hold no timestamps, so the same model, data and settings give the same bytes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
from importlib import metadata
from pathlib import Path
from typing import Callable

import numpy as np

from bindscope.encoders.embedding_cache import Embedder
from bindscope.encoders.interface import EncoderAdapter, l2_normalise
from bindscope.errors import BadInput
from bindscope.format.manifest import MANIFEST
from bindscope.format.reader import Dataset
from bindscope.io.atomic import write_text_atomic
from bindscope.io.canonical import canonical_json, sha256_file
from bindscope.schemas import validate

SCHEMA_VERSION = 1
TextTransform = Callable[[np.ndarray], np.ndarray]


def open_dataset(dataset: str | os.PathLike | Dataset, validate: bool = True) -> Dataset:
    """Open ``dataset`` (a path or an open :class:`Dataset`). Which dataset an evaluation accepts is decided by
    what it holds (:attr:`Dataset.holds <bindscope.format.reader.Dataset.holds>`) against what its tasks need,
    not by the generator that made it.

    ``validate`` (for a path): how shards are checked on open (:class:`Dataset`); the evaluations pass False:
    they read few of the string columns (captions and negatives), each checked when first read, and parse the
    specs where the images are read (in the reader workers, when there are any), so a bad shard is still refused
    before anything is written.

    Raises:
        DatasetError: missing/unfinished folder or invalid manifest.
    """
    return dataset if isinstance(dataset, Dataset) else Dataset(dataset, validate=validate)


def dataset_info(ds: Dataset, splits: list[str]) -> dict:
    """The ``dataset`` block of a result: path, generator, manifest sha256, config sha256, splits used."""
    return {"path": str(ds.path), "generator": ds.generator,
            "generator_version": ds.manifest["generator"]["version"],
            "manifest_sha256": sha256_file(ds.path / MANIFEST),
            "config_sha256": ds.manifest.get("config_sha256", ""), "splits": list(splits)}


def apply_text_transform(emb: np.ndarray, transform: TextTransform | None) -> np.ndarray:
    """Apply ``transform`` to L2-normalised text embeddings (N, D) and re-normalise rows to unit L2 norm.

    Raises:
        BadInput: the transform does not return an (N, D') array.
    """
    if transform is None:
        return emb
    out = np.asarray(transform(emb), dtype=np.float32)
    if out.ndim != 2 or out.shape[0] != emb.shape[0]:
        raise BadInput(f"the text transform returned shape {out.shape}, expected ({emb.shape[0]}, D)")
    return l2_normalise(out)


def transform_name(transform: TextTransform | None) -> str | None:
    """A label for a text transform in results: its ``name`` attribute, else its qualified name; None if none."""
    if transform is None:
        return None
    return str(getattr(transform, "name", None) or getattr(transform, "__qualname__", type(transform).__name__))


def model_info(adapter: EncoderAdapter) -> dict:
    """The ``model`` block of a result; ``run`` (a trained model's training seed and the sha256 of its run's
    identity without the seed, :attr:`run` of the adapter) only where the adapter has one."""
    return {"name": adapter.name, "resolved_name": str(getattr(adapter, "resolved_name", adapter.name)),
            "pretrained": str(adapter.pretrained), "embed_dim": int(adapter.embed_dim),
            "cache_key": adapter.cache_key, "supports_images": bool(adapter.supports_images),
            "device": str(getattr(adapter, "device", "")), "precision": str(getattr(adapter, "precision", "")),
            "context_length": getattr(adapter, "context_length", None),
            "image_preprocessing": str(getattr(adapter, "preprocessing", "") or ""),
            "step": getattr(adapter, "step", None),
            **({"run": adapter.run} if getattr(adapter, "run", None) else {})}


def versions() -> dict:
    """Versions of Python and the libraries that shape the numbers (a new dict; the installed versions are looked
    up once per process: 10 ms a time)."""
    return dict(_installed_versions())


@functools.cache
def _installed_versions() -> dict:
    out = {"python": platform.python_version()}
    for dist in ("bindscope", "numpy", "torch", "open_clip_torch", "sentence-transformers", "scipy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def truncation_counts(adapter: EncoderAdapter, texts: list[str], captions: list[str]) -> dict:
    """``{"captions", "captions_truncated", "texts", "texts_truncated", "context_length"}`` over unique texts."""
    unique_captions = list(dict.fromkeys(captions))  # first-seen order: counts need no sort
    unique_texts = list(dict.fromkeys([*texts, *unique_captions]))
    flags = dict(zip(unique_texts, adapter.truncated(unique_texts)))
    return {"context_length": getattr(adapter, "context_length", None),
            "captions": len(unique_captions), "captions_truncated": sum(flags[c] for c in unique_captions),
            "texts": len(unique_texts), "texts_truncated": sum(flags.values())}


def encoder_counts(embedder: Embedder) -> dict:
    """The encoder part of ``counts``: unique inputs encoded, cache hits, seconds."""
    s = embedder.stats
    return {"texts_requested": s["texts_requested"], "images_requested": s["images_requested"],
            "texts_encoded": s["text_misses"], "images_encoded": s["image_misses"],
            "text_cache_hits": s["text_hits"], "image_cache_hits": s["image_hits"],
            "cache": embedder.cache is not None}


def envelope(kind: str, adapter: EncoderAdapter, dataset: dict | None, settings: dict, metrics: dict,
             counts: dict, schema: str = "eval_result") -> dict:
    """The one result envelope of every encoder result (evaluations, probes, LABCLIP): assemble it and
    validate it against ``schema`` (``eval_result``: with the registered tasks' blocks,
    :func:`bindscope.evaluation.tasks.schema.validate_result`; or ``alignment_result``; RuntimeError if it violates
    the schema: a bug)."""
    result = {"schema_version": SCHEMA_VERSION, "kind": kind, "model": model_info(adapter), "dataset": dataset,
              "settings": settings, "metrics": metrics, "counts": counts, "versions": versions()}
    check_result(result, schema, f"{schema.replace('_', ' ')} (internal error)")
    return result


def check_result(result: dict, schema: str, what: str) -> None:
    """RuntimeError unless ``result`` is valid against ``schema`` (``eval_result``: composed with the registered
    tasks' block schemas)."""
    if schema == "eval_result":
        from bindscope.evaluation.tasks.schema import validate_result

        validate_result(result, what, RuntimeError)
    else:
        validate(result, schema, what, error=RuntimeError)


def slug(text: str) -> str:
    """A file-name-safe form of a model name or tag: runs of other characters become ``-``."""
    return re.sub(r"[^A-Za-z0-9._]+", "-", text).strip("-") or "x"


def short_hash(text: str) -> str:
    """The first 8 hex digits of the sha256 of ``text`` (UTF-8): a short tag that keeps file names apart."""
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def samples_path(path: str | os.PathLike) -> Path:
    """Where the per-sample rows of the result file ``path`` go, beside it: ``<name>.samples.jsonl``, ``<name>``
    the file name without its ``.json`` suffix (``a=2.5.json`` and ``a=2.5`` -> ``a=2.5.samples.jsonl``; a dot
    elsewhere in the name is kept, so results named ``a=2.5`` and ``a=2.7`` keep their rows apart)."""
    path = Path(path)
    name = path.name[:-len(".json")] if path.name.lower().endswith(".json") else path.name
    return path.with_name(f"{name}.samples.jsonl")


def check_result_path(path: str | os.PathLike, overwrite: bool) -> Path:
    """Refuse an existing result file (or its per-sample file) unless ``overwrite``; refuse a folder path.

    Returns the Path. Raises BadInput naming the file.
    """
    path = Path(path)
    if path.is_dir():
        raise BadInput(f"out {str(path)!r} is a folder; give a .json file path", param="out")
    for existing in (path, samples_path(path)):
        if existing.exists() and not overwrite:
            what = "" if existing == path else f": its per-sample file {str(existing)!r}"
            raise BadInput(f"out {str(path)!r}{what} already exists; pass overwrite=True to replace it, or choose "
                           "another file", param="out")
    return path


def write_result(path: str | os.PathLike, result: dict, overwrite: bool = False, rows: list | None = None,
                 schema: str = "eval_result") -> Path:
    """Write ``result`` as canonical JSON, atomically, after validating it against ``bindscope/schemas/<schema>.json``.
    Refuses to overwrite silently.

    With ``rows`` (the per-sample output of an evaluation), they are written first, one canonical JSON object a
    line, to :func:`samples_path` (also atomically), so a result file never exists without its rows.
    """
    path = check_result_path(path, overwrite)
    check_result(result, schema, "evaluation result (internal error)")
    path.parent.mkdir(parents=True, exist_ok=True)
    if rows is not None:
        write_text_atomic(samples_path(path), "".join(json.dumps(r, sort_keys=True, ensure_ascii=False,
                                                                 separators=(",", ":")) + "\n" for r in rows))
    write_text_atomic(path, canonical_json(result))
    return path


def read_rows(path: str | os.PathLike) -> list[dict]:
    """The per-sample rows written beside a result file (``path`` is the result JSON or the ``.jsonl`` itself).

    Raises:
        BadInput: the file is missing or a line is not a JSON object (the file and line are named).
    """
    path = Path(path)
    if path.suffix == ".json":
        path = samples_path(path)
    if not path.is_file():
        raise BadInput(f"per-sample file {str(path)!r} does not exist")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise BadInput(f"{str(path)!r} line {number} is not JSON: {exc}") from None
        if not isinstance(row, dict):
            raise BadInput(f"{str(path)!r} line {number} is not a JSON object")
        rows.append(row)
    return rows
