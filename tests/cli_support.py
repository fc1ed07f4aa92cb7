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


def numeric_options() -> list[tuple[list[str], object, object]]:
    """``(command path, click command, option)`` for every option of every command whose value is a number,
    e.g. ``(["madman", "generate"], <generate>, <--jobs>)``."""
    import click

    from bindscope.cli.main import bindscope, comco, madman
    from bindscope.cli.train import TableValue

    found = []
    for root in (madman, comco, bindscope):
        stack = [([root.name], root)]
        while stack:
            path, command = stack.pop()
            if isinstance(command, click.Group):
                stack.extend((path + [name], sub) for name, sub in sorted(command.commands.items(), reverse=True))
                continue
            found += [(path, command, param) for param in command.params
                      if isinstance(param.type, (click.types.IntParamType, click.types.FloatParamType, TableValue))]
    return found


def out_of_range(param) -> list[str]:
    """Values just outside ``param``'s range (an integer: one past each end; a float: ``nan`` and, with an upper
    end, beyond it), as command-line text."""
    import click

    from bindscope.cli.train import TableValue

    kind = param.type
    low, high = (kind.row.low, kind.row.high) if isinstance(kind, TableValue) else (kind.min, kind.max)
    if (kind.row.type is int) if isinstance(kind, TableValue) else not isinstance(kind, click.FloatRange):
        return [str(int(high) + 1), str(int(low) - 1)]
    return ["nan"] + ([repr(float(high) * 2 + 1)] if high is not None else [])


def refused(group, args, root, *needles: str) -> str:
    """Invoke ``group args`` in ``root``; assert exit status 2, one ``Error:`` line holding every needle (click's
    own "Usage:" / "Try" lines aside) and nothing changed under ``root``; return the line."""
    before = snapshot(root)
    result = invoke_in(root, group, args)
    lines = [line for line in result.output.splitlines()
             if line.strip() and not line.startswith(("Usage: ", "Try '"))]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert snapshot(root) == before, "something was written"
    return lines[0]
