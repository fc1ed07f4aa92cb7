"""Command-line entry points: ``madman``, ``comco`` and ``bindscope`` (click).

Each area defines its commands in its own ``commands.py`` (heavy imports such as torch or bpy happen inside
the command functions, so ``--help`` stays fast); this module only assembles them. Any
:class:`bindscope.errors.BadInput` raised by a command becomes one ``Error: ...`` line and exit status 2 (its
``param`` and the parameter names in its message are shown as the command's flags, see :func:`_in_flags`), a
:class:`bindscope.errors.GenerationError` one ``Error: ...`` line and exit status 1.
"""

from __future__ import annotations

import re

import click

from bindscope import __version__
from bindscope.errors import BadInput, GenerationError


def _flag(command: click.Command | None, param: str) -> str | None:
    """The flag (``--jobs``) of the option named ``param`` in ``command`` or its subcommands; None if none."""
    if command is None:
        return None
    for option in command.params:
        if option.name == param and isinstance(option, click.Option):
            return max(option.opts, key=len)
    for sub in getattr(command, "commands", {}).values():
        flag = _flag(sub, param)
        if flag:
            return flag
    return None


_KEYWORD = re.compile(r"(?<![\w.])([a-z]+(?:_[a-z]+)*)=(True\b|'[^']*'|[^\s,;()']+)")
"""``name=value`` in a library message: a keyword argument as Python spells it (``overwrite=True``,
``backend='dask'``, ``num_parts=2``); not after a dot, so config keys (``sizes.min_area_ratio``) never match."""


def _in_flags(message: str, param: str | None, command: click.Command | None) -> str:
    """A library message in the command's terms: a leading ``param`` (a library parameter name) becomes its
    flag (``out`` -> ``--out``), and every keyword argument ``name=value`` whose ``name`` is an option of
    ``command`` becomes the flag with its value (``overwrite=True`` -> ``--overwrite``, ``backend='dask'`` ->
    ``--backend 'dask'``). Other words are left alone (a config key such as ``attribute_density`` in a
    message may come from a YAML file)."""
    if param and message.startswith(param):
        flag = _flag(command, param)
        message = (flag + message[len(param):]) if flag else message

    def keyword(match: re.Match) -> str:
        flag = _flag(command, match.group(1))
        if flag is None:
            return match.group(0)
        return flag if match.group(2) == "True" else f"{flag} {match.group(2)}"

    return _KEYWORD.sub(keyword, message)


class Group(click.Group):
    """A click group that reports :class:`BadInput` as one ``Error: <message>`` line with exit status 2, and
    :class:`GenerationError` likewise with exit status 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (BadInput, GenerationError) as exc:
            # One line, always: a message that embeds a library's multi-line text (PyYAML, h5py) is joined.
            message = re.sub(r"\s*\n\s*", " ", str(exc).strip())
            name = ctx.invoked_subcommand
            message = _in_flags(message, getattr(exc, "param", None), self.get_command(ctx, name) if name else None)
            click.echo(f"Error: {message}", err=True)
            ctx.exit(2 if isinstance(exc, BadInput) else 1)


@click.group(cls=Group)
@click.version_option(__version__, prog_name="madman")
def madman():
    """MADMAN: MNIST digits with six attributes, captions from four data properties (Gurung et al., GCPR 2025)."""


@click.group(cls=Group)
@click.version_option(__version__, prog_name="comco")
def comco():
    """ComCO / SimCO: Blender-rendered multi-object scenes with exact masks (Abbasi et al., CVPR 2025)."""


@click.group(cls=Group)
@click.version_option(__version__, prog_name="bindscope")
def bindscope():
    """bindscope: dataset tools (verify, release, merge, import), analyses and alignment (probe, LABCLIP)."""


# Commands of each area, registered here so that this is the one place that lists every command.
from bindscope.cli import align as _alignment  # noqa: E402
from bindscope.cli import assets as _comco_assets  # noqa: E402
from bindscope.cli import comco as _comco  # noqa: E402
from bindscope.cli import dataset as _dataset  # noqa: E402
from bindscope.cli import evaluate as _evaluation  # noqa: E402
from bindscope.cli import importers as _importers  # noqa: E402
from bindscope.cli import madman as _madman  # noqa: E402
from bindscope.cli import train as _training  # noqa: E402

_madman.register(madman)          # madman generate, preview
_evaluation.register_madman(madman)  # madman eval, audit
_training.register(madman)        # madman train, sweep
_comco.register(comco)            # comco render, preview
_comco_assets.register(comco)     # comco assets import|fetch|list
_evaluation.register_comco(comco)  # comco eval, attention
_dataset.register(bindscope)      # bindscope verify, release, merge
_alignment.register(bindscope)    # bindscope probe, labclip
_importers.register(bindscope)    # bindscope import coco
_evaluation.register_bindscope(bindscope)  # bindscope caption-bias, bench, collect
