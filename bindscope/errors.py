"""Exceptions shared by every part of bindscope.

The CLI turns :class:`BadInput` into one message and exit status 2 (see :mod:`bindscope.cli`).
"""


class BadInput(ValueError):
    """A user-supplied value is not allowed. The message names the value and what is allowed."""


class DatasetError(BadInput):
    """A dataset directory is missing, incomplete, corrupt, or of the wrong generator."""
