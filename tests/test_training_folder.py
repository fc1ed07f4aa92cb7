"""The run folder's claim (bindscope.io.claim, kind train-run): a foreign folder, a stale lock, a concurrent writer,
``overwrite`` racing another writer, a failure before the first output, and a folder an earlier bindscope marked.
SIGTERM: tests/test_training_resume.py."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import bindscope
from bindscope.errors import BadInput
from bindscope.io.canonical import canonical_json
from bindscope.io.ownership import LOCK, MARKER, read_marker
from bindscope.training.config import build_train_config
from bindscope.training.train import Trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = dict(embed_dim=16, image_size=32, vision="cnn", vision_width=16, vision_layers=1, text_width=32,
            text_layers=1, head_width=16, tokenizer="word", context_length=16, batch_size=4, steps=2, warmup_steps=1,
            device="cpu", eval_every=0)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A tiny MADMAN dataset (train 8, test 4)."""
    from tiny_madman import tiny_madman

    from bindscope.build.builder import build_dataset

    path = tmp_path_factory.mktemp("folder") / "madman"
    build_dataset(tiny_madman({"train": 8, "test": 4}), path, jobs=1, progress=False)
    return path


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _trainer(data: Path, out: Path, **options) -> Trainer:
    return Trainer(build_train_config(str(data), str(out), None, None, **{**TINY, **options}), progress=False)


def test_a_foreign_folder_is_refused_even_with_overwrite(data, tmp_path):
    out = tmp_path / "notes"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(BadInput, match=r"is not empty and is not a madman train run \(it holds no "
                                                 r"\.bindscope\.json marker of one; e\.g\. 'notes\.txt'\)"):
            bindscope.train(data, out, overwrite=overwrite, progress=False, **TINY)
        assert _tree(out) == {"notes.txt": b"mine"}


def test_a_stale_lock_is_taken_over(data, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK).write_text("pid 99999 on elsewhere: madman train (killed -9)\n")
    summary = bindscope.train(data, out, progress=False, **TINY)
    assert summary["steps"] == 2 and not (out / LOCK).exists()
    assert read_marker(out)["kind"] == "train-run"


def test_a_concurrent_writer_and_an_overwrite_racing_it_are_refused_and_delete_nothing(data, tmp_path):
    out = tmp_path / "run"
    first = _trainer(data, out)  # holds the claim from here until its run ends
    before = _tree(out)
    assert set(before) == {MARKER, LOCK, "run.json", "vocab.json"}
    for options in ({}, {"seed": 1, "overwrite": True}):
        with pytest.raises(BadInput, match=r"is in use by another bindscope run \(pid "):
            bindscope.train(data, out, progress=False, **{**TINY, **options})
        assert _tree(out) == before
    assert first.run()["steps"] == 2
    assert {"model.pt", "result.json", "checkpoint.pt"} <= set(_tree(out))


def test_a_failure_before_the_first_checkpoint_leaves_no_claimed_folder(data, tmp_path, monkeypatch):
    out = tmp_path / "runs" / "run"
    monkeypatch.setattr(Trainer, "_build_optimiser", lambda self: (_ for _ in ()).throw(RuntimeError("no memory")))
    with pytest.raises(RuntimeError, match="no memory"):
        _trainer(data, out)
    assert not (tmp_path / "runs").exists()  # nor the parent the claim created


def test_a_run_marked_by_an_earlier_bindscope_is_this_run(data, tmp_path):
    out = tmp_path / "run"
    bindscope.train(data, out, progress=False, **TINY)
    record = json.loads((out / "run.json").read_text())
    marker = json.loads((out / MARKER).read_text())
    marker["run_id"] = hashlib.sha256(canonical_json(record).encode()).hexdigest()  # named by the whole record
    (out / MARKER).write_text(canonical_json(marker))
    again = bindscope.train(data, out, progress=False, **TINY)
    assert again["resumed_from"] == 2 and again["steps"] == 2  # finished: only its result
    with pytest.raises(BadInput, match="holds another madman train run .*made with another seed"):
        bindscope.train(data, out, progress=False, **{**TINY, "seed": 5})


def test_the_training_data_manifest_is_read_once(data, tmp_path, monkeypatch):
    import shutil

    from bindscope.format import manifest as manifest_module
    from bindscope.format import reader as reader_module

    evaluation = tmp_path / "eval"
    shutil.copytree(data, evaluation)  # evaluated on a copy: its reads are the evaluation's, not counted
    load, reads = manifest_module.load_manifest, []

    def counted(directory, *args, **kwargs):
        reads.append(Path(directory).resolve())
        return load(directory, *args, **kwargs)

    for module in (manifest_module, reader_module):
        monkeypatch.setattr(module, "load_manifest", counted)
    bindscope.train(data, tmp_path / "run", eval_data=evaluation, progress=False, **{**TINY, "steps": 1})
    assert reads.count(data.resolve()) == 1 and reads.count(evaluation.resolve()) >= 1
