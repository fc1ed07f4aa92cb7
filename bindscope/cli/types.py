"""Click parameter types shared by the commands."""

from __future__ import annotations

import math

import click

from bindscope.errors import check_device


class FiniteFloat(click.FloatRange):
    """A float option that must be finite (no ``nan``/``inf``), optionally within ``min``..``max``.

    click's own FloatRange lets ``nan`` through, because every comparison with NaN is false.
    """

    def convert(self, value, param, ctx):
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)


class Device(click.ParamType):
    """A ``--device`` value in the one grammar ``auto | cpu | cuda | cuda:N``; anything else is
    :class:`bindscope.errors.BadInput` (one ``Error:`` line, exit status 2) before the command runs."""

    name = "device"

    def convert(self, value, param, ctx):
        return check_device(value)


DEVICE = Device()
