"""The runner of the split tasks (result kind ``madman-eval``): each evaluation split is read and scored on its own
(``test`` in-distribution, ``ood`` out-of-distribution; any split by name).

A split task reads one *part* of a split (``Task.reads``), which the runner reads (and embeds) once per split for
every chosen task that reads it, in the order the tasks are registered:

- ``negatives``: the samples that store negatives, their captions, negatives and images embedded
  (:class:`NegativesPart`; the ``binding`` task);
- ``saliency``: the two-object samples whose caption mentions both objects (:class:`PairsPart`; the
  ``first-mention`` and ``large-object`` tasks, :mod:`bindscope.evaluation.saliency`).

The tasks' settings entries and the truncation counts are kept per part: the first part's at the top of the result,
a later part's under its name (``settings["saliency"]``, ``counts["truncation_saliency"]``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from bindscope.encoders.embedding_cache import Embedder, stored_image_key
from bindscope.errors import DatasetError
from bindscope.evaluation.feed import batches_of, embed_texts, read_images_ahead, reader_workers
from bindscope.evaluation.results import (
    apply_text_transform,
    dataset_info,
    encoder_counts,
    envelope,
    transform_name,
    truncation_counts,
)
from bindscope.evaluation.tasks.registry import (Task, describe_missing, missing_needs, parse_tasks, resolve_options,
                                                 tasks)
from bindscope.evaluation.tasks.run import TaskRun
from bindscope.format.reader import Dataset

KIND = "madman-eval"
EVAL_SPLITS = ("test", "ood")


@dataclass(kw_only=True)
class SplitRun(TaskRun):
    """What the split tasks compute on: :class:`~bindscope.evaluation.tasks.run.TaskRun` and the split at hand.

    Attributes:
        dataset / splits: the dataset and the splits evaluated, in order. workers: as :func:`run_splits`.
        generator: the dataset's generator for renders (None: rebuilt from the manifest).
        split / part: the split being scored and the part of it the running task reads.
        texts / captions: per part, the texts encoded and the captions, for its truncation counts (tasks add
            theirs).
    """

    dataset: Dataset
    splits: list[str]
    workers: int | None = None
    generator: object = None
    split: str = ""
    part: object = None
    texts: dict = field(default_factory=dict)
    captions: dict = field(default_factory=dict)


def default_splits(ds: Dataset) -> list[str]:
    """The evaluation splits ``test`` and ``ood`` that ``ds`` has. Raises DatasetError when it has neither."""
    splits = [s for s in EVAL_SPLITS if s in ds.split_names]
    if not splits:
        raise DatasetError(f"dataset {str(ds.path)!r} has no evaluation split (test or ood); it has: "
                           f"{', '.join(ds.split_names)}", param="splits")
    return splits


@dataclass
class SplitPlan:
    """Split tasks checked before any model is loaded (:func:`plan_splits`): the dataset, the chosen tasks (in
    registration order), the splits (each scored on its own) and the tasks' checked options by task name."""

    dataset: Dataset
    chosen: list[Task]
    splits: list[str]
    options: dict = field(default_factory=dict)


def plan_splits(ds: Dataset, task_names=None, splits: list[str] | None = None,
                options: dict | None = None) -> SplitPlan:
    """Check split tasks on ``ds`` before any model is loaded: the splits (default :func:`default_splits`), the
    tasks (default: the default ones each split holds what they need for), their needs on every split and their
    ``options`` (per task name; :func:`~bindscope.evaluation.tasks.registry.resolve_options`).

    Raises:
        BadInput / DatasetError: an unknown task, split or option, a task whose needs a split does not hold.
    """
    for name in splits or []:
        if name not in ds.split_names:
            raise DatasetError(f"splits {name!r}: dataset {str(ds.path)!r} has no such split; it has: "
                               f"{', '.join(ds.split_names)}", param="splits")
    splits = list(splits or []) or default_splits(ds)
    allowed = tasks(KIND, "dataset")
    if task_names is None:
        chosen = [t for t in allowed if t.default and not any(missing_needs(t, ds.split(s).holds) for s in splits)]
    else:
        chosen = parse_tasks(task_names, allowed, keep_order=False)
    for task in chosen:
        for name in splits:
            holds = ds.split(name).holds
            missing = missing_needs(task, holds)
            if missing:
                raise DatasetError(describe_missing(task, missing, f"split {name!r} of {str(ds.path)!r}", holds),
                                   param="tasks")
    return SplitPlan(ds, chosen, splits, resolve_options(chosen, options, KIND))


def run_splits(plan: SplitPlan, adapter, *, text_transform=None, embedder: Embedder | None = None, cache=None,
               seed: int = 0, progress: bool = True, rows: list | None = None, workers: int | None = None,
               generator=None) -> dict:
    """Run a checked :class:`SplitPlan` (:func:`plan_splits`) with ``adapter``; return the result (schema
    ``eval_result``, ``kind = "madman-eval"``).

    Args:
        plan: the dataset, the tasks, the splits (each scored on its own) and the tasks' options.
        text_transform: a map on L2-normalised text embeddings (rows re-normalised after), e.g. a LABCLIP map.
        embedder / cache: an :class:`Embedder` to reuse, or the on-disk cache of a new one.
        seed: seed of the bootstraps. progress: tqdm bars. rows: a list the per-sample rows are appended to.
        workers: processes that read and decompress images (:func:`bindscope.evaluation.feed.reader_workers`;
            the result does not depend on it). generator: the dataset's generator for single-object renders.

    Raises:
        BadInput: a task that needs images with a text-only encoder.
    """
    from bindscope.evaluation.scenes import check_image_tasks

    ds, chosen, splits = plan.dataset, plan.chosen, plan.splits
    check_image_tasks(chosen, adapter)
    run = SplitRun(adapter=adapter, embedder=embedder or Embedder(adapter, cache, progress=progress),
                   text_transform=text_transform, chosen=chosen, options=dict(plan.options),
                   names=[t.name for t in chosen], seed=seed, rows=rows, progress=progress, dataset=ds,
                   splits=list(splits), workers=workers, generator=generator)
    parts = list(dict.fromkeys(p for t in chosen for p in sorted(t.reads)))
    try:
        for part in parts:
            run.texts.setdefault(part, [])
            run.captions.setdefault(part, [])
            for name in splits:
                run.split, run.part = name, PARTS[part](run, name)
                for task in chosen:
                    if part in task.reads:
                        task.compute(run, run.options.get(task.name))
    finally:
        run.embedder.flush()
    counts = encoder_counts(run.embedder)
    settings = {"task": "madman", "splits": list(splits), "text_transform": transform_name(text_transform),
                "comparison": "strict > (ties count as wrong)", "seed": seed}
    defaults = [t for t in tasks(KIND, "dataset") if t.default]
    if chosen != defaults:
        settings["tasks"] = run.names
    for k, part in enumerate(parts):
        counts["truncation" if k == 0 else f"truncation_{part}"] = truncation_counts(adapter, run.texts[part],
                                                                                     run.captions[part])
        entries: dict = {}
        for task in chosen:
            if part in task.reads and task.settings is not None:
                entries.update(task.settings(run, run.options.get(task.name)))
        if k == 0:
            settings.update(entries)
        else:
            settings[part] = entries
    return envelope(KIND, adapter, dataset_info(ds, splits), settings, run.metrics, counts)


# ---------------------------------------------------------------------------------------------- negatives
@dataclass
class NegativeColumns:
    """The negatives of N samples as columns (M rows in all): sample ``i``'s are rows ``bounds[i]:bounds[i+1]``.

    Attributes:
        bounds: (N + 1,) int64, non-decreasing from 0 to M.
        kind, attribute, caption: M str each (the fields of :class:`~bindscope.format.records.Negative`).
        objects: M tuples of 1-based object indices.
    """

    bounds: np.ndarray
    kind: list[str]
    attribute: list[str]
    objects: list[tuple[int, ...]]
    caption: list[str]

    @classmethod
    def from_records(cls, negatives: list[list]) -> "NegativeColumns":
        """The columns of per-sample lists of :class:`~bindscope.format.records.Negative`."""
        flat = [n for negs in negatives for n in negs]
        return cls(np.cumsum([0] + [len(negs) for negs in negatives], dtype=np.int64), [n.kind for n in flat],
                   [n.attribute for n in flat], [tuple(n.objects) for n in flat], [n.caption for n in flat])


@dataclass
class ScoredSamples:
    """The samples of a split that have negatives, in index order: ``ids`` (indices in the split), ``captions``,
    ``negatives`` (:class:`~bindscope.evaluation.madman.NegativeColumns`) and ``keys`` (image cache keys:
    :func:`~bindscope.encoders.embedding_cache.stored_image_key`)."""

    ids: list[int]
    captions: list[str]
    negatives: NegativeColumns
    keys: list[bytes]


@dataclass
class NegativesPart:
    """The ``negatives`` part of a split: its scored samples, the number of samples of the split, and the
    embeddings: ``image_emb`` (N, D), ``caption_emb`` (N, D), ``negative_emb`` per sample (K_i, D)."""

    samples: ScoredSamples
    num_samples: int
    image_emb: np.ndarray
    caption_emb: np.ndarray
    negative_emb: list[np.ndarray]


def scored_samples(split) -> ScoredSamples:
    """The tables of the samples of ``split`` that have negatives, read a shard at a time (whole columns), and
    every shard's specs (not yet parsed: :meth:`~bindscope.format.shard.ShardReader.check_specs`)."""
    out = ScoredSamples([], [], NegativeColumns([0], [], [], [], []), [])
    columns = out.negatives
    for number, reader in enumerate(split.shards()):
        reader.check_specs(parse=False)  # read here, parsed by check_specs() while the images are read
        digest = split.shard_digest(number)
        sizes = np.diff(reader.negative_offsets)
        keep = np.flatnonzero(sizes).tolist()
        shard_captions = reader.captions
        out.ids += [reader.first_index + j for j in keep]
        out.captions += [shard_captions[j] for j in keep]
        out.keys += [stored_image_key(digest, j) for j in keep]
        columns.bounds += (columns.bounds[-1] + np.cumsum(sizes[keep])).tolist()
        columns.kind += reader.negative_column("kind")  # samples without negatives have no rows
        columns.attribute += reader.negative_column("attribute")
        columns.objects += reader.negative_column("objects")
        columns.caption += reader.negative_column("caption")
    columns.bounds = np.asarray(columns.bounds, dtype=np.int64)
    return out


def _scored_images(batches, samples: ScoredSamples, size: int, bar):
    """``(cache keys, images)`` of the scored samples among ``(first index, (B, H, W, 3) uint8)`` batches of their
    split (``size`` samples) in index order (those without negatives are left out)."""
    scored = np.zeros(size, bool)
    scored[samples.ids] = True
    done = 0
    for first, batch in batches:
        keep = np.flatnonzero(scored[first:first + len(batch)])
        if len(keep):
            yield (samples.keys[done:done + len(keep)], batch if len(keep) == len(batch) else batch[keep])
            done += len(keep)
        bar.update(len(batch))


def read_negatives(run: SplitRun, name: str) -> NegativesPart:
    """The ``negatives`` part of split ``name``: the images are read and decompressed (in a thread, and in
    worker processes when there are any) while the captions and negatives are encoded."""
    split = run.dataset.split(name)
    samples = scored_samples(split)
    captions, negatives, bounds = samples.captions, samples.negatives, samples.negatives.bounds
    with read_images_ahead(split, reader_workers(len(captions), run.workers)) as pieces:
        for reader in split.shards():  # an evaluation that reads no spec still refuses non-JSON ones
            reader.check_specs()
        neg_texts = negatives.caption
        text_emb = apply_text_transform(embed_texts(run.embedder, captions + neg_texts), run.text_transform)
        with tqdm(total=len(split), desc=f"madman eval {name}", disable=not run.progress, unit="img") as bar:
            images = _scored_images(batches_of(pieces), samples, len(split), bar)
            image_emb = run.embedder.image_batches(images, total=len(captions))
    caption_emb, flat_neg = text_emb[:len(captions)], text_emb[len(captions):]
    run.texts["negatives"] += neg_texts
    run.captions["negatives"] += captions
    return NegativesPart(samples, len(split), image_emb, caption_emb,
                         [flat_neg[bounds[i]:bounds[i + 1]] for i in range(len(captions))])


# ---------------------------------------------------------------------------------------------- pairs
def size_levels(ds: Dataset) -> dict[str, float]:
    """Size-level name -> its parameter, from the manifest's ``config.attributes.size`` (a mapping of numbers).

    Raises:
        DatasetError: the config records no numeric size levels.
    """
    sizes = ds.manifest.get("config", {}).get("attributes", {})
    sizes = sizes.get("size") if isinstance(sizes, dict) else None
    if not isinstance(sizes, dict) or not sizes or not all(isinstance(v, (int, float)) for v in sizes.values()):
        raise DatasetError(f"{str(ds.path)!r}: its config records no size levels (config.attributes.size, a mapping "
                           "of level names to numbers); first-mention and large-object compare digits by them",
                           param="tasks")
    return {k: float(v) for k, v in sizes.items()}


@dataclass
class PairsPart:
    """The ``saliency`` part of a split: its two-object samples whose caption mentions both objects
    (:class:`~bindscope.format.records.Sample`, images included), their indices and the size levels."""

    samples: list
    ids: list[int]
    levels: dict[str, float]


def read_pairs(run, name: str) -> PairsPart:
    """The ``saliency`` part of split ``name`` of ``run.dataset``.

    Raises:
        DatasetError: the split has no such sample, or the config no size levels.
    """
    ds = run.dataset
    levels = size_levels(ds)
    picked = [s for s in ds.split(name) if len(s.objects) == 2 and sum(o.mention_position > 0 for o in s.objects) == 2]
    if not picked:
        raise DatasetError(f"split {name!r} of {str(ds.path)!r} has no two-digit image whose caption describes both "
                           "digits", param="splits")
    return PairsPart(picked, [s.index for s in picked], levels)


PARTS = {"negatives": read_negatives, "saliency": read_pairs}
"""Part name -> its reader ``(run, split) -> part``."""
