"""One command-line vocabulary (docs/cli.md), checked on every click command of ``madman``, ``comco`` and
``bindscope``: the same option name for the same concept everywhere."""

from __future__ import annotations

import click
import pytest

from bindscope.cli.main import bindscope, comco, madman
from bindscope.errors import DEVICE_GRAMMAR

RETIRED = {"--progress", "--no-progress", "--workers", "--processes", "--license", "--num", "--resume", "--source",
           "--hard-negatives", "--hard-negatives-per-sample"}


def _commands(group: click.Group, path: str):
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _commands(command, f"{path} {name}")
        else:
            yield f"{path} {name}", command


COMMANDS = [c for group, name in ((madman, "madman"), (comco, "comco"), (bindscope, "bindscope"))
            for c in _commands(group, name)]
OPTIONS = [(path, option) for path, command in COMMANDS for option in command.params
           if isinstance(option, click.Option)]


def test_every_command_is_walked():
    assert len(COMMANDS) == 33
    assert {"madman generate", "comco render", "comco assets fetch", "bindscope labclip fit", "bindscope train",
            "bindscope import coco", "bindscope import clevr", "bindscope import pug", "bindscope export webdataset",
            "bindscope export open-clip-config", "bindscope export clip-oscope", "comco t2i",
            "comco t2i-score", "bindscope compare"} <= {path for path, _ in COMMANDS}


def test_no_retired_spelling():
    found = sorted(f"{path}: {flag}" for path, option in OPTIONS for flag in option.opts + option.secondary_opts
                   if flag in RETIRED)
    assert found == []


def test_processes_are_jobs_and_threads_are_threads():
    """A count of processes is ``--jobs`` (or ``--<what>-jobs``), a count of threads per process ``--threads``."""
    wrong = []
    for path, option in OPTIONS:
        flag = max(option.opts, key=len)
        text = (option.help or "").lower()
        if "process" in text.split(".")[0] and isinstance(option.type, (click.types.IntParamType, click.IntRange)):
            if not flag.endswith("jobs"):
                wrong.append(f"{path}: {flag} counts processes")
        if flag.endswith("jobs") and "process" not in text:
            wrong.append(f"{path}: {flag} does not say it counts processes")
        if flag == "--threads" and "thread" not in text:
            wrong.append(f"{path}: --threads does not say what threads")
    assert wrong == []


def test_quiet_is_the_one_progress_switch():
    quiet = [(path, option) for path, option in OPTIONS if "--quiet" in option.opts]
    assert len(quiet) >= 12
    assert all(option.is_flag and option.help == "No progress bar." or option.help == "No progress bars."
               for _, option in quiet)


def test_n_counts_what_the_command_makes_or_reads():
    """``-n`` is always "how many items", with the unit in its help; previews draw the same default number."""
    ns = {path: option for path, option in OPTIONS if "-n" in option.opts}
    assert sorted(ns) == ["comco eval", "comco preview", "comco render", "comco t2i", "madman generate",
                          "madman preview"]
    for path, option in ns.items():
        assert option.help and option.type.name.startswith("integer"), path
    assert ns["madman preview"].default == ns["comco preview"].default == 16
    assert ns["madman preview"].help == ns["comco preview"].help


@pytest.mark.parametrize("path,option", [(p, o) for p, o in OPTIONS if "--device" in o.opts],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_one_device_grammar(path, option):
    assert option.help.startswith(DEVICE_GRAMMAR), path
    assert option.default == "auto", path


def test_one_flag_is_one_kind_of_value():
    """The same flag is a switch everywhere or takes a value everywhere."""
    kinds: dict[str, set[str]] = {}
    for path, option in OPTIONS:
        kind = "flag" if option.is_flag else "value"
        for flag in option.opts:
            kinds.setdefault(flag, set()).add(kind)
    assert {flag: sorted(k) for flag, k in kinds.items() if len(k) > 1} == {}


@pytest.mark.parametrize("command", ["comco render", "madman eval", "madman train"])
def test_a_bad_device_is_one_error_naming_the_grammar(command, tmp_path):
    from click.testing import CliRunner

    group = {"madman": madman, "comco": comco}[command.split()[0]]
    args = {"comco render": ["render", "-n", "1", "--out", str(tmp_path / "o"), "--device", "gpu"],
            "madman eval": ["eval", str(tmp_path), "--model", "ViT-B-32", "--device", "gpu"],
            "madman train": ["train", str(tmp_path), "--out", str(tmp_path / "r"), "--device", "gpu"]}[command]
    result = CliRunner().invoke(group, args)
    assert result.exit_code == 2, result.output
    assert "'gpu'" in result.output and DEVICE_GRAMMAR in result.output, result.output
    assert list(tmp_path.iterdir()) == []
