"""Command-line entry points: ``madman``, ``comco`` and ``bindscope`` (click).

Each area defines its commands in its own ``commands.py`` (heavy imports such as torch or bpy happen inside
the command functions, so ``--help`` stays fast); this module only assembles them. Any
:class:`bindscope.errors.BadInput` raised by a command becomes one ``Error: ...`` line and exit status 2.
"""

from __future__ import annotations

import re

import click

from bindscope import __version__
from bindscope.errors import BadInput


class Group(click.Group):
    """A click group that reports :class:`BadInput` as one ``Error: <message>`` line with exit status 2."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BadInput as exc:
            # One line, always: a message that embeds a library's multi-line text (PyYAML, h5py) is joined.
            message = re.sub(r"\s*\n\s*", " ", str(exc).strip())
            click.echo(f"Error: {message}", err=True)
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

    Exit status 0 when sound, 1 with a list of problems otherwise, 2 when DIRECTORY does not exist.
    """
    import os

    from bindscope.dataset.verify import verify_dataset

    if not os.path.isdir(directory):  # a wrong path is bad input (2), not a dataset with problems (1)
        raise BadInput(f"dataset folder {directory!r} does not exist; give the folder of a bindscope dataset")
    problems = verify_dataset(directory, check_masks=not no_masks)
    if problems:
        click.echo(f"{directory}: {len(problems)} problem(s)", err=True)
        for problem in problems:
            click.echo(f"  - {problem}", err=True)
        raise SystemExit(1)
    click.echo(f"{directory}: OK")


# Commands of each area, registered here so that this is the one place that lists every command.
from bindscope.alignment import commands as _alignment  # noqa: E402
from bindscope.dataset import commands as _dataset  # noqa: E402
from bindscope.evaluation import commands as _evaluation  # noqa: E402
from bindscope.generators.comco import asset_commands as _comco_assets  # noqa: E402
from bindscope.generators.comco import commands as _comco  # noqa: E402
from bindscope.generators.madman import commands as _madman  # noqa: E402
from bindscope.training import commands as _training  # noqa: E402

_madman.register(madman)          # madman generate, preview
_evaluation.register_madman(madman)  # madman eval
_training.register(madman)        # madman train, sweep
_comco.register(comco)            # comco render, preview
_comco_assets.register(comco)     # comco assets import|fetch|list
_evaluation.register_comco(comco)  # comco eval
_dataset.register(bindscope)      # bindscope release, merge
_alignment.register(bindscope)    # bindscope probe, labclip
