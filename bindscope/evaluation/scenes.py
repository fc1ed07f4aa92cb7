"""The runner of the scene tasks (result kind ``comco-eval``): read one split of scenes once, embed what the chosen
tasks read, then run each task (:mod:`bindscope.evaluation.tasks`) on the :class:`SceneRun` in registration order.

The tasks (TOR, IOR, I2TOR, matching, binding, TOC, IOC, retrieval; their protocols in
:mod:`bindscope.evaluation.comco`) run on any dataset that holds what they need (:attr:`Dataset.holds
<bindscope.format.reader.Dataset.holds>`): ComCO / SimCO renders, COCO imports, any generator's scenes. Captions
sampled from a vocabulary (no dataset) run through the same :class:`SceneRun` (:mod:`bindscope.evaluation.sampled`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from bindscope.encoders.embedding_cache import Embedder, stored_image_key
from bindscope.errors import BadInput, DatasetError
from bindscope.limits import MAX_SEED
from bindscope.evaluation.feed import IMAGE_BATCH, reader_workers
from bindscope.evaluation.results import (
    dataset_info,
    encoder_counts,
    envelope,
    transform_name,
    truncation_counts,
)
from bindscope.evaluation.tasks.registry import (
    Task,
    describe_missing,
    missing_needs,
    parse_tasks,
    resolve_options,
    shared_option,
    tasks,
)
from bindscope.evaluation.tasks.run import TaskRun
from bindscope.format.reader import Dataset
from bindscope.format.records import ordered_objects

KIND = "comco-eval"
MATCHING_INTERVALS = ("ci95 = Wilson score 95% per (image, wrong caption) pair; ci95_cluster = 95% percentile "
                      "bootstrap over images (an image's wrong captions resampled together)")


@dataclass(kw_only=True)
class SceneRun(TaskRun):
    """What the scene tasks compute on: :class:`~bindscope.evaluation.tasks.run.TaskRun` and what the runner read
    and embedded before they run.

    Attributes:
        dataset / split: the dataset and its split of scenes (None for sampled captions).
        vocab / vocab_source / name_emb: candidate category names, where they come from, and their (C, D) text
            embeddings.
        captions / mentions / caption_ids: per caption its text, its objects' names in mention order and its
            scene's sample index (None for sampled captions: a row's ``sample`` is then the caption's position).
        cap_emb: (len(captions), D) caption embeddings, when a chosen task reads ``captions``.
        ids / objects / by_rank: per scene its sample index, its objects (one per category, the largest
            instance, in size-rank order: :func:`distinct_by_rank`) and their names.
        scene_emb: (len(ids), D) image embeddings, when a chosen task needs images.
        scene_negatives: per scene ``(caption, stored negatives)``, when a chosen task reads ``negatives``.
        references: external single-object references (:class:`~bindscope.evaluation.references.ReferenceSet`)
            or None.
        texts_used / truncation_captions: the texts encoded and the captions counted in the result's truncation
            counts (tasks add theirs).
        claim1_groups: sampled captions' Claim 1 groups, ``{"large_first" | "small_first": caption lists}``.
        oscope_rows_first: sampled captions write TOR's clip-oscope rows before bindscope's.
    """

    dataset: Dataset | None = None
    split: str | None = None
    vocab: list[str] = field(default_factory=list)
    vocab_source: str = ""
    name_emb: np.ndarray | None = None
    captions: list[str] = field(default_factory=list)
    mentions: list[list[str]] = field(default_factory=list)
    caption_ids: list[int] | None = None
    cap_emb: np.ndarray | None = None
    ids: list[int] = field(default_factory=list)
    objects: list[list] = field(default_factory=list)
    by_rank: list[list[str]] = field(default_factory=list)
    scene_emb: np.ndarray | None = None
    scene_negatives: list[tuple] = field(default_factory=list)
    references: object = None
    texts_used: list[str] = field(default_factory=list)
    truncation_captions: list[str] = field(default_factory=list)
    claim1_groups: dict = field(default_factory=dict)
    oscope_rows_first: bool = False

    def ordered(self, object_order: str) -> list[list[str]]:
        """Per scene, its objects' names in ``object_order`` (``mention`` or ``size``;
        :func:`~bindscope.format.records.ordered_objects`).

        Raises:
            DatasetError: ``size`` on a split whose objects have no masks (no visible areas to order by).
        """
        if object_order == "size" and self.dataset is not None and "masks" not in self.dataset.split(self.split).holds:
            raise DatasetError(f"object_order size orders objects by visible area; split {self.split!r} of "
                               f"{str(self.dataset.path)!r} holds no masks: use object_order mention",
                               param="object_order")
        return [[o.category for o in ordered_objects(objs, object_order)] for objs in self.objects]

    def reads(self, what: str) -> bool:
        """Whether a chosen task reads ``what`` (``captions``, ``negatives``)."""
        return any(what in t.reads for t in self.chosen)


# ---------------------------------------------------------------------------------------------- the scenes
@dataclass
class _Scene:
    """The parts of a sample the scene tasks read (what :func:`caption_mentions` needs of a Sample)."""

    index: int
    caption: str
    objects: list
    negatives: list
    spec: dict


def _spec_for_mentions(text: str) -> dict:
    """A scene's spec as far as :func:`caption_mentions` reads it: parsed only when it may hold a ``captions``
    key (written plainly or with a \\u escape); else empty, which reads the same (no ``captions``)."""
    return json.loads(text) if '"captions"' in text or "\\u" in text else {}


def scene_batches(split, workers: int = 0, images: bool = True, negatives: bool = True):
    """``(scenes, images, keys)`` per batch of :data:`~bindscope.evaluation.feed.IMAGE_BATCH` consecutive samples
    of ``split``, in index order: the scenes (what the tasks read of each sample), their ``(B, H, W, 3)`` uint8
    images and the images' cache keys (:func:`~bindscope.encoders.embedding_cache.stored_image_key`: the
    verified shard's sha256 and the place in it), or None and None with ``images=False``. The tables are read a
    shard at a time and the images a shard slice at a time (in ``workers`` processes when > 0).

    Raises:
        DatasetError: a shard that cannot be read, or a spec that may name captions and is not JSON.
    """
    pieces = split.slices(IMAGE_BATCH)
    batches = split.image_batches(IMAGE_BATCH, workers, check_specs=True) if images else None
    tables: dict[int, tuple] = {}
    for number, lo, hi in pieces:
        first, pixels = next(batches) if batches is not None else (None, None)
        if number not in tables:
            reader = split.shard(number)
            if batches is None:  # else checked where the images are read
                reader.check_specs()
            tables = {number: (reader, reader.captions, reader.all_objects(),
                               reader.all_negatives() if negatives else None)}
        reader, captions, objects, negs = tables[number]
        scenes = []
        for local in range(lo, hi):
            text = reader.spec_text(local, check=False)
            try:
                spec = _spec_for_mentions(text)
            except ValueError:
                spec = reader.spec(local)  # raises the reader's DatasetError naming the file
            scenes.append(_Scene(reader.first_index + local, captions[local], objects[local],
                                 negs[local] if negs is not None else [], spec))
        keys = None if pixels is None else [stored_image_key(split.shard_digest(number), local)
                                            for local in range(lo, hi)]
        yield scenes, pixels, keys


def caption_mentions(sample) -> list[tuple[str, list[str]]]:
    """``[(caption, category names in mention order), ...]`` for TOR: every caption the sample records in its spec
    (``spec["captions"]``: a COCO import), else the sample's caption with its ``mention_position`` column."""
    captions = sample.spec.get("captions") if isinstance(sample.spec, dict) else None
    if isinstance(captions, list):
        return [(c["text"], sorted(c["mentions"], key=c["mentions"].get)) for c in captions]
    mentioned = sorted((o for o in sample.objects if o.mention_position > 0), key=lambda o: o.mention_position)
    return [(sample.caption, [o.category for o in mentioned])]


def scene_split(ds: Dataset, split: str | None = None) -> str:
    """The split holding the scenes: ``split`` if given, ``scenes`` if the dataset has it, else its only split.

    Raises:
        DatasetError: ``split`` does not exist. BadInput: several splits and none chosen.
    """
    if split is not None:
        ds.split(split)
        return split
    if "scenes" in ds.split_names:
        return "scenes"
    if len(ds.split_names) == 1:
        return ds.split_names[0]
    raise BadInput(f"split: dataset {str(ds.path)!r} has several splits ({', '.join(ds.split_names)}); "
                   "choose one", param="split")


def dataset_vocabulary(ds: Dataset, scenes: str) -> tuple[list[str], str]:
    """``(category names, where they come from)``: the ``references`` split's categories if present, else the
    categories of the split ``scenes`` ordered by category id."""
    if "references" in ds.split_names:
        names = []
        for reader in ds.split("references").shards():
            for caption, objects in zip(reader.captions, reader.all_objects()):
                name = objects[0].category if objects else caption
                if name not in names:
                    names.append(name)
        return names, "references split"
    seen = {}
    for reader in ds.split(scenes).shards():
        for objects in reader.all_objects():
            for o in objects:
                seen.setdefault(o.category, o.category_id)
    return sorted(seen, key=lambda n: (seen[n], n)), "categories present in the scenes"


def distinct_by_rank(objects: list) -> list:
    """One object per category, the largest instance (lowest size rank), in size-rank order.

    COCO images often hold several instances of a category; retrieval and matching compare category names, so
    each category counts once, by its largest instance. (ComCO scenes hold distinct categories: no change.)
    """
    out, seen = [], set()
    for o in sorted(objects, key=lambda o: (o.size_rank, o.index)):
        if o.category not in seen:
            seen.add(o.category)
            out.append(o)
    return out


# ---------------------------------------------------------------------------------------------- planning
@dataclass
class ScenePlan:
    """Scene tasks checked before any model is loaded: the dataset, its split of scenes, the chosen tasks (in
    registration order), their names as given, their options and the external references (or None)."""

    dataset: Dataset
    split: str
    chosen: list[Task]
    names: list[str]
    options: dict
    references: object = None

    @property
    def splits(self) -> list[str]:
        """The splits read: the scenes and, for IOR without external references, ``references``."""
        refs = self.references is None and "references" in self.dataset.split_names
        return [self.split] + (["references"] if refs else [])

    def file_suffix(self) -> str:
        """The result-file suffix of the options that change the figures: external references (``-refs-<hash>``),
        the clip-oscope protocol, a size object order, a bias position."""
        from bindscope.evaluation.results import short_hash

        refs = shared_option(self.chosen, self.options, "references")
        out = "" if refs is None else f"-refs-{short_hash(str(Path(refs).resolve()))}"
        return out + oscope_suffix(shared_option(self.chosen, self.options, "protocol", "bindscope"),
                                   shared_option(self.chosen, self.options, "object_order", "mention"),
                                   shared_option(self.chosen, self.options, "bias_position"))


def oscope_suffix(protocol: str, object_order: str, bias_position: int | None) -> str:
    """Result-file suffix naming the non-default clip-oscope options (``-clip-oscope``, ``-both``, ``-size-order``,
    ``-bias2``), so that their results do not replace the default ones."""
    out = "" if protocol == "bindscope" else f"-{protocol}"
    out += "" if object_order == "mention" else f"-{object_order}-order"
    return out + ("" if bias_position is None else f"-bias{bias_position}")


def default_scene_tasks(holds: frozenset[str], options: dict | None = None) -> list[Task]:
    """The scene tasks that run when none is named: the default ones whose needs ``holds`` (or the options given
    for them) meets."""
    options = options or {}
    return [t for t in tasks(KIND, "dataset") if t.default and not missing_needs(t, holds, options.get(t.name))]


def plan_scenes(ds: Dataset, task_names=None, split: str | None = None, options: dict | None = None,
                seed: int = 0) -> ScenePlan:
    """Check scene tasks on ``ds`` before any model is loaded: the split of scenes (:func:`scene_split`), the
    tasks (default :func:`default_scene_tasks`), what each needs of the split, their options, and the external
    reference images of IOR (loaded here).

    Raises:
        BadInput / DatasetError: an unknown task or option, a task whose needs the split does not hold (the
            message says what it needs and what the split holds), a missing split or reference folder.
    """
    from bindscope.evaluation.references import load_references
    from bindscope.errors import check_int

    check_int("seed", seed, 0, MAX_SEED)
    scenes = scene_split(ds, split)
    holds = ds.split(scenes).holds
    allowed = tasks(KIND, "dataset")
    given = parse_tasks(task_names, allowed) if task_names is not None else \
        default_scene_tasks(holds, options)
    chosen = [t for t in allowed if t in given]
    resolved = resolve_options(chosen, options, KIND)
    for task in chosen:
        missing = missing_needs(task, holds, resolved.get(task.name))
        if missing:
            raise BadInput(describe_missing(task, missing, f"split {scenes!r} of {str(ds.path)!r}", holds),
                           param="references" if missing == ["references"] else "tasks")
    references = shared_option(chosen, resolved, "references")
    reference_set = None
    if references is not None:
        reference_set = load_references(references, dataset_vocabulary(ds, scenes)[0], ds.manifest["image_size"][0],
                                        shared_option(chosen, resolved, "category_map"),
                                        shared_option(chosen, resolved, "references_per_category", 10))
    return ScenePlan(ds, scenes, chosen, [t.name for t in given], resolved, reference_set)


# ---------------------------------------------------------------------------------------------- running
def run_scenes(plan: ScenePlan, adapter, *, text_transform=None, embedder: Embedder | None = None, cache=None,
               seed: int = 0, progress: bool = True, rows: list | None = None, workers: int | None = None) -> dict:
    """Run a checked :class:`ScenePlan` with ``adapter``: one pass over the scenes (their images embedded when a
    chosen task needs them, read in ``workers`` processes: :func:`bindscope.evaluation.feed.reader_workers`), the
    category names and captions embedded, then each task; return the result (schema ``eval_result``,
    ``kind = "comco-eval"``).

    Raises:
        BadInput: a task that needs images with a text-only encoder.
    """
    check_image_tasks(plan.chosen, adapter)
    ds, scene_name = plan.dataset, plan.split
    run = SceneRun(adapter=adapter, embedder=embedder or Embedder(adapter, cache, progress=progress),
                   text_transform=text_transform, chosen=plan.chosen, options=plan.options, names=plan.names,
                   seed=seed, rows=rows, progress=progress, dataset=ds, split=scene_name, references=plan.references)
    run.vocab, run.vocab_source = dataset_vocabulary(ds, scene_name)
    run.caption_ids = []
    needs_images = any(t.images for t in plan.chosen)
    scenes = ds.split(scene_name)

    def read_scenes():
        """One pass over the scenes: collect captions and objects, yield ``(keys, images)`` of each batch (read
        from disk once)."""
        batches = scene_batches(scenes, reader_workers(len(scenes), workers) if needs_images else 0,
                                images=needs_images, negatives=run.reads("negatives"))
        with tqdm(total=len(scenes), desc="comco eval: scenes", disable=not progress, unit="img") as bar:
            for batch, pixels, keys in batches:
                for sample in batch:
                    for caption, mentioned in caption_mentions(sample):
                        run.captions.append(caption)
                        run.mentions.append(mentioned)
                        run.caption_ids.append(sample.index)
                    distinct = distinct_by_rank(sample.objects)
                    run.by_rank.append([o.category for o in distinct])
                    run.objects.append(distinct)
                    run.ids.append(sample.index)
                    run.scene_negatives.append((sample.caption, sample.negatives))
                bar.update(len(batch))
                yield keys, pixels

    run.texts_used = list(run.vocab)
    try:
        if needs_images:
            run.scene_emb = run.embedder.image_batches(read_scenes(), total=len(scenes))
        else:
            for _ in read_scenes():
                pass
        run.name_emb = run.embed(run.vocab)
        if run.reads("captions"):
            run.cap_emb = run.embed(run.captions)
            run.texts_used += run.captions
        run.compute_tasks()
    finally:
        run.embedder.flush()
    settings = {"task": "comco", "tasks": plan.names, "vocabulary": {"source": run.vocab_source,
                                                                    "size": len(run.vocab)},
                "scenes": scene_name, "references": None if plan.references is None else plan.references.describe(),
                "objects": "one per category (its largest instance)",
                "text_transform": transform_name(text_transform),
                "matching_negatives": run.option("matching_negatives"),
                "seed": seed, "comparison": "strict > (ties count as wrong)",
                "interval": "shares: Wilson score 95% per query; where an image has several captions (TOR on COCO) "
                            "also ci95_cluster, 95% percentile bootstrap over images (an image's captions "
                            "resampled together); matching: " + MATCHING_INTERVALS,
                "caption_form": "dataset captions for TOR; category names joined with ' and ' for matching"}
    return scene_result(run, run.texts_used, settings, dataset_info(ds, plan.splits))


def scene_result(run: SceneRun, texts: list[str], settings: dict, dataset: dict | None, without=()) -> dict:
    """The result of a run whose tasks have computed (scenes, or sampled captions): the encoder's counts and the
    truncation counts of ``texts`` (the captions among them: ``run.truncation_captions``), ``settings`` with the
    entries the chosen tasks add (``Task.settings``, in registration order) but the keys ``without``, ``dataset``
    (None for sampled captions); schema ``eval_result``, ``kind = "comco-eval"``."""
    counts = encoder_counts(run.embedder)
    counts["truncation"] = truncation_counts(run.adapter, texts, run.truncation_captions)
    for task in run.chosen:
        if task.settings is not None:
            settings.update(task.settings(run, run.options.get(task.name)))
    for key in without:
        settings.pop(key, None)
    return envelope(KIND, run.adapter, dataset, settings, run.metrics, counts)


def check_image_tasks(chosen: list[Task], adapter) -> None:
    """BadInput when a chosen task needs images and ``adapter`` is text-only."""
    needs_images = [t.name for t in chosen if t.images]
    if needs_images and not adapter.supports_images:
        raise BadInput(f"task(s) {', '.join(needs_images)} need an image encoder; {adapter.name!r} is text-only "
                       "(use tasks='tor')", param="tasks")
