"""Output folders bindscope may write into and delete: ownership marker, exclusive lock, worker lifetime.

These are the parts; writers use them through :mod:`bindscope.io.claim`, the one claim on an output folder (what
it holds, the lock, new / resume / overwrite, stage and rename, clean-up on every signal).

Every folder a bindscope run creates (a dataset, a ``madman train`` run, a sweep, a release) holds the marker
``.bindscope.json``::

    {"format": "bindscope-output", "kind": "dataset", "run_id": "<hex sha256 of the run>"}

A folder is *ours* only if it holds that marker with the expected ``kind``; a stranger's ``manifest.json`` or
``run.json`` does not make it ours. ``--overwrite`` clears only folders that are ours (:func:`clear_owned`),
refuses anything else with :class:`~bindscope.errors.BadInput` (exit status 2) and deletes nothing then.

A run holds :class:`OutputLock` on its folder from its first write to its last (``fcntl.flock`` on
``.bindscope.lock``, an advisory lock released by the kernel when the process dies, so a ``kill -9`` leaves no
stale lock: the lock file it leaves is free and taken over like any other). A second writer fails at once with
``BadInput`` naming the holder (pid, host, command). Parts of one run that share a folder take the lock shared,
so they run together, while a single run or an ``--overwrite`` needs it exclusive.

Paths are resolved (symlinks followed) before any check, and :func:`resolve_output` refuses an empty path and
the current folder or one of its ancestors: a run never writes into or clears the folder it was started from.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import stat
import sys
from pathlib import Path

from bindscope.errors import BadInput
from bindscope.io.atomic import write_text_atomic
from bindscope.io.canonical import canonical_json

MARKER = ".bindscope.json"
LOCK = ".bindscope.lock"
MARKER_FORMAT = "bindscope-output"


def resolve_output(path: str | os.PathLike, flag: str = "out") -> Path:
    """The absolute, symlink-free form of an output folder path, after refusing paths no run may use.

    Raises:
        BadInput: ``path`` is empty (it would mean the current folder), or it resolves to the current folder,
            one of its ancestors or the file-system root; the message names ``flag`` and the path.
    """
    if str(path).strip() == "":
        raise BadInput(f"{flag} is empty; give the path of a new or empty folder", param=flag)
    resolved = Path(path).expanduser().resolve()
    cwd = Path.cwd().resolve()
    if resolved == cwd or resolved in cwd.parents:
        what = "the current folder" if resolved == cwd else "an ancestor of the current folder"
        raise BadInput(f"{flag} {str(path)!r} is {what} ({str(resolved)!r}); give a new or empty folder "
                       f"below it, e.g. {str(Path(path) / 'out')!r}", param=flag)
    return resolved


def check_output_location(flag: str, path: str | os.PathLike) -> None:
    """Check that ``path`` (a file or folder a call will create, with any missing parent folders) can be
    written: :func:`resolve_output` accepts it, and its nearest existing ancestor is a writable folder.

    Call it before anything is written, for every output path. ``flag`` names the parameter in messages: a
    library parameter (``"out"``; the command line shows it as its flag) or a flag (``"--out"``).

    Raises:
        BadInput: ``path`` is empty, the current folder or an ancestor of it; an ancestor of ``path`` is a
            file (e.g. ``notes.txt/run``), or the folder the new path would go into is not writable; the
            message names the parameter, the path and that ancestor.
    """
    resolve_output(path, flag)
    path = Path(path)
    ancestor = path.absolute().parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise BadInput(f"{flag} {str(path)!r}: {str(ancestor)!r} is a file, not a folder; give a path inside a "
                       "folder", param=flag)
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise BadInput(f"{flag} {str(path)!r}: folder {str(ancestor)!r} is not writable; give a path in a "
                       "writable folder", param=flag)


def read_marker(folder: Path) -> dict | None:
    """The folder's ownership marker, or ``None`` when it has none, an unreadable one, or one that is not a
    regular file of its own (a symlink to another folder's marker makes nothing ours)."""
    try:
        fd = os.open(folder / MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            marker = json.loads(handle.read(1 << 16).decode("utf-8"))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    if not isinstance(marker, dict) or marker.get("format") != MARKER_FORMAT:
        return None
    return marker


def is_owned(folder: Path, kind: str) -> bool:
    """True when ``folder`` holds bindscope's marker of ``kind`` (e.g. ``"dataset"``, ``"train-run"``)."""
    marker = read_marker(folder)
    return marker is not None and marker.get("kind") == kind


def write_marker(folder: Path, kind: str, run_id: str) -> None:
    """Mark ``folder`` (which must exist) as bindscope's output of ``kind`` for the run ``run_id``."""
    write_text_atomic(folder / MARKER, canonical_json({"format": MARKER_FORMAT, "kind": kind, "run_id": run_id}))


def bookkeeping(name: str) -> bool:
    """True for the entries a starting run writes before its marker: lock files and temporary files."""
    return ((name.startswith(".bindscope") and name.endswith(".lock"))
            or (name.startswith(".") and name.endswith(".tmp")))


def require_owned(folder: Path, kind: str, what: str, flag: str = "out") -> None:
    """Raise :class:`BadInput` (nothing deleted) unless ``folder`` is bindscope's output of ``kind``.

    ``what`` names the kind for the message, e.g. ``"bindscope dataset"``.
    """
    if is_owned(folder, kind):
        return
    foreign = sorted(p.name for p in folder.iterdir() if not bookkeeping(p.name))
    example = f" (e.g. {foreign[0]!r})" if foreign else ""
    raise BadInput(f"{flag} {str(folder)!r} is not a {what} (it holds no {MARKER} marker of one){example}; "
                   "overwrite=True only replaces folders bindscope made: delete it yourself or choose another "
                   "folder", param=flag)


def clear_owned(folder: Path, kind: str, what: str, flag: str = "out") -> None:
    """Delete everything inside ``folder`` (not the folder itself) after :func:`require_owned`; the lock file
    is kept (the caller holds it)."""
    require_owned(folder, kind, what, flag)
    empty_but_locks(folder)


def empty_but_locks(folder: Path) -> None:
    """Delete everything inside ``folder`` but its lock files (a link is removed, never followed)."""
    for entry in folder.iterdir():
        if bookkeeping(entry.name) and entry.name.endswith(".lock"):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


_held: set[int] = set()  # descriptors of the OutputLocks this process holds


def _drop_locks_in_child() -> None:
    """In a forked child (e.g. the server process of a ``multiprocessing.Manager``): close the descriptors of
    the parent's locks. An ``flock`` lock belongs to the open file, which a fork shares, so a child that kept
    the descriptor would hold the folder after its parent's ``kill -9`` and the repeated command would be
    refused. Closing a shared descriptor does not unlock the parent's."""
    for fd in _held:
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


os.register_at_fork(after_in_child=_drop_locks_in_child)


def _holder_text() -> str:
    command = " ".join([Path(sys.argv[0]).name] + sys.argv[1:]) if sys.argv and sys.argv[0] else "python"
    return f"pid {os.getpid()} on {socket.gethostname()}: {command[:300]}"


class OutputLock:
    """An advisory lock on ``folder/.bindscope.lock`` (or ``name``), held from ``__enter__`` to ``__exit__``.

    Args:
        folder: the output folder; created (with parents) if missing.
        shared: take the lock shared (parts of one run in one folder) instead of exclusive.
        flag: the option named in the error message.
        name: lock file name inside ``folder``.

    Raises:
        BadInput: another process holds the lock (the message names it: pid, host, command).

    The lock file is removed when the last holder leaves; a holder that dies (even by ``kill -9``) releases
    the lock with its process. Only the process that took the lock holds it: processes forked from it while
    it is held (e.g. by :mod:`multiprocessing`) close their copy of the descriptor at once.
    """

    def __init__(self, folder: str | os.PathLike, shared: bool = False, flag: str = "out", name: str = LOCK):
        self.folder = Path(folder)
        self.path = self.folder / name
        self.shared = shared
        self.flag = flag
        self._fd: int | None = None

    def __enter__(self) -> "OutputLock":
        self.folder.mkdir(parents=True, exist_ok=True)
        mode = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
        while True:
            fd = self._open()
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                try:
                    holder = self.path.read_text(encoding="utf-8", errors="replace").strip() or "unknown"
                except OSError:
                    holder = "unknown"
                raise BadInput(f"{self.flag} {str(self.folder)!r} is in use by another bindscope run ({holder}); "
                               "wait until it ends, or choose another folder", param=self.flag) from None
            try:  # the file we locked must still be the one under the name (a leaving holder may remove it)
                same = os.fstat(fd).st_ino == os.lstat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, (_holder_text() + "\n").encode(), 0)
        self._fd = fd
        _held.add(fd)
        return self

    def _open(self) -> int:
        """Open (or create) the lock file without following a symlink: a planted link (even a dangling one)
        must not make a run truncate the file it points to or create one outside the folder."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise BadInput(f"lock file {str(self.path)!r} is a symlink; bindscope never writes through a "
                               "link it did not make: remove it", param=self.flag) from None
            raise BadInput(f"lock file {str(self.path)!r} cannot be opened ({exc.strerror})",
                           param=self.flag) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise BadInput(f"lock file {str(self.path)!r} is not a regular file: remove it", param=self.flag)
        return fd

    def moved(self, folder: str | os.PathLike) -> None:
        """Record that the held lock's folder was renamed to ``folder`` (the lock file moved with it), so that
        :meth:`__exit__` removes the file under its new name (see :mod:`bindscope.io.claim`'s publish)."""
        self.folder = Path(folder)
        self.path = self.folder / self.path.name

    def __exit__(self, *exc) -> None:
        fd, self._fd = self._fd, None
        if fd not in _held:  # not taken, or taken by the process this one was forked from
            return
        _held.discard(fd)
        try:  # remove the file only when no other holder shares it (upgrade fails while one does)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.path.unlink(missing_ok=True)
        except OSError:
            pass
        finally:
            os.close(fd)




