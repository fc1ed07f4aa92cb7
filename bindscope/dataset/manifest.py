"""The dataset manifest (``manifest.json``): canonical JSON, hashing, atomic text writes, loading."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from bindscope.atomic import write_text_atomic  # noqa: F401 - re-exported for the dataset modules
from bindscope.errors import DatasetError
from bindscope.schemas import validate

MANIFEST = "manifest.json"


def canonical_json(obj: object) -> str:
    """JSON with sorted keys and 2-space indent, ending in a newline: the byte form of every JSON file written."""
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def config_sha256(generator: str, config: dict, seed: int) -> str:
    """Hex sha256 identifying a run: the generator name, the resolved config and the seed."""
    text = json.dumps({"generator": generator, "config": config, "seed": seed}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def load_manifest(directory: str | os.PathLike) -> dict:
    """Load and schema-validate ``<directory>/manifest.json``.

    Raises:
        DatasetError: the folder or manifest is missing, not JSON, or does not match the manifest schema.
    """
    directory = Path(directory)
    path = directory / MANIFEST
    if not directory.is_dir():
        raise DatasetError(f"dataset folder {str(directory)!r} does not exist")
    if not path.is_file():
        raise DatasetError(f"{str(directory)!r} is not a finished bindscope dataset: it has no {MANIFEST} "
                           "(an interrupted run resumes when you repeat its command)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: not valid JSON ({exc})") from None
    validate(manifest, "manifest", str(path), error=DatasetError)
    return manifest
