"""``bindscope merge``: join the parts of a dataset made with ``--num-parts K --part I`` into one dataset.

Each part run (see :mod:`bindscope.build.builder`) leaves in its output folder the shards it made and a
record ``parts/part-IIIII-of-KKKKK.json``. The parts may share one folder (merge it in place) or lie in K
folders (merge them into ``--out``). The merged folder is byte-identical to the folder a single run with the
same config and seed makes: same shards, same ``manifest.json`` (entries and statistics summed in manifest
order), same dataset card.

Everything is checked before anything is written: every input holds part records; all records come from the
same generator, generator version, resolved config and seed (``config_sha256``) and the same K; each part
0..K-1 is present exactly once; together they hold every shard of the dataset, each present with the sha256
the part recorded.

Nothing read from a part folder is executed: the generator that computes the merged statistics and card is
rebuilt from the JSON record's config and seed through the generator registry
(:func:`bindscope.build.registry.rebuild_generator`); shards are only hashed and linked; other files under
``parts/`` are ignored.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from bindscope.build.builder import (
    DATASET,
    PART_FORMAT,
    PART_FORMAT_VERSION,
    PARTS_DIR,
    RUN_STATE,
    ShardTask,
    assemble_manifest,
    finish_dataset,
    shard_tasks,
    tidy_finished,
)
from bindscope.build.registry import rebuild_generator
from bindscope.errors import BadInput
from bindscope.format.manifest import MANIFEST, load_manifest
from bindscope.io.atomic import atomic_path
from bindscope.io.canonical import config_sha256, sha256_file
from bindscope.io.inside import file_inside
from bindscope.io.json_input import load_json
from bindscope.io.claim import check_output, claim_output

_RECORD_KEYS = ("run_id", "generator", "config_json", "seed", "splits", "shard_size", "num_parts", "part", "shards")


def _load_records(folder: Path) -> list[dict]:
    if not folder.is_dir():
        raise BadInput(f"part folder {str(folder)!r} does not exist")
    if (folder / MANIFEST).is_file():
        raise BadInput(f"{str(folder)!r} is already a finished dataset (it has {MANIFEST}), not a part; "
                       "there is nothing to merge")
    files = sorted((folder / PARTS_DIR).glob("part-*-of-*.json"))
    if not files:
        hint = (" (it holds an unfinished run: repeat that part's command to finish it)"
                if (folder / RUN_STATE).is_file() else "")
        raise BadInput(f"{str(folder)!r} holds no finished part (no {PARTS_DIR}/part-*-of-*.json){hint}")
    records = []
    for file in files:
        file_inside(folder, file.relative_to(folder), "part record")
        record = load_json(file, "part record")
        if not isinstance(record, dict) or record.get("format") != PART_FORMAT:
            raise BadInput(f"{file}: not a bindscope part record")
        if record.get("format_version") != PART_FORMAT_VERSION:
            raise BadInput(f"{file}: part record format_version {record.get('format_version')!r} is not "
                           f"{PART_FORMAT_VERSION} (made by another bindscope version); rerun the parts")
        missing = [key for key in _RECORD_KEYS if key not in record]
        if missing:
            raise BadInput(f"{file}: not a complete part record (lacks {', '.join(missing)})")
        record["_folder"] = folder
        record["_file"] = file
        records.append(record)
    return records


def _describe(record: dict) -> str:
    return (f"{record['generator']['name']} {record['generator']['version']}, seed {record['seed']}, "
            f"config_sha256 {record['run_id'][:12]}..")


def plan_merge(inputs: list[str | os.PathLike]) -> tuple[object, dict[ShardTask, tuple[dict, dict]], dict]:
    """Check the part folders ``inputs``; return (generator, per-shard results, shard -> source file).

    Raises:
        BadInput: a folder is missing or holds no part; parts from different generators, versions, configs,
            seeds or part counts; a part missing or given twice; a shard file missing or changed (sha256).
    """
    if not inputs:
        raise BadInput("give at least one part folder to merge")
    records = [r for folder in inputs for r in _load_records(Path(folder).absolute())]
    first = records[0]
    for record in records[1:]:
        for key in ("run_id", "generator", "splits", "shard_size"):
            if record[key] != first[key]:
                raise BadInput(f"parts do not belong to one dataset: {record['_file']} was made with "
                               f"{_describe(record)}, but {first['_file']} with {_describe(first)}; "
                               "merge only parts of one run (same config and seed)")
        if record["num_parts"] != first["num_parts"]:
            raise BadInput(f"parts do not belong to one run: {record['_file']} is one of "
                           f"{record['num_parts']} parts, {first['_file']} one of {first['num_parts']}")
    num_parts = first["num_parts"]
    by_part: dict[int, dict] = {}
    for record in records:
        if record["part"] in by_part:
            raise BadInput(f"part {record['part']} of {num_parts} is given twice: {by_part[record['part']]['_file']} "
                           f"and {record['_file']}")
        by_part[record["part"]] = record
    missing = [p for p in range(num_parts) if p not in by_part]
    if missing:
        raise BadInput(f"parts {', '.join(map(str, missing))} of {num_parts} (0-based) are missing; "
                       f"found {len(by_part)}: run the missing parts first (the same command with part=I)")
    try:
        config = json.loads(first["config_json"])
    except (TypeError, json.JSONDecodeError) as exc:
        raise BadInput(f"{first['_file']}: config_json is not a JSON config ({exc})") from None
    generator = rebuild_generator(first["generator"]["name"], config, first["seed"])
    if generator.version != first["generator"]["version"]:
        raise BadInput(f"{first['_file']}: the parts were made by {first['generator']['name']} "
                       f"{first['generator']['version']}, this is {generator.version}; merge with the bindscope "
                       "version that made the parts")
    if config_sha256(generator.name, generator.config, generator.seed) != first["run_id"]:
        raise BadInput(f"{first['_file']}: its config and seed do not match its run id (edited or corrupt record)")
    expected = {t: t for t in shard_tasks(dict(first["splits"]), first["shard_size"])}
    results: dict[ShardTask, tuple[dict, dict]] = {}
    sources: dict[ShardTask, Path] = {}
    for record in records:
        for shard in record["shards"]:
            task = ShardTask(shard["split"], shard["number"], shard["start"], shard["count"])
            if task not in expected or task in results:
                raise BadInput(f"{record['_file']}: shard {task.filename} does not fit the dataset's shard plan")
            source = file_inside(record["_folder"], shard["entry"]["file"], f"shard of {record['_file']}")
            if sha256_file(source) != shard["entry"]["sha256"]:
                raise BadInput(f"shard {str(source)!r} differs from what part {record['part']} recorded "
                               "(sha256 mismatch: changed or corrupt); rerun that part")
            results[task] = (shard["entry"], shard["counts"])
            sources[task] = source
    absent = [t.filename for t in expected if t not in results]
    if absent:
        raise BadInput(f"the parts lack {len(absent)} shard(s) of the dataset, e.g. {absent[0]}")
    return generator, results, sources


def _link_or_copy(source: Path, target: Path) -> None:
    """Put ``source``'s bytes at ``target`` atomically: a hard link when possible, else a copy."""
    with atomic_path(target) as tmp:
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)


def merge_parts(inputs: list[str | os.PathLike], out: str | os.PathLike | None = None) -> dict:
    """Merge part folders into one finished dataset; return its manifest.

    Args:
        inputs: folders holding the parts (one shared folder or one per part, in any order).
        out: the merged dataset folder. ``None`` (only with one input) merges in place. Otherwise it must be
            missing, empty, one of ``inputs``, or this dataset (merged already, or a merge cut short: it is
            finished). Shards are hard-linked where the file system allows, else copied; input folders other
            than ``out`` are left unchanged. The folder is claimed through :mod:`bindscope.io.claim` (kind
            :data:`~bindscope.build.builder.DATASET`).

    Raises:
        BadInput: see :func:`plan_merge`; ``out`` missing with several inputs; an ``out`` that holds anything
            else (foreign files, another dataset or command's output) or that another run is writing.
    """
    folders = [Path(p).absolute() for p in inputs]
    if out is None:
        if len(folders) != 1:
            raise BadInput("out is needed to merge several part folders (the merged dataset's folder)", param="out")
        out = folders[0]
    check_output(out, DATASET)  # an unusable or foreign out is refused before the parts are read
    generator, results, sources = plan_merge(folders)
    manifest = assemble_manifest(generator, results)
    # a part folder merged in place holds an unfinished run of this dataset: the claim resumes it
    claim = claim_output(out, DATASET, manifest["config_sha256"])
    with claim:  # refused while a part (or another merge) still writes there
        if claim.decision == "done":  # the merged dataset is there already
            tidy_finished(claim.path)
            return load_manifest(claim.path)
        (claim.path / "shards").mkdir(exist_ok=True)
        for task, source in sources.items():
            target = claim.path / "shards" / task.filename
            if source.resolve() != target:
                _link_or_copy(source, target)
        finish_dataset(claim.path, generator, manifest)
    return manifest
