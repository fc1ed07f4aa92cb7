"""Crash and concurrency runs shared by tests/test_attack_matrix.py and benchmarks/attack_matrix.py.

Every run is a real process (``tests/slow_build.py``) killed with SIGKILL, never a simulated interruption.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).with_name("slow_build.py")
SHARDS = 12  # of tests/slow_build.py's dataset


def start(out: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SCRIPT.parents[1]), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, str(SCRIPT), str(out), *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def build(out: Path, *extra: str) -> subprocess.CompletedProcess:
    process = start(out, *extra)
    stdout, stderr = process.communicate(timeout=1800)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (hidden files too)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux /proc)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_for(predicate, timeout: float = 600.0, step: float = 0.02) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return False


def shards_done(out: Path) -> int:
    return len(list((out / "shards").glob("*.h5"))) if (out / "shards").is_dir() else 0


def kill_and_repeat(root: Path, timed: int, delay: float = 0.15, jobs: int = 1) -> tuple[int, int, list[str]]:
    """Kill a build with SIGKILL at ``timed`` moments spread over it (after 0..all shards) and at every exact
    moment of ``slow_build.MOMENTS`` (temporary files written but not renamed, at the start, mid-run and in the
    finish; after the card, after the manifest, half-way through the tidy-up), repeat the same command, and
    compare the folder with an uninterrupted build (with ``jobs > 1`` less ``shard-tmp``: the workers write the
    shards). Returns (identical, runs, the moments); the differing files of a run are listed in its moment."""
    from slow_build import MOMENTS

    root.mkdir(parents=True, exist_ok=True)
    reference = root / "reference"
    assert build(reference, "--delay", "0").returncode == 0
    expected = tree(reference)
    moments = [f"after {round(k * SHARDS / max(1, timed - 1))} shards" for k in range(timed)]
    moments += [m for m in MOMENTS if jobs == 1 or m != "shard-tmp"]
    identical = 0
    for number, moment in enumerate(moments):
        out = root / f"run-{number}"
        common = ["--delay", str(delay if moment.startswith("after") else 0), "--jobs", str(jobs)]
        if moment.startswith("after"):
            target = int(moment.split()[1])
            process = start(out, *common)
            wait_for(lambda: shards_done(out) >= target or process.poll() is not None)
            process.send_signal(signal.SIGKILL)
            process.wait()
        else:
            killed = build(out, *common, "--die-at", moment)
            assert killed.returncode == -signal.SIGKILL, killed.stderr
        repeated = build(out, *common)
        found = tree(out)
        if repeated.returncode == 0 and found == expected:
            identical += 1
        else:
            differ = sorted(n for n in {*found, *expected} if found.get(n) != expected.get(n))
            moments[number] += f" (exit {repeated.returncode}, differing: {', '.join(differ) or 'none'})"
    return identical, len(moments), moments


def two_writers(root: Path, tries: int = 2) -> tuple[int, int]:
    """Start a build, then a second one on the same folder while the first writes (the same command, and another
    seed with ``--overwrite``). Returns (second refused with exit 2 naming the holder, tries); the first must
    finish with the dataset an undisturbed run makes."""
    root.mkdir(parents=True, exist_ok=True)
    reference = root / "reference"
    assert build(reference).returncode == 0
    refused = 0
    for number in range(tries):
        out = root / f"run-{number}"
        first = start(out, "--delay", "1.0")
        wait_for(lambda: shards_done(out) >= 1 or first.poll() is not None)
        extra = ["--seed", "1", "--overwrite"] if number % 2 else []
        second = build(out, *extra)
        first_out, first_err = first.communicate(timeout=1800)
        refused += (second.returncode == 2 and "in use by another bindscope run" in second.stderr
                    and f"pid {first.pid}" in second.stderr and first.returncode == 0
                    and tree(out) == tree(reference))
    return refused, tries


def workers_die_with_parent(root: Path) -> tuple[bool, int, bool]:
    """Start a 2-process build with its progress bar, kill the parent with SIGKILL after its first shard, check
    that its child processes (workers and the progress bar's Manager process) exit within 10 s (0.2 s on a
    quiet machine) and write no shard afterwards, then repeat the command. Returns (all children gone, shards
    written after, the repeated command exited 0 with the bytes of an undisturbed run)."""
    out = root / "orphans"
    process = start(out, "--delay", "0.5", "--jobs", "2", "--progress")
    wait_for(lambda: shards_done(out) >= 1 and len(children(process.pid)) >= 3)
    workers = [pid for pid in children(process.pid)]
    process.send_signal(signal.SIGKILL)
    process.wait()  # it is dead once reaped (on a busy machine a killed process takes a while to exit)
    before = shards_done(out)
    gone = wait_for(lambda: not any(alive(pid) for pid in workers), timeout=300.0)
    time.sleep(1.0)
    written_after = shards_done(out) - before
    repeated = build(out, "--jobs", "2")  # refused (exit 2) if a child kept the folder's lock
    assert build(root / "reference").returncode == 0
    return gone, written_after, repeated.returncode == 0 and tree(out) == tree(root / "reference")
