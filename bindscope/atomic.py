"""Atomic file writes: every file bindscope writes appears complete under its final name, or not at all."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator


@contextmanager
def atomic_open(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``path`` for binary writing; on success fsync it and rename it onto ``path``.

    If the block raises, the temporary file is removed and ``path`` is left as it was. The temporary name is
    ``.<name>.<pid>.tmp`` in the same folder, so the rename is atomic on POSIX file systems.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`atomic_open`)."""
    with atomic_open(path) as handle:
        handle.write(text.encode("utf-8"))


def save_figure(fig, path: str | os.PathLike, dpi: int = 120, **savefig_kwargs) -> Path:
    """Save a matplotlib figure atomically (format from the suffix, e.g. ``.png``), close it, return the path.

    ``savefig_kwargs`` (e.g. ``facecolor="#404040"``) go to :meth:`matplotlib.figure.Figure.savefig`.
    """
    import matplotlib.pyplot as plt

    path = Path(path)
    try:
        with atomic_open(path) as handle:
            fig.savefig(handle, dpi=dpi, format=path.suffix.lstrip(".").lower() or "png", **savefig_kwargs)
    finally:
        plt.close(fig)
    return path
