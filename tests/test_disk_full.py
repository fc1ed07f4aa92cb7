"""A full disk while writing: one ``Error: No space left on device: ...`` line naming the file, exit status 1 (an
error of the machine, not of the input), no temporary file left, the earlier file under the final name intact,
and the same command resumes once there is space (finished shards are not written again). Simulated by an
``fsync`` that fails with ENOSPC, and for real on a 1 MiB tmpfs where mounting is allowed (root)."""

from __future__ import annotations

import errno
import os
import pickle
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from coco_fixture import write_coco

from bindscope.cli.main import bindscope
from bindscope.errors import DiskFull, GenerationError
from bindscope.io.atomic import atomic_open, disk_full, reporting_disk_full, write_text_atomic

SHARDS = ["val2017-00000.h5", "val2017-00001.h5", "val2017-00002.h5"]  # shard_size 1: one image each


def temp_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.tmp"))


def failing_fsync(monkeypatch, fails) -> list[str]:
    """Make ``os.fsync`` raise ENOSPC for the files whose path ``fails(path)`` selects; returns those paths."""
    real, hit = os.fsync, []

    def fsync(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if fails(path):
            hit.append(path)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return hit


def import_args(src: Path, out: Path, jobs: int = 1) -> list[str]:
    return ["import", "coco", "--images", str(src / "images"), "--instances", str(src / "instances.json"),
            "--captions", str(src / "captions.json"), "--out", str(out), "--image-size", "224", "--shard-size", "1",
            "--jobs", str(jobs), "--quiet"]


def one_error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    return lines[0]


def test_disk_full_error_is_an_oserror_and_a_generation_error():
    error = DiskFull(errno.ENOSPC, os.strerror(errno.ENOSPC), "/data/out/shards/a.h5")
    assert isinstance(error, OSError) and isinstance(error, GenerationError) and error.errno == errno.ENOSPC
    assert str(error) == ("No space left on device: could not write '/data/out/shards/a.h5'; free space there and "
                          "repeat the command (what was finished is kept)")
    again = pickle.loads(pickle.dumps(error))  # raised in a worker process, re-raised in the parent
    assert type(again) is DiskFull and str(again) == str(error) and again.filename == error.filename
    quota = disk_full(OSError(errno.EDQUOT, "quota"), "/q")
    assert str(quota).startswith("Disk quota exceeded: could not write '/q'")
    assert disk_full(OSError(errno.EACCES, "denied"), "/q") is None
    with pytest.raises(DiskFull, match="^No space left on device: could not write '/x/y'"):
        with reporting_disk_full("/x"):
            raise OSError(errno.ENOSPC, "full", "/x/y")
    with pytest.raises(PermissionError):
        with reporting_disk_full("/x"):
            raise PermissionError(errno.EACCES, "denied")


def test_atomic_write_on_a_full_disk_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "result.json"
    target.write_text("old\n")
    failing_fsync(monkeypatch, lambda path: path.endswith(".tmp"))
    with pytest.raises(DiskFull) as info:
        write_text_atomic(target, "new\n")
    assert str(info.value).startswith(f"No space left on device: could not write {str(target)!r}")
    assert target.read_text() == "old\n" and temp_files(tmp_path) == []

    def write_fails():  # ENOSPC raised by the writer itself (h5py, np.save), inside the block
        with atomic_open(tmp_path / "x.bin") as handle:
            handle.write(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(DiskFull, match="x.bin"):
        write_fails()
    assert not (tmp_path / "x.bin").exists() and temp_files(tmp_path) == []


def test_coco_import_disk_full_then_resume(tmp_path, monkeypatch):
    write_coco(tmp_path / "src")
    out = tmp_path / "out"
    hit = failing_fsync(monkeypatch, lambda path: Path(path).name.startswith(f".{SHARDS[1]}."))
    result = CliRunner().invoke(bindscope, import_args(tmp_path / "src", out))
    assert result.exit_code == 1, result.output
    shard = out / "shards" / SHARDS[1]
    assert one_error_line(result) == (f"Error: No space left on device: could not write {str(shard)!r}; free space "
                                      "there and repeat the command (what was finished is kept)")
    assert len(hit) == 1 and temp_files(out) == []
    assert (out / "shards" / SHARDS[0]).is_file() and not shard.exists() and not (out / "manifest.json").exists()
    first = (out / "shards" / SHARDS[0]).stat()
    monkeypatch.undo()  # space again
    result = CliRunner().invoke(bindscope, import_args(tmp_path / "src", out))
    assert result.exit_code == 0, result.output
    assert "3 samples" in result.output
    kept = (out / "shards" / SHARDS[0]).stat()
    assert (kept.st_ino, kept.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)  # resumed, not written again
    assert CliRunner().invoke(bindscope, ["verify", str(out)]).exit_code == 0


@pytest.fixture()
def small_disk(tmp_path):
    """A 1 MiB tmpfs mounted at ``tmp_path / "disk-..."``; skips where mounting is not allowed."""
    disk = tmp_path / f"disk-{uuid.uuid4().hex[:8]}"
    disk.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield disk
    finally:
        if subprocess.run(["umount", str(disk)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def fill(disk: Path, leave_kib: int) -> Path:
    """Fill ``disk`` up to ``leave_kib`` KiB of free space; returns the filler file (delete it to free space)."""
    stats = os.statvfs(disk)
    filler = disk / "filler"
    filler.write_bytes(b"\0" * (stats.f_bavail * stats.f_frsize - leave_kib * 1024))
    return filler


# A write that fails inside HDF5 leaves the library in a state that crashes the process when its objects are
# collected; bindscope's writers never let HDF5 meet the disk (io.atomic.atomic_hdf5), and every real full-disk
# write runs in a child process, so a crash would show as its exit status instead of ending the test run.
def run_child(code: str, *args: str) -> subprocess.CompletedProcess:
    tests = Path(__file__).parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tests.parent), str(tests)]), PYTHONFAULTHANDLER="1")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=1800)


CLI = """
import sys
from bindscope.cli.main import bindscope
bindscope(sys.argv[1:], prog_name="bindscope")
"""


def test_atomic_hdf5_on_a_really_full_disk(small_disk):
    filler = fill(small_disk, 100)
    code = """
import sys
import numpy as np
from bindscope.errors import DiskFull
from bindscope.io.atomic import atomic_hdf5
images = np.random.default_rng(0).integers(0, 255, (3, 224, 224, 3), dtype=np.uint8)  # 450 kB, incompressible
try:
    with atomic_hdf5(sys.argv[1], libver="v110", track_order=False) as f:
        f.create_dataset("images", data=images, chunks=(1, 224, 224, 3), compression="gzip").flush()
except DiskFull as exc:
    print(exc)
else:
    print("written")
"""
    target = small_disk / "s.h5"
    done = run_child(code, str(target))
    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"No space left on device: could not write {str(target)!r}; free space there and repeat "
                           "the command (what was finished is kept)\n")
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]  # no temporary file
    filler.unlink()
    done = run_child(code, str(target))
    assert (done.returncode, done.stdout) == (0, "written\n"), done.stderr
    import h5py
    import numpy as np

    with h5py.File(target, "r") as f:
        assert f["images"].shape == (3, 224, 224, 3) and f["images"][2, 5, 7].tolist() == \
            np.random.default_rng(0).integers(0, 255, (3, 224, 224, 3), dtype=np.uint8)[2, 5, 7].tolist()


def test_coco_import_on_a_really_full_disk_then_resume(tmp_path, small_disk):
    """The shipped shard writer (format.shard.write_shard) on a full disk: one error line, exit status 1 (not a
    crash), no temporary file, the finished shard kept; with space again the same command resumes."""
    write_coco(tmp_path / "src")
    out = small_disk / "out"
    filler = fill(small_disk, 220)  # the shards take about 166, 92 and 166 kB: room for the first and a bit
    done = run_child(CLI, *import_args(tmp_path / "src", out))
    assert done.returncode == 1, done.stderr
    assert done.stdout == "" and done.stderr == (
        f"Error: No space left on device: could not write {str(out / 'shards' / SHARDS[1])!r}; free space there "
        "and repeat the command (what was finished is kept)\n")
    assert temp_files(small_disk) == [] and not (out / "manifest.json").exists()
    finished = {p.name: p.stat().st_ino for p in (out / "shards").glob("*.h5")}
    assert list(finished) == [SHARDS[0]]
    filler.unlink()
    done = run_child(CLI, *import_args(tmp_path / "src", out))
    assert done.returncode == 0, done.stderr
    assert (out / "shards" / SHARDS[0]).stat().st_ino == finished[SHARDS[0]]  # resumed: kept, not rewritten
    assert sorted(p.name for p in (out / "shards").glob("*.h5")) == SHARDS
    assert CliRunner().invoke(bindscope, ["verify", str(out)]).exit_code == 0
