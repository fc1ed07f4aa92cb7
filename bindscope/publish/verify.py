"""``bindscope verify``: check a dataset directory against its manifest, checksums, the shards' own records and
the masks; every problem becomes one line naming the file (and the HDF5 dataset inside it), never a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from bindscope.errors import BadInput, DatasetError
from bindscope.format.manifest import MANIFEST, load_manifest, manifest_problems
from bindscope.format.reader import shard_mismatch
from bindscope.format.records import crowded_pairs, mask_bbox_area, size_ranks
from bindscope.format.shard import ShardReader
from bindscope.io.canonical import canonical_json, sha256_file
from bindscope.io.inside import file_inside
from bindscope.io.ownership import MARKER, bookkeeping


def verify_dataset(path: str | os.PathLike, check_masks: bool = True) -> list[str]:
    """Return a list of problems found in the dataset at ``path`` (empty when it is sound), one line each.

    Checks:

    - the manifest: schema; its ``config_sha256`` against the hash of its own generator, config and seed;
      consecutive shard ranges summing to each split's ``num_samples`` (see
      :func:`bindscope.format.manifest.manifest_problems`); its ``statistics`` against those the generator
      (from the registry) computes from the shards' own counts;
    - the files: ``shards/`` holds exactly the shards the manifest lists (no extra or leftover files), each
      with the recorded sha256; no unfinished-run state is left;
    - each shard: readable, every dataset present with the right shape and dtype (see
      :class:`bindscope.format.shard.ShardReader`); its own attributes (split, first index, count, object
      count, image size, attribute column order, per-sample array names, shapes and dtypes, and the run id =
      ``config_sha256``, which covers generator, config and seed) against the manifest;
    - each sample's stored plan, where its generator checks plans (``generator.plan_problem(spec, objects)``,
      e.g. MADMAN's: digit sources in range, known attribute values, a digit of the class of each object; see
      :func:`bindscope.generators.madman.plans.plan_problem`);
    - with ``check_masks``, every image and mask chunk is read, and per sample: the mask only holds 0 and
      object indices, each object's ``area`` and ``bbox`` equal those of its mask pixels, size ranks follow
      the areas, mention positions are 1..m over the mentioned objects, no negative equals the caption, and where
      the dataset's generator promises a gap between the objects of an image (a ``object_gap(version)`` of its
      class: MADMAN), the instance masks keep it (:func:`sample_problems`).
    """
    root = Path(path)
    try:
        manifest = load_manifest(root, consistent=False)
    except DatasetError as exc:
        return [str(exc)]
    problems = [f"{MANIFEST}: {p}" for p in manifest_problems(manifest)]
    problems += _file_problems(root, manifest)
    generator = _generator(manifest)
    plan_problem = getattr(generator, "plan_problem", None)
    gap = _object_gap(manifest)
    counts: dict[str, dict[str, float]] = {}
    complete = True  # every shard's own counts were read (else the statistics cannot be recomputed)
    for split, info in manifest["splits"].items():
        counts[split] = {}
        for entry in info["shards"]:
            found, shard_counts = _shard_problems(root, entry, split, manifest, check_masks, plan_problem, gap)
            problems += found
            complete = complete and isinstance(shard_counts, dict)
            for key, value in (shard_counts or {}).items():
                counts[split][key] = counts[split].get(key, 0) + value
    if complete and generator is not None:
        problems += _statistics_problems(manifest, counts, generator)
    return problems


def _generator(manifest: dict):
    """The dataset's generator rebuilt from the manifest, or None for one this installation cannot rebuild (an
    unknown name, a ``coco`` import, a config it refuses)."""
    from bindscope.build.registry import rebuild_generator

    try:
        return rebuild_generator(manifest["generator"]["name"], manifest["config"], manifest["seed"])
    except (BadInput, KeyError, TypeError, ValueError):
        return None


def _file_problems(root: Path, manifest: dict) -> list[str]:
    problems = []
    listed = {Path(e["file"]).name for info in manifest["splits"].values() for e in info["shards"]}
    shards = root / "shards"
    present = {p.name for p in shards.iterdir()} if shards.is_dir() else set()
    for name in sorted(present - listed):
        problems.append(f"shards/{name}: unexpected file (not in the manifest)")
    for name in sorted(listed - present):
        problems.append(f"shards/{name}: missing")
    for name in sorted(p.name for p in root.iterdir() if p.name.startswith(".bindscope")):
        if name != MARKER and not bookkeeping(name):
            problems.append(f"{name}: an unfinished run's state is left: repeat the command that made the dataset")
    return problems


def _object_gap(manifest: dict) -> int | None:
    """The gap (pixels) that the dataset's generator keeps between the instance masks of one image (its class's
    ``object_gap(version)``), or None: no such promise, or a generator this installation does not know."""
    from bindscope.build.registry import generator_class

    try:
        rule = getattr(generator_class(manifest["generator"]["name"]), "object_gap", None)
        return None if rule is None else rule(str(manifest["generator"]["version"]))
    except (BadInput, KeyError, TypeError):
        return None


def _shard_problems(root: Path, entry: dict, split: str, manifest: dict, check_masks: bool,
                    plan_problem=None, gap: int | None = None) -> tuple[list[str], dict | None]:
    """The problems of one shard, and its own additive counts (``None`` when they cannot be read);
    ``plan_problem(spec, objects)``: the generator's check of a stored plan (None: plans are not checked); ``gap``:
    the empty pixels the generator keeps between the objects of an image (None: not checked)."""
    where = entry["file"]
    if not (root / where).exists() and not (root / where).is_symlink():
        return [], None  # reported by _file_problems
    try:
        file = file_inside(root, where, "shard", DatasetError)
    except DatasetError as exc:
        return [str(exc).replace(str(root / where), where, 1)], None
    problems = []
    if sha256_file(file) != entry["sha256"]:
        problems.append(f"{where}: sha256 differs from the manifest (file changed or corrupt)")
    try:
        reader = ShardReader(file, manifest["object_attributes"], manifest["object_extras"])
    except DatasetError as exc:
        return problems + [str(exc).replace(str(file), where, 1)], None
    try:
        mismatch = shard_mismatch(reader, entry, split, manifest)
        if mismatch:
            problems.append(f"{where}: {mismatch}")
        attrs = reader.attrs
        if attrs.get("run_id") != manifest["config_sha256"]:
            problems.append(f"{where}: made by another run (its run id {str(attrs.get('run_id'))[:12]}.. is not the "
                            f"manifest's config_sha256 {manifest['config_sha256'][:12]}..: another config or seed)")
        for key in ("object_attributes", "object_extras"):
            if key in attrs and _json(attrs[key]) != manifest[key]:
                problems.append(f"{where}: column order {key} {attrs[key]} differs from the manifest's {manifest[key]}")
        layout = {name: {"shape": list(data.shape[1:]), "dtype": str(data.dtype)}
                  for name, data in reader.arrays.items()}
        if layout != manifest.get("sample_arrays", {}):
            problems.append(f"{where}: per-sample arrays {layout} differ from the manifest's sample_arrays "
                            f"{manifest.get('sample_arrays', {})}")
        shard_counts = _json(attrs.get("statistics", "{}"))
        objects = reader.all_objects() if plan_problem is not None else []
        for local in range(len(objects)):
            try:
                problem = plan_problem(reader.spec(local), objects[local])
            except (AttributeError, KeyError, TypeError, ValueError):  # a config the check cannot read
                problems.append(f"{where}: its plans cannot be checked against the manifest's config")
                break
            if problem:
                problems.append(f"{where}[{local}]: stored plan {problem}")
        if check_masks and not mismatch:
            for local in range(reader.count):
                try:
                    sample = reader.sample(local)
                except DatasetError as exc:
                    problems.append(str(exc).replace(str(file), where, 1))
                    continue
                problems += sample_problems(sample, f"{where}[{local}]", gap)
    finally:
        reader.close()
    return problems, shard_counts


def _json(text):
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def _statistics_problems(manifest: dict, counts: dict, generator) -> list[str]:
    """The manifest's statistics against those its generator computes from the shards' own counts."""
    try:
        expected = json.loads(canonical_json(generator.statistics(counts)))
    except (BadInput, KeyError, TypeError, ValueError, ZeroDivisionError):
        return []
    if expected != manifest["statistics"]:
        return [f"{MANIFEST}: statistics differ from those of the shards' own counts (the manifest was edited)"]
    return []


def sample_problems(sample, where: str, gap: int | None = None) -> list[str]:
    """The problems of one :class:`~bindscope.format.records.Sample` against its own object table, each a line
    starting with ``where`` (e.g. ``"shards/test-00000.h5[7]"``): mask values of no object, an object's area or
    bbox other than its mask's, size ranks, mention positions, a negative equal to the caption; with ``gap``
    (pixels), two objects whose masks are fewer than ``gap`` pixels apart along rows, columns or diagonals
    (:func:`~bindscope.format.records.crowded_pairs`; 1: touching or sharing)."""
    problems = []
    indices = [o.index for o in sample.objects]
    values = set(np.unique(sample.mask).tolist()) - {0}
    if not values <= set(indices):
        problems.append(f"{where}: mask values {sorted(values - set(indices))} belong to no object")
    for obj in sample.objects:
        bbox, area = mask_bbox_area(sample.mask, obj.index)
        if area != obj.area or bbox != tuple(obj.bbox):
            problems.append(f"{where}: object {obj.index} table says area {obj.area} bbox {tuple(obj.bbox)}, "
                            f"mask gives area {area} bbox {bbox}")
    if [o.size_rank for o in sample.objects] != size_ranks([o.area for o in sample.objects]):
        problems.append(f"{where}: size ranks do not follow the visible areas")
    mentioned = sorted(o.mention_position for o in sample.objects if o.mention_position > 0)
    if mentioned != list(range(1, len(mentioned) + 1)):
        problems.append(f"{where}: mention positions {mentioned} are not 1..{len(mentioned)}")
    for neg in sample.negatives:
        if neg.caption == sample.caption:
            problems.append(f"{where}: a {neg.kind} negative equals the caption")
    if gap is not None and len(sample.objects) > 1:
        objects = sample.objects
        for i, j in crowded_pairs([sample.mask == o.index for o in objects], gap):
            problems.append(f"{where}: sample {sample.index}: the masks of objects {objects[i].index} and "
                            f"{objects[j].index} are fewer than {gap} pixel(s) apart (a pixel of one lies within {gap} "
                            f"of the other, diagonals included); its generator keeps them at least {gap} apart")
    return problems
