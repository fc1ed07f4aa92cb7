"""bindscope.io.claim: what a folder holds, the decision, the lock, the claim and its removal after an early
failure, stage and rename, leftovers of killed runs, signals, and the claim on one file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bindscope.errors import BadInput
from bindscope.io.claim import (
    OutputKind,
    check_output,
    claim_file,
    claim_output,
    inspect_output,
)
from bindscope.io.ownership import LOCK, MARKER, OutputLock, read_marker, write_marker

ROOT = Path(__file__).resolve().parents[1]


def _finished(folder: Path, run_id: str) -> bool:
    try:
        return json.loads((folder / "done.json").read_text())["run_id"] == run_id
    except (OSError, ValueError, KeyError):
        return False


THING = OutputKind("thing", "test thing", identity="seed", finished=_finished, claim_files=("run.json",))
STAGED = OutputKind("staged-thing", "staged test thing", staged=True)


def _names(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def _finish(folder: Path, run_id: str) -> None:
    (folder / "data.txt").write_text("data")
    (folder / "done.json").write_text(json.dumps({"run_id": run_id}))


# ----------------------------------------------------------------------------------------- inspect, decide


def test_what_a_folder_holds(tmp_path):
    assert inspect_output(tmp_path / "missing", THING).holds == "new"
    (tmp_path / "stale").mkdir()
    (tmp_path / "stale" / LOCK).write_text("pid 1 on gone: madman generate\n")  # what kill -9 leaves
    (tmp_path / "stale" / "shards").mkdir()
    assert inspect_output(tmp_path / "stale", THING).holds == "new"
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    state = inspect_output(tmp_path / "user", THING)
    assert (state.holds, state.run_id, state.example) == ("foreign", None, "'notes.txt'")
    (tmp_path / "other").mkdir()
    write_marker(tmp_path / "other", "dataset", "a" * 64)
    state = inspect_output(tmp_path / "other", THING)
    assert (state.holds, state.example) == ("foreign", "a bindscope 'dataset' output")
    (tmp_path / "ours").mkdir()
    write_marker(tmp_path / "ours", "thing", "r1")
    assert inspect_output(tmp_path / "ours", THING).holds == "ours"
    assert (inspect_output(tmp_path / "ours", THING).run_id, inspect_output(tmp_path / "ours", THING).finished) \
        == ("r1", False)
    _finish(tmp_path / "ours", "r1")
    assert inspect_output(tmp_path / "ours", THING).finished is True
    recorded = OutputKind("thing", "test thing", run_of=lambda folder: json.loads((folder / "done.json").read_text())[
        "run_id"] + "-recorded")
    assert inspect_output(tmp_path / "ours", recorded).run_id == "r1-recorded"
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadInput, match="exists and is not a folder"):
        inspect_output(tmp_path / "file", THING)


def test_decisions(tmp_path):
    out = tmp_path / "out"
    assert claim_output(out, THING, "r1").decision == "new"
    out.mkdir()
    write_marker(out, "thing", "r1")
    assert claim_output(out, THING, "r1").decision == "resume"
    _finish(out, "r1")
    assert claim_output(out, THING, "r1").decision == "done"
    with pytest.raises(BadInput, match=r"^out '.*' is not empty: it holds another test thing \(finished\), made "
                                       "with another seed; pass overwrite=True"):
        claim_output(out, THING, "r2")
    assert claim_output(out, THING, "r2", overwrite=True).decision == "overwrite"
    assert claim_output(out, THING, "r2", extends=lambda folder: True).decision == "extend"
    assert claim_output(out, THING, "r2", overwrite=True, extends=lambda folder: True).decision == "overwrite"
    (out / "done.json").unlink()
    with pytest.raises(BadInput, match=r"unfinished: repeat its own command to resume it"):
        claim_output(out, THING, "r2")
    assert check_output(out, THING) == out.resolve()


def test_foreign_and_other_kinds_are_refused_even_with_overwrite(tmp_path):
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(BadInput, match=r"is not empty and is not a test thing \(it holds no \.bindscope\.json marker of one; "
                                              r"e\.g\. 'notes\.txt'\); choose a new or empty folder"):
            claim_output(tmp_path / "user", THING, "r1", overwrite=overwrite)
        with pytest.raises(BadInput, match="is not a test thing"):
            check_output(tmp_path / "user", THING, overwrite=overwrite)
    assert _names(tmp_path / "user") == ["notes.txt"]
    with pytest.raises(BadInput, match="^--out is empty"):
        check_output("", THING, flag="--out")


# ----------------------------------------------------------------------------------------- claiming


def test_a_new_claim_marks_the_folder_and_holds_the_lock(tmp_path):
    out = tmp_path / "a" / "out"
    with claim_output(out, THING, "r1") as claim:
        assert claim.path == out.resolve() and claim.decision == "new"
        assert read_marker(out) == {"format": "bindscope-output", "kind": "thing", "run_id": "r1"}
        with pytest.raises(BadInput, match=r"^out '.*' is in use by another bindscope run \(pid "):
            with claim_output(out, THING, "r1"):
                pass
        _finish(out, "r1")
    assert _names(out) == [MARKER, "data.txt", "done.json"]  # the lock file is gone with the lock


def test_a_stale_lock_file_is_taken_over(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK).write_text("pid 99999 on elsewhere: killed -9\n")
    with claim_output(out, THING, "r1") as claim:
        assert claim.decision == "new"
        _finish(out, "r1")
    assert _names(out) == [MARKER, "data.txt", "done.json"]


def test_a_failure_before_the_first_output_leaves_no_claimed_folder(tmp_path):
    out = tmp_path / "a" / "b" / "out"
    with pytest.raises(RuntimeError, match="model file unreadable"):
        with claim_output(out, THING, "r1"):
            (out / "run.json").write_text("{}")  # a claim file: no output yet
            (out / "shards").mkdir()
            raise RuntimeError("model file unreadable")
    assert not (tmp_path / "a").exists()  # the folder and the parents the claim created
    (tmp_path / "mine").mkdir()  # a folder the user made is kept, emptied of the claim
    with pytest.raises(KeyboardInterrupt):
        with claim_output(tmp_path / "mine", THING, "r1"):
            raise KeyboardInterrupt
    assert _names(tmp_path / "mine") == []
    with pytest.raises(RuntimeError):
        with claim_output(out, THING, "r1"):
            (out / "shards").mkdir()
            (out / "shards" / "train-0.h5").write_text("a finished shard")
            raise RuntimeError("later")
    assert _names(out) == [MARKER, "shards", "shards/train-0.h5"]  # output: kept, it resumes


def test_overwrite_deletes_only_under_the_lock_and_only_this_kind(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    write_marker(out, "thing", "r1")
    _finish(out, "r1")
    claim = claim_output(out, THING, "r2", overwrite=True)  # decided: overwrite
    # meanwhile another command replaces the folder's content with its own finished output
    for entry in out.iterdir():
        entry.unlink()
    write_marker(out, "dataset", "d" * 64)
    (out / "manifest.json").write_text("{}")
    with pytest.raises(BadInput, match="is not a test thing \\(it holds a bindscope 'dataset' output\\)"):
        with claim:
            pass
    assert _names(out) == [MARKER, "manifest.json"] and read_marker(out)["kind"] == "dataset"
    write_marker(out, "thing", "r1")
    claim = claim_output(out, THING, "r2", overwrite=True)
    _finish(out, "r3")
    write_marker(out, "thing", "r3")  # meanwhile another run of this kind finished its own output there
    with pytest.raises(BadInput, match="changed while this command started .*; nothing was deleted"):
        with claim:
            pass
    assert _names(out) == [MARKER, "data.txt", "done.json", "manifest.json"] and read_marker(out)["run_id"] == "r3"
    with claim_output(out, THING, "r2", overwrite=True) as claim:
        assert claim.decision == "overwrite" and _names(out) == [MARKER, LOCK]
    assert read_marker(out)["run_id"] == "r2"


def test_shared_claims_run_together_and_never_overwrite(tmp_path):
    out = tmp_path / "out"
    with claim_output(out, THING, "r1", shared=True), claim_output(out, THING, "r1", shared=True) as second:
        assert second.decision == "resume"  # the first one's marker names the same run
        with pytest.raises(BadInput, match="in use"):
            with claim_output(out, THING, "r1"):
                pass
    claim = claim_output(out, THING, "r2", shared=True, overwrite=True)  # decided overwrite: taken exclusive
    with claim, pytest.raises(BadInput, match="in use"):
        with claim_output(out, THING, "r2", shared=True, overwrite=True):
            pass
    assert read_marker(out)["run_id"] == "r2"
    claim = claim_output(out, THING, "r2", shared=True, overwrite=True)  # decided resume: shared
    write_marker(out, "thing", "r3")  # meanwhile another run took the folder over
    with pytest.raises(BadInput, match="changed while this command started"):
        with claim:
            pass
    assert read_marker(out)["run_id"] == "r3"


# ----------------------------------------------------------------------------------------- staging


def test_stage_and_publish(tmp_path):
    out = tmp_path / "out"
    with claim_output(out, STAGED, "s1") as claim:
        assert _names(out) == [LOCK] and read_marker(out) is None  # nothing until published
        staging = claim.staging()
        assert staging.parent == tmp_path and staging.name.startswith(".out.bindscope-staging-")
        assert staging.stat().st_mode & 0o777 == 0o777 & ~_umask()
        (staging / "a.txt").write_text("first")
        claim.publish()
        assert not staging.exists()
        with pytest.raises(BadInput, match="in use"):  # still held after the swap
            with claim_output(out, STAGED, "s2", overwrite=True):
                pass
    assert _names(out) == [MARKER, "a.txt"] and read_marker(out)["run_id"] == "s1"
    with pytest.raises(BadInput, match="holds a staged test thing; pass overwrite=True"):
        claim_output(out, STAGED, "s1")
    with claim_output(out, STAGED, "s2", overwrite=True) as claim:
        (claim.staging() / "b.txt").write_text("second")
        assert _names(out) == [MARKER, LOCK, "a.txt"]  # the earlier output stays whole until published
        claim.publish()
    assert _names(out) == [MARKER, "b.txt"] and read_marker(out)["run_id"] == "s2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_failed_staged_run_leaves_nothing_and_leftovers_are_removed(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ValueError):
        with claim_output(out, STAGED, "s1") as claim:
            (claim.staging() / "a.txt").write_text("half")
            (claim.scratch() / "cache").write_text("arrow")
            raise ValueError("bad row")
    assert list(tmp_path.iterdir()) == []
    # what a kill -9 leaves: staging, scratch and set-aside folders beside out, a stale lock in it
    for role in ("staging", "scratch", "old"):
        (tmp_path / f".out.bindscope-{role}-4242.tmp").mkdir()
        (tmp_path / f".out.bindscope-{role}-4242.tmp" / "f").write_text("x")
    (tmp_path / ".outer.bindscope-staging-4242.tmp").mkdir()  # another folder's: kept
    out.mkdir()
    (out / LOCK).write_text("pid 4242 on gone\n")
    with claim_output(out, STAGED, "s1") as claim:
        (claim.staging() / "a.txt").write_text("whole")
        claim.publish()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".outer.bindscope-staging-4242.tmp", "out"]
    assert _names(out) == [MARKER, "a.txt"]


SIGNALLED = """
import signal, sys, time
from bindscope.io.claim import OutputKind, claim_output
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (a shell's background job ignores it)
with claim_output(sys.argv[1], OutputKind("staged-thing", "staged test thing", staged=True), "s1") as claim:
    (claim.staging() / "a.txt").write_text("half")
    print("ready", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda n: n.name)
def test_every_signal_removes_the_staging_folder(tmp_path, number):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-c", SIGNALLED, str(tmp_path / "out")], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "ready\n", process.communicate()
    assert len(list(tmp_path.iterdir())) == 2  # out (holding the lock) and the staging folder
    process.send_signal(number)
    process.communicate(timeout=60)
    assert process.returncode != 0
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------------------- one file


def _is_config(path: Path) -> bool:
    return path.read_text().startswith("{")


def test_claim_file(tmp_path):
    out = tmp_path / "cfg" / "model.json"
    with claim_file(out, _is_config, "model config") as path:
        assert (tmp_path / "cfg" / ".bindscope-model.json.lock").exists()
        with pytest.raises(BadInput, match="in use by another bindscope run"):
            with claim_file(out, _is_config, "model config"):
                pass
        path.write_text("{}")
    assert sorted(p.name for p in (tmp_path / "cfg").iterdir()) == ["model.json"]
    with pytest.raises(BadInput, match="exists; pass overwrite=True"):
        with claim_file(out, _is_config, "model config"):
            pass
    (tmp_path / "notes.json").write_text("my notes")
    with pytest.raises(BadInput, match="is not a model config; overwrite=True only replaces a file this command"):
        with claim_file(tmp_path / "notes.json", _is_config, "model config", overwrite=True):
            pass
    assert (tmp_path / "notes.json").read_text() == "my notes"
    (tmp_path / "cfg" / ".model.json.123.tmp").write_text("cut short by a kill")
    with claim_file(out, _is_config, "model config", overwrite=True) as path:
        path.write_text("{1}")
    assert sorted(p.name for p in (tmp_path / "cfg").iterdir()) == ["model.json"]
    with pytest.raises(ValueError):
        with claim_file(tmp_path / "new" / "deeper" / "m.json", _is_config, "model config"):
            raise ValueError
    assert not (tmp_path / "new").exists()


def test_lock_moves_with_its_folder(tmp_path):
    lock = OutputLock(tmp_path / "a").__enter__()
    os.rename(tmp_path / "a", tmp_path / "b")
    lock.moved(tmp_path / "b")
    lock.__exit__(None, None, None)
    assert list((tmp_path / "b").iterdir()) == []


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
