"""Canonical JSON and hashing: the byte form of every JSON file bindscope writes, run ids and file checksums."""

from __future__ import annotations

import hashlib
import json
import os


def canonical_json(obj: object) -> str:
    """JSON with sorted keys and 2-space indent, ending in a newline: the byte form of every JSON file written."""
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def config_sha256(generator: str, config: dict, seed: int) -> str:
    """Hex sha256 identifying a run: the generator name, the resolved config and the seed."""
    text = json.dumps({"generator": generator, "config": config, "seed": seed}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
