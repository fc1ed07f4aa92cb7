"""``bindscope release``: turn a bindscope dataset into a Hugging Face Hub dataset repository (Parquet + card).

Layout of a release folder (what ``datasets.load_dataset(RELEASE_DIR)`` and the Hub's dataset viewer read)::

    README.md                                   dataset card: YAML header (configs, licence, task categories,
                                                size category) + how the data was generated
    <config>/<split>-00000-of-0000N.parquet     rows of one split, at most ``max_shard_size`` each (500 MB)
    .bindscope-source.json                      local only (never uploaded): where the source dataset is
    .bindscope.json                             local only: the ownership marker (kind "release")

Configs: a MADMAN dataset gives one config, ``default``, with its splits (``train``, ``test``, ``ood``); a
ComCO dataset gives one config per split, named after it — ``scenes`` (the default config) and
``references`` (the single-object reference images) — each holding one split of the same name.

Columns of every row (Parquet written by ``datasets``: :meth:`datasets.Dataset.from_generator` with explicit
:class:`datasets.Features`, then :meth:`datasets.Dataset.to_parquet`):

- ``index`` int64: the sample's index in its source split;
- ``image`` Image: the RGB image, PNG (lossless);
- ``mask`` Image: the instance mask, 8-bit grey PNG: 0 background, k = visible pixels of object k;
- ``caption`` string;
- ``objects`` list of structs, one per object: ``index`` int16 (the mask value), ``category`` string,
  ``category_id`` int32, ``bbox`` [x0, y0, x1, y1] int32 pixels (half-open), ``area`` int32 pixels,
  ``size_rank`` int16, ``salient`` bool, ``mention_position`` int16 (0 = not mentioned), ``attributes``
  struct of strings (the manifest's ``object_attributes``), ``extras`` struct of float32 (``object_extras``);
- ``negatives`` list of structs: ``kind``, ``caption``, ``attribute``, ``objects`` (list of int16),
  ``original``, ``replacement``;
- ``spec`` string: the sample's generation plan as JSON;
- one column per per-sample array of the manifest's ``sample_arrays`` (format version 2; ComCO:
  ``camera_K`` 3 x 3 and ``world_to_camera`` 4 x 4 float32, ``depth`` H x W float16 with ``--depth``), as
  :class:`datasets.Array2D` of the stored dtype.

The Hub's conventions followed here (https://huggingface.co/docs/hub/datasets-manual-configuration,
https://huggingface.co/docs/hub/datasets-cards): Parquet is the viewer's format; masks are PNG, never JPEG;
the card's ``configs`` name every config and split with ``data_files`` globs.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import warnings
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from string import Template
from typing import Iterator

import numpy as np
import yaml

from bindscope import __version__
from bindscope.build.registry import generator_class
from bindscope.errors import BadInput, DatasetError
from bindscope.format.manifest import MANIFEST
from bindscope.format.reader import Dataset
from bindscope.format.records import Sample
from bindscope.io.canonical import canonical_json, sha256_file
from bindscope.io.inside import file_inside
from bindscope.io.claim import OutputKind, check_output, claim_output
from bindscope.io.ownership import resolve_output
from bindscope.publish.verify import verify_dataset

SOURCE_FILE = ".bindscope-source.json"
DEFAULT_MAX_SHARD_SIZE = "500MB"
TASK_CATEGORIES = ["zero-shot-image-classification", "image-to-text", "text-to-image", "image-segmentation"]
RELEASE = OutputKind("release", "bindscope release", staged=True)
"""A release folder, for :mod:`bindscope.io.claim`."""
SIZE_CATEGORIES = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                   (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M")]

# --------------------------------------------------------------------------------------------- layout


def release_layout(manifest: dict) -> dict[str, list[str]]:
    """Config name -> the source splits it holds, default config first.

    One config per split, named after it, when the generator's class (generator registry) sets
    ``release_per_split`` (ComCO: ``scenes`` first), else ``{"default": [every split]}`` (MADMAN, COCO). Splits
    with no samples are left out (a config cannot point at no file).
    """
    order = {name: rank for rank, name in enumerate(("train", "test", "ood", "scenes", "references"))}
    splits = sorted((s for s, info in manifest["splits"].items() if info["num_samples"] > 0),
                    key=lambda s: (order.get(s, len(order)), s))
    if getattr(generator_class(manifest["generator"]["name"]), "release_per_split", False):
        return {s: [s] for s in splits}
    return {"default": splits}


def default_name(manifest: dict) -> str:
    """The card title when none is given: the manifest's ``provenance.title`` (e.g. "MADMAN (bindscope)",
    "SimCO (bindscope)"), else the generator's name."""
    return manifest.get("provenance", {}).get("title") or f"{manifest['generator']['name']} (bindscope)"


def size_category(num_rows: int) -> str:
    """The Hub's ``size_categories`` value for ``num_rows`` rows, e.g. 2500 -> ``"1K<n<10K"``."""
    for bound, name in SIZE_CATEGORIES:
        if num_rows < bound:
            return name
    return "n>1T" if num_rows >= 10 ** 12 else "100M<n<1B"


def release_features(attribute_names: list[str], extra_names: list[str], sample_arrays: dict | None = None):
    """The :class:`datasets.Features` of a release row (see the module docstring); ``sample_arrays`` is the
    manifest's ``{name: {"shape", "dtype"}}``."""
    from datasets import Array2D, Features, Image, List, Value

    obj = {"index": Value("int16"), "category": Value("string"), "category_id": Value("int32"),
           "bbox": List(Value("int32"), length=4), "area": Value("int32"), "size_rank": Value("int16"),
           "salient": Value("bool"), "mention_position": Value("int16")}
    if attribute_names:  # Parquet cannot hold an empty struct
        obj["attributes"] = {name: Value("string") for name in attribute_names}
    if extra_names:
        obj["extras"] = {name: Value("float32") for name in extra_names}
    neg = {"kind": Value("string"), "caption": Value("string"), "attribute": Value("string"),
           "objects": List(Value("int16")), "original": Value("string"), "replacement": Value("string")}
    arrays = {name: Array2D(tuple(info["shape"]), info["dtype"]) for name, info in (sample_arrays or {}).items()}
    return Features({"index": Value("int64"), "image": Image(), "mask": Image(), "caption": Value("string"),
                     "objects": List(obj), "negatives": List(neg), "spec": Value("string"), **arrays})


def _png(array: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(array)).save(buffer, format="PNG")
    return buffer.getvalue()


def sample_row(sample: Sample, attribute_names: list[str], extra_names: list[str], encode: bool = True) -> dict:
    """A release row for ``sample``; images as ``{"bytes": PNG, "path": None}`` (``encode=False``: arrays)."""
    objects = []
    for o in sample.objects:
        row = {"index": o.index, "category": o.category, "category_id": o.category_id, "bbox": list(o.bbox),
               "area": o.area, "size_rank": o.size_rank, "salient": o.salient,
               "mention_position": o.mention_position}
        if attribute_names:
            row["attributes"] = {n: o.attributes[n] for n in attribute_names}
        if extra_names:
            row["extras"] = {n: float(np.float32(o.extras.get(n, np.nan))) for n in extra_names}
        objects.append(row)
    negatives = [{"kind": n.kind, "caption": n.caption, "attribute": n.attribute, "objects": list(n.objects),
                  "original": n.original, "replacement": n.replacement} for n in sample.negatives]
    image, mask = sample.image, sample.mask
    if encode:
        image, mask = {"bytes": _png(image), "path": None}, {"bytes": _png(mask), "path": None}
    return {"index": sample.index, "image": image, "mask": mask, "caption": sample.caption, "objects": objects,
            "negatives": negatives, "spec": json.dumps(sample.spec, sort_keys=True), **sample.arrays}


def _rows(source: str, split: str, shards: list[int]):
    """Rows of the given shards of ``split`` (module-level so that ``datasets`` can hash and pickle it)."""
    with Dataset(source) as ds:
        part = ds.split(split)
        for number in shards:
            reader = part.shard(number)
            for local in range(reader.count):
                yield sample_row(reader.sample(local), ds.attribute_names, ds.extra_names)


# ----------------------------------------------------------------------------------------------- card


def source_licences(manifest: dict) -> list[str]:
    """Licence and provenance lines of a dataset's sources, as its generator recorded them at build time
    (``manifest["provenance"]["sources"]``: the MNIST digits, the 3D models and Blender, COCO, ...)."""
    sources = manifest.get("provenance", {}).get("sources")
    if not sources:
        return [f"sources not recorded (dataset made by {manifest['generator']['name']} "
                f"{manifest['generator']['version']} before provenance was recorded); see its card below"]
    return list(sources)


def release_card(manifest: dict, layout: dict[str, list[str]], rows: dict[str, int], licence: str,
                 pretty_name: str, source_card: str, repo_id: str | None = None) -> str:
    """The release's ``README.md``: Hub YAML header and a Markdown body (``bindscope/assets/release_card.md``,
    a :class:`string.Template`).

    Args:
        manifest: the source dataset's manifest.
        layout: config -> splits (see :func:`release_layout`).
        rows: split -> number of rows released.
        licence: the Hub licence id for the header (e.g. ``"cc-by-4.0"``, ``"other"``).
        pretty_name: the card's title.
        source_card: the source dataset's own card (appended verbatim).
        repo_id: the Hub repository, used in the loading example (the local folder when ``None``).
    """
    generator = manifest["generator"]
    configs = []
    for number, (config, splits) in enumerate(layout.items()):
        entry = {"config_name": config,
                 "data_files": [{"split": s, "path": f"{config}/{s}-*.parquet"} for s in splits]}
        if number == 0:
            entry["default"] = True
        configs.append(entry)
    header = {
        "pretty_name": pretty_name,
        "license": licence,
        "task_categories": TASK_CATEGORIES,
        "language": ["en"],
        "size_categories": [size_category(sum(rows.values()))],
        "tags": ["synthetic", "compositionality", "attribute-binding", "multi-object", "clip", "bindscope",
                 generator["name"]],
        "configs": configs,
    }
    first_config = next(iter(layout))
    body = Template(resources.files("bindscope").joinpath("assets", "release_card.md").read_text(encoding="utf-8"))
    body = body.substitute(
        pretty_name=pretty_name, bindscope_version=__version__, generator_name=generator["name"],
        generator_version=generator["version"], where=repo_id or "path/to/this/folder", first_config=first_config,
        first_split=layout[first_config][0],
        split_table="\n".join(f"| `{c}` | `{s}` | {rows[s]} |" for c, splits in layout.items() for s in splits),
        width=manifest["image_size"][1], height=manifest["image_size"][0],
        attributes=", ".join(manifest["object_attributes"]) or "—",
        extras=", ".join(manifest["object_extras"]) or "—", seed=manifest["seed"],
        config_sha256=manifest.get("config_sha256", ""),
        config_yaml=yaml.safe_dump(manifest["config"], sort_keys=True, allow_unicode=True).rstrip(),
        statistics_yaml=yaml.safe_dump(manifest["statistics"], sort_keys=True, allow_unicode=True).rstrip(),
        sources="\n".join(f"- {line}" for line in source_licences(manifest)), licence=licence,
        source_card=source_card.strip())
    return "---\n" + yaml.safe_dump(header, sort_keys=False, allow_unicode=True) + "---\n\n" + body


def read_card_header(release_dir: str | os.PathLike) -> dict:
    """Parse the YAML header of ``<release_dir>/README.md``.

    Raises:
        DatasetError: no README.md, or no parsable ``---``-delimited YAML header with ``configs``.
    """
    path = Path(release_dir) / "README.md"
    if not path.is_file():
        raise DatasetError(f"{str(release_dir)!r} is not a release folder: it has no README.md")
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---\n") or "\n---\n" not in text[4:]:
        raise DatasetError(f"{path}: no YAML header between '---' lines")
    try:
        header = yaml.safe_load(text[4:text.index("\n---\n", 4)])
    except yaml.YAMLError as exc:
        raise DatasetError(f"{path}: YAML header does not parse ({exc})") from None
    if not isinstance(header, dict) or not isinstance(header.get("configs"), list):
        raise DatasetError(f"{path}: YAML header has no 'configs' list")
    return header


# -------------------------------------------------------------------------------------------- release


def _parse_size(max_shard_size: str | int) -> int:
    from datasets.utils.py_utils import convert_file_size_to_int

    try:
        size = convert_file_size_to_int(max_shard_size)
    except ValueError:
        size = -1
    if size <= 0:
        raise BadInput(f"max_shard_size {max_shard_size!r} is not a size; use e.g. 500MB, 2GB or a byte count",
                       param="max_shard_size")
    return size


def check_source(source: str | os.PathLike) -> dict:
    """Return the manifest of the source dataset after checking it is finished and intact.

    Checks the manifest schema, every shard's presence, sha256, counts and index ranges
    (:func:`bindscope.publish.verify.verify_dataset` without the per-sample mask checks).

    Raises:
        DatasetError: the folder is missing, unfinished (no manifest), or a shard is missing or corrupt.
    """
    problems = verify_dataset(source, check_masks=False)
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        raise DatasetError(f"source dataset {str(source)!r} is broken or partial: {shown} "
                           f"(see `bindscope verify {source}`); nothing was released")
    with Dataset(source) as ds:
        return ds.manifest


def _check_release(source, out, licence: str, jobs: int, overwrite: bool) -> tuple[Path, Path, dict]:
    """The checks of :func:`make_release` before anything is written; returns ``(source, out, manifest)``."""
    if not licence or not all(c.isalnum() or c in "-." for c in licence) or licence != licence.lower():
        raise BadInput(f"licence {licence!r} is not a Hub licence id (lower case, like cc-by-4.0, mit, other)",
                       param="licence")
    if jobs < 1:
        raise BadInput(f"jobs must be at least 1, got {jobs}", param="jobs")
    source = Path(source).resolve()  # symbolic links followed first: a link cannot hide out inside the source
    out = resolve_output(out)
    if out == source or source in out.parents:
        raise BadInput(f"out {str(out)!r} must not be the source dataset or lie inside it", param="out")
    check_output(out, RELEASE, overwrite)  # a file, a foreign folder, or an earlier release without overwrite
    manifest = check_source(source)
    return source, out, manifest


@contextmanager
def progress_bars(enabled: bool) -> Iterator[None]:
    """Within the block, the progress bars of ``datasets`` and ``huggingface_hub`` as they are (``enabled``) or
    off; after it, as they were."""
    if enabled:
        yield
        return
    import datasets
    from huggingface_hub import utils as hub_utils

    was = datasets.is_progress_bar_enabled(), not hub_utils.are_progress_bars_disabled()
    with warnings.catch_warnings():  # an environment variable that forces the bars on wins, with a warning
        warnings.simplefilter("ignore")
        datasets.disable_progress_bars()
        hub_utils.disable_progress_bars()
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if was[0]:
                datasets.enable_progress_bars()
            if was[1]:
                hub_utils.enable_progress_bars()


def _arrow_files(source: str, split: str, shards: list[int], features, cache: str,
                 progress: bool = True) -> list[str]:
    """Encode the rows of ``shards`` into an Arrow file under ``cache``; return its path(s). Runs in this process or
    in a joblib worker; ``progress``: show ``datasets``' progress bar."""
    import datasets

    with progress_bars(progress):
        part = datasets.Dataset.from_generator(
            _rows, features=features, cache_dir=cache, split=datasets.NamedSplit(split),
            gen_kwargs={"source": source, "split": split, "shards": shards})
    return [entry["filename"] for entry in part.cache_files]


def _write_parquet(source: Path, split: str, num_shards: int, features, staging: Path, config: str,
                   max_bytes: int, jobs: int, scratch: Path, progress: bool) -> tuple[int, list[str]]:
    """Convert one split to Parquet files under ``staging/config`` (each at most about ``max_bytes``); return
    ``(rows, relative file names)``. ``datasets`` keeps an Arrow copy of the split in ``scratch`` (beside the
    release folder: same file system, usually more room than /tmp), deleted once the split's Parquet files are
    written.

    With ``jobs > 1`` contiguous groups of shards are encoded by joblib's loky workers, which are started fresh
    rather than forked (a fork of a process that already runs threads, as a test session or a notebook does,
    can hang in the child), and the groups are concatenated in shard order, so the files do not depend on
    ``jobs``."""
    import datasets
    from joblib import Parallel, delayed

    cache = scratch / split
    cache.mkdir()
    try:
        groups = [list(g) for g in _contiguous_groups(num_shards, max(1, min(jobs, num_shards)))]
        tasks = [delayed(_arrow_files)(str(source), split, group, features, os.path.join(cache, str(i)), progress)
                 for i, group in enumerate(groups)]
        if len(tasks) == 1:
            files = [_arrow_files(str(source), split, groups[0], features, os.path.join(cache, "0"), progress)]
        else:
            files = Parallel(n_jobs=len(tasks), backend="loky")(tasks)
        parts = [datasets.Dataset.from_file(name) for group in files for name in group]
        table = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
        num_files = max(1, math.ceil(table.data.nbytes / max_bytes))
        names = []
        for i in range(num_files):
            name = f"{config}/{split}-{i:05d}-of-{num_files:05d}.parquet"
            with progress_bars(progress):
                table.shard(num_files, i, contiguous=True).to_parquet(str(staging / name))
            names.append(name)
        rows = len(table)
        del table, parts
    finally:
        shutil.rmtree(cache)
    return rows, names


def _contiguous_groups(count: int, groups: int) -> list[range]:
    """``range(count)`` cut into ``groups`` contiguous, nearly equal runs (the first ones one longer)."""
    size, extra = divmod(count, groups)
    starts = [i * size + min(i, extra) for i in range(groups + 1)]
    return [range(starts[i], starts[i + 1]) for i in range(groups)]


def make_release(source: str | os.PathLike, out: str | os.PathLike, licence: str = "other",
                 pretty_name: str | None = None, max_shard_size: str | int = DEFAULT_MAX_SHARD_SIZE,
                 jobs: int = 1, overwrite: bool = False, repo_id: str | None = None, progress: bool = True) -> dict:
    """Write the release folder ``out`` for the dataset ``source``; return a summary.

    The folder is claimed through :mod:`bindscope.io.claim` (kind :data:`RELEASE`, staged): assembled in a staging
    folder next to ``out`` and exchanged with ``out`` when complete, so ``out`` never holds a partial release.
    During the conversion ``datasets`` keeps an Arrow copy of the split being converted in a scratch folder next
    to ``out`` too (removed after each split).

    Args:
        source: a finished bindscope dataset folder.
        out: the release folder to write; must be missing or empty (or a release, with ``overwrite``).
        licence: Hub licence id for the card (lower case, e.g. ``"cc-by-4.0"``, ``"mit"``, ``"other"``).
        pretty_name: card title (default: ``"<generator> dataset (bindscope)"``).
        max_shard_size: upper bound of one Parquet file, e.g. ``"500MB"`` (estimated from the Arrow size).
        jobs: processes that encode PNGs (joblib loky workers); the output does not depend on it.
        overwrite: replace an existing release folder (only one made by ``bindscope release``: its marker says
            so).
        repo_id: Hub repository named in the card's loading example.
        progress: show ``datasets``' progress bars (encoding, Parquet writing).

    Returns:
        ``{"configs": {config: [splits]}, "rows": {split: n}, "files": [relative paths]}``.

    Raises:
        BadInput / DatasetError: a broken or partial source, a bad size or licence, an unusable ``out``.
    """
    max_bytes = _parse_size(max_shard_size)
    source, out, manifest = _check_release(source, out, licence, jobs, overwrite)
    layout = release_layout(manifest)
    features = release_features(manifest["object_attributes"], manifest["object_extras"],
                                manifest.get("sample_arrays"))
    pretty_name = pretty_name or default_name(manifest)
    card_file = source / "README.md"  # read before any work: a card linked out of the source is refused now
    source_card = "" if not (card_file.exists() or card_file.is_symlink()) else \
        file_inside(source, "README.md", "dataset card", DatasetError).read_text(encoding="utf-8")
    # The claim every writer takes (bindscope.io.claim), on --out itself: a generate, merge or train on the same
    # folder is refused while the release runs, and the release is refused while one of them runs; what --out
    # holds is checked again under the lock. SIGTERM and SIGHUP clean up like Ctrl-C.
    with claim_output(out, RELEASE, sha256_file(source / MANIFEST), overwrite=overwrite) as claim:
        staging, scratch = claim.staging(), claim.scratch()
        files: list[str] = []
        rows: dict[str, int] = {}
        for config, splits in layout.items():
            (staging / config).mkdir()
            for split in splits:
                rows[split], names = _write_parquet(source, split, len(manifest["splits"][split]["shards"]),
                                                    features, staging, config, max_bytes, jobs, scratch,
                                                    progress)
                files += names
        card = release_card(manifest, layout, rows, licence, pretty_name, source_card, repo_id)
        (staging / "README.md").write_text(card, encoding="utf-8")
        (staging / SOURCE_FILE).write_text(canonical_json({
            "source": str(source), "source_manifest_sha256": sha256_file(source / MANIFEST),
            "config_sha256": manifest.get("config_sha256"), "configs": layout, "rows": rows}), encoding="utf-8")
        claim.publish()
    return {"configs": layout, "rows": rows, "files": ["README.md"] + files}


# ---------------------------------------------------------------------------------------------- check


def _same(a, b) -> bool:
    """Equality of nested rows where NaN equals NaN (float32 extras)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def check_release(release_dir: str | os.PathLike, source: str | os.PathLike | None = None,
                  limit: int = 20) -> list[str]:
    """Load a release with ``datasets.load_dataset`` and compare it with its source; return the problems.

    Every config and split named by the source's layout must be in the card; every row must equal the
    source sample: image and mask pixel for pixel, caption, index, every object row, every negative, spec.

    Args:
        release_dir: the release folder.
        source: the source dataset (default: the path recorded in the release's ``.bindscope-source.json``).
        limit: stop listing after this many problems.

    Raises:
        BadInput / DatasetError: no source known or the source is broken; the release has no card header.
    """
    import datasets

    release_dir = Path(release_dir).absolute()
    header = read_card_header(release_dir)
    if source is None:
        info_file = release_dir / SOURCE_FILE
        if not info_file.is_file():
            raise BadInput(f"release_dir {str(release_dir)!r} does not record its source dataset; give it "
                           "(source=DATA; on the command line: bindscope release DATA --check RELEASE_DIR)",
                           param="release_dir")
        source = json.loads(info_file.read_text(encoding="utf-8"))["source"]
    manifest = check_source(source)
    layout = release_layout(manifest)
    problems: list[str] = []
    card_configs = {c.get("config_name"): {d.get("split") for d in c.get("data_files", [])}
                    for c in header["configs"]}
    for config, splits in layout.items():
        if card_configs.get(config) != set(splits):
            problems.append(f"card: config {config!r} should name splits {sorted(splits)}, "
                            f"names {sorted(card_configs.get(config, set()))}")
    if problems:
        return problems
    with Dataset(source) as ds:
        for config, splits in layout.items():
            for split in splits:
                loaded = datasets.load_dataset(str(release_dir), config, split=split, streaming=True)
                expected = ds.split(split)
                count = 0
                rows = iter(loaded)
                for sample, row in zip(expected, rows):
                    count += 1
                    want = sample_row(sample, ds.attribute_names, ds.extra_names, encode=False)
                    where = f"{config}/{split}[{sample.index}]"
                    for key in ("image", "mask"):
                        got = np.asarray(row[key])
                        if got.shape != want[key].shape or not np.array_equal(got, want[key]):
                            problems.append(f"{where}: {key} differs from the source")
                    for key in ("index", "caption", "objects", "negatives", "spec"):
                        if not _same(row[key], want[key]):
                            problems.append(f"{where}: {key} differs: {row[key]!r} != {want[key]!r}")
                    for key in sample.arrays:
                        got = np.asarray(row[key], dtype=sample.arrays[key].dtype)
                        if not np.array_equal(got, sample.arrays[key], equal_nan=True):
                            problems.append(f"{where}: {key} differs from the source")
                    if len(problems) >= limit:
                        return problems
                rest = sum(1 for _ in rows)
                if count != len(expected) or rest:
                    problems.append(f"{config}/{split}: {count + rest} rows released, source has {len(expected)}")
    return problems
