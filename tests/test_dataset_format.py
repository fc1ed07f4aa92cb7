import json

import h5py
import numpy as np
import pytest
from toy_generator import SquaresGenerator

from bindscope.build.builder import RUN_STATE, build_dataset
from bindscope.errors import BadInput, DatasetError
from bindscope.format.reader import Dataset
from bindscope.format.records import size_ranks
from bindscope.publish.verify import verify_dataset


def _files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_build_read_verify_roundtrip(tmp_path):
    manifest = build_dataset(SquaresGenerator(), tmp_path / "d", progress=False)
    assert [e["count"] for e in manifest["splits"]["train"]["shards"]] == [3, 3, 1]
    assert manifest["statistics"]["train"] == {"samples": 7, "objects": 14}
    with Dataset(tmp_path / "d") as ds:
        train = ds.split("train")
        assert len(train) == 7
        expected = SquaresGenerator().make_samples("train", 4, 1)[0]
        got = train[4]
        assert got.index == 4
        np.testing.assert_array_equal(got.image, expected.image)
        np.testing.assert_array_equal(got.mask, expected.mask)
        assert got.objects == expected.objects
        assert got.negatives == expected.negatives
        assert got.spec == expected.spec
        assert [s.index for s in train] == list(range(7))
        with pytest.raises(DatasetError, match="has no split 'val'"):
            ds.split("val")
    assert verify_dataset(tmp_path / "d") == []
    assert not (tmp_path / "d" / RUN_STATE).exists()


def test_jobs_do_not_change_bytes(tmp_path):
    build_dataset(SquaresGenerator(), tmp_path / "a", jobs=1, progress=False)
    build_dataset(SquaresGenerator(), tmp_path / "b", jobs=2, progress=False)
    assert _files(tmp_path / "a") == _files(tmp_path / "b")


def test_interrupted_run_resumes_to_identical_bytes(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        build_dataset(SquaresGenerator(fail_at=4), tmp_path / "r", progress=False)
    assert (tmp_path / "r" / RUN_STATE).exists()
    assert not (tmp_path / "r" / "manifest.json").exists()
    assert sorted(p.name for p in (tmp_path / "r" / "shards").iterdir()) == [".train-00000.h5.done", "train-00000.h5"]
    build_dataset(SquaresGenerator(), tmp_path / "r", progress=False)  # same command: resumes
    build_dataset(SquaresGenerator(), tmp_path / "full", progress=False)
    assert _files(tmp_path / "r") == _files(tmp_path / "full")


def test_output_folder_rules(tmp_path):
    first = build_dataset(SquaresGenerator(), tmp_path / "d", progress=False)
    before = _files(tmp_path / "d")
    assert build_dataset(SquaresGenerator(), tmp_path / "d", progress=False) == first  # the same run: done
    assert _files(tmp_path / "d") == before
    with pytest.raises(BadInput, match=r"not empty: it holds another bindscope dataset \(finished\), made with "
                                       "another config or seed"):
        build_dataset(SquaresGenerator(seed=1), tmp_path / "d", progress=False)
    build_dataset(SquaresGenerator(seed=1), tmp_path / "d", overwrite=True, progress=False)
    assert Dataset(tmp_path / "d").manifest["seed"] == 1
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    with pytest.raises(BadInput, match="is not a bindscope dataset"):
        build_dataset(SquaresGenerator(), tmp_path / "foreign", overwrite=True, progress=False)
    assert (tmp_path / "foreign" / "notes.txt").read_text() == "mine"


def test_verify_finds_tampering(tmp_path):
    build_dataset(SquaresGenerator(), tmp_path / "d", progress=False)
    shard = tmp_path / "d" / "shards" / "test-00000.h5"
    with h5py.File(shard, "r+") as f:
        f["objects/area"][0] = 99
    problems = verify_dataset(tmp_path / "d")
    assert any("sha256 differs" in p for p in problems)
    assert any("area 99" in p for p in problems)
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    manifest["format_version"] = 7
    (tmp_path / "d" / "manifest.json").write_text(json.dumps(manifest))
    assert "format_version" in verify_dataset(tmp_path / "d")[0]


def test_size_ranks_hand_computed():
    assert size_ranks([5, 9, 5]) == [2, 1, 3]
    assert size_ranks([1]) == [1]


def test_per_sample_arrays_round_trip_and_version_1_stays_readable(tmp_path):
    from bindscope.io.canonical import canonical_json, sha256_file

    class WithArrays(SquaresGenerator):
        sample_arrays = {"pose": {"shape": [2, 3], "dtype": "float32"}}

        def make_samples(self, split, start, count):
            samples = super().make_samples(split, start, count)
            for s in samples:
                s.arrays = {"pose": np.full((2, 3), s.index, np.float32)}
            return samples

    manifest = build_dataset(WithArrays(), tmp_path / "d", progress=False)
    assert manifest["format_version"] == 2 and manifest["sample_arrays"] == WithArrays.sample_arrays
    with Dataset(tmp_path / "d") as ds:
        got = ds.split("train")[5].arrays["pose"]
        assert got.dtype == np.float32 and np.array_equal(got, np.full((2, 3), 5.0))
    # a version-1 dataset (no arrays group, no sample_arrays) reads with empty arrays and verifies
    root = tmp_path / "d"
    for entry in [e for split in manifest["splits"].values() for e in split["shards"]]:
        with h5py.File(root / entry["file"], "a") as f:
            del f["arrays"]
            f.attrs["format_version"] = 1
        entry["sha256"] = sha256_file(root / entry["file"])
    manifest["format_version"] = 1
    del manifest["sample_arrays"]
    (root / "manifest.json").write_text(canonical_json(manifest))
    assert verify_dataset(root) == []
    with Dataset(root) as ds:
        sample = ds.split("train")[5]
        assert sample.arrays == {} and sample.index == 5


def test_verify_reports_per_sample_arrays_that_differ_from_the_manifest(tmp_path):
    from bindscope.io.canonical import canonical_json

    build_dataset(SquaresGenerator(), tmp_path / "d", progress=False)
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert manifest["sample_arrays"] == {}
    manifest["sample_arrays"] = {"depth": {"shape": [8, 8], "dtype": "float16"}}
    (tmp_path / "d" / "manifest.json").write_text(canonical_json(manifest))
    problems = verify_dataset(tmp_path / "d")
    assert any("per-sample arrays {} differ from the manifest's sample_arrays" in p for p in problems)
