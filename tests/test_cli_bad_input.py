"""Adversarial command-line input: each case must end in exit status 2, ONE ``Error:`` line naming the bad value
and what is allowed, and nothing written on disk (no output folder or file created or changed).

Every case here failed before its fix (a traceback, exit status 1, a multi-line or misleading message, a
NaN/inf accepted as a config value, or a run started with an absurd number of processes or images).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_support import refused, snapshot
from click.testing import CliRunner

from bindscope.cli.main import bindscope, comco, madman
from bindscope.io.canonical import config_sha256

MINILM = "sentence-transformers/all-MiniLM-L6-v2"



_bad = refused


@pytest.fixture(scope="module")
def madman_data(tmp_path_factory) -> Path:
    """A tiny finished MADMAN dataset (real digits, train 6 / test 5 / ood 3)."""
    from tiny_madman import tiny_madman

    from bindscope.build.builder import build_dataset

    path = tmp_path_factory.mktemp("data") / "madman"
    build_dataset(tiny_madman(), path, jobs=1, progress=False)
    return path


@pytest.fixture()
def work(tmp_path) -> Path:
    (tmp_path / "work").mkdir()
    return tmp_path / "work"


# --- config values: NaN / infinity passed JSON Schema's minimum/maximum (every comparison with NaN is false) ---

@pytest.mark.parametrize("flag, value, allowed", [
    ("--saliency-bias", "nan", "[0, 1]"),
    ("--multi-object-images", "inf", "[0, 1]"),
    ("--multi-object-captions", "-inf", "[0, 1]"),
    ("--attribute-density", "nan", "[0, 6]"),
    ("--holdout-fraction", "nan", "[0, 0.5]"),
])
def test_madman_generate_non_finite_flag(work, flag, value, allowed):
    line = _bad(madman, ["generate", "-n", 4, flag, value, "--out", "out", "--quiet"], work)
    assert line == f"Error: {flag} {value} is not allowed; use a finite number in {allowed}"


def test_madman_generate_non_finite_in_yaml(work):
    (work / "c.yaml").write_text("saliency_bias: .nan\n")
    _bad(madman, ["generate", "-n", 4, "--config", "c.yaml", "--out", "out", "--quiet"], work,
         "saliency_bias", "nan", "0..1")


def test_comco_render_non_finite_in_yaml(work):
    (work / "c.yaml").write_text("resolution: .nan\n")
    _bad(comco, ["render", "-n", 2, "--config", "c.yaml", "--out", "out"], work, "resolution", "nan", "16..4096")


# --- malformed YAML: PyYAML's multi-line message became several lines ---

@pytest.mark.parametrize("group, args", [
    (madman, ["generate", "-n", 4, "--out", "out", "--quiet"]),
    (comco, ["render", "-n", 2, "--out", "out"]),
])
def test_malformed_yaml_is_one_line(work, group, args):
    (work / "bad.yaml").write_text("a: [\n")
    _bad(group, args + ["--config", "bad.yaml"], work, "'bad.yaml'", "not valid YAML", "line 2, column 1")


# --- absurd sizes: a huge -n planned for minutes; --jobs 100000 spawned processes until killed ---

def test_madman_generate_huge_num_images(work):
    _bad(madman, ["generate", "-n", 99999999999, "--out", "out", "--quiet"], work,
         "--num-images 99999999999 is not allowed", "1..10000000")


@pytest.mark.parametrize("group, args", [
    (madman, ["generate", "-n", 4, "--out", "out", "--quiet"]),
    (comco, ["render", "-n", 2, "--out", "out"]),
])
def test_huge_jobs(work, group, args):
    _bad(group, args + ["--jobs", 100000], work, "--jobs 100000", "1..256")


def test_comco_render_huge_threads(work):
    _bad(comco, ["render", "-n", 2, "--threads", 100000, "--out", "out"], work, "--threads 100000", "1..1024")


# --- comco eval: checks that came after the model load, or not at all ---

def test_comco_eval_negative_seed(work):  # was a numpy traceback, exit status 1
    _bad(comco, ["eval", "-n", 4, "--seed", -1, "--model", MINILM, "--out", "r.json"], work, "--seed -1", "0..4294967295")


def test_comco_eval_too_many_objects(work):
    _bad(comco, ["eval", "-n", 4, "--objects", 19, "--vocab", "simco18", "--model", MINILM, "--out", "r.json"],
         work, "--objects 19", "2..18")


def test_comco_eval_unknown_vocab_names_the_flag(work):  # said "--set 'nope'" although the flag is --vocab
    _bad(comco, ["eval", "-n", 4, "--vocab", "nope", "--model", MINILM, "--out", "r.json"], work,
         "--vocab 'nope'", "comco72, simco18")


def test_comco_eval_huge_n(work):
    _bad(comco, ["eval", "-n", 99999999999, "--model", MINILM, "--out", "r.json"], work, "-n 99999999999",
         "1..1000000")


def test_comco_eval_matching_negatives_zero(work, madman_data):
    _bad(comco, ["eval", str(madman_data), "--matching-negatives", 0, "--model", MINILM, "--out", "r.json"], work,
         "--matching-negatives 0", ">= 1")


# --- bindscope verify: a missing folder was exit status 1 ("1 problem(s)") ---

def test_verify_missing_folder(work):
    _bad(bindscope, ["verify", "nodir"], work, "'nodir'", "does not exist")


# --- madman preview: a ComCO dataset was drawn; a file as DIRECTORY said "does not exist" ---

def test_madman_preview_wrong_generator(work, madman_data):
    fake = work / "fake"
    shutil.copytree(madman_data, fake)
    manifest = json.loads((fake / "manifest.json").read_text())
    manifest["generator"]["name"] = "comco"  # a consistent manifest: its config_sha256 follows the name
    manifest["config_sha256"] = config_sha256("comco", manifest["config"], manifest["seed"])
    (fake / "manifest.json").write_text(json.dumps(manifest))
    _bad(madman, ["preview", "fake", "--out", "p.png"], work, "'fake'", "'comco'", "madman dataset")


def test_madman_preview_file_as_directory(work):
    (work / "f.yaml").write_text("a: 1\n")
    _bad(madman, ["preview", "f.yaml", "--out", "p.png"], work, "'f.yaml'", "is a file")


# --- an output path under a FILE: was a NotADirectoryError / FileExistsError traceback (exit status 1), and
# --- `comco eval --plot file/p.png` wrote the result JSON before failing ---

@pytest.mark.parametrize("group, args, flag", [
    (madman, ["generate", "-n", 4, "--out", "f.txt/out", "--quiet"], "--out"),
    (comco, ["render", "-n", 2, "--set", "simco18", "--out", "f.txt/out"], "--out"),
    (comco, ["eval", "-n", 4, "--model", MINILM, "--out", "f.txt/r.json"], "--out"),
    (comco, ["eval", "-n", 4, "--model", MINILM, "--out", "r.json", "--plot", "f.txt/p.png"], "--plot"),
    (comco, ["assets", "fetch", "--out", "f.txt/assets"], "--out"),
])
def test_output_under_a_file(work, group, args, flag):
    (work / "f.txt").write_text("x")
    _bad(group, args, work, flag, "f.txt", "is a file, not a folder")


@pytest.mark.parametrize("command", ["madman-eval", "release", "merge", "assets-import"])
def test_output_under_a_file_with_data(work, madman_data, command):
    (work / "f.txt").write_text("x")
    models = work / "models"
    models.mkdir()
    (models / "cat.glb").write_bytes(b"glTF")
    group, args = {
        "madman-eval": (madman, ["eval", madman_data, "--model", "ViT-B-32", "--pretrained", "none",
                                 "--out", "f.txt/r.json"]),
        "release": (bindscope, ["release", madman_data, "--out", "f.txt/rel"]),
        "merge": (bindscope, ["merge", madman_data, "--out", "f.txt/merged"]),
        "assets-import": (comco, ["assets", "import", "models", "--out", "f.txt/assets"]),
    }[command]
    _bad(group, args, work, "--out", "f.txt", "is a file, not a folder")


def test_multi_line_library_message_is_joined(work):  # PyYAML's message in a BadInput raised outside cli.py
    models = work / "models"
    models.mkdir()
    (models / "cat.glb").write_bytes(b"glTF")
    (work / "bad.yaml").write_text("a: [\n")
    _bad(comco, ["assets", "import", "models", "--mapping", "bad.yaml"], work, "'bad.yaml'", "line 2, column 1")


# --- a render that fails on its first scene (here: a large object 100 times any other's area is asked for) left
# --- an empty run folder (.bindscope-run.json + shards/) behind, and the missing parent folders it had made.
# --- The config is valid, so this is a GenerationError (exit status 1), not bad input, with one Error line ---

def test_comco_render_failing_first_scene_leaves_nothing(work):
    (work / "strict.yaml").write_text("sizes: {min_area_ratio: 100, corrections: 0}\nvisibility: {max_tries: 2}\n")
    before = snapshot(work)
    cwd = os.getcwd()
    os.chdir(work)
    try:
        result = CliRunner().invoke(comco, ["render", "-n", "2", "--resolution", "48", "--samples", "1", "--set",
                                            "simco18", "--threads", "1", "--config", "strict.yaml", "--quiet",
                                            "--out", "new/r1"], catch_exceptions=False)
    finally:
        os.chdir(cwd)
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: scenes 0: no acceptable render"), result.output
    assert "sizes.min_area_ratio = 100" in lines[0] and "max_tries = 2" in lines[0]
    assert snapshot(work) == before and not (work / "new").exists()


@pytest.mark.parametrize("args, message", [
    (["--patch-size", "0"], "--patch-size"),
    (["--warmup", "-5"], "--warmup -5 is not allowed; use an integer in 0..10000000 steps"),
    (["--lr", "nan"], "--lr nan is not allowed; use a finite number in (0, 10]"),
    (["--out-under-file"], "is a file, not a folder"),
])
def test_madman_train_bad_input_exits_2_and_writes_nothing(madman_data, tmp_path, args, message):
    (tmp_path / "notes.txt").write_text("x")
    out = tmp_path / "notes.txt" / "run" if args == ["--out-under-file"] else tmp_path / "run"
    extra = [] if args == ["--out-under-file"] else args
    result = CliRunner().invoke(madman, ["train", str(madman_data), "--out", str(out), *extra])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", [["probe"], ["labclip", "fit"]])
def test_alignment_rejects_nan_learning_rate(madman_data, tmp_path, command):
    out = tmp_path / "result.pt"
    result = CliRunner().invoke(bindscope, [*command, str(madman_data), "--model", "ViT-B-32", "--pretrained", "none",
                                            "--lr", "nan", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert result.output == "Error: --lr nan is not allowed; use a finite number in (0, 10]\n"
    assert not out.exists()


# --- madman audit: everything a user can get wrong is refused before the oracle is trained ---

@pytest.mark.parametrize("args, needles", [
    (["nope"], ["'nope'"]),
    (["DATA", "--test-split", "valid"], ["'valid'", "it has: ood, test, train"]),
    (["DATA", "--train-split", "test"], ["both 'test'"]),
    (["DATA", "--epochs", "0"], ["--epochs", "0"]),
    (["DATA", "--batch-size", "1"], ["--batch-size", "1"]),
    (["DATA", "--lr", "nan"], ["--lr nan is not allowed; use a finite number in (0, 10]"]),
    (["DATA", "--seed", "-1"], ["--seed", "-1"]),
    (["DATA", "--max-train-objects", "0"], ["--max-train-objects", "0"]),
    (["DATA", "--out", "f.txt/a.json"], ["--out", "f.txt", "is a file, not a folder"]),
    (["DATA", "--out", "old.json"], ["'old.json' already exists", "--overwrite"]),
    (["DATA", "--plot", "old.png"], ["'old.png' already exists", "--overwrite"]),
    (["DATA", "--plot", "c.gif"], ["--plot", ".png"]),
    (["DATA", "--out", "."], ["--out", "is a directory"]),
])
def test_madman_audit_bad_input(work, madman_data, args, needles):
    (work / "f.txt").write_text("x")
    (work / "old.json").write_text("{}")
    (work / "old.png").write_bytes(b"png")
    args = [madman_data if a == "DATA" else a for a in args] + ([] if "--epochs" in args else ["--epochs", "1"])
    _bad(madman, ["audit", *args, "--quiet"], work, *needles)


def test_madman_audit_needs_attribute_value_tables(work, madman_data):
    fake = work / "fake"
    shutil.copytree(madman_data, fake)
    manifest = json.loads((fake / "manifest.json").read_text())
    manifest["config"]["attributes"] = sorted(manifest["config"]["attributes"])  # names only, as ComCO's config
    manifest["config_sha256"] = config_sha256("madman", manifest["config"], manifest["seed"])
    (fake / "manifest.json").write_text(json.dumps(manifest))
    _bad(madman, ["audit", "fake", "--out", "a.json"], work, "'fake'", "config.attributes maps every object attribute")
