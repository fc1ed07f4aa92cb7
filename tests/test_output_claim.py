"""Every writer claims its output through bindscope.io.claim, and each passes the same five trials: a foreign folder
(exit 2, nothing deleted), a stale lock file (taken over, the run succeeds), a concurrent writer (the second exits
2 naming the holder), an ``--overwrite`` racing another command (nothing of the other's deleted), SIGTERM during
the run (no staging or claimed folder left; a rerun completes). The writers: ``madman generate``, ``comco render``,
``bindscope import coco|clevr|pug``, ``bindscope merge``, ``bindscope release`` and ``bindscope export webdataset |
open-clip-config | clip-oscope``. Then shared/cases/export-overwrite-race.md, as written."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
import yaml
from click.testing import CliRunner
from eval_fakes import comco_fixture
from tiny_madman import tiny_madman
from toy_generator import Squares, SquaresGenerator

from bindscope.build.builder import build_dataset
from bindscope.cli.main import bindscope, comco, madman
from bindscope.io import claim as claim_module
from bindscope.io.ownership import LOCK, read_marker
from bindscope.publish.open_clip_config import is_model_config
from bindscope.publish.verify import verify_dataset

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
GROUPS = {"madman": madman, "comco": comco, "bindscope": bindscope}
MODEL = ["--embed-dim", "32", "--image-size", "32", "--patch-size", "8", "--vision-width", "64", "--vision-layers",
         "2", "--text-width", "64", "--text-layers", "2", "--head-width", "32", "--context-length", "32"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """The writers' inputs: ``mnist`` (a small MNIST folder), ``data`` (a tiny MADMAN dataset), ``comco`` (scenes and references), ``part0`` and
    ``part1`` (the two parts of a toy run), ``coco`` (a tiny COCO layout), ``clevr`` (a CLEVR split's images and
    scene file), ``pug`` (PUG:SPAR Parquet files), ``tiny.yaml`` (a ComCO render config),
    and the outputs other commands finish meanwhile: ``wds`` (a webdataset export) and ``squares`` (a dataset)."""
    from coco_fixture import write_coco
    from madman_support import write_fake_mnist_root
    from scene_fixtures import write_clevr, write_pug_parquet

    from bindscope.publish.webdataset import export_webdataset

    root = tmp_path_factory.mktemp("claim-inputs")
    write_fake_mnist_root(root / "mnist", train_per_class=12, test_per_class=4)
    build_dataset(tiny_madman(splits={"train": 8, "test": 4}, shard_size=4), root / "data", progress=False)
    comco_fixture(root, "comco")
    for part in (0, 1):
        build_dataset(Squares(), root / f"part{part}", num_parts=2, part=part, progress=False)
    write_coco(root / "coco")
    images, scenes = write_clevr(root / "clevr-src")
    (root / "clevr").mkdir()
    images.rename(root / "clevr" / "images")
    scenes.rename(root / "clevr" / "scenes.json")
    write_pug_parquet(root / "pug-src").rename(root / "pug")
    (root / "tiny.yaml").write_text(yaml.safe_dump({"shard_size": 4, "denoise": False}))
    export_webdataset(root / "data", root / "wds", samples_per_shard=4)
    build_dataset(SquaresGenerator(seed=7), root / "squares", progress=False)
    return root


def _dataset_done(out: Path) -> bool:
    return (out / "manifest.json").is_file() and verify_dataset(out) == []


def _kind_done(kind: str, index: str) -> Callable[[Path], bool]:
    return lambda out: (out / index).is_file() and (read_marker(out) or {}).get("kind") == kind


@dataclass
class Writer:
    name: str
    group: str
    args: Callable[[Path, Path], list[str]]   # (inputs, out) -> the command's arguments
    done: Callable[[Path], bool]              # the output is complete
    pause: str = "claimed"                    # where the signal test stops it (tests/claim_writer.py)
    overwrite: bool = True                    # the command has --overwrite
    file: bool = False                        # the output is one file
    other: str = "squares"                    # the other command's output that lands in --out meanwhile
    marks: list = field(default_factory=list)

    def run(self, inputs: Path, out: Path, *extra: str):
        return CliRunner().invoke(GROUPS[self.group], [*self.args(inputs, out), *extra])


WRITERS = [
    Writer("generate", "madman", lambda i, o: ["generate", "--out", str(o), "-n", "4", "--mnist-root",
                                               str(i / "mnist"), "--quiet"], _dataset_done, other="wds"),
    Writer("render", "comco", lambda i, o: ["render", "--set", "simco18", "--objects", "2-2", "-n", "1",
                                            "--no-references", "--resolution", "32", "--samples", "1", "--device",
                                            "cpu", "--quiet", "--config", str(i / "tiny.yaml"), "--out", str(o)],
           _dataset_done, other="wds", marks=[pytest.mark.blender]),
    Writer("import-coco", "bindscope", lambda i, o: ["import", "coco", "--images", str(i / "coco" / "images"),
                                                     "--instances", str(i / "coco" / "instances.json"),
                                                     "--captions", str(i / "coco" / "captions.json"), "--out",
                                                     str(o), "--image-size", "32", "--quiet"],
           _dataset_done, other="wds"),
    Writer("import-clevr", "bindscope", lambda i, o: ["import", "clevr", "--images", str(i / "clevr" / "images"),
                                                      "--scenes", str(i / "clevr" / "scenes.json"), "--out", str(o),
                                                      "--image-size", "32", "--quiet"],
           _dataset_done, other="wds"),
    Writer("import-pug", "bindscope", lambda i, o: ["import", "pug", "--parquet", str(i / "pug"), "--out", str(o),
                                                    "--image-size", "32", "--quiet"],
           _dataset_done, other="wds"),
    Writer("merge", "bindscope", lambda i, o: ["merge", str(i / "part0"), str(i / "part1"), "--out", str(o)],
           _dataset_done, overwrite=False, other="wds"),
    Writer("release", "bindscope", lambda i, o: ["release", str(i / "data"), "--out", str(o)],
           _kind_done("release", "README.md"), pause="staging"),
    Writer("export-webdataset", "bindscope", lambda i, o: ["export", "webdataset", str(i / "data"), "--out", str(o),
                                                           "--samples-per-shard", "4", "--quiet"],
           _kind_done("webdataset", "webdataset.json")),
    Writer("export-open-clip-config", "bindscope", lambda i, o: ["export", "open-clip-config", "--out", str(o),
                                                                 *MODEL],
           is_model_config, pause="file", file=True),
    Writer("export-clip-oscope", "bindscope", lambda i, o: ["export", "clip-oscope", str(i / "comco"), "--out",
                                                            str(o)],
           _kind_done("clip-oscope", "clip-oscope.json"), pause="staging"),
]
PARAMS = [pytest.param(w, id=w.name, marks=w.marks) for w in WRITERS]


def _out(tmp_path: Path, writer: Writer) -> Path:
    return tmp_path / ("cfg.json" if writer.file else "out")


def _lock_of(writer: Writer, out: Path) -> Path:
    return out.parent / f".bindscope-{out.name}.lock" if writer.file else out / LOCK


def _error_line(result) -> str:
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == 2 and len(errors) == 1, result.output
    return errors[0]


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------------------------------- the trials


@pytest.mark.parametrize("writer", PARAMS)
def test_a_foreign_folder_is_refused_and_nothing_deleted(writer, inputs, tmp_path):
    out = _out(tmp_path, writer)
    if writer.file:
        out.write_text("my notes, not a model config")
    else:
        (out / "src").mkdir(parents=True)
        (out / "src" / "app.js").write_text("x\n")
        (out / "manifest.json").write_text("{}")  # a stranger's manifest proves nothing
    before = _tree(tmp_path)
    result = writer.run(inputs, out, *(["--overwrite"] if writer.overwrite else []))
    assert str(out.resolve()) in _error_line(result)
    assert _tree(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == [out.name]


@pytest.mark.parametrize("writer", PARAMS)
def test_a_stale_lock_is_taken_over(writer, inputs, tmp_path):
    """What kill -9 leaves: the lock file of a process that is gone (the kernel released its lock)."""
    out = _out(tmp_path, writer)
    lock = _lock_of(writer, out)
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("pid 4194304 on gone: killed -9\n")
    result = writer.run(inputs, out)
    assert result.exit_code == 0, result.output
    assert writer.done(out) and not lock.exists()


HOLDER = """
import sys, time
from pathlib import Path
from bindscope.io.ownership import OutputLock
folder, name = Path(sys.argv[1]), sys.argv[2]
sys.argv = ["bindscope", "other-writer", "--out", str(folder)]
with OutputLock(folder, name=name):
    print("held", flush=True)
    time.sleep(300)
"""


@contextlib.contextmanager
def _held(lock: Path):
    """Another process holding ``lock`` (the lock a running writer of the same output holds)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock.parent), lock.name], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline() == "held\n", process.communicate()
        yield process.pid
    finally:
        process.kill()
        process.communicate()


@pytest.mark.parametrize("writer", PARAMS)
def test_a_concurrent_writer_is_refused_naming_the_holder(writer, inputs, tmp_path):
    out = _out(tmp_path, writer)
    with _held(_lock_of(writer, out)) as pid:
        before = _tree(tmp_path)
        line = _error_line(writer.run(inputs, out))
        assert f"is in use by another bindscope run (pid {pid} on " in line and "other-writer" in line
        assert _tree(tmp_path) == before


def _meanwhile(monkeypatch, action: Callable[[], None]) -> list:
    """Run ``action`` once, at the moment the command takes its claim (after its checks, before its lock)."""
    done = []
    original = claim_module.terminate_as_interrupt

    def hooked():
        if not done:
            done.append(True)
            action()
        return original()
    monkeypatch.setattr(claim_module, "terminate_as_interrupt", hooked)
    return done


@pytest.mark.parametrize("writer", PARAMS)
def test_overwrite_racing_another_command_deletes_nothing_of_the_other(writer, inputs, tmp_path, monkeypatch):
    """The command decided to replace an earlier output of its own kind; by the time it takes its lock another
    command has finished its own output there: that is refused, not deleted."""
    out = _out(tmp_path, writer)
    if writer.overwrite:  # an earlier output of this command kind, which --overwrite may replace
        if writer.done is _dataset_done:
            shutil.copytree(inputs / "squares", out)
        else:
            assert writer.run(inputs, out).exit_code == 0
    other = tmp_path / "other"

    def another_command_finishes():
        if writer.file:
            out.write_text(json.dumps({"metrics": {"accuracy": 0.5}}))  # e.g. a results file
            return
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(inputs / writer.other, out)
    if not writer.file:
        shutil.copytree(inputs / writer.other, other)
    seen = _meanwhile(monkeypatch, another_command_finishes)
    line = _error_line(writer.run(inputs, out, *(["--overwrite"] if writer.overwrite else [])))
    assert seen == [True] and str(out.resolve()) in line
    if writer.file:
        assert json.loads(out.read_text()) == {"metrics": {"accuracy": 0.5}}
    else:
        assert _tree(out) == _tree(other)
    assert {p.name for p in tmp_path.iterdir()} == {out.name} | ({"other"} if not writer.file else set())


@pytest.mark.parametrize("writer", PARAMS)
def test_sigterm_leaves_no_staging_and_a_rerun_completes(writer, inputs, tmp_path):
    out = _out(tmp_path, writer)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, str(TESTS / "claim_writer.py"), writer.pause, writer.group,
                                *writer.args(inputs, out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        assert process.stdout.readline() == "paused\n", process.communicate()
        if writer.pause == "staging":
            assert any(".bindscope-staging-" in p.name for p in tmp_path.iterdir())
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode != 0
    assert "Traceback" not in stderr, stderr
    assert list(tmp_path.iterdir()) == []  # no staging, no temporary file, no lock, no claimed folder
    result = writer.run(inputs, out)
    assert result.exit_code == 0, result.output
    assert writer.done(out) and not _lock_of(writer, out).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]


# ----------------------------------------------------------------------------------------------- the case


def test_export_overwrite_race(inputs, tmp_path, monkeypatch):
    """shared/cases/export-overwrite-race.md: ``bindscope export clip-oscope DATA --out OUT --overwrite`` over an
    earlier export in OUT while ``madman generate --out OUT -n 50`` runs (or a second identical export): one
    writer at a time (the second exits 2 naming the holder); nothing another command finished is deleted; a stale
    lock is handled as every other writer handles it."""
    data, out = inputs / "comco", tmp_path / "OUT"
    export = ["export", "clip-oscope", str(data), "--out", str(out)]
    generate = ["generate", "--out", str(out), "-n", "50", "--mnist-root", str(inputs / "mnist"), "--quiet"]
    from bindscope.publish import clip_oscope

    def during_the_export(*others: tuple) -> list[str]:
        """While the export writes its first image, run ``others`` (group, args); return their Error lines."""
        lines: list[str] = []
        write_png = clip_oscope._write_png

        def writing(array, path):
            if not lines:
                lines.extend(_error_line(CliRunner().invoke(group, args)) for group, args in others)
            write_png(array, path)
        monkeypatch.setattr(clip_oscope, "_write_png", writing)
        return lines

    # 1. a new export: generate and a second identical export meanwhile are refused, naming the export
    lines = during_the_export((madman, generate), (bindscope, [*export, "--overwrite"]))
    result = CliRunner().invoke(bindscope, export)
    monkeypatch.undo()
    assert result.exit_code == 0, result.output
    holder = f"is in use by another bindscope run (pid {os.getpid()} on "
    assert len(lines) == 2 and all(holder in line for line in lines), lines
    earlier = _tree(out)

    # 2. --overwrite over it: generate meanwhile is refused (OUT is not a dataset), so is a second export
    lines = during_the_export((madman, generate), (bindscope, [*export, "--overwrite"]))
    result = CliRunner().invoke(bindscope, [*export, "--overwrite"])
    monkeypatch.undo()
    assert result.exit_code == 0, result.output
    assert "is not a bindscope dataset (it holds a bindscope 'clip-oscope' output)" in lines[0]
    assert holder in lines[1]
    assert _tree(out) == earlier and sorted(p.name for p in tmp_path.iterdir()) == ["OUT"]

    # 3. generate finishes a dataset in OUT after the export's checks, before its lock: refused, nothing deleted
    generated: dict[str, bytes] = {}

    def generate_finishes():
        shutil.rmtree(out)
        result = CliRunner().invoke(madman, generate)
        assert result.exit_code == 0, result.output
        generated.update(_tree(out))
    _meanwhile(monkeypatch, generate_finishes)
    line = _error_line(CliRunner().invoke(bindscope, [*export, "--overwrite"]))
    monkeypatch.undo()
    assert "is not a clip-oscope export (it holds a bindscope 'dataset' output)" in line
    assert generated and _tree(out) == generated and sorted(p.name for p in tmp_path.iterdir()) == ["OUT"]

    # 4. a folder holding only a stale lock: the export runs and succeeds, like every writer
    shutil.rmtree(out)
    out.mkdir()
    (out / LOCK).write_text("pid 4194304 on gone: killed -9\n")
    assert CliRunner().invoke(bindscope, export).exit_code == 0
    assert _tree(out) == earlier
