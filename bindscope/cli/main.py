"""Command-line entry points: ``madman``, ``comco`` and ``bindscope`` (click).

The commands are named functions in the modules of this package (``bindscope.cli.madman.madman_generate``,
``bindscope.cli.dataset.bindscope_verify``, ...); this module defines the three groups and adds them. Any
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
    """bindscope: dataset tools (verify, release, merge, import, export), training, analyses and alignment (probe,
    LABCLIP)."""


# Every command, in one place. The command modules import nothing heavy at import time (torch, bpy, h5py and
# matplotlib are imported inside the command functions), so --help stays fast.
from bindscope.cli import (  # noqa: E402
    align,
    assets,
    dataset,
    evaluate,
    export,
    importers,
    train,  # noqa: E402
)
from bindscope.cli import comco as comco_commands  # noqa: E402
from bindscope.cli import madman as madman_commands  # noqa: E402

COMMANDS = {
    madman: [madman_commands.madman_generate, madman_commands.madman_preview, evaluate.madman_eval,
             evaluate.madman_audit, train.madman_train, train.madman_sweep],
    comco: [comco_commands.comco_render, comco_commands.comco_preview, comco_commands.comco_t2i, assets.comco_assets,
            evaluate.comco_eval, evaluate.comco_attention, evaluate.comco_t2i_score],
    bindscope: [dataset.bindscope_verify, dataset.bindscope_release, dataset.bindscope_merge, align.bindscope_probe,
                align.bindscope_labclip, importers.bindscope_import, evaluate.bindscope_caption_bias,
                evaluate.bindscope_bench, evaluate.bindscope_collect, evaluate.bindscope_compare,
                export.bindscope_export, train.bindscope_train],
}
for _group, _commands in COMMANDS.items():
    for _command in _commands:
        _group.add_command(_command)
