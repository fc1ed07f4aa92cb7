"""``bindscope export webdataset``: one split of a bindscope dataset as WebDataset tar shards.

WebDataset (https://github.com/webdataset/webdataset) is the shard format ``open_clip_train`` reads with
``--dataset-type webdataset``: plain POSIX tar files in which the files of one sample are consecutive and share
a key (the file name up to its first dot). Layout of an export folder::

    <split>-000000.tar      samples 0 .. S-1 of the split (S = samples_per_shard)
    <split>-000001.tar      samples S .. 2S-1, ...
    sizes.json              {"<split>-000000.tar": count, ...}: open_clip_train reads it for the number of
                            samples (so --train-num-samples may be left out)
    webdataset.json         the export's manifest, written last: source, split, key scheme, and per shard
                            its file name, first index, sample count, byte size and sha256
    .bindscope.json         the ownership marker (kind "webdataset"; see bindscope.io.ownership)

Members of sample ``i`` (key ``<split>_<i:08d>``, e.g. ``train_00000042``), in name order:

- ``<key>.json``: ``{"key", "split", "index", "caption", "objects": [...], "negatives": [...], "spec": {...}}``;
  an object has ``index`` (its mask value), ``category``, ``category_id``, ``attributes``, ``bbox``
  [x0, y0, x1, y1] (half-open, pixels), ``area``, ``size_rank``, ``salient``, ``mention_position`` and
  ``extras`` (the stored float32 values as JSON numbers, ``null`` for NaN); a negative has ``kind``,
  ``caption``, ``attribute``, ``objects``, ``original``, ``replacement``. Strict JSON (no NaN), sorted keys.
- ``<key>.mask.png``: the instance mask, 8-bit grey PNG (0 background, k = visible pixels of object k);
- ``<key>.png``: the RGB image, PNG (lossless);
- ``<key>.txt``: the caption, UTF-8, no trailing newline;
- ``<key>.<name>.npy``: one per per-sample array of the manifest's ``sample_arrays`` (ComCO ``camera_K``,
  ``world_to_camera``, ``depth``), ``numpy.save`` format.

Deterministic bytes: members in name order, every tar header with mtime 0, uid/gid 0, empty user and group
names, mode 0644; PNGs written by Pillow at compression level 6 without metadata. The same dataset exported
twice (with the same Pillow and zlib) gives byte-identical tars, whatever ``jobs``.

Each shard is written under a temporary name and renamed when complete, after its member names were read back
and its sha256 computed; a ``.<shard>.done`` record beside it holds its manifest entry. A rerun of the same
export (same source, split and shard size) keeps every shard whose sha256 matches its record or the
manifest and rewrites the rest, so an interrupted export resumes to the same bytes, and a finished one is
checked and left as it is. The folder is claimed through :mod:`bindscope.io.claim` (kind :data:`WEBDATASET`):
locked for the whole export, refused when it holds anything but an export, replaced only with ``overwrite``.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

from bindscope import __version__
from bindscope.errors import BadInput, DatasetError, check_int
from bindscope.format.manifest import MANIFEST
from bindscope.format.reader import Dataset
from bindscope.format.records import Sample
from bindscope.io.atomic import atomic_path, write_text_atomic
from bindscope.io.canonical import canonical_json, sha256_file
from bindscope.io.claim import OutputKind, check_output, claim_output
from bindscope.io.workers import exit_with_parent, parent_alive

FORMAT = "bindscope-webdataset"
FORMAT_VERSION = 1
KIND = "webdataset"  # the ownership marker's kind (see bindscope.io.ownership)
MANIFEST_FILE = "webdataset.json"
SIZES_FILE = "sizes.json"
DEFAULT_SAMPLES_PER_SHARD = 1000
MTIME = 0  # every tar header's modification time (seconds since 1970)
PNG_LEVEL = 6
_SPLIT_NAME = re.compile(r"[A-Za-z0-9_-]+")  # a key is the name up to its first dot: no dot, no slash


def shard_name(split: str, number: int) -> str:
    """The file name of shard ``number`` (0-based) of ``split``, e.g. ``train-000003.tar``."""
    return f"{split}-{number:06d}.tar"


def sample_key(split: str, index: int) -> str:
    """The WebDataset key of sample ``index`` of ``split``, e.g. ``train_00000042``."""
    return f"{split}_{index:08d}"


def brace_pattern(split: str, num_shards: int) -> str:
    """The shard names as one brace pattern (``--train-data`` of open_clip_train), e.g.
    ``train-{000000..000003}.tar``; the one name for a single shard."""
    if num_shards == 1:
        return shard_name(split, 0)
    return f"{split}-{{{0:06d}..{num_shards - 1:06d}}}.tar"


# ---------------------------------------------------------------------------------------------- members


def _finite(value):
    """``value`` with every non-finite float replaced by None (strict JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _png(array) -> bytes:
    import numpy as np
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(array)).save(buffer, format="PNG", compress_level=PNG_LEVEL)
    return buffer.getvalue()


def _npy(array) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def sample_record(sample: Sample, split: str) -> dict:
    """The ``<key>.json`` member of ``sample`` as a dict (see the module docstring)."""
    objects = [{"index": o.index, "category": o.category, "category_id": o.category_id,
                "attributes": dict(o.attributes), "bbox": [int(v) for v in o.bbox], "area": o.area,
                "size_rank": o.size_rank, "salient": bool(o.salient), "mention_position": o.mention_position,
                "extras": {name: float(value) for name, value in o.extras.items()}} for o in sample.objects]
    negatives = [{"kind": n.kind, "caption": n.caption, "attribute": n.attribute, "objects": list(n.objects),
                  "original": n.original, "replacement": n.replacement} for n in sample.negatives]
    return _finite({"key": sample_key(split, sample.index), "split": split, "index": sample.index,
                    "caption": sample.caption, "objects": objects, "negatives": negatives, "spec": sample.spec})


def sample_members(sample: Sample, split: str) -> list[tuple[str, bytes]]:
    """The tar members of ``sample``: ``(file name, bytes)`` in name order (see the module docstring)."""
    key = sample_key(split, sample.index)
    record = json.dumps(sample_record(sample, split), sort_keys=True, ensure_ascii=False, allow_nan=False,
                        separators=(",", ":"))
    members = {f"{key}.png": _png(sample.image), f"{key}.mask.png": _png(sample.mask),
               f"{key}.txt": sample.caption.encode("utf-8"), f"{key}.json": record.encode("utf-8")}
    for name, array in sample.arrays.items():
        members[f"{key}.{name}.npy"] = _npy(array)
    return sorted(members.items())


def _tarinfo(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = MTIME
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


# ------------------------------------------------------------------------------------------------ shards


@dataclass(frozen=True)
class ShardTask:
    """Shard ``number`` of the export: samples ``start .. start + count - 1`` of the split."""

    number: int
    start: int
    count: int


def shard_tasks(num_samples: int, samples_per_shard: int) -> list[ShardTask]:
    """The export's shards in order (the last one may hold fewer samples; none for an empty split)."""
    return [ShardTask(number, start, min(samples_per_shard, num_samples - start))
            for number, start in enumerate(range(0, num_samples, samples_per_shard))]


def _done_record(out: Path, name: str) -> Path:
    return out / f".{name}.done"


def _entry_if_intact(out: Path, entry: dict | None, task: ShardTask, name: str) -> dict | None:
    """``entry`` when it describes ``task``'s shard and the file on disk still has its sha256, else None."""
    if not isinstance(entry, dict) or entry.get("file") != name or entry.get("first_index") != task.start \
            or entry.get("count") != task.count:
        return None
    path = out / name
    if path.is_symlink() or not path.is_file() or sha256_file(path) != entry.get("sha256"):
        return None
    return entry


def _read_json(path: Path):
    if path.is_symlink() or not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _write_shard(common: tuple, task: ShardTask) -> dict:
    """Write one shard (atomically) and its ``.done`` record; return its manifest entry. Runs in a worker."""
    ds, split, out, run_id, parent_pid = common
    out = Path(out)
    if parent_pid is not None:
        exit_with_parent(parent_pid)
    name = shard_name(split, task.number)
    part = ds.split(split)
    expected: list[str] = []

    def exit_if_orphaned() -> None:  # the watcher polls; this closes the window before the shard appears
        if not parent_alive(parent_pid):
            os._exit(1)

    with atomic_path(out / name, before_rename=exit_if_orphaned) as tmp:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for index in range(task.start, task.start + task.count):
                for member, data in sample_members(part[index], split):
                    tar.addfile(_tarinfo(member, len(data)), io.BytesIO(data))
                    expected.append(member)
        with tarfile.open(tmp, "r") as tar:  # read back: every member, in order, and nothing else
            names = tar.getnames()
        if names != expected:
            raise RuntimeError(f"{name}: the written tar holds {len(names)} members, {len(expected)} expected")
        entry = {"file": name, "first_index": task.start, "count": task.count, "bytes": tmp.stat().st_size,
                 "sha256": sha256_file(tmp)}
    write_text_atomic(_done_record(out, name), canonical_json({"run_id": run_id, "entry": entry}))
    return entry


# ------------------------------------------------------------------------------------------------ export


def export_run_id(source_manifest_sha256: str, split: str, samples_per_shard: int) -> str:
    """Hex sha256 naming an export: the source manifest's sha256, the split, the shard size, the format."""
    text = canonical_json({"format": FORMAT, "format_version": FORMAT_VERSION, "source": source_manifest_sha256,
                           "split": split, "samples_per_shard": samples_per_shard})
    return hashlib.sha256(text.encode()).hexdigest()


def _finished(out: Path, run_id: str) -> bool:
    manifest = _read_json(out / MANIFEST_FILE)
    return isinstance(manifest, dict) and manifest.get("run_id") == run_id


WEBDATASET = OutputKind(KIND, "webdataset export", identity="source, split or samples_per_shard",
                        finished=_finished)
"""An export folder, for :mod:`bindscope.io.claim`."""


def _check_source(data, out: Path, split: str) -> tuple[Path, Dataset]:
    """Open the source dataset and check the split (every shard's sha256 and structure, Dataset.check)."""
    if not isinstance(split, str) or not _SPLIT_NAME.fullmatch(split):
        raise BadInput(f"split {split!r} cannot name WebDataset keys (letters, digits, '_' and '-' only)",
                       param="split")
    source = Path(data).resolve()
    if out == source or source in out.parents or out in source.parents:
        raise BadInput(f"out {str(out)!r} must not be the source dataset, lie inside it or contain it",
                       param="out")
    ds = Dataset(source)
    try:
        ds.split(split)  # DatasetError naming the splits the dataset has
        ds.check([split])
    except BaseException:
        ds.close()
        raise
    return source, ds


def export_webdataset(data: str | os.PathLike, out: str | os.PathLike, split: str = "train",
                      samples_per_shard: int = DEFAULT_SAMPLES_PER_SHARD, jobs: int = 1, overwrite: bool = False,
                      progress: bool = False) -> dict:
    """Write the split ``split`` of the dataset ``data`` as WebDataset tar shards into the folder ``out``.

    See the module docstring for the layout, the members and the byte-for-byte rules.

    Args:
        data: a finished bindscope dataset folder. A split that fails the dataset's own check (a missing,
            changed or corrupt shard: :meth:`bindscope.format.reader.Dataset.check`) is refused before
            anything is written.
        out: the export folder: missing, empty, or an earlier export (the same one is resumed or checked).
        split: the split exported (its name starts every key and shard name).
        samples_per_shard: samples per tar (the last one holds the rest).
        jobs: worker processes writing shards; the bytes do not depend on it.
        overwrite: replace an earlier export of another source, split or shard size in ``out`` (only a folder
            this function made).
        progress: show a progress bar (samples) on stderr.

    Returns:
        ``{"path": out, "manifest": the webdataset.json dict, "written": [shard names made now],
        "kept": [shard names kept from an earlier run]}``.

    Raises:
        BadInput: a bad ``split``, ``samples_per_shard`` or ``jobs``; an ``out`` that is a file, inside the
            source, foreign, or another export without ``overwrite``; another run writing into ``out``.
        DatasetError: ``data`` is not a finished dataset, has no such split, or one of its shards fails the check.
    """
    from tqdm.auto import tqdm

    from bindscope.build.backends import LocalExecutor

    samples_per_shard = check_int("samples_per_shard", samples_per_shard, 1, what="samples")
    jobs = check_int("jobs", jobs, 1, what="processes")
    out = check_output(out, WEBDATASET, overwrite)  # a foreign out is refused before the source is checked
    source, ds = _check_source(data, out, split)
    with ds:
        source_sha = sha256_file(source / MANIFEST)
        run_id = export_run_id(source_sha, split, samples_per_shard)
        claim = claim_output(out, WEBDATASET, run_id, overwrite=overwrite)  # before anything is written
        num_samples = len(ds.split(split))
        tasks = shard_tasks(num_samples, samples_per_shard)
        with claim:
            finished = _read_json(out / MANIFEST_FILE) if claim.decision in ("resume", "done") else None
            previous = {e.get("file"): e for e in finished.get("shards", []) if isinstance(e, dict)} \
                if isinstance(finished, dict) and finished.get("run_id") == run_id else {}
            entries: dict[int, dict] = {}
            for task in tasks:
                name = shard_name(split, task.number)
                record = _read_json(_done_record(out, name))
                done = record.get("entry") if isinstance(record, dict) and record.get("run_id") == run_id \
                    else previous.get(name)
                entry = _entry_if_intact(out, done, task, name)
                if entry is not None:
                    entries[task.number] = entry
            todo = [t for t in tasks if t.number not in entries]
            kept = [shard_name(split, n) for n in sorted(entries)]
            parent_pid = os.getpid() if jobs > 1 else None
            with tqdm(total=num_samples, initial=num_samples - sum(t.count for t in todo), unit="img",
                      disable=not progress, desc=f"webdataset {split}") as bar:
                for position, entry in LocalExecutor(jobs).map(
                        _write_shard, (ds, split, str(out), run_id, parent_pid), todo):
                    entries[todo[position].number] = entry
                    bar.update(todo[position].count)
            manifest = _finish(out, ds, source_sha, run_id, split, samples_per_shard,
                               [entries[t.number] for t in tasks])
    return {"path": out, "manifest": manifest, "written": [shard_name(split, t.number) for t in todo],
            "kept": kept}


def _finish(out: Path, ds: Dataset, source_sha: str, run_id: str, split: str, samples_per_shard: int,
            shards: list[dict]) -> dict:
    """Check the shards against the source split, write ``sizes.json`` and (last) ``webdataset.json``, then
    remove the ``.done`` records; return the manifest."""
    num_samples = len(ds.split(split))
    arrays = ds.manifest.get("sample_arrays") or {}
    if sum(e["count"] for e in shards) != num_samples:
        raise RuntimeError(f"the shards hold {sum(e['count'] for e in shards)} samples, the source split "
                           f"{split!r} {num_samples}")
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "bindscope_version": __version__, "run_id": run_id,
        "source": {"manifest_sha256": source_sha, "config_sha256": ds.manifest.get("config_sha256"),
                   "generator": ds.manifest["generator"], "split": split, "num_samples": num_samples,
                   "image_size": ds.manifest["image_size"]},
        "samples_per_shard": samples_per_shard, "num_samples": num_samples,
        "key": f"{split}_<index:08d>",
        "members": ["json", "mask.png", "png", "txt"] + sorted(f"{name}.npy" for name in arrays),
        "shards": shards,
        "train_data": brace_pattern(split, len(shards)) if shards else None,
    }
    write_text_atomic(out / SIZES_FILE, canonical_json({e["file"]: e["count"] for e in shards}))
    write_text_atomic(out / MANIFEST_FILE, canonical_json(manifest))
    for entry in shards:
        _done_record(out, entry["file"]).unlink(missing_ok=True)
    return manifest


def load_export(path: str | os.PathLike) -> dict:
    """The manifest (``webdataset.json``) of a finished export folder.

    Raises:
        DatasetError: no readable manifest of this format in ``path``.
    """
    manifest = _read_json(Path(path) / MANIFEST_FILE)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DatasetError(f"{str(path)!r} is not a finished webdataset export (no {MANIFEST_FILE} of format "
                           f"{FORMAT!r})")
    return manifest
