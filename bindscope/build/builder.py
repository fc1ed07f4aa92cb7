"""Build a dataset directory from a generator, shard by shard: atomic, resumable, identical for any ``--jobs``.

The unit of work is one shard: samples ``[start, start + count)`` of one split. A shard's content depends on
the generator's resolved config, the seed, the split and the sample indices alone, so the output is
byte-identical whatever the number of jobs, the backend (``local`` joblib processes or a ``dask`` cluster,
see :mod:`bindscope.build.backends`) or the number of parts, and an interrupted run continues where it
stopped: finished shards (present under their final name, written atomically) are kept, everything else is
redone.

Parts (``num_parts=K, part=I``, see docs/scale-out.md): the shards, in manifest order, are dealt round-robin
to K parts (shard j belongs to part ``j % K``). A part run makes only its shards and, instead of the manifest,
writes ``parts/part-IIIII-of-KKKKK.json`` (its shard entries, additive counts, and the generator's name,
resolved config, in its key order, and seed, from which the merge rebuilds the generator through the registry);
:func:`bindscope.build.merge.merge_parts` joins the K parts into the dataset a single run makes.

The output folder is claimed through :mod:`bindscope.io.claim` (kind :data:`DATASET`: the folder is ours only
through its marker, and is locked for the whole run); its decisions mean here:

- ``new`` (missing or empty): a new run starts;
- ``resume`` (an unfinished run of the same generator, config and seed): it adopts a finished shard only when its
  ``.done`` record names this run and its sha256 still matches;
- ``done`` (the finished dataset of this very run): nothing to do (leftovers of an interrupted tidy-up are
  removed);
- ``extend`` (a finished, smaller dataset of the same generator, config and seed: the generator's ``extends``
  says so, e.g. ComCO with a larger ``-n``): its shards are set aside as ``.<shard>.previous``; each task reads
  its samples back from there, generates only the missing ones and writes the shard again (with this run's id),
  so the result is byte-identical to a single run of the larger dataset;
- ``overwrite``: another bindscope dataset or run is replaced (only with ``overwrite``); foreign files and
  other commands' outputs: :class:`BadInput` always, and nothing is deleted.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tqdm.auto import tqdm

from bindscope.build.backends import check_backend, check_parts, open_executor
from bindscope.build.registry import generator_class
from bindscope.errors import GenerationError
from bindscope.format.manifest import MANIFEST, load_manifest
from bindscope.format.records import Sample
from bindscope.format.shard import FORMAT_VERSION, ShardReader, write_shard
from bindscope.io.atomic import remove_temp_files, write_text_atomic
from bindscope.io.canonical import canonical_json, config_sha256, sha256_file
from bindscope.io.claim import OutputKind, check_output, claim_output
from bindscope.io.ownership import OutputLock, write_marker
from bindscope.io.workers import exit_with_parent, parent_alive
from bindscope.schemas import validate

RUN_STATE = ".bindscope-run.json"
KIND = "dataset"  # the ownership marker's kind (see bindscope.io.ownership)
PARTS_DIR = "parts"
PART_FORMAT = "bindscope-part"
PART_FORMAT_VERSION = 2  # a part record of another format version is refused by merge (rerun the parts)


class Generator(Protocol):
    """What :func:`build_dataset` needs from a generator. Must be picklable (it travels to worker processes).

    Its class is registered in :mod:`bindscope.build.registry` under ``name`` (and has ``from_config``).
    """

    name: str                      # its name in the generator registry (bindscope.build.registry)
    version: str
    config: dict                   # resolved, JSON-serialisable config (stored in the manifest)
    seed: int
    splits: dict[str, int]         # split name -> number of samples
    shard_size: int                # samples per shard
    image_size: tuple[int, int]    # (H, W) pixels
    attribute_names: list[str]
    extra_names: list[str]
    # optional: sample_arrays: {name: {"shape": [...], "dtype": "float32"}} (the samples' ``arrays``)

    def make_samples(self, split: str, start: int, count: int) -> list[Sample]:
        """Samples ``start .. start+count-1`` of ``split``; a pure function of (config, seed, split, index)."""

    def shard_statistics(self, split: str, samples: list[Sample]) -> dict[str, float]:
        """Additive counts over ``samples`` (summed over shards, then passed to :meth:`statistics`)."""

    def statistics(self, counts: dict[str, dict[str, float]]) -> dict:
        """Realised statistics for the manifest from the per-split summed counts."""

    def card(self, manifest: dict) -> str:
        """The dataset card (``README.md``, Markdown) for a finished manifest."""

    # Optional:
    # progress_per_sample: bool  -- make_samples may be called one sample at a time (the progress bar then
    #                                moves per sample; the samples are the same either way)
    # def extends(self, manifest: dict) -> bool
    #     True when the finished dataset of ``manifest`` is a prefix of this generator's output (same
    #     generator, seed and config but smaller split sizes): the run then extends it (see output_state).
    def provenance(self) -> dict:
        """Optional. ``{"title": str, "sources": [str, ...]}``: the dataset's display name and one line per
        source it draws from, with its licence (written into the manifest; the release card shows them)."""


@dataclass(frozen=True)
class ShardTask:
    split: str
    number: int
    start: int
    count: int

    @property
    def filename(self) -> str:
        return f"{self.split}-{self.number:05d}.h5"


@dataclass(frozen=True)
class BuildResult:
    """What a public generate/render call (``bindscope.madman.generate``, ``bindscope.comco.render``) did.

    Attributes:
        path: the output folder.
        manifest: the finished dataset's manifest; None for one part of a ``num_parts > 1`` run.
        part_record: that part's record (see :func:`write_part_record`); None for a whole run.
        already_complete: ``path`` already held this very dataset (same generator, config and seed), finished
            (:func:`output_state` said ``"done"``, see :func:`finish_if_done`); nothing was written.
    """

    path: Path
    manifest: dict | None
    part_record: dict | None = None
    already_complete: bool = False


def shard_tasks(splits: dict[str, int], shard_size: int) -> list[ShardTask]:
    """All shards of a dataset in manifest order: splits in the given order, consecutive index ranges."""
    tasks = []
    for split, total in splits.items():
        for number, start in enumerate(range(0, total, shard_size)):
            tasks.append(ShardTask(split, number, start, min(shard_size, total - start)))
    return tasks


def _run_id_in(path: Path, key: str) -> str | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _finished(out: Path, run_id: str) -> bool:
    """The folder holds the finished dataset of the run ``run_id`` (its manifest, written last, names it)."""
    return _run_id_in(out / MANIFEST, "config_sha256") == run_id


DATASET = OutputKind(KIND, "bindscope dataset", identity="config or seed", finished=_finished,
                     claim_files=(RUN_STATE,))
"""A dataset folder, for :mod:`bindscope.io.claim` (generate, render, import, merge)."""


def _extending(extends):
    """``extends(manifest)`` as the claim's ``extends(folder)`` test: the folder's finished manifest is a prefix of
    this run's dataset. None stays None."""
    if extends is None:
        return None

    def test(out: Path) -> bool:
        try:
            previous = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(previous, dict) and bool(extends(previous))
    return test


def refuse_foreign(out: str | Path, overwrite: bool) -> None:
    """Raise :class:`BadInput` for a folder no dataset run could use (foreign files, another command's output, a
    file), before any slow work (commands call it first); see :func:`bindscope.io.claim.check_output`."""
    check_output(out, DATASET, overwrite)


def output_state(out: str | Path, run_id: str, overwrite: bool, extends=None) -> str:
    """What a run ``run_id`` would do with the folder ``out``, decided without writing anything: ``"new"``,
    ``"resume"``, ``"done"``, ``"extend"`` (``extends(manifest)`` is true for the finished dataset in ``out``; never
    with ``overwrite``) or ``"overwrite"`` (see :func:`bindscope.io.claim.claim_output`, kind :data:`DATASET`).

    Raises:
        BadInput: ``out`` is empty, the current folder or an ancestor of it, or a file; or it is not empty and
            neither a matching run nor ``overwrite`` allows using it (the message says what it holds and
            what to pass); or ``overwrite`` would delete a folder this command did not make.
    """
    return claim_output(out, DATASET, run_id, overwrite=overwrite, extends=_extending(extends)).decision


def finish_if_done(out: str | Path, run_id: str) -> dict | None:
    """The manifest of ``out`` when it holds the finished dataset of the run ``run_id`` (after tidying up, under
    the folder's claim, what a run killed at its finishing moment left), else ``None``. Lets a command say
    "already complete" before it loads its data."""
    claim = claim_output(out, DATASET, run_id)
    if claim.decision != "done":
        return None
    with claim:
        if claim.decision != "done":  # changed meanwhile: the run itself decides again
            return None
        tidy_finished(claim.path)
        return load_manifest(claim.path)


def _done_record(shards_dir: Path, task: ShardTask) -> Path:
    """The record a worker writes beside a finished shard: its manifest entry, counts and run id."""
    return shards_dir / f".{task.filename}.done"


def _adopt(shards_dir: Path, task: ShardTask, run_id: str) -> tuple[dict, dict] | None:
    """(entry, counts) of a shard finished by an earlier run of ``run_id``, after re-checking its sha256; a
    shard without a matching record (foreign, corrupt, truncated, or finished just before a kill) is
    deleted so that it is made again."""
    path, record = shards_dir / task.filename, _done_record(shards_dir, task)
    if not path.is_file():
        record.unlink(missing_ok=True)
        return None
    try:
        done = json.loads(record.read_text(encoding="utf-8"))
        entry = done["entry"]
        if (done["run_id"] == run_id and entry["file"] == f"shards/{task.filename}"
                and entry["first_index"] == task.start and entry["count"] == task.count
                and sha256_file(path) == entry["sha256"]):
            return entry, done["counts"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    path.unlink()
    record.unlink(missing_ok=True)
    return None


def _previous(shards_dir: Path, task: ShardTask) -> Path:
    """Where an extension keeps the shard of the smaller dataset until this task has read it back."""
    return shards_dir / f".{task.filename}.previous"


def _make_samples(generator: Generator, split: str, start: int, count: int, tick) -> list[Sample]:
    if tick is None or not getattr(generator, "progress_per_sample", False):
        samples = generator.make_samples(split, start, count)
        if tick is not None:
            tick(count)
        return samples
    samples = []
    for index in range(start, start + count):
        samples.extend(generator.make_samples(split, index, 1))
        tick(1)
    return samples


def _run_task(generator: Generator, shards_dir: Path, task: ShardTask, run_id: str,
              parent_pid: int | None = None, tick=None) -> tuple[dict, dict]:
    """Generate and write one shard (or adopt a finished one after checking it); return (manifest entry, counts).

    ``parent_pid``: the process running the build; a worker exits when it is gone (see
    :func:`~bindscope.io.workers.exit_with_parent`), so no shard is written after the run was killed.
    In an extension the task's first samples are read back from the smaller dataset's shard
    (:func:`_previous`) and only the rest are generated (the same bytes as a shard made in one go when the
    generator's statistics depend only on stored values). ``tick(n)`` reports ``n`` more samples done.
    """
    if parent_pid is not None:
        exit_with_parent(parent_pid)
    adopted = _adopt(shards_dir, task, run_id)
    if adopted is not None:
        if tick is not None:
            tick(task.count)
        return adopted
    previous = _previous(shards_dir, task)
    old: list[Sample] = []
    if previous.is_file():
        reader = ShardReader(previous, generator.attribute_names, generator.extra_names)
        try:
            old = [reader.sample(local) for local in range(min(reader.count, task.count))]
        finally:
            reader.close()
        if tick is not None:
            tick(len(old))
    samples = old + _make_samples(generator, task.split, task.start + len(old), task.count - len(old), tick)
    counts = generator.shard_statistics(task.split, samples)

    def exit_if_orphaned() -> None:  # the watcher polls; this closes the window before the shard appears
        if not parent_alive(parent_pid):
            os._exit(1)

    entry = write_shard(shards_dir / task.filename, task.split, task.start, samples, generator.attribute_names,
                        generator.extra_names, statistics=counts, run_id=run_id, before_rename=exit_if_orphaned)
    write_text_atomic(_done_record(shards_dir, task),
                      canonical_json({"run_id": run_id, "entry": entry, "counts": counts}))
    previous.unlink(missing_ok=True)
    return entry, counts


@contextlib.contextmanager
def _progress_channel(executor, bar, enabled: bool):
    """Per-sample progress from the workers: yields ``tick`` for :func:`_shard_job` (None: the bar moves per
    shard). In this process it is ``bar.update``; for joblib worker processes a multiprocessing queue drained
    by a thread here; Dask workers report per shard."""
    jobs = getattr(executor, "jobs", None)
    if not enabled or jobs is None:
        yield None
        return
    if jobs == 1:
        yield bar.update
        return
    import threading
    from multiprocessing.managers import SyncManager

    manager = SyncManager()
    manager.start(exit_with_parent, (os.getpid(),))  # its server process must not outlive a killed run
    with manager:
        queue = manager.Queue()

        def drain():
            while (n := queue.get()) is not None:
                bar.update(n)

        thread = threading.Thread(target=drain, daemon=True)
        thread.start()
        try:
            yield queue
        finally:
            queue.put(None)
            thread.join()


def _shard_job(common: tuple, task: ShardTask) -> tuple[dict, dict]:
    generator, shards_dir, run_id, parent_pid, *rest = common
    tick = rest[0] if rest else None
    if tick is not None and not callable(tick):  # a multiprocessing queue (worker processes)
        tick = tick.put
    return _run_task(generator, Path(shards_dir), task, run_id, parent_pid, tick)


def part_tasks(tasks: list[ShardTask], num_parts: int, part: int) -> list[ShardTask]:
    """The shards of part ``part`` (0-based) of ``num_parts``: every ``num_parts``-th shard from ``part`` on."""
    return [task for j, task in enumerate(tasks) if j % num_parts == part]


def part_stem(part: int, num_parts: int) -> str:
    """File stem of a part record, e.g. ``part-00002-of-00004`` (``part`` is 0-based)."""
    return f"part-{part:05d}-of-{num_parts:05d}"


def _remove_temp_files(shards_dir: Path, tasks: list[ShardTask]) -> None:
    """Delete temporary files left by interrupted writers of ``tasks``' shards and ``.done`` records (never
    other parts' files)."""
    remove_temp_files(shards_dir, {name for t in tasks for name in (t.filename, _done_record(shards_dir, t).name)})


def assemble_manifest(generator: Generator, results: dict[ShardTask, tuple[dict, dict]]) -> dict:
    """The manifest of a finished dataset from every shard's (entry, counts), summed in manifest order.

    Raises:
        RuntimeError: a shard of the dataset is missing from ``results``, or the manifest fails its schema.
    """
    tasks = shard_tasks(generator.splits, generator.shard_size)
    entries: dict[str, list[dict]] = {split: [] for split in generator.splits}
    counts: dict[str, dict[str, float]] = {split: {} for split in generator.splits}
    for task in tasks:
        if task not in results:
            raise RuntimeError(f"internal error: no result for shard {task.filename}")
        entry, shard_counts = results[task]
        entries[task.split].append(entry)
        for key, value in shard_counts.items():
            counts[task.split][key] = counts[task.split].get(key, 0) + value
    manifest = {
        "format": "bindscope-dataset", "format_version": FORMAT_VERSION,
        "generator": {"name": generator.name, "version": generator.version},
        "config": generator.config,
        "config_sha256": config_sha256(generator.name, generator.config, generator.seed), "seed": generator.seed,
        "image_size": list(generator.image_size),
        "object_attributes": list(generator.attribute_names), "object_extras": list(generator.extra_names),
        "sample_arrays": dict(getattr(generator, "sample_arrays", {})),
        "splits": {s: {"num_samples": generator.splits[s], "shards": entries[s]} for s in generator.splits},
        "statistics": generator.statistics(counts),
    }
    if hasattr(generator, "provenance"):  # optional (e.g. a test's toy generator may have none)
        manifest["provenance"] = generator.provenance()
    validate(manifest, "manifest", "manifest (internal error)", error=RuntimeError)
    return manifest


def finish_dataset(out: Path, generator: Generator, manifest: dict) -> None:
    """Mark ``out`` as this run's dataset, write the card and (last) the manifest, then tidy up (see
    :func:`tidy_finished`)."""
    write_marker(out, KIND, manifest["config_sha256"])
    write_text_atomic(out / "README.md", generator.card(manifest))
    write_text_atomic(out / MANIFEST, canonical_json(manifest))
    tidy_finished(out)


def tidy_finished(out: Path) -> None:
    """Remove what only an unfinished run needs from the finished dataset ``out``: the run state, the shards'
    ``.done`` records, any part records, and the temporary files of writes cut short by a kill (e.g. of the
    marker, card or manifest: :func:`~bindscope.io.atomic.atomic_open` cannot remove its own after ``kill -9``).
    Safe to repeat (a run killed while tidying up is tidied by its repeated command). Called with the folder
    locked and no other writer in it (a finished dataset has none)."""
    remove_temp_files(out)
    remove_temp_files(out / "shards")
    (out / RUN_STATE).unlink(missing_ok=True)
    for record in [*(out / "shards").glob(".*.done"), *(out / "shards").glob(".*.previous")]:
        record.unlink(missing_ok=True)
    if (out / PARTS_DIR).is_dir():
        shutil.rmtree(out / PARTS_DIR)


def write_part_record(out: Path, generator: Generator, num_parts: int, part: int,
                      results: dict[ShardTask, tuple[dict, dict]]) -> dict:
    """Write ``parts/<stem>.json`` (atomically); return the record."""
    parts_dir = out / PARTS_DIR
    parts_dir.mkdir(exist_ok=True)
    stem = part_stem(part, num_parts)
    record = {
        "format": PART_FORMAT, "format_version": PART_FORMAT_VERSION,
        "run_id": config_sha256(generator.name, generator.config, generator.seed),
        "generator": {"name": generator.name, "version": generator.version},
        # key order matters to generators (e.g. the order of an attribute's values) and the record's keys are
        # sorted, so the config travels as a JSON string in its own order
        "config_json": json.dumps(generator.config, ensure_ascii=False), "seed": generator.seed,
        "splits": [[split, n] for split, n in generator.splits.items()], "shard_size": generator.shard_size,
        "num_parts": num_parts, "part": part,
        "shards": [{"split": t.split, "number": t.number, "start": t.start, "count": t.count,
                    "entry": entry, "counts": counts} for t, (entry, counts) in results.items()],
    }
    write_text_atomic(parts_dir / f"{stem}.json", canonical_json(record))
    return record


def build_dataset(generator: Generator, out: str | Path, jobs: int = 1, overwrite: bool = False,
                  progress: bool = True, backend: str = "local", scheduler: str | None = None,
                  num_parts: int = 1, part: int = 0) -> dict:
    """Generate the whole dataset of ``generator`` (or one part of it) into ``out``; return the manifest written.

    Args:
        generator: a :class:`Generator`.
        out: output folder (created if missing). With ``backend="dask"`` and a remote scheduler it must be on a
            file system that every worker mounts at the same path.
        jobs: worker processes (>= 1): joblib processes for ``"local"``, LocalCluster workers for ``"dask"``
            without ``scheduler``; ignored with ``scheduler``. The output does not depend on it.
        overwrite: replace an existing bindscope dataset or run in ``out``.
        progress: show a tqdm progress bar (samples) on stderr.
        backend: ``"local"`` (joblib) or ``"dask"`` (dask.distributed futures; see
            :mod:`bindscope.build.backends`).
        scheduler: Dask scheduler address (``tcp://host:8786``) or scheduler-file path; ``None`` with
            ``backend="dask"`` starts a LocalCluster of ``jobs`` worker processes.
        num_parts: split the run into this many independent parts (>= 1, at most the number of shards).
        part: which part (0-based, ``0 <= part < num_parts``) this run makes. With ``num_parts > 1`` no
            manifest is written: the return value is the part record (see :func:`write_part_record`) and
            ``bindscope merge`` joins the parts.

    Raises:
        BadInput: a generator name not in the registry; bad ``jobs``, ``backend``, ``scheduler``, ``num_parts``
            or ``part``; an unreachable scheduler; an output folder that cannot be used (see
            :func:`output_state`), or one another run is writing (see
            :class:`~bindscope.io.ownership.OutputLock`). All checked before writing.
        GenerationError: shards the workers wrote are not visible here (a remote cluster without a shared
            file system).

    The folder is claimed for the whole run (:mod:`bindscope.io.claim`; parts of one run share the lock): SIGTERM
    and SIGHUP stop it like Ctrl-C, and a run that fails before its first shard leaves no claimed folder. Worker
    processes on this machine exit when this process dies. A repeated command of a finished run returns its
    manifest.
    """
    generator_class(generator.name)  # a registered generator: verify, release and merge find it by name
    check_backend(backend, scheduler, jobs)
    tasks = shard_tasks(generator.splits, generator.shard_size)
    check_parts(num_parts, part, len(tasks))
    mine = part_tasks(tasks, num_parts, part)
    run_id = config_sha256(generator.name, generator.config, generator.seed)
    extends = _extending(getattr(generator, "extends", None) if num_parts == 1 else None)
    claim = claim_output(out, DATASET, run_id, overwrite=overwrite, shared=num_parts > 1, extends=extends)
    out = claim.path  # decided before connecting, locking or writing anything; decided again under the lock
    # Workers on this machine watch this process (a remote Dask worker cannot see it).
    parent_pid = os.getpid() if scheduler is None else None
    with open_executor(backend, scheduler, jobs) as executor, claim, _part_lock(out, num_parts, part):
        decision = claim.decision
        if decision == "done":
            tidy_finished(out)
            return load_manifest(out)
        if decision != "resume":
            write_text_atomic(out / RUN_STATE, canonical_json({"run_id": run_id, "generator": generator.name}))
        elif extends is not None and extends(out):
            decision = "extend"  # an extension cut short before the smaller dataset's manifest was removed
        shards_dir = out / "shards"
        shards_dir.mkdir(exist_ok=True)
        if decision == "extend":  # set the smaller dataset's shards aside, then it is an unfinished run of this one
            for task in tasks:
                if (shards_dir / task.filename).is_file():
                    os.replace(shards_dir / task.filename, _previous(shards_dir, task))
            (out / MANIFEST).unlink()
            (out / "README.md").unlink(missing_ok=True)
        _remove_temp_files(shards_dir, mine)
        results: dict[ShardTask, tuple[dict, dict]] = {}
        desc = f"{generator.name} ({ {'resume': 'resuming', 'extend': 'extending'}.get(decision, 'new')}"
        desc += f", part {part}/{num_parts}" if num_parts > 1 else ""
        desc += f", {executor.description})" if backend == "dask" else ")"
        with tqdm(total=sum(t.count for t in mine), unit="img", disable=not progress, desc=desc) as bar, \
                _progress_channel(executor, bar, progress) as tick:
            for position, result in executor.map(
                    _shard_job, (generator, str(shards_dir), run_id, parent_pid, tick), mine):
                results[mine[position]] = result
                if tick is None:
                    bar.update(mine[position].count)
        _remove_temp_files(shards_dir, mine)  # e.g. left by a worker that died mid-shard
        missing = [t.filename for t in mine if not (shards_dir / t.filename).is_file()]
        if missing:
            raise GenerationError(f"the workers wrote shards this machine cannot see in {str(shards_dir)!r} "
                                  f"(e.g. {missing[0]}): with a remote Dask cluster, out must be on a file "
                                  "system shared by every worker and this machine, at the same path")
        results = {t: results[t] for t in mine}  # manifest order
        if num_parts > 1:
            return write_part_record(out, generator, num_parts, part, results)
        manifest = assemble_manifest(generator, results)
        finish_dataset(out, generator, manifest)
        return manifest


def _part_lock(out: Path, num_parts: int, part: int):
    """The exclusive lock of one part (parts share the folder's lock), or nothing for a whole run."""
    if num_parts == 1:
        return contextlib.nullcontext()
    return OutputLock(out, name=f".bindscope-{part_stem(part, num_parts)}.lock")
