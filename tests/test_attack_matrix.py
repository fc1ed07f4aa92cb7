"""The fast subset of the attack matrix (tests/attack_matrix.py; the full set runs in
benchmarks/attack_matrix.py), kill -9 at any moment, two writers on one folder, workers that outlive their
parent, resume after damage, the embedding cache and bounded config parsing."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest
from attack_matrix import LAUGHS, SHARD, build_fixtures, cases, flip_byte, run_case
from click.testing import CliRunner

from bindscope.errors import BadInput

FAST = [case for case in cases() if case.fast]


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    return build_fixtures(tmp_path_factory.mktemp("attack") / "fixtures")


@pytest.mark.parametrize("case", FAST, ids=[case.id for case in FAST])
def test_bad_input_exits_2_naming_it_and_changes_nothing(case, fixtures, tmp_path):
    outcome = run_case(case, fixtures, tmp_path / "work")
    assert outcome.handled, f"{outcome.reason}\n{outcome.output}"


def test_case_overwrite_foreign_folder(tmp_path, monkeypatch):
    """shared/cases/overwrite-foreign-folder.md, exactly."""
    from bindscope.cli.main import madman

    (tmp_path / "proj" / "src").mkdir(parents=True)
    (tmp_path / "proj" / "manifest.json").write_text("{}")
    (tmp_path / "proj" / "src" / "app.js").write_text("x\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(madman, ["generate", "--out", "proj", "-n", "4", "--overwrite"])
    assert result.exit_code == 2
    assert result.output.count("Error:") == 1 and "'" + str(tmp_path / "proj") + "'" in result.output
    assert (tmp_path / "proj" / "src" / "app.js").read_text() == "x\n"
    assert sorted(p.name for p in (tmp_path / "proj").rglob("*")) == ["app.js", "manifest.json", "src"]
    for out in ("", "."):  # the current folder, named or empty
        result = CliRunner().invoke(madman, ["generate", "--out", out, "-n", "4", "--overwrite"])
        assert result.exit_code == 2 and result.output.startswith("Error: --out"), result.output
    assert (tmp_path / "proj" / "src" / "app.js").is_file()


@pytest.mark.parametrize("dataset", ["images", "masks", "captions"])
def test_case_verify_flipped_byte(fixtures, tmp_path, dataset):
    """shared/cases/verify-flipped-byte.md: one line per problem naming the shard and the dataset inside it."""
    from bindscope.cli.main import bindscope

    work = tmp_path / "w"
    work.mkdir()
    shutil.copytree(fixtures / "d", work / "d")
    flip_byte(dataset)(work)
    result = CliRunner().invoke(bindscope, ["verify", str(work / "d")])
    assert result.exit_code == 1 and "Traceback" not in result.output
    problems = [line for line in result.output.splitlines() if line.startswith("  - ")]
    assert problems and all(SHARD in line for line in problems), result.output
    assert any(f"{SHARD}: {dataset}: " in line for line in problems), result.output
    assert any("sha256 differs" in line for line in problems)


def test_kill_9_at_any_moment_then_the_same_command_gives_identical_bytes(tmp_path):
    from crash_runs import kill_and_repeat
    from slow_build import MOMENTS

    identical, runs, moments = kill_and_repeat(tmp_path, 2)
    assert (identical, runs) == (10, 10), moments
    # besides two timed kills, the exact moments: e.g. a kill while the finish's marker, card or manifest is a
    # written but not yet renamed temporary file (it once left that file in 1 run of 25)
    assert moments == ["after 0 shards", "after 12 shards", *MOMENTS]


def test_two_writers_on_one_folder_one_refuses(tmp_path):
    from crash_runs import two_writers

    assert two_writers(tmp_path, tries=2) == (2, 2)


def test_workers_exit_with_their_killed_parent(tmp_path):
    from crash_runs import workers_die_with_parent

    gone, written_after, resumed = workers_die_with_parent(tmp_path)
    assert gone and written_after == 0 and resumed


def test_resume_remakes_corrupt_truncated_or_foreign_shards(tmp_path):
    from crash_runs import tree
    from toy_generator import SquaresGenerator

    from bindscope.build.builder import build_dataset

    build_dataset(SquaresGenerator(), tmp_path / "ref", progress=False)
    build_dataset(SquaresGenerator(seed=5), tmp_path / "other", progress=False)
    out = tmp_path / "r"
    with pytest.raises(KeyboardInterrupt):
        build_dataset(SquaresGenerator(fail_at=6), out, progress=False)
    first, second = out / "shards" / "train-00000.h5", out / "shards" / "train-00001.h5"
    assert first.is_file() and second.is_file()
    shutil.copy(tmp_path / "other" / "shards" / "train-00000.h5", first)  # another seed's shard
    second.write_bytes(second.read_bytes()[:100])  # truncated
    build_dataset(SquaresGenerator(), out, progress=False)
    assert tree(out) == tree(tmp_path / "ref")


def test_poisoned_embedding_cache_chunks_are_recomputed(tmp_path):
    from bindscope.encoders.embedding_cache import EmbeddingCache

    keys = [hashlib.sha256(bytes([i])).digest() for i in range(2)]
    hashes = np.frombuffer(b"".join(keys), np.uint8).reshape(2, 32)
    folder = EmbeddingCache(tmp_path, "k").folder
    folder.mkdir(parents=True)
    for emb in (np.ones((2, 5), np.float32), np.full((2, 3), np.nan, np.float32)):  # wrong D; NaN
        name = hashlib.sha256(hashes.tobytes() + emb.tobytes()).hexdigest()  # a valid checksum name
        np.savez(folder / f"{name}.npz", hashes=hashes, embeddings=emb)
    cache = EmbeddingCache(tmp_path, "k", dim=3)
    assert cache.get(keys[0]) is None and cache.rejected == 2 and not list(folder.glob("*.npz"))
    cache.put(keys[0], np.array([1, 2, 3], np.float32))
    cache.flush()
    assert EmbeddingCache(tmp_path, "k", dim=3).get(keys[0]).tolist() == [1, 2, 3]


@pytest.mark.parametrize("text, message", [
    (LAUGHS, "expands to more than 100,000 values"),
    ("a: " + "[" * 5000 + "]" * 5000, "nested more than 64 levels"),
    ("a: &a [*a]\n", "recursive anchor"),
    ("a: !!python/object/apply:os.system ['true']\n", "python/object"),
])
def test_yaml_bounds(text, message):
    from bindscope.config import load_yaml

    with pytest.raises(BadInput, match=message):  # refused while parsing: nothing is expanded
        load_yaml(text, "c.yaml")
    assert load_yaml("a: &x [1, 2]\nb: *x\n", "ok.yaml") == {"a": [1, 2], "b": [1, 2]}


def test_whole_number_floats_become_integers_where_the_schema_wants_them(tmp_path):
    from bindscope.generators.comco.config import resolve_render_config
    from bindscope.generators.madman import config as madman_config

    madman = madman_config.resolve(None, {"morpho": {"upsample": 3.0}, "splits": {"train": 2.0}}, None, 0)
    assert type(madman["morpho"]["upsample"]) is int and type(madman["splits"]["train"]) is int
    assert type(madman["morpho"]["threshold"]) is float  # a number stays a number
    (tmp_path / "c.yaml").write_text("n: 2.0\nobjects: {min: 2.0, max: 3}\nplacement: {grid: [3.0, 3]}\n")
    comco = resolve_render_config(str(tmp_path / "c.yaml"), {})
    assert (comco["n"], comco["objects"]["min"], comco["placement"]["grid"]) == (2, 2, [3, 3])
    assert json.dumps(comco["placement"]["grid"]) == "[3, 3]"
    (tmp_path / "c.yaml").write_text("n: 2.5\n")
    with pytest.raises(BadInput, match="2.5"):
        resolve_render_config(str(tmp_path / "c.yaml"), {})
