"""Click options and output helpers shared by several command groups."""

from __future__ import annotations

import dataclasses
import functools

import click

from bindscope.build.backends import BuildSettings
from bindscope.cli.types import DEVICE, FiniteFloat, count, schema_range
from bindscope.encoders.settings import EncoderSettings
from bindscope.errors import check_utf8_path


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


def report_build(result: dict, out: str) -> None:
    """Print what a build made: the dataset, or (for ``--num-parts K``) the part and how to merge."""
    if result.get("format") == "bindscope-part":
        click.echo(f"{out}: part {result['part']} of {result['num_parts']} done ({len(result['shards'])} shards). "
                   f"When every part is done: bindscope merge PART_FOLDERS... [--out DIR]")
    else:
        total = sum(s["num_samples"] for s in result["splits"].values())
        click.echo(f"{out}: {total} samples in {len(result['splits'])} split(s)")


def _setting_option(setting: dataclasses.Field, help_text: str | None = None) -> click.Option:
    """The click option of one field of a settings dataclass, from its ``metadata`` (plain data, so that the
    dataclass's module imports no click):

    - ``flag``: the flag, or a tuple of them (``("-n", "--num-images")``; ``"--depth/--no-depth"`` for an on/off
      pair); ``name``: the command's keyword (default: the field's name; :func:`_param_name`);
    - ``help``, ``metavar``, ``required``, ``multiple``, ``show_default``; ``default``: the option's default when it
      differs from the field's (None: "the protocol's", "the config's");
    - the value's type: ``range`` (both ends) of an integer (:func:`~bindscope.cli.types.count`) or, with float
      ends (or ``float``), of a :class:`~bindscope.cli.types.FiniteFloat` (``open``: ``(min_open, max_open)``);
      ``schema``: ``(schema, dotted key)`` whose bounds are read from that JSON Schema
      (:func:`~bindscope.cli.types.schema_range`); ``choice``: a :class:`click.Choice`; ``choices``: names shown
      as the metavar, checked by the settings object; ``path``: a :class:`click.Path` (the dict of its
      arguments); ``device``: a :data:`~bindscope.cli.types.DEVICE`; ``negated``: a switch that turns the field
      off (``--no-cache`` sets ``use_cache=False``).

    click checks a range or a choice while parsing (the same bounds the settings object checks for library
    callers); other values reach the settings object unchecked: its one check gives the ``Error:`` line."""
    meta = setting.metadata
    decls = meta["flag"] if isinstance(meta["flag"], tuple) else (meta["flag"],)
    name, text = _param_name(setting), meta.get("help") if help_text is None else help_text
    if meta.get("negated"):
        return click.option(*decls, name, is_flag=True, help=text)
    field_default = None if setting.default is dataclasses.MISSING else setting.default
    default = None if meta.get("multiple") else meta.get("default", field_default)
    choices = meta.get("choices")
    if "range" in meta:
        low, high, *unit = meta["range"]
        if meta.get("float") or isinstance(low, float) or isinstance(high, float):
            min_open, max_open = meta.get("open", (False, False))
            kind = FiniteFloat(low, high, min_open=min_open, max_open=max_open)
        else:
            kind = count(low, high, *unit)
    elif "schema" in meta:
        kind = schema_range(*meta["schema"])
    elif "choice" in meta:
        kind = click.Choice(list(meta["choice"]))
    elif "path" in meta:
        kind = click.Path(**meta["path"])
    elif meta.get("device"):
        kind = DEVICE
    else:
        kind = None if "/" in decls[0] else str
    more = {"multiple": True} if meta.get("multiple") else {"default": default}
    return click.option(*decls, name, type=kind, required=meta.get("required", False), help=text,
                        show_default=meta.get("show_default", default is not None),
                        metavar="[" + "|".join(choices) + "]" if choices else meta.get("metavar"), **more)


def _param_name(setting: dataclasses.Field) -> str:
    """The command's keyword for a setting: ``metadata["name"]``, else a negated switch's flag without dashes
    (``--no-cache`` -> ``no_cache``), else the field's name."""
    meta = setting.metadata
    if "name" in meta:
        return meta["name"]
    return meta["flag"].lstrip("-").replace("-", "_") if meta.get("negated") else setting.name


def settings_options(cls, keyword: str, build=None, *, only: tuple[str, ...] | None = None,
                     helps: dict[str, str] | None = None):
    """A click decorator generated from the settings dataclass ``cls``: one option per field whose ``metadata``
    names a ``flag`` (:func:`_setting_option`; ``only``: these fields, in this order), and the command receives
    them as one keyword argument ``keyword``: ``build(**values)`` (default ``cls(**values)``; a negated switch
    gives its field the opposite value), made before the command body runs, so a bad value is one ``Error:`` line
    naming its flag (exit status 2) before any work. ``helps``: a command's own help text of a field. The
    command's other string arguments are checked for UTF-8 (:func:`check_utf8_arguments`)."""
    settings = [s for s in dataclasses.fields(cls) if "flag" in s.metadata]
    if only is not None:
        by_name = {s.name: s for s in settings}
        settings = [by_name[name] for name in only]
    return _fields_decorator(settings, keyword, build or cls, helps or {})


def task_options(kind: str):
    """A click decorator generated from the options dataclasses of the registered tasks of ``kind``
    (:mod:`bindscope.evaluation.tasks`, registration order): one option per field name whose ``metadata`` names a
    ``flag`` (from the first task that has the field; :func:`_setting_option`), and the command receives them as
    one keyword argument ``options``: per task name the given values that differ from its defaults
    (:func:`~bindscope.evaluation.tasks.registry.options_from_fields`; a field several tasks share goes to each),
    which :func:`bindscope.evaluation.api.plan_evaluation` checks against the tasks that run."""
    from bindscope.evaluation.tasks.registry import options_from_fields, tasks

    fields: dict[str, dataclasses.Field] = {}
    for task in tasks(kind):
        for setting in dataclasses.fields(task.options) if task.options is not None else ():
            if "flag" in setting.metadata:
                fields.setdefault(setting.name, setting)
    return _fields_decorator(list(fields.values()), "options",
                             lambda **values: options_from_fields(kind, values), {})


def _fields_decorator(settings: list[dataclasses.Field], keyword: str, build, helps: dict[str, str]):
    """The decorator of :func:`settings_options` and :func:`task_options`: the options of ``settings``, their
    values given to the command as ``keyword=build(**values)``."""

    def decorate(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            values = {s.name: kwargs.pop(_param_name(s)) for s in settings}
            values.update({s.name: not values[s.name] for s in settings if s.metadata.get("negated")})
            check_utf8_arguments({**kwargs, **values})
            return func(*args, **{keyword: build(**values)}, **kwargs)

        return _apply(wrapper, [_setting_option(s, helps.get(s.name)) for s in settings])

    return decorate


build_options = settings_options(BuildSettings, "build")
build_options.__doc__ = """Click decorator adding ``--backend``, ``--scheduler``, ``--num-parts`` and ``--part`` (generated from
:class:`~bindscope.build.backends.BuildSettings`) to a generator command, which receives them as one keyword
argument ``build``, a ``BuildSettings`` checked before the command body (``--part`` < ``--num-parts``,
``--scheduler`` needs ``--backend dask``: :class:`bindscope.errors.BadInput`, exit status 2); pass it on to the
generator's library call, whose build checks ``--num-parts`` against the number of shards before anything is
written."""
encoder_settings = settings_options(EncoderSettings, "encoder")
encoder_settings.__doc__ = """Click decorator: one option per :class:`~bindscope.encoders.settings.EncoderSettings`
field (``--model``, ``--pretrained``, ``--device``, ``--precision``, ``--batch-size``, ``--pooling``,
``--context-length``, ``--cache-dir``, ``--no-cache``; generated from the fields, so every command that loads an
encoder offers the same options), and the command receives them as one keyword argument ``encoder``, an
``EncoderSettings`` checked before the command body runs (:func:`settings_options`)."""


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
