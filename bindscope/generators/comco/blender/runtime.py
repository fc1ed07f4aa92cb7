"""The one door to Blender's Python modules: every module of this package gets ``bpy``, ``bmesh`` and
``mathutils`` from :func:`blender_modules` (or ``bpy`` alone from :func:`import_bpy`); nothing else in bindscope
imports them (``tests/test_layers.py`` checks it). Importing this module imports no Blender module; the first
call does, once per process.
"""

from __future__ import annotations

import contextlib
import os
import sys


def import_bpy():
    """Import and return ``bpy`` (the Blender Python module, ``bpy==5.0.1``).

    Importing bpy appends Blender's script folders (``.../bpy/<version>/scripts/modules`` ...) to
    ``sys.path``; a worker process started with the parent's ``sys.path`` (joblib/loky does this) would then
    find Blender's inner ``bpy`` package before the wheel and fail with "No module named '_bpy'". Those
    entries are dropped before the first import in a process.
    """
    if "bpy" not in sys.modules:
        def blender_scripts(entry: str) -> bool:
            parts = os.path.normpath(entry).split(os.sep)
            return any(parts[i] == "bpy" and parts[i + 2] == "scripts" for i in range(len(parts) - 2)) or \
                ("blender" in parts and "scripts" in parts)
        sys.path[:] = [p for p in sys.path if not blender_scripts(p)]
    with quiet_stdout((1, 2)):  # Cycles logs missing CUDA/HIP libraries on import
        import bpy

    return bpy


def blender_modules():
    """``(bpy, bmesh, mathutils)``: Blender's modules, imported through :func:`import_bpy` (bmesh and
    mathutils come with the bpy wheel and are importable once bpy is)."""
    bpy = import_bpy()
    import bmesh
    import mathutils

    return bpy, bmesh, mathutils


@contextlib.contextmanager
def quiet_stdout(fds: tuple[int, ...] = (1,)):
    """Send file descriptors ``fds`` (default stdout) to /dev/null inside the block. Blender logs every render
    ("Saved: ...") to stdout and missing GPU libraries to stderr, which would garble progress bars and command
    output. Python's ``sys.stdout``/``sys.stderr`` are flushed first."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(fd) for fd in fds]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in fds:
            os.dup2(devnull, fd)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip(fds, saved):
            os.dup2(copy, fd)
            os.close(copy)
        os.close(devnull)
