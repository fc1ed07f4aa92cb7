"""The generator registry: generator name (as recorded in a manifest or part record) -> generator class.

A generator class implements :class:`bindscope.build.builder.Generator` and (if it can) has a classmethod
``from_config(config: dict, seed: int)`` that rebuilds the generator from a *recorded* resolved config and seed
(what a manifest or part record holds). That is how ``bindscope merge`` gets the generator that computes the
statistics and the card of a merged dataset: from JSON it validates, never from a file that could run code.
A generator also names its sources and their licences (``provenance()``), which
:func:`bindscope.build.builder.build_dataset` writes into the manifest, and its class says how a Hub release
is laid out (``release_per_split``); ``bindscope release`` reads both instead of checking names.

Generators are found by name among the classes registered with :func:`register_generator` (a test's toy
generator, a plug-in loaded at run time) and the entry points of the group ``bindscope.generators`` that
installed packages declare (bindscope declares ``madman``, ``comco``, ``t2i`` and the ``coco``, ``clevr`` and
``pug`` importers in its pyproject.toml), which are imported on first use: this layer never imports the generator
packages above it.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points

from bindscope.errors import BadInput

ENTRY_POINT_GROUP = "bindscope.generators"
_REGISTERED: dict[str, type] = {}


@cache
def _installed() -> dict:
    """Entry-point name -> entry point, for the ``bindscope.generators`` group."""
    return {point.name: point for point in entry_points(group=ENTRY_POINT_GROUP)}


def register_generator(cls: type, name: str | None = None) -> type:
    """Register generator class ``cls`` under ``name`` (default ``cls.name``); return ``cls`` (usable as a
    class decorator). Re-registering a name replaces the earlier class."""
    _REGISTERED[name or cls.name] = cls
    return cls


def generator_names() -> list[str]:
    """Every generator name: the installed ones (sorted), then those registered at run time."""
    installed = sorted(_installed())
    return installed + [name for name in _REGISTERED if name not in installed]


def generator_class(name: str) -> type:
    """The generator class registered as ``name``.

    Raises:
        BadInput: no generator of that name (the message lists the known ones).
    """
    if name not in _REGISTERED:
        if name not in _installed():
            raise BadInput(f"unknown generator {name!r}; known: {', '.join(generator_names())}")
        _REGISTERED[name] = _installed()[name].load()
    return _REGISTERED[name]


def rebuild_generator(name: str, config: dict, seed: int):
    """The generator ``name`` rebuilt from a recorded resolved ``config`` and ``seed`` (``cls.from_config``).

    Raises:
        BadInput: unknown generator, one that cannot be rebuilt from a config alone (no ``from_config``: the
            ``coco`` importer needs its annotation files), or a config the generator refuses.
    """
    cls = generator_class(name)
    if not hasattr(cls, "from_config"):
        raise BadInput(f"generator {name!r} cannot be rebuilt from its recorded config alone")
    return cls.from_config(config, seed)
