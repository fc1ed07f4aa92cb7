"""Shared helper of the ComCO render tests: one `comco render` through the CLI with a tiny config file."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from bindscope.cli.main import comco


def render_cli(folder: Path, config: dict, args: list[str], *extra: str) -> Path:
    """Write ``config`` to ``folder/tiny.yaml``, run ``comco`` with ``args`` + that config + ``--out folder/data`` +
    ``extra``, assert exit 0 and return the dataset folder."""
    cfg = folder / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(config))
    out = folder / "data"
    result = CliRunner().invoke(comco, [*args, "--config", str(cfg), "--out", str(out), *extra])
    assert result.exit_code == 0, result.output
    return out
