"""The one cache folder of bindscope (MNIST digit tables, embeddings), and the rules every cache follows.

``$BINDSCOPE_CACHE`` if set, else ``$XDG_CACHE_HOME/bindscope``, else ``~/.cache/bindscope``. Everything in it
can be deleted at any time; it is rebuilt on demand.

A cache only saves time; it never changes a result and never stops a run:

- a cache folder that cannot be written (a file in its place, a read-only folder or disk) costs one
  :class:`CacheWarning` per folder and process (:func:`writable_folder`, :func:`cache_unusable`), and the work goes
  on uncached;
- an entry is read with :func:`read_npz` (a regular file, only the arrays expected, each of the expected dtype and
  rank, sizes bounded, never a pickle) and used only after its reader has checked it against what it claims to
  come from (the glyph table against its digits, an embedding chunk against its model and inputs); anything else
  is a :class:`CacheWarning` and the entry is rebuilt.
"""

from __future__ import annotations

import os
import stat
import tempfile
import warnings
import zipfile
from pathlib import Path

import numpy as np


class CacheWarning(UserWarning):
    """A cache folder cannot be written, or a cache entry failed its checks: the work goes on without it."""


_WARNED: set[str] = set()


def cache_root() -> Path:
    """The bindscope cache folder (not created here)."""
    if os.environ.get("BINDSCOPE_CACHE"):
        return Path(os.environ["BINDSCOPE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "bindscope"


def _culprit(folder: Path) -> Path:
    """The path to blame when ``folder`` cannot be written: the nearest existing path on the way to it."""
    for path in (folder, *folder.parents):
        if os.path.lexists(path):
            return path
    return folder


def cache_unusable(folder: str | os.PathLike, exc: OSError | None = None) -> None:
    """Warn (:class:`CacheWarning`, once per culprit folder and process) that ``folder`` cannot be written."""
    culprit = _culprit(Path(folder))
    if str(culprit) in _WARNED:
        return
    _WARNED.add(str(culprit))
    if culprit.exists() and not culprit.is_dir():
        why = "is not a folder"
    else:
        why = f"cannot be written ({(exc.strerror if exc is not None else None) or exc or 'read-only'})"
    warnings.warn(f"cache folder {str(culprit)!r} {why}: going on without caching (set BINDSCOPE_CACHE or "
                  "--cache-dir to a writable folder)", CacheWarning, stacklevel=3)


def writable_folder(folder: str | os.PathLike) -> bool:
    """Create ``folder`` (and its parents) if needed and check that a file can be created in it (a real probe,
    so a read-only file system and an unwritable folder count, whoever runs). False after one
    :class:`CacheWarning` (see :func:`cache_unusable`) otherwise."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".write-probe-", dir=folder)
        os.close(handle)
        os.unlink(probe)
        return True
    except OSError as exc:
        cache_unusable(folder, exc)
        return False


def warn_entry(path: str | os.PathLike, why: str) -> None:
    """One :class:`CacheWarning` naming a cache entry that is not used (``why``) and is rebuilt."""
    warnings.warn(f"cache entry {str(path)!r} {why}: not used, rebuilt", CacheWarning, stacklevel=3)


class EntryRefused(ValueError):
    """A cache file is not a sound cache entry (see :func:`read_npz`); the message says why."""


def read_npz(path: str | os.PathLike, expected: dict[str, tuple[str, int]], max_bytes: int) -> dict[str, np.ndarray]:
    """The arrays of a cache file written by ``np.savez``, read without trusting it.

    Args:
        path: the file; it must be a regular file (not a link, FIFO or device) of at most ``max_bytes``.
        expected: array name -> (dtype string such as ``"<f4"`` or ``"|u1"``, number of dimensions). The file must
            hold exactly these arrays; each must have that dtype and rank, C order, and no more data than its
            member of the archive holds (so a header cannot make the reader allocate more than the file's size).
        max_bytes: the largest file (and the largest total of its uncompressed arrays) accepted.

    Returns:
        name -> array (the data copied out, never unpickled).

    Raises:
        FileNotFoundError, NotADirectoryError: no such file. EntryRefused: anything else wrong (the message says
            what).
    """
    try:
        handle = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except (FileNotFoundError, NotADirectoryError):
        raise
    except OSError as exc:
        raise EntryRefused(f"cannot be opened ({exc.strerror})") from None
    with os.fdopen(handle, "rb") as raw:
        info = os.fstat(raw.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise EntryRefused("is not a regular file")
        if info.st_size > max_bytes:
            raise EntryRefused(f"is larger than {max_bytes} bytes")
        try:
            with zipfile.ZipFile(raw) as archive:
                members = {m.filename: m for m in archive.infolist()}
                if sorted(members) != sorted(f"{name}.npy" for name in expected):
                    raise EntryRefused(f"holds {sorted(members)}, not the arrays {sorted(expected)}")
                if sum(m.file_size for m in members.values()) > max_bytes:
                    raise EntryRefused(f"expands to more than {max_bytes} bytes")
                return {name: _read_member(archive, members[f"{name}.npy"], dtype, ndim)
                        for name, (dtype, ndim) in expected.items()}
        except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as exc:
            if isinstance(exc, EntryRefused):
                raise
            raise EntryRefused(f"is not a sound .npz file ({type(exc).__name__}: {exc})") from None


def _read_member(archive: zipfile.ZipFile, member: zipfile.ZipInfo, dtype: str, ndim: int) -> np.ndarray:
    from numpy.lib import format as npy

    with archive.open(member) as stream:
        version = npy.read_magic(stream)
        if version == (1, 0):
            shape, fortran, found = npy.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, fortran, found = npy.read_array_header_2_0(stream)
        else:
            raise EntryRefused(f"{member.filename}: .npy version {version} is not allowed")
        if found.str != np.dtype(dtype).str or found.hasobject or len(shape) != ndim or fortran:
            raise EntryRefused(f"{member.filename}: {found.str} {'Fortran' if fortran else 'C'}-order array of "
                               f"shape {shape}, not a {np.dtype(dtype).str} array of {ndim} dimensions")
        size = int(np.prod(shape, dtype=np.int64)) * found.itemsize
        if size > member.file_size:
            raise EntryRefused(f"{member.filename}: its header claims more data than it holds")
        data = stream.read(size)
        if len(data) != size or stream.read(1):
            raise EntryRefused(f"{member.filename}: holds {len(data)} data bytes, not {size}")
    return np.frombuffer(bytearray(data), dtype=found).reshape(shape)  # writable, as np.load gives
