"""Build a dataset directory from a generator, shard by shard: atomic, resumable, identical for any ``--jobs``.

The unit of work is one shard: samples ``[start, start + count)`` of one split. A shard's content depends on
the generator's resolved config, the seed, the split and the sample indices alone, so the output is
byte-identical whatever the number of jobs, and an interrupted run continues where it stopped: finished
shards (present under their final name, written atomically) are kept, everything else is redone.

Folder states handled by :func:`prepare_output`:

- missing or empty: a new run starts;
- holds an unfinished run of the same generator, config and seed (``.bindscope-run.json``): it resumes;
- holds a finished dataset, another run, or foreign files: :class:`BadInput` unless ``overwrite`` (which only
  ever deletes a folder that holds a bindscope dataset or run, never foreign files).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol

import h5py
import joblib
from tqdm.auto import tqdm

from bindscope.dataset.manifest import MANIFEST, canonical_json, config_sha256, write_text_atomic
from bindscope.dataset.records import Sample
from bindscope.dataset.shard import sha256_file, write_shard
from bindscope.errors import BadInput
from bindscope.schemas import validate

RUN_STATE = ".bindscope-run.json"


class Generator(Protocol):
    """What :func:`build_dataset` needs from a generator. Must be picklable (it travels to worker processes)."""

    name: str                      # "madman" or "comco"
    version: str
    config: dict                   # resolved, JSON-serialisable config (stored in the manifest)
    seed: int
    splits: dict[str, int]         # split name -> number of samples
    shard_size: int                # samples per shard
    image_size: tuple[int, int]    # (H, W) pixels
    attribute_names: list[str]
    extra_names: list[str]

    def make_samples(self, split: str, start: int, count: int) -> list[Sample]:
        """Samples ``start .. start+count-1`` of ``split``; a pure function of (config, seed, split, index)."""

    def shard_statistics(self, split: str, samples: list[Sample]) -> dict[str, float]:
        """Additive counts over ``samples`` (summed over shards, then passed to :meth:`statistics`)."""

    def statistics(self, counts: dict[str, dict[str, float]]) -> dict:
        """Realised statistics for the manifest from the per-split summed counts."""

    def card(self, manifest: dict) -> str:
        """The dataset card (``README.md``, Markdown) for a finished manifest."""


@dataclass(frozen=True)
class ShardTask:
    split: str
    number: int
    start: int
    count: int

    @property
    def filename(self) -> str:
        return f"{self.split}-{self.number:05d}.h5"


def shard_tasks(splits: dict[str, int], shard_size: int) -> list[ShardTask]:
    """All shards of a dataset in manifest order: splits in the given order, consecutive index ranges."""
    tasks = []
    for split, total in splits.items():
        for number, start in enumerate(range(0, total, shard_size)):
            tasks.append(ShardTask(split, number, start, min(shard_size, total - start)))
    return tasks


def _is_bindscope_folder(out: Path) -> bool:
    return (out / MANIFEST).is_file() or (out / RUN_STATE).is_file()


def prepare_output(out: Path, run_id: str, overwrite: bool) -> bool:
    """Make ``out`` ready for the run ``run_id``; return True when an unfinished run of it is resumed.

    Raises:
        BadInput: ``out`` is a file, holds other content without ``overwrite``, or holds foreign files.
    """
    if out.exists() and not out.is_dir():
        raise BadInput(f"output {str(out)!r} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        state_file = out / RUN_STATE
        if state_file.is_file() and not (out / MANIFEST).is_file():
            try:
                same = json.loads(state_file.read_text()).get("run_id") == run_id
            except json.JSONDecodeError:
                same = False
            if same:
                return True
        if not overwrite:
            what = ("a finished dataset" if (out / MANIFEST).is_file() else
                    "an unfinished run with another config or seed" if state_file.is_file() else "other files")
            raise BadInput(f"output folder {str(out)!r} is not empty (it holds {what}); "
                           "pass --overwrite to replace it, or choose another --out")
        if not _is_bindscope_folder(out):
            raise BadInput(f"--overwrite refused: {str(out)!r} holds files that are not a bindscope dataset")
        shutil.rmtree(out)
    return False


def _run_task(generator: Generator, shards_dir: Path, task: ShardTask) -> tuple[dict, dict]:
    """Generate and write one shard (or read back a finished one); return (manifest entry, counts)."""
    path = shards_dir / task.filename
    if path.is_file():  # finished in an earlier, interrupted run (files appear only by atomic rename)
        with h5py.File(path, "r") as f:
            counts = json.loads(f.attrs["statistics"])
            entry = {"file": f"shards/{task.filename}", "first_index": task.start, "count": task.count,
                     "num_objects": int(f["objects/index"].shape[0])}
        entry["sha256"] = sha256_file(path)
        return entry, counts
    samples = generator.make_samples(task.split, task.start, task.count)
    counts = generator.shard_statistics(task.split, samples)
    entry = write_shard(path, task.split, task.start, samples, generator.attribute_names,
                        generator.extra_names, statistics=counts)
    return entry, counts


def run_tasks(generator: Generator, shards_dir: Path, tasks: list[ShardTask], jobs: int) -> Iterator:
    """Run shard tasks with joblib (``jobs`` processes; 1 = in this process), yielding results in task order."""
    if jobs == 1:
        return (_run_task(generator, shards_dir, t) for t in tasks)
    parallel = joblib.Parallel(n_jobs=jobs, return_as="generator")
    return parallel(joblib.delayed(_run_task)(generator, shards_dir, t) for t in tasks)


def build_dataset(generator: Generator, out: str | Path, jobs: int = 1, overwrite: bool = False,
                  progress: bool = True) -> dict:
    """Generate the whole dataset of ``generator`` into ``out``; return the manifest written.

    Args:
        generator: a :class:`Generator`.
        out: output folder (created if missing).
        jobs: worker processes (>= 1); the output does not depend on it.
        overwrite: replace an existing bindscope dataset or run in ``out``.
        progress: show a tqdm progress bar (samples) on stderr.

    Raises:
        BadInput: bad ``jobs`` or an output folder that cannot be used (see :func:`prepare_output`).
    """
    if jobs < 1:
        raise BadInput(f"--jobs must be at least 1, got {jobs}")
    out = Path(out)
    run_id = config_sha256(generator.name, generator.config, generator.seed)
    resumed = prepare_output(out, run_id, overwrite)
    shards_dir = out / "shards"
    shards_dir.mkdir(parents=True, exist_ok=True)
    for stale in shards_dir.glob(".*.tmp"):
        stale.unlink()
    if not resumed:
        write_text_atomic(out / RUN_STATE, canonical_json({"run_id": run_id, "generator": generator.name}))
    tasks = shard_tasks(generator.splits, generator.shard_size)
    total = sum(generator.splits.values())
    entries: dict[str, list[dict]] = {split: [] for split in generator.splits}
    counts: dict[str, dict[str, float]] = {split: {} for split in generator.splits}
    with tqdm(total=total, unit="img", disable=not progress,
              desc=f"{generator.name} ({'resuming' if resumed else 'new'})") as bar:
        for task, (entry, shard_counts) in zip(tasks, run_tasks(generator, shards_dir, tasks, jobs)):
            entries[task.split].append(entry)
            for key, value in shard_counts.items():
                counts[task.split][key] = counts[task.split].get(key, 0) + value
            bar.update(task.count)
    manifest = {
        "format": "bindscope-dataset", "format_version": 1,
        "generator": {"name": generator.name, "version": generator.version},
        "config": generator.config, "config_sha256": run_id, "seed": generator.seed,
        "image_size": list(generator.image_size),
        "object_attributes": list(generator.attribute_names), "object_extras": list(generator.extra_names),
        "splits": {s: {"num_samples": generator.splits[s], "shards": entries[s]} for s in generator.splits},
        "statistics": generator.statistics(counts),
    }
    validate(manifest, "manifest", "manifest (internal error)", error=RuntimeError)
    write_text_atomic(out / "README.md", generator.card(manifest))
    write_text_atomic(out / MANIFEST, canonical_json(manifest))
    (out / RUN_STATE).unlink()
    return manifest
