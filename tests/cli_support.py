"""Shared helpers of the CLI tests: run a command inside a folder, and detect anything written under it."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner


def snapshot(root: Path) -> dict:
    """Every path under ``root`` with its size and modification time (to detect anything written)."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in Path(root).rglob("*")}


def invoke_in(root: Path, group, args):
    """Invoke the click ``group`` with ``args`` (stringified) with ``root`` as the working folder."""
    cwd = os.getcwd()
    os.chdir(root)
    try:
        return CliRunner().invoke(group, [str(a) for a in args], catch_exceptions=False)
    finally:
        os.chdir(cwd)
