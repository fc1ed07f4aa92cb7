"""Atomic file writes: every file bindscope writes appears complete under its final name, or not at all.

A full disk (``ENOSPC``) or a spent quota (``EDQUOT``) while writing is :class:`bindscope.errors.DiskFull`, naming
the file: the temporary file is removed, the earlier file under the final name (if any) is left as it was.
"""

from __future__ import annotations

import errno
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Callable, Collection, Iterator

from bindscope.errors import DiskFull

_FULL = {errno.ENOSPC, errno.EDQUOT}
_HDF5_ERRNO = re.compile(r"\berrno = (\d+)")  # HDF5's error text: "file write failed: ..., errno = 28, ..."


def _full_errno(exc: BaseException | None) -> int | None:
    """The errno of a full disk or quota behind ``exc`` or the exceptions it was raised while handling: an
    OSError's ``errno``, or the ``errno = N`` in the text of an h5py error (HDF5 reports a failed write as
    RuntimeError or OSError, often while closing, after the first failure)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _FULL:
            return exc.errno
        if isinstance(exc, (OSError, RuntimeError)):
            match = _HDF5_ERRNO.search(str(exc))
            if match and int(match.group(1)) in _FULL:
                return int(match.group(1))
        exc = exc.__context__
    return None


def disk_full(exc: BaseException, path: str | os.PathLike) -> DiskFull | None:
    """``exc`` as a :class:`~bindscope.errors.DiskFull` naming ``path`` (the file being written) if a full disk
    or quota caused it (see :func:`_full_errno`), else None."""
    if isinstance(exc, DiskFull):
        return exc
    number = _full_errno(exc)
    if number is None:
        return None
    return DiskFull(number, os.strerror(number), os.fsdecode(path))


@contextmanager
def reporting_disk_full(path: str | os.PathLike) -> Iterator[None]:
    """Within the block, an OSError of a full disk or quota becomes :class:`~bindscope.errors.DiskFull` naming the
    file it names (``filename``), else ``path`` (e.g. the output folder of a whole run)."""
    try:
        yield
    except (OSError, RuntimeError) as exc:
        full = disk_full(exc, getattr(exc, "filename", None) or path)
        if full is None or full is exc:
            raise
        raise full from None

_TEMP_NAME = re.compile(r"\.(?P<name>.+)\.[0-9]+\.tmp")  # the temporary names of atomic_path


@contextmanager
def atomic_path(path: str | os.PathLike, before_rename: Callable[[], None] | None = None) -> Iterator[Path]:
    """The one temp-file-and-rename writer: yield a temporary path beside ``path`` for the caller to write (any
    writer that needs a file name: h5py, a hard link, a copy); on success fsync it and rename it onto ``path``.

    If the block raises, the temporary file is removed and ``path`` is left as it was; a full disk (in the block,
    at fsync or at the rename) is :class:`~bindscope.errors.DiskFull` naming ``path``. The temporary name is
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
    except (OSError, RuntimeError) as exc:
        full = disk_full(exc, path)
        if full is None or full is exc:
            raise
        raise full from None
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


@contextmanager
def atomic_hdf5(path: str | os.PathLike, before_rename: Callable[[], None] | None = None,
                **file_options) -> Iterator:
    """An :class:`h5py.File` built in memory (HDF5's ``core`` driver, no backing store) and, when the block
    ends without error, written to ``path`` atomically (:func:`atomic_path`) with plain writes.

    HDF5 must never meet a full disk itself: a write that fails inside the library (``errno = 28``) leaves its
    objects in a state that crashes the process (segmentation fault) when they are closed or collected, after
    any error message. Here the library writes only to memory, and a full disk is an ordinary ``ENOSPC`` in
    :func:`atomic_path`, hence :class:`~bindscope.errors.DiskFull` naming ``path``.

    Bytes: the same calls give the same file, for any process. They are those HDF5 writes to a file directly
    except at the end: the image is taken while the file is still open, so it keeps the free space HDF5 gives
    back when it closes a file (1 KiB of zeros in bindscope's shards) and the superblock's end-of-file address
    says so. Memory: the file as written (compressed), held once while the block runs and twice for the moment
    HDF5 hands the image over; nothing else.

    ``file_options`` go to :class:`h5py.File` (e.g. ``libver="v110", track_order=False``).
    """
    import uuid

    import h5py

    name = f"bindscope-memory-{os.getpid()}-{uuid.uuid4().hex}.h5"  # the core driver's name for the image only
    with h5py.File(name, "w", driver="core", backing_store=False, **file_options) as file:
        yield file
        file.flush()
        image = file.id.get_file_image()
    with atomic_path(path, before_rename) as tmp, open(tmp, "wb") as handle:
        handle.write(image)

