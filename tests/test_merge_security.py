"""Case merge-crafted-part-folder: merging part folders never executes anything found in them.

Part folders travel between machines (job arrays, shared file systems). ``bindscope merge`` rebuilds the
generator from the JSON record's config and seed; a pickle planted in ``parts/`` (where older versions kept
the pickled generator) is ignored, and a record that is not JSON is refused with exit 2 naming the file.
"""

from __future__ import annotations

import os
import pickle

import pytest
from click.testing import CliRunner
from madman_support import write_fake_mnist_root

from bindscope.cli.main import bindscope, madman


class _Payload:
    """Unpickling this runs ``touch <marker>`` (a harmless stand-in for arbitrary code)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """A single run and the same run as two part folders (``madman generate --num-parts 2 --part 0|1``)."""
    tmp = tmp_path_factory.mktemp("parts")
    root = write_fake_mnist_root(tmp / "mnist", train_per_class=12, test_per_class=4)
    common = ["generate", "--mnist-root", str(root), "-n", "10", "--seed", "3", "--quiet"]
    for args in (["--out", str(tmp / "single")],
                 *(["--out", str(tmp / f"p{i}"), "--num-parts", "2", "--part", str(i)] for i in (0, 1))):
        result = CliRunner().invoke(madman, common + args)
        assert result.exit_code == 0, result.output
    return tmp


def _copy_parts(parts, tmp_path):
    import shutil

    for i in (0, 1):
        shutil.copytree(parts / f"p{i}", tmp_path / f"p{i}")
    return tmp_path / "p0", tmp_path / "p1"


def test_part_runs_write_no_pickle(parts):
    for i in (0, 1):
        names = sorted(p.name for p in (parts / f"p{i}" / "parts").iterdir())
        assert names == [f"part-0000{i}-of-00002.json"]


def test_planted_pickle_is_never_executed_and_merge_equals_single_run(parts, tmp_path):
    p0, p1 = _copy_parts(parts, tmp_path)
    marker = tmp_path / "executed"
    payload = pickle.dumps(_Payload(marker), protocol=4)
    (p0 / "parts" / "part-00000-of-00002.generator.pkl").write_bytes(payload)
    (p1 / "parts" / "part-00001-of-00002.generator.pkl").write_bytes(payload)
    (p1 / "parts" / "notes.pkl").write_bytes(payload)
    result = CliRunner().invoke(bindscope, ["merge", str(p0), str(p1), "--out", str(tmp_path / "M")])
    assert result.exit_code == 0, result.output
    assert result.output == f"{tmp_path / 'M'}: merged 2 shards, 20 samples\n"
    assert not marker.exists()
    assert _files(tmp_path / "M") == _files(parts / "single")


def test_record_replaced_by_a_pickle_is_refused_with_exit_2_naming_it(parts, tmp_path):
    p0, p1 = _copy_parts(parts, tmp_path)
    marker = tmp_path / "executed"
    record = p1 / "parts" / "part-00001-of-00002.json"
    record.write_bytes(pickle.dumps(_Payload(marker), protocol=4))
    result = CliRunner().invoke(bindscope, ["merge", str(p0), str(p1), "--out", str(tmp_path / "M")])
    assert result.exit_code == 2
    assert result.output.startswith("Error: ") and str(record) in result.output
    assert "part record" in result.output and "is not UTF-8 text" in result.output
    assert not marker.exists() and not (tmp_path / "M").exists()
