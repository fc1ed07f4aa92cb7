"""A shard is a closed world, and every file read from a given folder is a regular file inside it: crafted
shards (external storage, external and soft links, virtual datasets, objects of odd types, declared sizes that
would exhaust memory), symlinks out of the dataset, and FIFOs are refused by every reader with one error naming
the file and the HDF5 dataset, and reported by ``bindscope verify``; no byte of an outside file is read."""

from __future__ import annotations

import os
import shutil

import pytest
from click.testing import CliRunner

from attack_matrix import (
    CLOSED_WORLD_CRAFTS,
    SECRET,
    SHARD,
    build_fixtures,
    external_link,
    external_storage,
    huge_images,
    virtual_dataset,
)
from bindscope.cli.main import bindscope, madman

@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    return build_fixtures(tmp_path_factory.mktemp("closed") / "fixtures")


@pytest.fixture
def place(fixtures, tmp_path):
    shutil.copytree(fixtures / "d", tmp_path / "d")
    shutil.copy(fixtures / "model.pt", tmp_path / "model.pt")
    (tmp_path / "secret").write_bytes(SECRET)
    return tmp_path


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


@pytest.mark.parametrize("craft", CLOSED_WORLD_CRAFTS, ids=lambda c: c.__name__)
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
    """shared/cases/release-external-storage.md, for every reader (verify: the test above)."""
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
