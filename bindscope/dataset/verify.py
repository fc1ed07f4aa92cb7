"""``bindscope verify``: check a dataset directory against its manifest, checksums and masks."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from bindscope.dataset.records import mask_bbox_area, size_ranks
from bindscope.dataset.reader import Dataset
from bindscope.dataset.shard import sha256_file
from bindscope.errors import DatasetError


def verify_dataset(path: str | os.PathLike, check_masks: bool = True) -> list[str]:
    """Return a list of problems found in the dataset at ``path`` (empty when it is sound).

    Checks: manifest schema; every shard exists with the recorded sha256, sample count, first index and
    object count; and, if ``check_masks``, for every sample: the mask only holds 0 and object indices, each
    object's ``area`` and ``bbox`` equal those of its mask pixels, size ranks follow the areas, mention
    positions are a permutation of 1..m over the mentioned objects, and no negative equals the caption.
    """
    try:
        ds = Dataset(path)
    except DatasetError as exc:
        return [str(exc)]
    problems: list[str] = []
    root = Path(path)
    with ds:
        for split_name in ds.split_names:
            split = ds.split(split_name)
            expected_start = 0
            for number, entry in enumerate(ds.manifest["splits"][split_name]["shards"]):
                file = root / entry["file"]
                where = entry["file"]
                if not file.is_file():
                    problems.append(f"{where}: missing")
                    continue
                if sha256_file(file) != entry["sha256"]:
                    problems.append(f"{where}: sha256 differs from the manifest (file changed or corrupt)")
                if entry["first_index"] != expected_start:
                    problems.append(f"{where}: first_index {entry['first_index']} != {expected_start}")
                expected_start += entry["count"]
                try:
                    reader = split.shard(number)
                except DatasetError as exc:
                    problems.append(str(exc))
                    continue
                if reader.count != entry["count"] or len(reader.images) != entry["count"]:
                    problems.append(f"{where}: holds {len(reader.images)} samples, manifest says {entry['count']}")
                    continue
                if int(reader.object_offsets[-1]) != entry["num_objects"]:
                    problems.append(f"{where}: holds {int(reader.object_offsets[-1])} objects, "
                                    f"manifest says {entry['num_objects']}")
                if check_masks:
                    for local in range(reader.count):
                        problems += _check_sample(reader.sample(local), f"{where}[{local}]")
            if expected_start != ds.manifest["splits"][split_name]["num_samples"]:
                problems.append(f"split {split_name}: shards hold {expected_start} samples, "
                                f"num_samples says {ds.manifest['splits'][split_name]['num_samples']}")
    return problems


def _check_sample(sample, where: str) -> list[str]:
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
    return problems
