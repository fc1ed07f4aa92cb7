"""Locks and ownership cannot be turned against the user: a planted lock or marker symlink destroys nothing
and creates nothing outside --out; ``bindscope release`` takes the lock every writer takes, on --out itself,
so it can never delete a dataset another command is writing; SIGTERM cleans up a release like Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from bindscope.build.builder import build_dataset
from bindscope.cli.main import bindscope, madman
from bindscope.errors import BadInput
from bindscope.io.ownership import LOCK, MARKER, OutputLock
from crash_runs import start, tree, wait_for
from tiny_madman import tiny_madman

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("locks") / "d"
    build_dataset(tiny_madman(splits={"train": 8, "test": 4}, shard_size=4), path, progress=False)
    return path


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim.txt"
    path.write_text("precious")
    return path


def _error_line(result) -> str:
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == 2 and len(errors) == 1, result.output
    return errors[0]


def _plant(out: Path, target: Path) -> None:
    out.mkdir(exist_ok=True)
    os.symlink(target, out / LOCK)


@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_generate_refuses_a_lock_symlink(tmp_path, victim, dangling):
    """shared/cases/lock-symlink.md (also for release, train and merge below)."""
    target = tmp_path / "created-outside.txt" if dangling else victim
    _plant(tmp_path / "out", target)
    result = CliRunner().invoke(madman, ["generate", "--out", str(tmp_path / "out"), "-n", "4", "--quiet"])
    assert "lock file" in _error_line(result) and "is a symlink" in result.output
    assert victim.read_text() == "precious" and not (tmp_path / "created-outside.txt").exists()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [LOCK]


def test_release_refuses_a_lock_symlink(tmp_path, victim, source):
    _plant(tmp_path / "rel", victim)
    result = CliRunner().invoke(bindscope, ["release", str(source), "--out", str(tmp_path / "rel")])
    assert "is a symlink" in _error_line(result)
    assert victim.read_text() == "precious" and sorted(p.name for p in (tmp_path / "rel").iterdir()) == [LOCK]


def test_train_refuses_a_lock_symlink(tmp_path, victim, source):
    _plant(tmp_path / "run", victim)
    result = CliRunner().invoke(madman, ["train", str(source), "--out", str(tmp_path / "run"), "--steps", "1",
                                         "--batch-size", "4", "--device", "cpu", "--quiet"])
    assert "is a symlink" in _error_line(result) and victim.read_text() == "precious"


def test_merge_refuses_a_part_folder_holding_a_lock_symlink(tmp_path, victim):
    from toy_generator import Squares

    part = tmp_path / "part"
    build_dataset(Squares(), part, num_parts=2, part=0, progress=False)
    build_dataset(Squares(), tmp_path / "part1", num_parts=2, part=1, progress=False)
    (part / LOCK).unlink(missing_ok=True)
    os.symlink(victim, part / LOCK)
    result = CliRunner().invoke(bindscope, ["merge", str(part), str(tmp_path / "part1"), "--out", str(part)])
    assert "is a symlink" in _error_line(result) and victim.read_text() == "precious"


def test_a_marker_symlinked_from_a_dataset_does_not_make_a_folder_ours(tmp_path, source):
    """--overwrite clears only folders bindscope made: a marker that is a link to another dataset's marker
    proves nothing."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    os.symlink(source / MARKER, mine / MARKER)
    result = CliRunner().invoke(madman, ["generate", "--out", str(mine), "-n", "4", "--overwrite", "--quiet"])
    assert "is not a bindscope dataset" in _error_line(result)
    assert (mine / "thesis.tex").read_text() == "years of work"


def test_release_is_refused_while_another_writer_holds_out(tmp_path, source):
    out = tmp_path / "rel"
    with OutputLock(out):  # what a running generate, merge or train on that folder holds
        (out / "shards").mkdir()
        result = CliRunner().invoke(bindscope, ["release", str(source), "--out", str(out)])
        assert "in use by another bindscope run" in _error_line(result)
    assert sorted(p.name for p in out.iterdir()) == ["shards"]


def test_a_writer_is_refused_while_a_release_holds_out(tmp_path, source, monkeypatch):
    from bindscope.publish import release

    seen = {}

    def generate_meanwhile(*args, **kwargs):
        with pytest.raises(BadInput, match="in use by another bindscope run"):
            with OutputLock(tmp_path / "rel"):
                pass
        seen["refused"] = True
        raise KeyboardInterrupt

    monkeypatch.setattr(release, "_write_parquet", generate_meanwhile)
    with pytest.raises(KeyboardInterrupt):
        release.make_release(source, tmp_path / "rel")
    assert seen == {"refused": True}
    assert not (tmp_path / "rel").exists()  # the folder this release made is gone again
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".rel")] == []


def test_release_racing_a_slow_generate_leaves_the_dataset_whole(tmp_path, source):
    out = tmp_path / "rel"
    writer = start(out, "--delay", "3")  # seconds per shard: the generate outlasts the release's checks
    assert wait_for(lambda: (out / LOCK).exists() or writer.poll() is not None)
    result = CliRunner().invoke(bindscope, ["release", str(source), "--out", str(out), "--overwrite"])
    line = _error_line(result)  # the lock is held; once the generate has claimed the folder, it is a dataset too
    assert "in use by another bindscope run" in line or "it holds a bindscope 'dataset' output" in line, line
    assert writer.wait(timeout=1800) == 0, writer.stderr.read()
    reference = tmp_path / "reference"
    assert start(reference).wait(timeout=1800) == 0
    assert tree(out) == tree(reference)


def test_sigterm_cleans_up_a_release_like_ctrl_c(tmp_path, source):
    out = tmp_path / "rel"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-c", "from bindscope.cli.main import bindscope; bindscope()"]
    process = subprocess.Popen(command + ["release", str(source), "--out", str(out)], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)

    def staging():
        return [p for p in tmp_path.iterdir() if p.name.startswith(".rel.")]

    assert wait_for(lambda: staging() or process.poll() is not None, timeout=1800)
    assert process.poll() is None, process.communicate()
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=1800)
    assert process.returncode != 0
    assert staging() == [] and not out.exists()
