"""The task registry: every evaluation task is one :class:`Task` object, registered under its result kind and name.

A task says what it is (``name``, ``kind``: the result it writes into, ``summary``), what it needs (the dataset
holdings of :data:`bindscope.format.reader.HOLDINGS`, an image encoder), its options (a frozen dataclass with
defaults and a ``check()``), how it computes its figures (``compute(run, options)``, on what the runner of its
kind read and embedded: :class:`bindscope.evaluation.scenes.SceneRun`, :class:`bindscope.evaluation.splits.SplitRun`,
...), the JSON Schema of its result block, its terminal lines, its plot panels and its ``bindscope collect``
columns with their definitions. ``madman eval``, ``comco eval``, :func:`bindscope.evaluate`, the report
(:mod:`bindscope.evaluation.report`) and ``bindscope collect`` read this registry.

bindscope's own tasks are the modules of this package (:data:`BUILTIN`, imported on first use); an installed
package adds tasks through the entry-point group ``bindscope.tasks`` (each entry point names a :class:`Task`, or a
list of them), and a script or test through :func:`register_task` (:func:`unregister_task` removes one). Tasks
run, report and are collected in registration order within their kind.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from importlib import import_module
from importlib.metadata import entry_points
from typing import Callable, Mapping

from bindscope.errors import BadInput

ENTRY_POINT_GROUP = "bindscope.tasks"
BUILTIN = ("tor", "claim1", "ior", "i2tor", "matching", "binding", "toc", "ioc", "retrieval", "first_mention",
           "large_object", "attention", "bench")
"""The modules of :mod:`bindscope.evaluation.tasks` that define bindscope's tasks, in registration order."""
KINDS = {"madman-eval": "madman eval", "comco-eval": "comco eval", "comco-attention": "comco attention",
         "bench": "bindscope bench"}
"""The result kinds whose tasks are registered, and the command that writes each."""
SOURCES = ("dataset", "sampled")


@dataclass(frozen=True)
class Task:
    """One evaluation task.

    Attributes:
        name: as in ``--tasks`` (unique within its kind).
        kind: the result kind it writes into (:data:`KINDS`).
        summary: one line for ``--help`` and the docs.
        compute: ``compute(run, options)``: adds the task's blocks to ``run.metrics`` (and its per-sample rows to
            ``run.rows`` when that is a list) from what the runner of its kind read (the run object's documented
            attributes).
        needs: dataset holdings it needs (:data:`bindscope.format.reader.HOLDINGS`) on the split it reads.
        supplied_by: holding -> ``"field=PLACEHOLDER"``: the option that supplies it instead (IOR's
            ``"references=DIR"``, an external reference folder).
        images: it needs an image encoder.
        default: it runs when no task is named and the dataset holds what it needs.
        sources: ``"dataset"`` and/or ``"sampled"`` (captions sampled from a vocabulary, no dataset).
        reads: what it reads of what the runner of its kind prepares (scene tasks: ``captions``, the caption
            embeddings; ``negatives``, the stored negatives; split tasks: the part of a split, ``negatives`` or
            ``pairs``); the runner prepares only what a chosen task reads.
        options: frozen dataclass of its options (every field with a default; a ``check()`` that returns the
            instance or raises :class:`~bindscope.errors.BadInput` naming the field), or None.
        schema: metrics path -> JSON Schema of that block (``"tor"``, ``"clip_oscope/tor"``; ``""``: the whole
            ``metrics`` object). ``#/$defs/...`` refers to ``bindscope/schemas/eval_result.json``.
        settings: ``settings(run, options) -> dict``: entries it adds to the result's ``settings``, or None.
        report: ``report(result) -> list[str]``: its terminal lines (empty when its blocks are absent), or None.
        note: a line printed under the report when the task ran ("" for none).
        columns: ``columns(result, c)``: its ``bindscope collect`` columns (``c.add`` / ``c.proportion`` with a
            definition each; :class:`bindscope.evaluation.collect_kinds.Columns`), or None.
        panels: ``panels(result) -> list`` of plot panels ``(title, labels, {series: values}, ylabel, chance,
            ymax)``, or None.
    """

    name: str
    kind: str
    summary: str
    compute: Callable
    needs: frozenset[str] = frozenset()
    supplied_by: Mapping[str, str] = field(default_factory=dict)
    images: bool = False
    default: bool = False
    sources: tuple[str, ...] = ("dataset",)
    reads: frozenset[str] = frozenset()
    options: type | None = None
    schema: Mapping[str, dict] = field(default_factory=dict)
    settings: Callable | None = None
    report: Callable | None = None
    note: str = ""
    columns: Callable | None = None
    panels: Callable | None = None

    def check(self) -> "Task":
        """Self, after ValueError for a malformed definition (unknown kind or source, options not a dataclass)."""
        if self.kind not in KINDS:
            raise ValueError(f"task {self.name!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if not self.name or not set(self.sources) <= set(SOURCES):
            raise ValueError(f"task {self.name!r}: sources {self.sources!r} must be among {SOURCES}")
        if self.options is not None and not dataclasses.is_dataclass(self.options):
            raise ValueError(f"task {self.name!r}: options must be a dataclass")
        return self

    def option_fields(self) -> list[str]:
        """The names of its option fields."""
        return [f.name for f in dataclasses.fields(self.options)] if self.options is not None else []


_REGISTERED: dict[tuple[str, str], Task] = {}
_LOADED = False


def register_task(task: Task) -> Task:
    """Register ``task`` (after :meth:`Task.check`); a task of the same kind and name is replaced in its place.
    Returns ``task``."""
    _load()
    _REGISTERED[(task.kind, task.name)] = task.check()
    return task


def unregister_task(task: Task) -> None:
    """Remove ``task`` (by kind and name) from the registry; no-op when it is not registered."""
    _load()
    _REGISTERED.pop((task.kind, task.name), None)


def _load() -> None:
    """Import the built-in task modules, then the ``bindscope.tasks`` entry points (once)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for module in BUILTIN:
        for task in import_module(f"bindscope.evaluation.tasks.{module}").TASKS:
            _REGISTERED[(task.kind, task.name)] = task.check()
    for point in entry_points(group=ENTRY_POINT_GROUP):
        loaded = point.load()
        for task in loaded if isinstance(loaded, (list, tuple)) else [loaded]:
            if not isinstance(task, Task):
                raise TypeError(f"entry point {point.name!r} of {ENTRY_POINT_GROUP} gives {type(task).__name__}, "
                                "not a Task")
            _REGISTERED[(task.kind, task.name)] = task.check()


def tasks(kind: str, source: str | None = None) -> list[Task]:
    """The registered tasks of ``kind`` (those that run on ``source``, ``"dataset"`` or ``"sampled"``, when
    given), in registration order."""
    _load()
    return [t for (k, _), t in _REGISTERED.items() if k == kind and (source is None or source in t.sources)]


def get_task(kind: str, name: str) -> Task:
    """The task ``name`` of ``kind``. Raises BadInput listing the tasks of ``kind``."""
    _load()
    if (kind, name) not in _REGISTERED:
        raise BadInput(f"unknown task {name!r}; allowed here: {', '.join(t.name for t in tasks(kind))}",
                       param="tasks")
    return _REGISTERED[(kind, name)]


def parse_tasks(text: str | list[str], allowed: list[Task], keep_order: bool = True) -> list[Task]:
    """``"tor,ior"`` (or a list of names) -> those tasks of ``allowed``, without repeats: in the given order, or
    with ``keep_order=False`` in registration order.

    Raises:
        BadInput: an unknown task (the allowed ones are listed) or none.
    """
    items = [str(t).strip() for t in text] if isinstance(text, (list, tuple)) else \
        [t.strip() for t in str(text).split(",")]
    by_name = {t.name: t for t in allowed}
    chosen: list[Task] = []
    for name in items:
        if not name:
            continue
        if name not in by_name:
            raise BadInput(f"tasks {text!r}: unknown task {name!r}; allowed here: {', '.join(by_name)}",
                           param="tasks")
        if by_name[name] not in chosen:
            chosen.append(by_name[name])
    if not chosen:
        raise BadInput(f"tasks is empty; allowed: {', '.join(by_name)}", param="tasks")
    return chosen if keep_order else [t for t in allowed if t in chosen]


def missing_needs(task: Task, holds: frozenset[str], options=None) -> list[str]:
    """The holdings ``task`` needs that ``holds`` lacks and its ``options`` (an instance or a dict of fields) do not
    supply, sorted."""
    def given(name):
        return options.get(name) if isinstance(options, Mapping) else getattr(options, name, None)

    supplied = {h for h, field_name in task.supplied_by.items() if given(field_name.split("=")[0])}
    return sorted(set(task.needs) - set(holds) - supplied)


def describe_missing(task: Task, missing: list[str], where: str, holds: frozenset[str]) -> str:
    """The message of a task whose needs are not met: what it needs (:data:`HOLDINGS`' words, and the option
    that can supply it) and what ``where`` holds."""
    from bindscope.format.reader import HOLDINGS

    what = "; ".join(f"{h} ({HOLDINGS.get(h, h)}" + (f"; or give {task.supplied_by[h]}"
                                                      if h in task.supplied_by else "") + ")" for h in missing)
    return f"task {task.name} needs {what}; {where} holds: {', '.join(sorted(holds)) or 'none of these'}"


def resolve_options(chosen: list[Task], given: Mapping[str, object] | None, kind: str) -> dict[str, object]:
    """Per chosen task, its checked options: the instance given for it (or a dict of its fields), else its
    defaults.

    ``given`` maps task names of ``kind`` to options. A field takes one value in every chosen task that has it: a
    chosen task given no options takes the values given for the same fields of other tasks (``{"tor": {"protocol":
    "both"}}`` with tasks tor and ior sets IOR's protocol too), and two chosen tasks given different values are
    refused. Options given for a task that does not run are refused unless a chosen task has the changed fields
    (so the commands can give one value to every task that has a field).

    Raises:
        BadInput: an unknown task or field, a value its options refuse, a field no chosen task uses, or one
            field with two values (``param`` names the field).
    """
    given = dict(given or {})
    by_name = {t.name: t for t in tasks(kind)}
    chosen_fields = {name for t in chosen for name in t.option_fields()}
    out: dict[str, object] = {}
    for name, instance in check_options(kind, given).items():
        task = by_name[name]
        if task in chosen:
            out[name] = instance
            continue
        default = task.options()
        changed = [f for f in task.option_fields() if getattr(instance, f) != getattr(default, f)]
        unused = [f for f in changed if f not in chosen_fields]
        if unused:
            users = [t.name for t in by_name.values() if unused[0] in t.option_fields()]
            raise BadInput(f"{unused[0]} applies to task(s) {', '.join(users)}; add one to tasks", param=unused[0])
    for task in chosen:
        if task.options is not None and task.name not in out:
            out[task.name] = options_instance(task, _shared_values(task, given, by_name))
    _check_agreement(chosen, out)
    return out


def check_options(kind: str, given: Mapping[str, object] | None) -> dict[str, object]:
    """Options given by task name (an instance of the task's options class or a dict of its fields) as checked
    instances; which tasks run is not known yet (:func:`resolve_options` checks the rest).

    Raises:
        BadInput: a task ``kind`` has not, an unknown field, a value the task's options refuse.
    """
    by_name = {t.name: t for t in tasks(kind)}
    out = {}
    for name, value in (given or {}).items():
        if name not in by_name:
            raise BadInput(f"options given for unknown task {name!r}; tasks here: {', '.join(by_name)}",
                           param="options")
        out[name] = options_instance(by_name[name], value)
    return out


def _shared_values(task: Task, given: dict, by_name: dict) -> dict:
    """The values that options given for other tasks set for ``task``'s fields (commands give one value to every
    task that has the field)."""
    values = {}
    for name, value in given.items():
        other = by_name[name]
        instance = options_instance(other, value)
        default = other.options()
        for f in other.option_fields():
            if f in task.option_fields() and getattr(instance, f) != getattr(default, f):
                values[f] = getattr(instance, f)
    return values


def options_instance(task: Task, value) -> object:
    """``value`` (an instance of the task's options class or a dict of its fields) as a checked instance."""
    if task.options is None:
        if value in (None, {}):
            return None
        raise BadInput(f"task {task.name} has no options; got {value!r}", param="options")
    if isinstance(value, task.options):
        instance = value
    elif isinstance(value, Mapping):
        unknown = [k for k in value if k not in task.option_fields()]
        if unknown:
            raise BadInput(f"{unknown[0]} is not an option of task {task.name}; its options: "
                           f"{', '.join(task.option_fields())}", param=str(unknown[0]))
        instance = task.options(**value)
    else:
        raise BadInput(f"options of task {task.name} must be a {task.options.__name__} or a dict of its fields, "
                       f"got {type(value).__name__}", param="options")
    return instance.check() if hasattr(instance, "check") else instance


def _check_agreement(chosen: list[Task], options: dict[str, object]) -> None:
    """BadInput when two chosen tasks give one option field two values."""
    seen: dict[str, tuple[str, object]] = {}
    for task in chosen:
        for f in task.option_fields():
            value = getattr(options[task.name], f)
            if f in seen and seen[f][1] != value:
                raise BadInput(f"{f}: task {seen[f][0]} has {seen[f][1]!r} and task {task.name} {value!r}; an "
                               "option shared by several tasks takes one value", param=f)
            seen.setdefault(f, (task.name, value))


def shared_option(chosen: list[Task], options: dict[str, object], name: str, default=None):
    """The value of option field ``name`` in the chosen tasks that have it (one value: :func:`resolve_options`),
    else ``default``."""
    for task in chosen:
        if name in task.option_fields():
            return getattr(options[task.name], name)
    return default


def options_from_fields(kind: str, fields: Mapping[str, object]) -> dict[str, dict]:
    """Options by task from one value per field (what a command's flags give): each value that differs from a
    task's default goes to every task of ``kind`` that has the field, e.g. ``{"protocol": "both"}`` ->
    ``{"tor": {"protocol": "both"}, "ior": {"protocol": "both"}}``."""
    out: dict[str, dict] = {}
    for task in tasks(kind):
        if task.options is None:
            continue
        default = task.options()
        chosen = {k: v for k, v in fields.items() if k in task.option_fields() and v != getattr(default, k)}
        if chosen:
            out[task.name] = chosen
    return out


def tasks_help(kind: str) -> str:
    """The ``--tasks`` help of a command: every registered task of ``kind`` with its summary, the defaults
    marked."""
    lines = [f"{t.name}{' (default)' if t.default else ''}: {t.summary}" for t in tasks(kind)]
    return "Comma-separated, of: " + "; ".join(lines) + "."
