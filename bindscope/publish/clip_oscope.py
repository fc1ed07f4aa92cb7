"""``bindscope export clip-oscope``: a ComCO / SimCO dataset in the folder layout of the ComCO authors' scripts.

The experiment scripts of Abbasi et al. ("CLIP Under the Microscope", CVPR 2025; GitHub ``clip-oscope/clip-oscope``,
``Image_Encoder_Experiments/IOR.py``, ``IOC.py``, ``Image_Text_Matching.py``) read two folders and nothing else:

- a reference folder, one single-object image per class, named ``<class>.png``; every file name (``.png``
  removed) is a class, so the folder holds nothing but these PNGs;
- a folder of scenes with one fixed number n of objects, each named by its objects in order,
  ``<obj1>_<obj2>_..._<objn>.png``; the scripts split the name at ``_`` and read the object order from it.

Layout of an export folder::

    references/<class>.png         one per class of the ``references`` split (its single object's category)
    <n>-objects/<o1>_..._<on>.png  every scene of the split with n objects, objects in ``object_order``
    clip-oscope.json               source (manifest sha256), split, object order, and per file its sample index
    .bindscope.json                the ownership marker (kind "clip-oscope")

so ``IOR.py --one_object_dataset_path OUT/references --many_objects_dataset_path OUT/3-objects:3`` runs on it
unchanged. The pixels are the dataset's (PNG is lossless). Deterministic bytes: PNGs written by Pillow at
compression level 6 without metadata, ``clip-oscope.json`` as canonical JSON.

Refused with :class:`~bindscope.errors.BadInput` before anything is written: two scenes that would get the same
file name (the same objects in the same order), two references of one class, a category name that cannot be
read back from a file name (containing ``_`` or ``/``, or empty) or too long for one (a file name holds at most
255 bytes), and a scene object without a reference image (the scripts look every object up among the references).
The folder is claimed through :mod:`bindscope.io.claim` (kind :data:`CLIP_OSCOPE`, staged): written into a staging
folder beside ``out`` and exchanged with ``out`` when complete, under ``out``'s lock; ``overwrite`` replaces only an
earlier clip-oscope export. The export's folders get the permissions of any new folder (the umask's).
"""

from __future__ import annotations

import os
from pathlib import Path

from bindscope.errors import BadInput
from bindscope.format.manifest import MANIFEST
from bindscope.format.reader import Dataset
from bindscope.format.records import ordered_objects
from bindscope.io.canonical import canonical_json, sha256_file
from bindscope.io.claim import OutputKind, check_output, claim_output

KIND = "clip-oscope"
INDEX_FILE = "clip-oscope.json"
REFERENCES = "references"
PNG_LEVEL = 6
MAX_NAME_BYTES = 255  # the longest file name most file systems take
CLIP_OSCOPE = OutputKind(KIND, "clip-oscope export", staged=True)
"""An export folder, for :mod:`bindscope.io.claim`."""


def objects_folder(n: int) -> str:
    """The folder of the scenes with ``n`` objects, e.g. ``3-objects``."""
    return f"{n}-objects"


def _check_name(category: str, where: str) -> str:
    if not category or "_" in category or "/" in category or "\0" in category or category in (".", ".."):
        raise BadInput(f"{where}: category {category!r} cannot be written into the authors' file names "
                       "(obj1_obj2_..._objn.png is split at '_'): a category name must be non-empty and hold no "
                       "'_' or '/'", param="data")
    size = len(category.encode())
    if size > MAX_NAME_BYTES - len(".png"):
        raise BadInput(f"{where}: category {category[:40]!r}... is {size} bytes long (UTF-8); a file name holds at "
                       f"most {MAX_NAME_BYTES} bytes, so <category>.png allows at most {MAX_NAME_BYTES - 4}",
                       param="data")
    return category


def _object_tables(split):
    """``(sample index, objects)`` of every sample of ``split``, read from the object tables (no pixels)."""
    for reader in split.shards():
        for local in range(reader.count):
            yield reader.first_index + local, reader.objects(local)


def plan_export(dataset: Dataset, split: str = "scenes", object_order: str = "mention") -> dict:
    """The files of an export, without writing: ``{"references": {file name: sample index}, "scenes":
    {"<n>-objects/<name>.png": sample index}}`` (relative paths, in sample order).

    Raises:
        BadInput: a bad ``object_order``, no ``references`` split, a split name that is ``references``, a
            category that cannot be a file-name part (or is too long for a file name), two references of one
            class, a scene object without a reference, or two scenes with the same file name (both sample indices
            named).
        DatasetError: no such split.
    """
    ordered_objects([], object_order)
    if REFERENCES not in dataset.split_names:
        raise BadInput(f"dataset {str(dataset.path)!r} has no {REFERENCES!r} split (render it with "
                       "comco render --references); the authors' scripts need one image per class", param="data")
    if split == REFERENCES:
        raise BadInput(f"split {split!r} holds the reference images; name the scenes' split", param="split")
    dataset.split(split)  # DatasetError naming the splits the dataset has
    references: dict[str, int] = {}
    for number, objects in _object_tables(dataset.split(REFERENCES)):
        if len(objects) != 1:
            raise BadInput(f"{REFERENCES} {number}: a reference image holds {len(objects)} objects, 1 expected",
                           param="data")
        name = _check_name(objects[0].category, f"{REFERENCES} {number}") + ".png"
        if name in references:
            raise BadInput(f"{REFERENCES} {references[name]} and {number} both show {name[:-4]!r}: the "
                           "reference folder holds one image per class", param="data")
        references[name] = number
    scenes: dict[str, int] = {}
    for number, objects in _object_tables(dataset.split(split)):
        where = f"{split} {number}"
        names = [_check_name(o.category, where) for o in ordered_objects(objects, object_order)]
        missing = [n for n in names if f"{n}.png" not in references]
        if missing:
            raise BadInput(f"{where}: {missing[0]!r} has no reference image; the authors' scripts look every "
                           "object up among the references", param="data")
        file = "_".join(names) + ".png"
        if len(file.encode()) > MAX_NAME_BYTES:
            raise BadInput(f"{where}: the file name {file!r} is longer than {MAX_NAME_BYTES} bytes", param="data")
        path = f"{objects_folder(len(names))}/{file}"
        if path in scenes:
            raise BadInput(f"{split} {scenes[path]} and {number} would both be {path!r} (the same objects "
                           f"in {object_order} order); the authors' layout names a scene by its objects only, so "
                           "it cannot hold both", param="data")
        scenes[path] = number
    return {"references": references, "scenes": scenes}


def _write_png(array, path: Path) -> None:
    import numpy as np
    from PIL import Image

    Image.fromarray(np.ascontiguousarray(array)).save(path, format="PNG", compress_level=PNG_LEVEL)


def export_clip_oscope(data: str | os.PathLike, out: str | os.PathLike, split: str = "scenes",
                       object_order: str = "mention", overwrite: bool = False) -> dict:
    """Write the dataset ``data`` into ``out`` in the ComCO authors' folder layout (see the module docstring).

    Args:
        data: a finished ComCO / SimCO dataset (or any dataset with a ``references`` split of one object per
            image and distinct category names); its shards must pass :meth:`Dataset.check`.
        out: the export folder: missing or empty; an earlier clip-oscope export only with ``overwrite``.
        split: the scenes' split. object_order: ``mention`` (the caption's order, unmentioned objects last) or
            ``size`` (size rank 1 = largest visible area first), as ``comco eval --object-order``.
        overwrite: replace an earlier clip-oscope export in ``out`` (never a folder this function did not make).

    Returns:
        ``{"path": out, "files": {"references": count, "<n>-objects": count, ...}, "index": the
        clip-oscope.json dict}``.

    Raises:
        BadInput: see :func:`plan_export`; an ``out`` that is a file, inside the source, or not empty (and not
            an earlier export with ``overwrite``), or that another run is writing (naming it).
        DatasetError: ``data`` is not a finished dataset or a shard fails its check.
    """
    out = check_output(out, CLIP_OSCOPE, overwrite)  # before the source is read
    source = Path(data).resolve()
    if out == source or source in out.parents or out in source.parents:
        raise BadInput(f"out {str(out)!r} must not be the source dataset, lie inside it or contain it", param="out")
    with Dataset(source) as ds:
        plan = plan_export(ds, split, object_order)
        ds.check([REFERENCES, split])
        source_sha256 = sha256_file(source / MANIFEST)
        with claim_output(out, CLIP_OSCOPE, source_sha256, overwrite=overwrite) as claim:
            staging = claim.staging()
            (staging / REFERENCES).mkdir()
            refs = ds.split(REFERENCES)
            for name, index in plan["references"].items():
                _write_png(refs[index].image, staging / REFERENCES / name)
            scenes = ds.split(split)
            for path, index in plan["scenes"].items():
                (staging / path).parent.mkdir(exist_ok=True)
                _write_png(scenes[index].image, staging / path)
            index = {"format": "bindscope-clip-oscope-export", "format_version": 1,
                     "source": {"manifest_sha256": source_sha256, "generator": ds.generator},
                     "split": split, "object_order": object_order,
                     "references": {f"{REFERENCES}/{k}": v for k, v in plan["references"].items()},
                     "scenes": plan["scenes"]}
            (staging / INDEX_FILE).write_text(canonical_json(index), encoding="utf-8")
            claim.publish()
    files = {REFERENCES: len(plan["references"])}
    for path in plan["scenes"]:
        files[path.split("/")[0]] = files.get(path.split("/")[0], 0) + 1
    return {"path": str(out), "files": files, "index": index}
