"""A cache folder (BINDSCOPE_CACHE) that is a file or cannot be written costs one CacheWarning and no caching;
the work is done and its results are those of an uncached run (never an error after the work). A read-only
folder that already holds sound entries still serves them, without a warning."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

TESTS = Path(__file__).resolve().parent
WORKTREE = TESTS.parent
CONFIG = {"splits": {"train": 4}}

# the glyph table and visibility caches (a MADMAN generator) and the embedding cache, in a fresh process
SNIPPET = r'''
import hashlib, json, warnings
caught = []
warnings.simplefilter("always")
warnings.showwarning = lambda message, category, *rest, **kw: caught.append(f"{category.__name__}: {message}")
from madman_support import small_source
from bindscope.encoders.embedding_cache import EmbeddingCache, default_cache_dir, text_hash
from bindscope.generators.madman import config as madman_config
from bindscope.generators.madman.generator import MadmanGenerator
config = madman_config.resolve(flags=json.loads(%r), seed=1)
generator = MadmanGenerator.create(config, 1, source=small_source(12, 4))
images = b"".join(s.image.tobytes() for s in generator.make_samples("train", 0, 4))
cache = EmbeddingCache(default_cache_dir(), "model", 3)
if cache.get(text_hash("a red 7")) is None:
    cache.put(text_hash("a red 7"), [1.0, 0.0, 0.0])
    cache.flush()
print(json.dumps({"images": hashlib.sha256(images).hexdigest(), "rejected": generator.config["digits"]["rejected"],
                  "embedding": cache.get(text_hash("a red 7")).tolist(), "warnings": caught}))
''' % json.dumps(CONFIG)


def _no_write_override() -> list[str]:
    """A command prefix under which folder permissions hold: none for a normal user; for root, ``setpriv`` without
    the capabilities that ignore them (skipped where that is not allowed)."""
    if os.geteuid() != 0:
        return []
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]
    if shutil.which("setpriv") is None or subprocess.run(prefix + ["true"], capture_output=True).returncode != 0:
        pytest.skip("running as root without a way to drop CAP_DAC_OVERRIDE: permissions cannot be tested")
    return prefix


def _child(args: list[str], cache: Path, read_only: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "BINDSCOPE_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(WORKTREE), str(TESTS), os.environ.get("PYTHONPATH", "")])}
    prefix = _no_write_override() if read_only else []
    return subprocess.run(prefix + [sys.executable, *args], capture_output=True, text=True, env=env, timeout=900)


def _snippet(cache: Path, read_only: bool = False) -> dict:
    done = _child(["-c", SNIPPET], cache, read_only)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def uncached() -> dict:
    """The images and rejected digits of the same generator built without any cache."""
    from madman_support import small_source

    from bindscope.generators.madman import config as madman_config
    from bindscope.generators.madman.generator import MadmanGenerator

    config = madman_config.resolve(flags=CONFIG, seed=1)
    generator = MadmanGenerator.create(config, 1, source=small_source(12, 4), use_cache=False)
    images = b"".join(s.image.tobytes() for s in generator.make_samples("train", 0, 4))
    return {"images": hashlib.sha256(images).hexdigest(), "rejected": generator.config["digits"]["rejected"]}


def _read_only(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)


def _writable(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def test_a_cache_path_that_is_a_file_costs_one_warning(tmp_path, uncached):
    cache = tmp_path / "cache"
    cache.write_text("not a folder")
    got = _snippet(cache)
    assert got["images"] == uncached["images"] and got["rejected"] == uncached["rejected"]
    assert got["embedding"] == [1.0, 0.0, 0.0]  # kept in memory for the run
    assert got["warnings"] == [f"CacheWarning: cache folder {str(cache)!r} is not a folder: going on without "
                               "caching (set BINDSCOPE_CACHE or --cache-dir to a writable folder)"]
    assert cache.read_text() == "not a folder"


def test_a_read_only_cache_folder_costs_one_warning_and_still_serves_sound_entries(tmp_path, uncached):
    cache = tmp_path / "cache"
    cache.mkdir()
    _read_only(cache)
    try:
        got = _snippet(cache, read_only=True)
        assert got["images"] == uncached["images"] and got["rejected"] == uncached["rejected"]
        assert len(got["warnings"]) == 1, got["warnings"]
        assert got["warnings"][0].startswith(f"CacheWarning: cache folder {str(cache)!r} cannot be written "
                                             "(Permission denied): going on without caching")
        assert not list(cache.iterdir())
        _writable(cache)
        filled = _snippet(cache)  # fills the caches
        assert filled["warnings"] == [] and filled["images"] == uncached["images"]
        names = sorted(p.name.split("-")[1] for p in cache.iterdir() if p.is_file())
        assert names == ["glyphs", "visible"] and (cache / "embeddings").is_dir()
        _read_only(cache)
        again = _snippet(cache, read_only=True)  # nothing to write: no warning, the entries are used
        assert again == {**filled, "warnings": []}
    finally:
        _writable(cache)


@pytest.mark.parametrize("kind", ["file", "read-only"])
def test_an_evaluation_with_an_unusable_default_cache_finishes_with_one_warning(tmp_path, kind):
    from bindscope.cli.main import comco

    args = ["eval", "--tasks", "tor", "--objects", "3", "--vocab", "simco18", "-n", "12", "--model",
            "sentence-transformers/all-MiniLM-L6-v2", "--device", "cpu", "--quiet"]
    result = CliRunner().invoke(comco, args + ["--no-cache", "--out", str(tmp_path / "uncached.json")],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    cache = tmp_path / "cache"
    if kind == "file":
        cache.write_text("")
    else:
        cache.mkdir()
        _read_only(cache)
    try:
        code = "import sys; from bindscope.cli.main import comco; sys.exit(comco.main(sys.argv[1:]))"
        done = _child(["-c", code, *args, "--out", str(tmp_path / "r.json")], cache, read_only=kind == "read-only")
    finally:
        if cache.is_dir():
            _writable(cache)
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if "CacheWarning" in line]
    assert len(warned) == 1 and str(cache) in warned[0], done.stderr
    assert "Error" not in done.stderr and "Traceback" not in done.stderr
    ours, theirs = json.loads((tmp_path / "r.json").read_text()), json.loads((tmp_path / "uncached.json").read_text())
    assert ours["metrics"] == theirs["metrics"] and ours["counts"]["texts_encoded"] > 12
    assert (cache.is_file() and cache.read_text() == "") or not list(cache.iterdir())
