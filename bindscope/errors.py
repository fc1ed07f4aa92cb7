"""Exceptions shared by every part of bindscope.

The CLI turns :class:`BadInput` into one ``Error: ...`` line and exit status 2 (a ``param`` becomes the
command's flag, e.g. ``jobs`` -> ``--jobs``) and :class:`GenerationError` into one ``Error: ...`` line and exit
status 1 (see :mod:`bindscope.cli`).
"""

from __future__ import annotations


class BadInput(ValueError):
    """A user-supplied value is not allowed. The message names the value and what is allowed.

    Attributes:
        param: the library parameter at fault (e.g. ``"jobs"``), or None. A message about a parameter starts
            with its name, so that the CLI can put the flag (``--jobs``) in its place.
    """

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param

    def __reduce__(self):  # keeps ``param`` when raised in a worker process and re-raised here
        return type(self), (str(self), self.param)


class DatasetError(BadInput):
    """A dataset directory is missing, incomplete, corrupt, or of the wrong generator."""


class GenerationError(RuntimeError):
    """Generation failed after writing began (the input was valid, e.g. a ComCO scene found no acceptable
    render). Finished shards are kept: after changing the config, a rerun into a new folder starts afresh;
    the same command resumes."""
