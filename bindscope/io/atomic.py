"""Atomic file writes: every file bindscope writes appears complete under its final name, or not at all."""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Callable, Collection, Iterator

_TEMP_NAME = re.compile(r"\.(?P<name>.+)\.[0-9]+\.tmp")  # the temporary names of atomic_path


@contextmanager
def atomic_path(path: str | os.PathLike, before_rename: Callable[[], None] | None = None) -> Iterator[Path]:
    """The one temp-file-and-rename writer: yield a temporary path beside ``path`` for the caller to write (any
    writer that needs a file name: h5py, a hard link, a copy); on success fsync it and rename it onto ``path``.

    If the block raises, the temporary file is removed and ``path`` is left as it was. The temporary name is
    ``.<name>.<pid>.tmp`` in the same folder, so the rename is atomic on POSIX file systems (and a stale one
    left by a killed process is recognisable, see :func:`remove_temp_files`). ``before_rename()``, if given,
    is called once the temporary file is fsynced, right before the rename.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        if before_rename is not None:
            before_rename()
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def remove_temp_files(folder: str | os.PathLike, names: Collection[str] | None = None) -> None:
    """Delete the temporary files (``.<name>.<pid>.tmp`` of :func:`atomic_path`, any pid) that writers killed
    before their rename (e.g. by ``kill -9``) left in ``folder``: those of the final names ``names``, or all.

    Call it only while no other process writes into ``folder`` (under its exclusive lock, see
    :class:`bindscope.io.ownership.OutputLock`): a live writer's temporary file would be removed too.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        match = _TEMP_NAME.fullmatch(entry.name)
        if match and (names is None or match["name"] in names) and entry.is_file() and not entry.is_symlink():
            entry.unlink(missing_ok=True)


@contextmanager
def atomic_open(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``path`` for binary writing; on success it replaces ``path`` (see
    :func:`atomic_path`)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        yield handle


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
