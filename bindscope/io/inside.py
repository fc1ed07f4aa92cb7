"""Files read from a folder the user gave: regular files inside that folder, nothing else.

A dataset, part folder, asset folder, benchmark folder or model folder can arrive from another machine, so a
name in it (a manifest's shard path, a README, an image listed in an annotation file) must not lead outside it:
no absolute names, no ``..``, no symlink whose target lies outside the folder, and never a FIFO, socket or
device (opening a FIFO blocks forever). Checked with ``os.lstat`` / ``os.stat`` before any byte is read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from bindscope.errors import BadInput


def file_inside(folder: str | os.PathLike, name: str | os.PathLike, what: str = "file",
                error: type[BadInput] = BadInput) -> Path:
    """``folder / name`` after checking that it is a regular file inside ``folder``.

    Args:
        folder: the folder the user gave. name: a path relative to it (as a manifest or annotation file
            records it). what: how the message names the file (``"shard"``, ``"README.md"``, ``"image"``).
        error: the exception class raised (:class:`BadInput` or a subclass such as ``DatasetError``).

    Returns:
        The path ``folder / name`` (not resolved, so messages show what the user gave).

    Raises:
        ``error`` naming the path: an absolute name or one with ``..``, a missing file, a symlink (anywhere
        on the way) whose target is outside ``folder``, or anything but a regular file (folder, FIFO, socket,
        device).
    """
    relative = Path(name)
    path = Path(folder) / relative
    if relative.is_absolute() or ".." in relative.parts:
        raise error(f"{path}: {what} name {str(name)!r} leads outside {str(folder)!r}")
    try:
        os.lstat(path)
        info = os.stat(path)  # follows links; a dangling link is missing
    except FileNotFoundError:
        raise error(f"{path}: {what} missing") from None
    except OSError as exc:
        raise error(f"{path}: {what} cannot be read ({exc.strerror})") from None
    try:
        inside = Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))
    except (OSError, ValueError):
        inside = False
    if not inside:
        raise error(f"{path}: {what} is a symlink to {os.path.realpath(path)!r}, outside {str(folder)!r}")
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{path}: {what} is not a regular file")
    return path


def regular_file(path: str | os.PathLike, what: str = "file", error: type[BadInput] = BadInput) -> Path:
    """``path`` after checking that it is (or links to) a regular file, so that opening it cannot block (a
    FIFO) or read a device. Raises ``error`` naming the path otherwise, or when it is missing."""
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise error(f"{path}: {what} missing") from None
    except OSError as exc:
        raise error(f"{path}: {what} cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{path}: {what} is not a regular file")
    return path
