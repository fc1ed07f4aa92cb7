"""Click parameter types shared by the commands."""

from __future__ import annotations

import math

import click

from bindscope.errors import BadInput, check_device
from bindscope.limits import MAX_COUNT, MAX_JOBS, MAX_SEED


def _refuse(param: click.Parameter | None, value, allowed: str):
    """One ``Error:`` line (:class:`BadInput`, exit status 2) naming the flag, the value and what is allowed, in the
    words the library's own checks use."""
    flag = max(param.opts, key=len) if param is not None and param.opts else "value"
    raise BadInput(f"{flag} {value} is not allowed; use {allowed}")


class Count(click.IntRange):
    """An integer option within ``min..max`` (both ends included and required: no loop is unbounded by user input).

    The range shows in ``--help``; a value outside it is refused while the command line is parsed, before any work.
    """

    def __init__(self, low: int, high: int, unit: str = ""):
        super().__init__(low, high)
        self.unit = unit

    def convert(self, value, param, ctx):
        number = click.INT.convert(value, param, ctx)
        if not self.min <= number <= self.max:
            _refuse(param, number, f"an integer in {self.min}..{self.max}" + (f" {self.unit}" if self.unit else ""))
        return number


class FiniteFloat(click.FloatRange):
    """A float option that must be finite (no ``nan``/``inf``), optionally within ``min``..``max`` (open ends
    with ``min_open`` / ``max_open``). click's own FloatRange lets ``nan`` through, because every comparison with
    NaN is false. Refused while the command line is parsed, as :class:`Count`."""

    def convert(self, value, param, ctx):
        number = click.FLOAT.convert(value, param, ctx)
        low_ok = self.min is None or (number > self.min if self.min_open else number >= self.min)
        high_ok = self.max is None or (number < self.max if self.max_open else number <= self.max)
        if not (math.isfinite(number) and low_ok and high_ok):
            _refuse(param, f"{number!r}", "a finite number" + self._words())
        return number

    def _words(self) -> str:
        if self.min is not None and self.max is not None:
            return (f" in {'(' if self.min_open else '['}{self.min:g}, {self.max:g}{')' if self.max_open else ']'}")
        if self.min is not None:
            return f" {'>' if self.min_open else '>='} {self.min:g}"
        if self.max is not None:
            return f" {'<' if self.max_open else '<='} {self.max:g}"
        return ""


class Device(click.ParamType):
    """A ``--device`` value in the one grammar ``auto | cpu | cuda | cuda:N``; anything else is
    :class:`bindscope.errors.BadInput` (one ``Error:`` line, exit status 2) before the command runs."""

    name = "device"

    def convert(self, value, param, ctx):
        return check_device(value)


DEVICE = Device()


SEED = Count(0, MAX_SEED)
"""A ``--seed`` (0..:data:`bindscope.limits.MAX_SEED`)."""
JOBS = Count(1, MAX_JOBS)
"""A ``--jobs`` (worker processes, 1..:data:`bindscope.limits.MAX_JOBS`)."""


def count(low: int = 1, high: int = MAX_COUNT, unit: str = "") -> Count:
    """An integer option counting things (images, samples, steps, ...): ``low..high``, ``unit`` named in the error
    (as the library's check names it)."""
    return Count(low, high, unit)


def schema_range(schema: str, key: str) -> click.ParamType:
    """The click type of the number option that sets config key ``key`` (dotted, e.g. ``ood.holdout_fraction``):
    its type and bounds read from ``bindscope/schemas/<schema>.json``, so flag and config file allow the same
    values. A float key gives a :class:`FiniteFloat`.

    Raises:
        KeyError / ValueError: ``key`` is not a number key with both bounds in the schema (a programming error).
    """
    from bindscope.schemas import load_schema

    node = load_schema(schema)
    for part in key.split("."):
        node = node["properties"][part]
    node = next((n for n in node.get("anyOf", [node]) if n.get("type") != "null"), node)
    low = node.get("minimum", node.get("exclusiveMinimum"))
    high = node.get("maximum", node.get("exclusiveMaximum"))
    if low is None or high is None or node.get("type") not in ("integer", "number"):
        raise ValueError(f"{schema}.{key} is not a number with both bounds")
    if node["type"] == "integer":
        return Count(low, high)
    return FiniteFloat(low, high, min_open="exclusiveMinimum" in node, max_open="exclusiveMaximum" in node)
