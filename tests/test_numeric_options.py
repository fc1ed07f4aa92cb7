"""Every numeric option of every command has a range with both ends (floats: finite, with their bounds), shown in
``--help`` and checked while the command line is parsed, before any work: a value outside it is one ``Error:``
line naming the flag, exit status 2, and nothing is written."""

from __future__ import annotations

import re

import click
import pytest
from cli_support import numeric_options, out_of_range
from click.testing import CliRunner

from bindscope.cli.main import bindscope, comco, madman
from bindscope.cli.train import TableValue
from bindscope.cli.types import Count, FiniteFloat

OPTIONS = numeric_options()
IDS = [" ".join(path) + " " + param.opts[-1] for path, _, param in OPTIONS]
GROUPS = {"madman": madman, "comco": comco, "bindscope": bindscope}


def test_the_walk_finds_the_commands_and_their_numbers():
    assert len(OPTIONS) >= 90
    assert {"madman generate --jobs", "comco eval --head-test-fraction", "bindscope import coco --image-size",
            "madman train --steps", "bindscope probe --batch-size"} <= set(IDS)


@pytest.mark.parametrize(("path", "command", "param"), OPTIONS, ids=IDS)
def test_every_numeric_option_has_a_range(path, command, param):
    kind = param.type
    assert isinstance(kind, (Count, FiniteFloat, TableValue)), f"{kind!r} checks no range"
    if isinstance(kind, TableValue):  # the training table's rows: their range is printed in words
        assert kind.row.low is not None and kind.row.high is not None
        return
    if isinstance(kind, Count):
        assert kind.min is not None and kind.max is not None, "an integer needs both ends: no unbounded loop"
    else:
        assert kind.min is not None, "a float needs at least its lower end"
    help_text = " ".join(command.get_help(click.Context(command, info_name=path[-1])).split())
    assert kind._describe_range() in help_text


@pytest.mark.parametrize(("path", "command", "param"), OPTIONS, ids=IDS)
def test_a_value_outside_the_range_is_refused_while_parsing(path, command, param, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for value in out_of_range(param):
        result = CliRunner().invoke(GROUPS[path[0]], path[1:] + [param.opts[-1], value])
        assert result.exit_code == 2, (value, result.output)
        flag = max(param.opts, key=len)
        assert re.fullmatch(rf"Error: {re.escape(flag)} {re.escape(value)} is not allowed; use [^\n]+\n",
                            result.output), result.output
        assert list(tmp_path.iterdir()) == []  # refused before anything was written
