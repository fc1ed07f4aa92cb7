"""A shard is a closed world, and every file read from a given folder is a regular file inside it: crafted
shards (external storage, external and soft links, virtual datasets, objects of odd types, declared sizes that
would exhaust memory), symlinks out of the dataset, and FIFOs are refused by every reader with one error naming
the file and the HDF5 dataset, and reported by ``bindscope verify``; no byte of an outside file is read."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from attack_matrix import SHARD, build_fixtures
from bindscope.cli.main import bindscope, madman
from bindscope.io.canonical import canonical_json, sha256_file

SECRET = b"ssh-rsa AAAA-this-is-a-private-key-that-must-never-be-read " * 400


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    return build_fixtures(tmp_path_factory.mktemp("closed") / "fixtures")


@pytest.fixture
def place(fixtures, tmp_path):
    shutil.copytree(fixtures / "d", tmp_path / "d")
    shutil.copy(fixtures / "model.pt", tmp_path / "model.pt")
    (tmp_path / "secret").write_bytes(SECRET)
    return tmp_path


def _rehash(d: Path) -> None:
    """Record the crafted shard's sha256 in the manifest, as an attacker would."""
    manifest = json.loads((d / "manifest.json").read_text())
    for info in manifest["splits"].values():
        for entry in info["shards"]:
            if entry["file"] == SHARD:
                entry["sha256"] = sha256_file(d / SHARD)
    (d / "manifest.json").write_text(canonical_json(manifest))


def _replace(d: Path, name: str, make) -> None:
    with h5py.File(d / SHARD, "a") as f:
        like = f[name]
        shape, dtype = like.shape, like.dtype
        del f[name]
        make(f, name, shape, dtype)
    _rehash(d)


def external_storage(place):
    _replace(place / "d", "images", lambda f, n, shape, dtype: f.create_dataset(
        n, shape, dtype, external=[(str(place / "secret"), 0, h5py.h5f.UNLIMITED)]))
    return "images", "external storage"


def external_link(place):
    with h5py.File(place / "other.h5", "w") as o:
        with h5py.File(place / "d" / SHARD, "r") as f:
            o.create_dataset("images", data=f["images"][()])
    _replace(place / "d", "images", lambda f, n, s, t: f.__setitem__(n, h5py.ExternalLink(str(place / "other.h5"),
                                                                                           "images")))
    return "images", "external link"


def soft_link(place):
    _replace(place / "d", "captions", lambda f, n, s, t: f.__setitem__(n, h5py.SoftLink("/specs")))
    return "captions", "soft link"


def virtual_dataset(place):
    with h5py.File(place / "other.h5", "w") as o:
        with h5py.File(place / "d" / SHARD, "r") as f:
            o.create_dataset("images", data=f["images"][()])

    def make(f, name, shape, dtype):
        layout = h5py.VirtualLayout(shape=shape, dtype=dtype)
        layout[...] = h5py.VirtualSource(str(place / "other.h5"), "images", shape=shape)
        f.create_virtual_dataset(name, layout)

    _replace(place / "d", "images", make)
    return "images", "virtual dataset"


def compound_dtype(place):
    _replace(place / "d", "objects/area", lambda f, n, shape, dtype: f.create_dataset(
        n, shape, np.dtype([("a", "i4"), ("b", "f4")])))
    return "objects/area", "has dtype"


def huge_object_count(place):
    def make(f, name, shape, dtype):
        offsets = np.arange(shape[0], dtype=np.int64) * (10 ** 9)
        f.create_dataset(name, data=offsets)
    _replace(place / "d", "object_offsets", make)
    return "object_offsets", "more than the"


def huge_images(place):
    _replace(place / "d", "images", lambda f, n, shape, dtype: f.create_dataset(
        n, (shape[0], 60000, 60000, 3), dtype, chunks=(1, 64, 64, 3), compression="gzip"))
    return "images", "pixels per side"


def huge_count(place):
    with h5py.File(place / "d" / SHARD, "a") as f:
        f.attrs["count"] = 4_000_000_000
    _rehash(place / "d")
    return "attributes", "samples"


CRAFTS = [external_storage, external_link, soft_link, virtual_dataset, compound_dtype, huge_object_count,
          huge_images, huge_count]


def _readers(place):
    d = str(place / "d")
    return {
        "eval": (madman, ["eval", d, "--model", str(place / "model.pt"), "--device", "cpu", "--no-cache", "--quiet",
                          "--out", str(place / "r.json")]),
        "preview": (madman, ["preview", d, "--out", str(place / "p.png")]),
        "release": (bindscope, ["release", d, "--out", str(place / "rel")]),
        "probe": (bindscope, ["probe", d, "--model", str(place / "model.pt"), "--device", "cpu", "--no-cache",
                              "--steps", "2", "--out", str(place / "probe.json")]),
    }


def _no_secret_anywhere(place):
    for path in place.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.name != "secret":
            assert SECRET[:40] not in path.read_bytes(), path


@pytest.mark.parametrize("craft", CRAFTS, ids=lambda c: c.__name__)
def test_verify_reports_the_shard_and_the_dataset(craft, place):
    dataset, words = craft(place)
    result = CliRunner().invoke(bindscope, ["verify", str(place / "d")])
    assert result.exit_code == 1, result.output
    assert f"{SHARD}: {dataset}:" in result.output and words in result.output, result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("reader", ["eval", "preview", "release", "probe"])
@pytest.mark.parametrize("craft", [external_storage, external_link, virtual_dataset, huge_images],
                         ids=lambda c: c.__name__)
def test_every_reader_refuses_it_and_reads_no_outside_byte(craft, reader, place):
    dataset, words = craft(place)
    group, args = _readers(place)[reader]
    result = CliRunner().invoke(group, args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and f"{dataset}:" in errors[0] and words in errors[0], result.output
    assert not (place / "rel").exists() and not (place / "p.png").exists() and not (place / "r.json").exists()
    _no_secret_anywhere(place)


def test_the_torch_reader_refuses_it(place):
    from bindscope.errors import DatasetError
    from bindscope.format.reader import Dataset

    external_storage(place)
    with pytest.raises(DatasetError, match="images: has external storage"):
        with Dataset(place / "d") as ds:
            ds.split("test").as_torch()[0]


def _move_shard_out(place) -> None:
    os.replace(place / "d" / SHARD, place / "outside.h5")


def test_a_shard_symlinked_out_of_the_dataset_is_refused(place):
    _move_shard_out(place)
    os.symlink(place / "outside.h5", place / "d" / SHARD)
    result = CliRunner().invoke(bindscope, ["verify", str(place / "d")])
    assert result.exit_code == 1 and f"{SHARD}: shard is a symlink to" in result.output, result.output
    result = CliRunner().invoke(*_readers(place)["preview"])
    assert result.exit_code == 2 and "outside" in result.output, result.output


def test_a_fifo_never_hangs_a_reader(place):
    (place / "d" / SHARD).unlink()
    os.mkfifo(place / "d" / SHARD)
    result = CliRunner().invoke(bindscope, ["verify", str(place / "d")])
    assert result.exit_code == 1 and f"{SHARD}: shard is not a regular file" in result.output, result.output
    result = CliRunner().invoke(*_readers(place)["eval"])
    assert result.exit_code == 2 and "not a regular file" in result.output, result.output


def test_a_manifest_symlinked_out_is_refused(place):
    os.replace(place / "d" / "manifest.json", place / "manifest.json")
    os.symlink(place / "manifest.json", place / "d" / "manifest.json")
    result = CliRunner().invoke(*_readers(place)["preview"])
    assert result.exit_code == 2 and "manifest is a symlink" in result.output, result.output


def test_release_never_copies_a_card_symlinked_out(place):
    (place / "d" / "README.md").unlink(missing_ok=True)
    os.symlink(place / "secret", place / "d" / "README.md")
    result = CliRunner().invoke(*_readers(place)["release"])
    assert result.exit_code == 2 and "README.md: dataset card is a symlink" in result.output, result.output
    assert not (place / "rel").exists()
    _no_secret_anywhere(place)
