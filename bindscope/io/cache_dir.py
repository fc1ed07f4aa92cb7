"""The one cache folder of bindscope (MNIST digit tables, embeddings).

``$BINDSCOPE_CACHE`` if set, else ``$XDG_CACHE_HOME/bindscope``, else ``~/.cache/bindscope``. Everything in it
can be deleted at any time; it is rebuilt on demand.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The bindscope cache folder (not created here)."""
    if os.environ.get("BINDSCOPE_CACHE"):
        return Path(os.environ["BINDSCOPE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "bindscope"
