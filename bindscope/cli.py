"""Command-line entry points: ``madman``, ``comco`` and ``bindscope`` (click).

Each area defines its commands in its own ``commands.py`` (heavy imports such as torch or bpy happen inside
the command functions, so ``--help`` stays fast); this module only assembles them. Any
:class:`bindscope.errors.BadInput` raised by a command becomes one ``Error: ...`` line and exit status 2.
"""

from __future__ import annotations

import click

from bindscope import __version__
from bindscope.errors import BadInput


class Group(click.Group):
    """A click group that reports :class:`BadInput` as ``Error: <message>`` with exit status 2."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BadInput as exc:
            click.echo(f"Error: {exc}", err=True)
            ctx.exit(2)


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
    """bindscope: dataset tools (verify, release, merge) and alignment (probe, LABCLIP)."""


@bindscope.command("verify")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--no-masks", is_flag=True, help="Skip the per-sample mask/table checks (checksums and counts only).")
def verify(directory: str, no_masks: bool):
    """Check a dataset DIRECTORY: manifest schema, shard checksums and counts, masks against the object table.

    Exit status 0 when sound, 1 with a list of problems otherwise.
    """
    from bindscope.dataset.verify import verify_dataset

    problems = verify_dataset(directory, check_masks=not no_masks)
    if problems:
        click.echo(f"{directory}: {len(problems)} problem(s)", err=True)
        for problem in problems:
            click.echo(f"  - {problem}", err=True)
        raise SystemExit(1)
    click.echo(f"{directory}: OK")


# Commands of each area (registered here so there is one place that lists every command).
from bindscope.generators.madman.commands import register as _register_madman  # noqa: E402

_register_madman(madman)
from bindscope.training.commands import register as _register_training  # noqa: E402

_register_training(madman)
from bindscope.dataset.commands import register as _register_dataset  # noqa: E402

_register_dataset(bindscope)
from bindscope.evaluation.commands import register_comco as _register_comco_eval, register_madman as _register_madman_eval  # noqa: E402,E501

_register_madman_eval(madman)
_register_comco_eval(comco)
from bindscope.generators.comco.commands import register as _register_comco  # noqa: E402

_register_comco(comco)
from bindscope.alignment.commands import register as _register_alignment  # noqa: E402

_register_alignment(bindscope)
from bindscope.generators.comco.asset_commands import register as _register_comco_assets  # noqa: E402

_register_comco_assets(comco)
