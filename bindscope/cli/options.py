"""Click options and output helpers shared by several command groups."""

from __future__ import annotations

import dataclasses
import functools

import click

from bindscope.cli.types import count
from bindscope.encoders.settings import EncoderSettings
from bindscope.errors import check_utf8_path
from bindscope.limits import MAX_COUNT


def exit_with_problems(header: str, problems: list[str]) -> None:
    """Print ``header`` and one ``  - problem`` line each on stderr, then exit with status 1; no-op if none."""
    if problems:
        click.echo(header, err=True)
        for problem in problems:
            click.echo(f"  - {problem}", err=True)
        raise SystemExit(1)


def check_utf8_arguments(kwargs: dict) -> None:
    """Refuse (BadInput, exit status 2, naming the option) a string argument that holds bytes that are not
    UTF-8 (on POSIX they reach Python as lone surrogates): such a path would make the command fail later,
    when it writes the path into a manifest or result or prints it."""
    for name, value in kwargs.items():
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, str):
                check_utf8_path(name, item)


def build_options(func):
    """Click decorator adding ``--backend``, ``--scheduler``, ``--num-parts`` and ``--part`` to a generator command.

    The command receives them as keyword arguments ``backend``, ``scheduler``, ``num_parts``, ``part``; pass
    them on to :func:`bindscope.build.builder.build_dataset` unchanged (collect them with ``**build`` in the
    command's signature and call ``build_dataset(..., **build)``). The cross-checks (``--part`` < ``--num-parts``, ``--scheduler`` needs ``--backend dask``) run before
    the command body, as :class:`bindscope.errors.BadInput` (exit status 2); ``build_dataset`` repeats them
    and checks ``--num-parts`` against the number of shards, before anything is written.
    """
    options = [
        click.option("--backend", type=click.Choice(["local", "dask"]), default="local", show_default=True,
                     help="Where shards are made: 'local' = --jobs processes on this machine (joblib); "
                          "'dask' = a Dask cluster (--scheduler, or a LocalCluster of --jobs worker processes)."),
        click.option("--scheduler", metavar="ADDRESS", default=None,
                     help="With --backend dask: address of a running Dask scheduler (tcp://HOST:8786) or the path "
                          "of its scheduler file. --out must be on a file system every worker sees."),
        click.option("--num-parts", type=count(), default=1, show_default=True, metavar="K",
                     help="Split the run into K independent parts (e.g. a batch-scheduler job array); "
                          "join them afterwards with `bindscope merge`."),
        click.option("--part", type=count(0, MAX_COUNT - 1), default=0, show_default=True, metavar="I",
                     help="Which part this run makes, 0-based (0 <= I < K)."),
    ]

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from bindscope.build.backends import check_backend
        from bindscope.build.builder import check_parts

        # The cheap cross-checks first, before the command loads data or builds its generator.
        check_utf8_arguments(kwargs)
        check_backend(kwargs["backend"], kwargs["scheduler"], 1)
        check_parts(kwargs["num_parts"], kwargs["part"])
        return func(*args, **kwargs)

    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


def report_build(result: dict, out: str) -> None:
    """Print what a build made: the dataset, or (for ``--num-parts K``) the part and how to merge."""
    if result.get("format") == "bindscope-part":
        click.echo(f"{out}: part {result['part']} of {result['num_parts']} done ({len(result['shards'])} shards). "
                   f"When every part is done: bindscope merge PART_FOLDERS... [--out DIR]")
    else:
        total = sum(s["num_samples"] for s in result["splits"].values())
        click.echo(f"{out}: {total} samples in {len(result['splits'])} split(s)")


def _setting_option(setting: dataclasses.Field) -> click.Option:
    """The click option of one :class:`~bindscope.encoders.settings.EncoderSettings` field, from its metadata
    (flag, help, ``choices`` shown as the metavar, ``range`` of an integer, ``negated`` for a flag that turns the
    field off). click checks an integer's range (the same bounds the settings object checks for library callers);
    the other values reach the settings object unchecked: its one check gives the ``Error:`` line."""
    meta = setting.metadata
    if meta.get("negated"):
        return click.option(meta["flag"], _param_name(setting), is_flag=True, help=meta["help"])
    choices = meta.get("choices")
    default = None if setting.default is dataclasses.MISSING else setting.default
    kind = count(*meta["range"]) if "range" in meta else str
    return click.option(meta["flag"], _param_name(setting), type=kind, default=default,
                        required=meta.get("required", False), help=meta["help"],
                        show_default=default is not None,
                        metavar="[" + "|".join(choices) + "]" if choices else meta.get("metavar"))


def _param_name(setting: dataclasses.Field) -> str:
    """The command's keyword for a setting: its flag without dashes (``--no-cache`` -> ``no_cache``)."""
    return setting.metadata["flag"].lstrip("-").replace("-", "_")


def encoder_settings(func):
    """Click decorator: one option per :class:`~bindscope.encoders.settings.EncoderSettings` field (``--model``,
    ``--pretrained``, ``--device``, ``--precision``, ``--batch-size``, ``--pooling``, ``--context-length``,
    ``--cache-dir``, ``--no-cache``; generated from the fields, so every command that loads an encoder offers
    the same options), and the command receives them as one keyword argument ``encoder``, an
    ``EncoderSettings`` checked before the command body runs (a bad value: one ``Error:`` line naming the flag,
    exit status 2). The command's other string arguments are checked for UTF-8 (:func:`check_utf8_arguments`)."""
    settings = dataclasses.fields(EncoderSettings)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        values = {s.name: kwargs.pop(_param_name(s)) for s in settings}
        values.update({s.name: not values[s.name] for s in settings if s.metadata.get("negated")})
        check_utf8_arguments(kwargs)
        return func(*args, encoder=EncoderSettings(**values), **kwargs)

    return _apply(wrapper, [_setting_option(s) for s in settings])


def _apply(func, options):
    for option in reversed(options):
        func = option(func)
    return func


class _TasksOption(click.Option):
    """``--tasks``: its help lists the registered tasks of a result kind at the time the help is shown (so tasks
    added by plug-ins appear); ``--tasks help`` (or ``--tasks --help``) prints them, one per line, and exits."""

    def __init__(self, *args, kind: str, extra: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self.kind, self.extra = kind, extra

    def get_help_record(self, ctx):
        from bindscope.evaluation.tasks.registry import tasks_help

        self.help = tasks_help(self.kind) + self.extra
        return super().get_help_record(ctx)


def _list_tasks(ctx, param, value):
    if value in ("help", "--help"):
        from bindscope.evaluation.tasks.registry import tasks

        for task in tasks(param.kind):
            click.echo(f"{task.name}{' (default)' if task.default else ''}: {task.summary}")
        ctx.exit(0)
    return value


def tasks_option(kind: str, extra: str = ""):
    """The ``--tasks`` option of a command that runs the registered tasks of ``kind``
    (:mod:`bindscope.evaluation.tasks`): comma-separated names; its help lists the tasks."""
    return click.option("--tasks", default=None, cls=_TasksOption, kind=kind, extra=extra, callback=_list_tasks,
                        is_eager=True)
