"""The dataset manifest (``manifest.json``): canonical JSON, hashing, atomic text writes, loading."""

from __future__ import annotations

import os
from pathlib import Path

from bindscope.errors import BadInput, DatasetError
from bindscope.io.canonical import config_sha256
from bindscope.io.inside import file_inside
from bindscope.io.json_input import parse_json
from bindscope.schemas import validate

MANIFEST = "manifest.json"


def load_manifest(directory: str | os.PathLike, consistent: bool = True, param: str = "data") -> dict:
    """Load and schema-validate ``<directory>/manifest.json``; with ``consistent`` also refuse a manifest that
    contradicts itself (see :func:`manifest_problems`).

    Raises:
        DatasetError (its ``param`` is ``param``): the folder is missing or a file, the manifest is missing,
            not JSON, does not match the manifest schema, or (``consistent``) contradicts itself; the message
            names the file.
    """
    directory = Path(directory)
    path = directory / MANIFEST
    if directory.is_file():
        raise DatasetError(f"{str(directory)!r} is a file, not a dataset folder", param=param)
    if not directory.is_dir():
        raise DatasetError(f"dataset folder {str(directory)!r} does not exist", param=param)
    if not (path.exists() or path.is_symlink()):
        raise DatasetError(f"{str(directory)!r} is not a finished bindscope dataset: it has no {MANIFEST} "
                           "(an interrupted run resumes when you repeat its command)", param=param)
    file_inside(directory, MANIFEST, "manifest", DatasetError)
    try:
        manifest = parse_json(path.read_bytes(), str(path), param)
    except BadInput as exc:  # not UTF-8, nested too deeply, not JSON
        raise DatasetError(str(exc), param=param) from None
    validate(manifest, "manifest", str(path), error=DatasetError)
    problems = manifest_problems(manifest) if consistent else []
    if problems:
        raise DatasetError(f"{path}: {problems[0]}", param=param)
    return manifest


def manifest_problems(manifest: dict) -> list[str]:
    """What contradicts itself in a schema-valid manifest: ``config_sha256`` against the hash of its own
    generator, config and seed; per split, shard first indices that are not consecutive from 0, a sum of shard
    counts other than ``num_samples``; a shard file listed twice; repeated attribute names."""
    problems = []
    expected = config_sha256(manifest["generator"]["name"], manifest["config"], manifest["seed"])
    if manifest["config_sha256"] != expected:
        problems.append(f"config_sha256 {manifest['config_sha256'][:12]}.. is not the hash of the manifest's own "
                        f"generator, config and seed ({expected[:12]}..): the manifest was edited")
    seen: set[str] = set()
    for split, info in manifest["splits"].items():
        start = 0
        for entry in info["shards"]:
            if entry["file"] in seen:
                problems.append(f"split {split}: {entry['file']} is listed twice")
            seen.add(entry["file"])
            if entry["first_index"] != start:
                problems.append(f"split {split}: {entry['file']} starts at {entry['first_index']}, expected {start}")
            start = entry["first_index"] + entry["count"]
        total = sum(e["count"] for e in info["shards"])
        if total != info["num_samples"]:
            problems.append(f"split {split}: shards hold {total} samples, num_samples says {info['num_samples']}")
    for key in ("object_attributes", "object_extras"):
        if len(set(manifest[key])) != len(manifest[key]):
            problems.append(f"{key} repeats a name: {manifest[key]}")
    return problems
