"""The generator registry: generator name (as recorded in a manifest or part record) -> generator class.

A generator class implements :class:`bindscope.dataset.build.Generator` and (if it can) has a classmethod
``from_config(config: dict, seed: int)`` that rebuilds the generator from a *recorded* resolved config and seed
(what a manifest or part record holds). That is how ``bindscope merge`` gets the generator that computes the
statistics and the card of a merged dataset: from JSON it validates, never from a file that could run code.
A generator also names its sources and their licences (``provenance()``), which
:func:`bindscope.dataset.build.build_dataset` writes into the manifest, and its class says how a Hub release
is laid out (``release_per_split``); ``bindscope release`` reads both instead of checking names.

The built-in generators (``madman``, ``comco``, and the ``coco`` importer) are named here by import path and imported on first use, so the
dataset layer does not import the generator packages (which sit above it); other generators (a plug-in, a
test's toy generator) call :func:`register_generator`.
"""

from __future__ import annotations

import importlib

from bindscope.errors import BadInput

_BUILTIN = {
    "madman": "bindscope.generators.madman.generator:MadmanGenerator",
    "comco": "bindscope.generators.comco.generator:ComcoGenerator",
    "coco": "bindscope.importers.coco:CocoImporter",
}
_REGISTERED: dict[str, type] = {}


def register_generator(cls: type, name: str | None = None) -> type:
    """Register generator class ``cls`` under ``name`` (default ``cls.name``); return ``cls`` (usable as a
    class decorator). Re-registering a name replaces the earlier class."""
    _REGISTERED[name or cls.name] = cls
    return cls


def generator_names() -> list[str]:
    """Every registered generator name, built-in ones first."""
    return list(_BUILTIN) + [name for name in _REGISTERED if name not in _BUILTIN]


def generator_class(name: str) -> type:
    """The generator class registered as ``name``.

    Raises:
        BadInput: no generator of that name (the message lists the known ones).
    """
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name not in _BUILTIN:
        raise BadInput(f"unknown generator {name!r}; known: {', '.join(generator_names())}")
    module, attr = _BUILTIN[name].split(":")
    cls = getattr(importlib.import_module(module), attr)
    _REGISTERED[name] = cls
    return cls


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
