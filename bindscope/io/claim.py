"""One claim on an output path, used by every writer: what it holds, the lock, new / resume / overwrite, stage
and rename, and clean-up on every signal.

A writer describes its output once, as an :class:`OutputKind`, checks the path before any slow work with
:func:`check_output` (writes nothing) and claims it with :func:`claim_output` before its first write::

    DATASET = OutputKind("dataset", "bindscope dataset", identity="config or seed", finished=..., claim_files=(...))

    claim = claim_output(out, DATASET, run_id, overwrite=overwrite)  # BadInput here: nothing written
    with claim:                                                      # locked, decided again, claimed
        if claim.decision == "done": ...
        ...write into claim.path (or claim.staging(), then claim.publish())...

**What a folder holds** (:func:`inspect_output`): ``"new"`` (missing, or nothing but bookkeeping files, see
:func:`bindscope.io.ownership.bookkeeping`, and empty folders: e.g. the stale ``.bindscope.lock`` a ``kill -9``
leaves, which is taken over like any lock file nobody holds); ``"ours"`` (bindscope's marker of this kind: the run
that made it and whether it is finished); ``"foreign"`` (anything else, another command's output included).

**The decision** (:attr:`OutputClaim.decision`), made in this one place for every writer:

====================================  ===================================================================
folder                                decision
====================================  ===================================================================
new                                   ``"new"``
foreign                               :class:`~bindscope.errors.BadInput` (with ``overwrite`` too)
ours, this run, finished              ``"done"`` (a staged kind: needs ``overwrite``, like another run)
ours, this run, unfinished            ``"resume"``
ours, another run, ``extends`` true   ``"extend"`` (never with ``overwrite``)
ours, another run                     ``"overwrite"`` with ``overwrite``, else BadInput
====================================  ===================================================================

**A claim's life** (``with claim:``):

1. Enter: the lock (:class:`~bindscope.io.ownership.OutputLock` on ``<folder>/.bindscope.lock``; the folder and
   missing parents are created); SIGTERM and SIGHUP interrupt like Ctrl-C (``KeyboardInterrupt``, see
   :func:`bindscope.io.workers.terminate_as_interrupt`); the folder is inspected and the decision made again under
   the lock (BadInput if another command changed it meanwhile: nothing another command finished is deleted, not
   even another run's output of this kind that appeared after the first decision).
   Then, with an exclusive lock: what killed runs left is removed (temporary files in the folder, staging and
   scratch folders beside it); ``"overwrite"`` of an unstaged kind deletes everything in the folder but the lock;
   an unstaged kind writes its marker (the claim) for ``"new"``, ``"overwrite"`` and ``"extend"``.
2. The writer works. A staged kind writes into :meth:`OutputClaim.staging` and calls :meth:`OutputClaim.publish`,
   which marks the staging folder and exchanges it with the folder in one rename (an earlier output is deleted
   after it, still under the lock).
3. Exit: staging and scratch folders are removed. After an exception (a signal's ``KeyboardInterrupt``
   included), a folder that holds nothing but the claim (marker, the kind's ``claim_files``, empty folders,
   bookkeeping files) is emptied, and it is removed with the parents the claim created: a command that fails
   before its first byte of output leaves no claimed folder. The lock is released last.

A ``kill -9`` leaves the lock file (the kernel releases the lock), perhaps a staging folder (removed by the next
claim) and, for an unstaged kind, a resumable folder.

**A file** (``bindscope export open-clip-config``): :func:`claim_file` locks ``.bindscope-<name>.lock`` beside it
and lets ``overwrite`` replace only a file the kind's ``owns`` test accepts; the file is written atomically
(:mod:`bindscope.io.atomic`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import shutil
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from bindscope.errors import BadInput
from bindscope.io.atomic import remove_temp_files
from bindscope.io.ownership import (LOCK, MARKER, OutputLock, bookkeeping, empty_but_locks, read_marker,
                                    resolve_output, write_marker)
from bindscope.io.workers import terminate_as_interrupt

DECISIONS = ("new", "resume", "done", "extend", "overwrite")
_SIBLINGS = ("staging", "scratch", "old")  # folders a claim makes beside its folder


@dataclass(frozen=True)
class OutputKind:
    """How one writer's output is recognised and claimed.

    Attributes:
        kind: the marker's kind (``.bindscope.json``, see :mod:`bindscope.io.ownership`), e.g. ``"dataset"``.
        what: the output named in messages, e.g. ``"bindscope dataset"``.
        identity: what tells two runs apart, for messages, e.g. ``"config or seed"``.
        staged: the writer builds its output in a staging folder and publishes it whole (no resume; a finished
            output of any run is replaced only with ``overwrite``).
        finished: ``finished(folder, run_id) -> bool``: whether the folder marked by ``run_id`` is complete
            (None: always, e.g. a staged output).
        claim_files: files the writer writes when it claims the folder (e.g. a run record), removed with the
            marker when the run fails before any other output.
        run_of: ``run_of(folder) -> str | None``: the run id of a folder that holds this kind's marker, where the
            writer keeps it elsewhere (e.g. in its run record); None: the marker's ``run_id``.
    """

    kind: str
    what: str
    identity: str = "settings"
    staged: bool = False
    finished: Callable[[Path, str], bool] | None = None
    claim_files: tuple[str, ...] = ()
    run_of: Callable[[Path], str | None] | None = None


@dataclass(frozen=True)
class FolderState:
    """What an output folder holds (:func:`inspect_output`).

    Attributes:
        holds: ``"new"``, ``"ours"`` or ``"foreign"``.
        run_id: the run that made an ``"ours"`` folder (its marker's ``run_id``, or the kind's ``run_of``), else
            None.
        finished: an ``"ours"`` folder is complete (the kind's ``finished`` test).
        example: for ``"foreign"``: an entry of the folder, or the kind of another command's marker.
    """

    holds: str
    run_id: str | None = None
    finished: bool = False
    example: str | None = None


def _only_claim(folder: Path, spare: set[str]) -> bool:
    """True when ``folder`` (and its subfolders) hold no file but bookkeeping files and the names ``spare``."""
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            if not _only_claim(entry, set()):
                return False
        elif not (bookkeeping(entry.name) or entry.name in spare):
            return False
    return True


def inspect_output(path: str | os.PathLike, kind: OutputKind) -> FolderState:
    """What the folder ``path`` holds for a writer of ``kind`` (reads only; ``path`` as given, not resolved).

    Raises:
        BadInput: ``path`` exists and is not a folder (or is a symlink to one).
    """
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise BadInput(f"out {str(path)!r} exists and is not a folder", param="out")
    if not path.is_dir() or _only_claim(path, set()):
        return FolderState("new")
    marker = read_marker(path)
    if marker is None:
        entries = sorted(p.name for p in path.iterdir() if not bookkeeping(p.name))
        return FolderState("foreign", example=repr(entries[0]) if entries else None)
    if marker.get("kind") != kind.kind:
        return FolderState("foreign", example=f"a bindscope {marker.get('kind')!r} output")
    run_id = kind.run_of(path) if kind.run_of is not None else marker.get("run_id")
    run_id = run_id if isinstance(run_id, str) else None
    finished = kind.finished is None or (run_id is not None and bool(kind.finished(path, run_id)))
    return FolderState("ours", run_id, finished)


def _foreign(path: Path, kind: OutputKind, state: FolderState, overwrite: bool, flag: str) -> BadInput:
    if state.example and state.example.startswith("a bindscope"):
        held = f" (it holds {state.example})"
    else:
        held = f" (it holds no {MARKER} marker of one" + (f"; e.g. {state.example})" if state.example else ")")
    return BadInput(f"{flag} {str(path)!r} is not empty and is not a {kind.what}{held}; choose a new or empty "
                    "folder" + ("; overwrite=True only replaces a folder this command made: delete it yourself if "
                                "you mean to" if overwrite else ""), param=flag)


def _decide(path: Path, kind: OutputKind, run_id: str | None, overwrite: bool, flag: str,
            extends: Callable[[Path], bool] | None) -> tuple[str, FolderState]:
    """The decision (see the module docstring) and the state it was made on; ``run_id=None``: the early check
    (any run of this kind)."""
    state = inspect_output(path, kind)
    if state.holds == "new":
        return "new", state
    if state.holds == "foreign":
        raise _foreign(path, kind, state, overwrite, flag)
    if kind.staged:
        if overwrite:
            return "overwrite", state
        raise BadInput(f"{flag} {str(path)!r} is not empty: it holds a {kind.what}; pass overwrite=True to "
                       "replace it, or choose another folder", param=flag)
    if run_id is None:
        return ("overwrite" if overwrite else "resume"), state
    if state.run_id == run_id:
        return ("done" if state.finished else "resume"), state
    if state.finished and extends is not None and not overwrite and extends(path):
        return "extend", state
    if overwrite:
        return "overwrite", state
    how = "finished" if state.finished else "unfinished: repeat its own command to resume it"
    raise BadInput(f"{flag} {str(path)!r} is not empty: it holds another {kind.what} ({how}), made with another "
                   f"{kind.identity}; pass overwrite=True to replace it, or choose another folder", param=flag)


def check_output(out: str | os.PathLike, kind: OutputKind, overwrite: bool = False, flag: str = "out") -> Path:
    """The early check, before any slow work and before the run is known: refuse what no run of this ``kind``
    could use. Writes nothing.

    Returns:
        ``out`` resolved (absolute, symlinks followed; see :func:`bindscope.io.ownership.resolve_output`).

    Raises:
        BadInput: ``out`` is empty, the current folder or an ancestor of it, a file; it is not empty and not this
            kind's output (with ``overwrite`` too); or, for a staged kind, an earlier output without
            ``overwrite``. The message names ``flag`` and the folder.
    """
    path = resolve_output(out, flag)
    _decide(path, kind, None, overwrite, flag, None)
    return path


def claim_output(out: str | os.PathLike, kind: OutputKind, run_id: str, *, overwrite: bool = False,
                 flag: str = "out", shared: bool = False,
                 extends: Callable[[Path], bool] | None = None) -> "OutputClaim":
    """Check the folder ``out`` for the run ``run_id`` of ``kind`` and return its claim, not yet entered (nothing
    written yet); enter it (``with``) before the first write.

    Args:
        out: the output folder (resolved first: symlinks followed).
        kind: the writer's :class:`OutputKind`.
        run_id: what names this run (e.g. the hex sha256 of its config); the marker records it.
        overwrite: replace another run's output of this kind (never a foreign folder, never another kind's).
        flag: the parameter named in messages (``"out"``; the command line shows its flag).
        shared: take the lock shared (parts of one run writing into one folder together): no clean-up of what
            killed runs left, no removal on failure; a decision ``"overwrite"`` takes it exclusive (so the parts
            of an overwriting run after the first are refused while it holds the folder).
        extends: ``extends(folder) -> bool`` for a finished output of another run that this run continues
            (e.g. a smaller dataset of the same config): decision ``"extend"``.

    Returns:
        An :class:`OutputClaim`; ``claim.decision`` is one of :data:`DECISIONS` (made again on entering).

    Raises:
        BadInput: see :func:`check_output`; ``out`` holds another run's output without ``overwrite``.
    """
    path = resolve_output(out, flag)
    decision, seen = _decide(path, kind, run_id, overwrite, flag, extends)
    return OutputClaim(path, kind, run_id, decision, seen, overwrite, flag, shared, extends)


def _first_missing(path: Path) -> Path | None:
    """The outermost missing folder on the way to ``path`` (None when ``path`` exists)."""
    if path.exists() or path.is_symlink():
        return None
    while not path.parent.exists():
        path = path.parent
    return path


def _sibling_pattern(path: Path) -> re.Pattern:
    return re.compile(re.escape(f".{path.name}.bindscope-") + f"({'|'.join(_SIBLINGS)})" + r"-[0-9]+\.tmp")


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Within the block, SIGINT, SIGTERM and SIGHUP wait (delivered when it ends): in the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _exchange(a: Path, b: Path) -> None:
    """Swap the folders ``a`` and ``b`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``); where the system or the
    file system cannot, two renames (``a`` to ``b`` is missing in between)."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
        renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    except (OSError, AttributeError):
        renameat2 = None
    if renameat2 is not None:
        at_cwd, exchange = -100, 2  # AT_FDCWD, RENAME_EXCHANGE (linux/fs.h)
        if renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), exchange) == 0:
            return
        number = ctypes.get_errno()
        if number not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
            raise OSError(number, os.strerror(number), str(a), None, str(b))
    aside = b.with_name(f"{b.name}.swap")
    os.rename(b, aside)
    os.rename(a, b)
    os.rename(aside, a)


class OutputClaim:
    """The claim of one run on one output folder (made by :func:`claim_output`; see the module docstring).

    Attributes:
        path: the folder (absolute, symlinks resolved).
        kind: the writer's :class:`OutputKind`. run_id: this run's id (recorded in the marker).
        decision: one of :data:`DECISIONS`; made again when the claim is entered.
    """

    def __init__(self, path: Path, kind: OutputKind, run_id: str, decision: str, seen: FolderState,
                 overwrite: bool, flag: str, shared: bool, extends: Callable[[Path], bool] | None):
        self.path, self.kind, self.run_id, self.decision = path, kind, run_id, decision
        self._seen = seen  # what the folder held when the decision was first made
        self._overwrite, self._flag, self._extends = overwrite, flag, extends
        self._shared = shared and decision != "overwrite"  # an overwrite is made under the exclusive lock
        self._stack: contextlib.ExitStack | None = None
        self._lock: OutputLock | None = None
        self._created: Path | None = None
        self._siblings: list[Path] = []

    # ------------------------------------------------------------------------------------------- entering
    def __enter__(self) -> "OutputClaim":
        if self._stack is not None:
            raise RuntimeError("an output claim is entered once")
        self._created = _first_missing(self.path)
        stack = contextlib.ExitStack()
        try:
            stack.enter_context(terminate_as_interrupt())
            self._lock = stack.enter_context(OutputLock(self.path, shared=self._shared, flag=self._flag))
            self.decision, state = _decide(self.path, self.kind, self.run_id, self._overwrite, self._flag,
                                           self._extends)
            if self.decision == "overwrite" and (self._shared or state != self._seen):
                raise BadInput(f"{self._flag} {str(self.path)!r} changed while this command started (another run's "
                               "output is there now); nothing was deleted: repeat the command", param=self._flag)
            if not self._shared:
                remove_temp_files(self.path)
                self._remove_leftovers()
            if self.decision == "overwrite" and not self.kind.staged:
                self._clear()
            if not self.kind.staged and self.decision in ("new", "overwrite", "extend"):
                write_marker(self.path, self.kind.kind, self.run_id)
        except BaseException:
            self._stack = stack
            self.__exit__(*sys.exc_info())
            raise
        self._stack = stack
        return self

    def _remove_leftovers(self) -> None:
        """Delete the staging, scratch and set-aside folders that claims killed before their clean-up (``kill -9``)
        left beside the folder; only the holder of the exclusive lock makes them, so none is alive."""
        pattern = _sibling_pattern(self.path)
        for entry in self.path.parent.iterdir():
            if pattern.fullmatch(entry.name) and entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)

    def _clear(self) -> None:
        """Delete everything in the folder but the lock files: only this kind's output, under the lock."""
        empty_but_locks(self.path)

    # ------------------------------------------------------------------------------------------- staging
    def _sibling(self, role: str) -> Path:
        self._require_entered()
        folder = self.path.with_name(f".{self.path.name}.bindscope-{role}-{os.getpid()}.tmp")
        if folder in self._siblings:
            return folder
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(0o777)  # the process umask applies: an ordinary folder, readable as the user's others
        self._siblings.append(folder)
        return folder

    def staging(self) -> Path:
        """The staging folder of a staged kind (beside the folder, created on the first call, the same one later):
        write the whole output into it, then call :meth:`publish`. Removed when the claim ends."""
        if not self.kind.staged:
            raise RuntimeError(f"{self.kind.what}: not a staged output")
        return self._sibling("staging")

    def scratch(self) -> Path:
        """A scratch folder beside the output folder (the same file system) for intermediate files; removed when
        the claim ends, and by the next claim after a ``kill -9``."""
        return self._sibling("scratch")

    def publish(self) -> None:
        """Make the staging folder the output: write the marker into it, then exchange it with the folder in one
        rename (the lock moves with it, still held) and delete what the folder held before. Signals wait until it
        is done."""
        self._require_entered()
        staging = self.staging()
        write_marker(staging, self.kind.kind, self.run_id)
        fresh = OutputLock(staging, flag=self._flag).__enter__()  # nobody else knows the staging folder
        with _signals_held():
            _exchange(staging, self.path)
            fresh.moved(self.path)
            self._lock.moved(staging)
            self._lock.__exit__(None, None, None)
            self._lock = fresh
            self._stack.callback(fresh.__exit__, None, None, None)
        shutil.rmtree(staging)
        self._siblings.remove(staging)

    def _require_entered(self) -> None:
        if self._stack is None:
            raise RuntimeError("enter the output claim first (with claim: ...)")

    # ------------------------------------------------------------------------------------------- leaving
    def __exit__(self, exc_type, exc, tb) -> None:
        stack, self._stack = self._stack, None
        if stack is None:
            return
        try:
            for folder in self._siblings:
                shutil.rmtree(folder, ignore_errors=True)
            self._siblings.clear()
            emptied = exc_type is not None and self._unclaim()
        finally:
            stack.close()  # the lock is released, the signal handlers restored
        if emptied:
            _remove_empty(self.path, self._created)

    def _unclaim(self) -> bool:
        """After a failure: empty a folder that holds nothing but the claim (see the module docstring); True if
        it is empty now."""
        if self._shared or self._lock is None or not self.path.is_dir():
            return False
        spare = {MARKER, *self.kind.claim_files}
        if not _only_claim(self.path, spare):
            return False
        for entry in sorted(self.path.iterdir()):
            if entry.name == LOCK:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        return True



# ----------------------------------------------------------------------------------------------- files


@contextlib.contextmanager
def claim_file(out: str | os.PathLike, owns: Callable[[Path], bool], what: str, overwrite: bool = False,
               flag: str = "out") -> Iterator[Path]:
    """Claim the output file ``out``: yields its resolved path, locked, for an atomic write
    (:func:`bindscope.io.atomic.write_text_atomic`).

    The lock is ``.bindscope-<name>.lock`` beside the file (an :class:`~bindscope.io.ownership.OutputLock`);
    SIGTERM and SIGHUP interrupt like Ctrl-C; temporary files of earlier writes of the file cut short by a kill
    are removed; the checks are made again under the lock. After a failure, the folders the claim created are
    removed where empty.

    Args:
        out: the file. owns: ``owns(path) -> bool``: the existing file is this command's output (only such a
            file is replaced). what: the output named in messages, e.g. ``"open_clip model config"``.
        overwrite: replace an existing file that ``owns`` accepts. flag: the parameter named in messages.

    Raises:
        BadInput: ``out`` is empty, the current folder or an ancestor of it, a folder or a link; it exists and
            ``overwrite`` is not given, or ``owns`` refuses it; another run holds the lock (naming it).
    """
    path = resolve_output(out, flag)

    def check() -> None:
        if Path(out).is_symlink() or path.is_dir():
            raise BadInput(f"{flag} {str(out)!r} is a folder or a link; give a new file", param=flag)
        if path.exists() and not overwrite:
            raise BadInput(f"{flag} {str(out)!r} exists; pass overwrite=True to replace it", param=flag)
        if path.exists() and not owns(path):
            raise BadInput(f"{flag} {str(out)!r} is not a {what}; overwrite=True only replaces a file this command "
                           "made: delete it yourself if you mean to", param=flag)

    check()
    created = _first_missing(path.parent)
    try:
        with terminate_as_interrupt(), OutputLock(path.parent, flag=flag, name=f".bindscope-{path.name}.lock"):
            check()
            remove_temp_files(path.parent, {path.name})
            yield path
    except BaseException:
        _remove_empty(path.parent, created)
        raise


def _remove_empty(folder: Path, top: Path | None) -> None:
    """Remove ``folder`` and its parents up to ``top`` (folders a claim created) while they are empty."""
    if top is None:
        return
    while True:
        try:
            folder.rmdir()
        except OSError:
            return
        if folder == top:
            return
        folder = folder.parent
