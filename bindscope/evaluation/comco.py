"""ComCO / SimCO evaluations: TOR, IOR, I2TOR, image–text matching, and the Claim-1 text test.

Protocols of Abbasi et al., "CLIP Under the Microscope" (CVPR 2025), as restated in docs/papers.md section 1: TOR and
IOR (text- and image-based object retrieval), I2TOR, Claim 1 (large- vs small-first captions), and image–text
matching scenarios 1 and 2. Details and the project's choices are in docs/evaluation.md.

- **TOR**: each caption's text embedding is compared (cosine, embeddings L2-normalised) with the text embeddings
  of the bare names of every category in the vocabulary; the top-1 name is attributed to its mention position in
  the caption. Reported per number of objects and position: the *unconditional* share (count / all captions) and
  the *conditional* share (count / captions whose top-1 is one of their objects; rows sum to 100%, as the paper's
  tables).
- **IOR**: each scene image embedding is compared with the image embeddings of the single-object reference images
  (split ``references``); the top-1 category is attributed to that object's size rank in the scene (1 = largest
  visible area). Unconditional and conditional shares as for TOR.
- **I2TOR**: as IOR, but the candidates are the text embeddings of the category names.
- **Matching**: scenario 1: correct caption names the largest object first; each wrong caption replaces that
  first name by a category absent from the image. Scenario 2: correct caption names the largest object last; each
  wrong caption moves the largest object to the front and replaces the last name by an absent category.
  Accuracy = share of (image, wrong caption) pairs with cos(image, correct) > cos(image, wrong).
- Without a dataset, TOR runs on captions sampled from a vocabulary: ``objects`` distinct categories in uniformly
  random, seeded order (the authors' ``itertools.combinations`` confounds position with list order; this does not).
  **Claim 1**: group ``large_first`` = a Large category first, then ``objects - 1`` Medium ones; group
  ``small_first`` = a Small category first, then Medium ones; TOR per position for each group.
- **Binding** (datasets rendered with ``comco render --attributes``, which store recognition and binding
  negatives): MADMAN's recognition and binding accuracy (:func:`bindscope.evaluation.madman.score_split`, Gurung
  et al., GCPR 2025) on the ``scenes`` split: binding conditional on recognition of the attribute for both
  objects, and unconditional. Part of the default tasks when the dataset stores negatives.

- ``protocol="clip-oscope"`` / ``"both"``: TOR and IOR also (or only) as the authors' released scripts compute them
  (:mod:`bindscope.evaluation.clip_oscope`, docs/clip-oscope.md: top-n accuracy with their containment tests,
  per-position figures, P@k, R@k, MAP, NDCG), under ``metrics["clip_oscope"]``; ``bias_position`` builds the
  matching captions as their script does, with the biased object at that position.
- **TOC / IOC** (tasks ``toc``, ``ioc``; only when named): a linear head per position on frozen caption / image
  embeddings (:mod:`bindscope.evaluation.position_heads`).
- **Retrieval** (task ``retrieval``; only when named): text→image and image→text R@1/5/10 over every caption
  (a COCO import: all of an image's captions) and every scene (:mod:`bindscope.evaluation.retrieval`, as
  CLIP_benchmark defines them); with a text transform (a LABCLIP map) also the figures before it.

On a COCO import (``bindscope import coco``, docs/real-data.md) the same protocols run on natural images: TOR over
every caption (its objects = the annotated categories it mentions, in mention order), each category counted once by
its largest instance for IOR, I2TOR and matching, and IOR against an external reference folder
(:mod:`bindscope.evaluation.references`, e.g. DomainNet).

Ties (several candidates share the top score, or equal scores in matching) count as wrong. Captions are
category names joined with " and " (the paper's form); TOR on a dataset uses the dataset's own captions.

Each task is a registered object (:mod:`bindscope.evaluation.tasks`) that the runner of the scenes
(:mod:`bindscope.evaluation.scenes`) or of sampled captions (:mod:`bindscope.evaluation.sampled`) runs; this module
holds the protocols' cores (:func:`retrieval_shares`, :func:`matching_accuracy`, :func:`matching_captions`) and the
library calls :func:`evaluate_comco` and :func:`evaluate_tor_sampled`.
"""

from __future__ import annotations

import os

import numpy as np

from bindscope.encoders.embedding_cache import Embedder, EmbeddingCache
from bindscope.encoders.interface import EncoderAdapter
from bindscope.evaluation.results import TextTransform
from bindscope.evaluation.stats import cluster_bootstrap, clustered_proportion, share, strict_top1
from bindscope.evaluation.sampled import (  # noqa: F401 (part of this API)
    JOIN,
    VocabEntry,
    claim1_captions,
    load_vocabulary,
    sample_captions,
)
from bindscope.evaluation.scenes import distinct_by_rank  # noqa: F401 (part of this API)
from bindscope.format.reader import Dataset

def retrieval_shares(query_emb: np.ndarray, candidate_emb: np.ndarray, candidate_names: list[str],
                     ordered: list[list[str]], rows: list | None = None, task: str = "",
                     sample_ids: list[int] | None = None, seed: int = 0) -> dict:
    """Top-1 retrieval attributed to positions (pure numpy; the core of TOR, IOR and I2TOR).

    Args:
        query_emb: (N, D) unit-norm query embeddings (captions for TOR, scene images for IOR/I2TOR).
        candidate_emb: (C, D) unit-norm candidate embeddings (category names or reference images).
        candidate_names: the C category names.
        ordered: per query, the category names of its objects in position order (mention order for TOR, size
            rank for IOR/I2TOR).
        rows: when a list is given, one dict per query is appended: ``{"task", "sample", "objects" (names in
            position order), "top1" (name, None on a tie), "top1_position" (1-based, 0 = not in the query, None on
            a tie), "ranks" (per position, the 1-based rank of that object's name among the candidates; ties
            share the better rank), "similarities" (per candidate name, the cosine)}``.
        task, sample_ids: the ``task`` and per-query ``sample`` written into the rows (default 0..N-1); the
            samples are the sampling units of the intervals. seed: seed of the cluster bootstrap.

    Returns:
        ``{"<n>": block}`` per number of objects n, where block = ``{"num_queries", "top1_in_query",
        "top1_not_in_query", "ties", "positions": [{"position": k, "unconditional": share,
        "conditional": share}, ...]}``; unconditional = count / num_queries, conditional = count / top1_in_query.
        Every share has the Wilson ``ci95``; where ``sample_ids`` give some sample several queries (the five
        captions of a COCO image), also ``ci95_cluster``, a 95% cluster bootstrap over samples (all queries of
        one sample resampled together, :func:`~bindscope.evaluation.stats.cluster_bootstrap`, ``seed``), and
        ``clusters``, the number of samples: the queries of one image are not independent.
    """
    sims = query_emb @ candidate_emb.T if len(query_emb) else np.zeros((0, len(candidate_names)))
    top = strict_top1(sims) if len(query_emb) else np.zeros(0, int)
    groups: dict[int, dict] = {}
    if rows is not None:
        index = {name: j for j, name in enumerate(candidate_names)}
        for q, (names, best) in enumerate(zip(ordered, top)):
            row = sims[q]
            top_name = candidate_names[best] if best >= 0 else None
            rows.append({"task": task, "sample": int(sample_ids[q]) if sample_ids is not None else q,
                         "objects": list(names), "top1": top_name,
                         "top1_position": None if top_name is None else
                         (names.index(top_name) + 1 if top_name in names else 0),
                         "ranks": [int((row > row[index[n]]).sum()) + 1 if n in index else None for n in names],
                         "similarities": {n: float(v) for n, v in zip(candidate_names, row)}})
    units = list(range(len(ordered))) if sample_ids is None else list(sample_ids)
    clustered = len(set(units)) < len(units)
    for q, (names, best) in enumerate(zip(ordered, top)):
        n = len(names)
        g = groups.setdefault(n, {"num_queries": 0, "ties": 0, "not_in": 0, "hits": [0] * n, "at": [], "units": []})
        g["num_queries"] += 1
        g["units"].append(units[q])
        if best < 0:
            g["ties"] += 1
            g["at"].append(-1)
        elif candidate_names[best] in names:
            g["hits"][names.index(candidate_names[best])] += 1
            g["at"].append(names.index(candidate_names[best]))
        else:
            g["not_in"] += 1
            g["at"].append(-1)
    out = {}
    for n in sorted(groups):
        g = groups[n]
        inside = sum(g["hits"])
        positions = [{"position": k + 1, "unconditional": share(c, g["num_queries"]),
                      "conditional": share(c, inside)} for k, c in enumerate(g["hits"])]
        if clustered:
            _cluster_intervals(positions, np.asarray(g["at"]), np.asarray(g["units"]), seed)
        out[str(n)] = {"num_queries": g["num_queries"], "top1_in_query": inside, "top1_not_in_query": g["not_in"],
                       "ties": g["ties"], "positions": positions}
    return out


def _cluster_intervals(positions: list[dict], at: np.ndarray, units: np.ndarray, seed: int) -> None:
    """Add ``ci95_cluster`` and ``clusters`` to each position's shares: ``at`` is each query's top-1 position
    (0-based; -1 outside the query or tied), ``units`` its sample."""
    inside = (at >= 0).astype(np.float64)
    count = int(len(set(units.tolist())))
    for k, p in enumerate(positions):
        hit = (at == k).astype(np.float64)
        for key, den in (("unconditional", np.ones_like(hit)), ("conditional", inside)):
            p[key]["ci95_cluster"] = cluster_bootstrap(hit, den, units, seed=seed)
            p[key]["clusters"] = count


def matching_accuracy(image_emb: np.ndarray, correct_emb: np.ndarray, wrong_emb: list[np.ndarray],
                      groups: list[int], sample_ids: list[int] | None = None, rows: list | None = None,
                      seed: int = 0) -> dict:
    """Share of (image, wrong caption) pairs with cos(image, correct) > cos(image, wrong) (strict).

    Args:
        image_emb: (N, D); correct_emb: (N, D); wrong_emb: per image (K_i, D); groups: per image its object count.
        sample_ids: per image its index in the split (default 0..N-1), the cluster of its pairs.
        rows: when a list is given, one ``{"sample", "correct_similarity", "wrong_similarity", "passed",
            "wrong"}`` dict per pair is appended (``wrong`` = index of the wrong caption within the image).
        seed: seed of the cluster bootstrap.

    Returns:
        ``{"all": proportion, "by_num_objects": {"<n>": proportion}}``; each proportion has the per-pair Wilson
        ``ci95`` and ``ci95_cluster``, a bootstrap over images (one image's wrong captions are not independent).
    """
    sample_ids = list(range(len(image_emb))) if sample_ids is None else list(sample_ids)
    outcomes: dict[int, list[tuple[int, bool]]] = {}
    for img, good, bad, n, sid in zip(image_emb, correct_emb, wrong_emb, groups, sample_ids):
        positive = float(img @ good)
        for k, score in enumerate(float(v) for v in bad @ img):
            outcomes.setdefault(n, []).append((sid, positive > score))
            if rows is not None:
                rows.append({"sample": int(sid), "wrong": k, "correct_similarity": positive,
                             "wrong_similarity": score, "passed": positive > score})

    def clustered(pairs):
        return clustered_proportion([ok for _, ok in pairs], [sid for sid, _ in pairs], seed=seed)

    return {"all": clustered([p for n in sorted(outcomes) for p in outcomes[n]]),
            "by_num_objects": {str(n): clustered(outcomes[n]) for n in sorted(outcomes)}}


def matching_captions(objects: list, absent: list[str]) -> dict[str, tuple[str, list[str]]]:
    """The two matching scenarios' captions for one scene.

    Args:
        objects: the scene's :class:`~bindscope.format.records.ObjectRecord` (at least 2).
        absent: category names not in the scene (one wrong caption each).

    Returns:
        ``{"scenario_1": (correct, wrongs), "scenario_2": (correct, wrongs)}``. L = the object of size rank 1;
        the others keep their caption mention order (unmentioned ones last, by index). Scenario 1: correct =
        L, o1..o(n-1); wrong = a, o1..o(n-1). Scenario 2: correct = o1..o(n-1), L; wrong = L, o1..o(n-2), a.
    """
    large = min(objects, key=lambda o: (o.size_rank, o.index))
    others = sorted((o for o in objects if o is not large),
                    key=lambda o: (o.mention_position == 0, o.mention_position, o.index))
    names = [o.category for o in others]
    return {"scenario_1": (JOIN.join([large.category] + names), [JOIN.join([a] + names) for a in absent]),
            "scenario_2": (JOIN.join(names + [large.category]),
                           [JOIN.join([large.category] + names[:-1] + [a]) for a in absent])}


def evaluate_comco(dataset: str | os.PathLike | Dataset, adapter: EncoderAdapter, tasks: list[str] | str | None = None,
                   *, options: dict | None = None, text_transform: TextTransform | None = None,
                   cache: EmbeddingCache | None = None, embedder: Embedder | None = None, seed: int = 0,
                   progress: bool = True, split: str | None = None, rows: list | None = None,
                   workers: int | None = None) -> dict:
    """The scene tasks (TOR, IOR, I2TOR, matching, binding, TOC, IOC, retrieval; see the module docstring and
    :mod:`bindscope.evaluation.tasks`) on a dataset's split of scenes: ComCO / SimCO renders, COCO imports, any
    dataset that holds what the tasks need (:func:`bindscope.evaluation.scenes.plan_scenes`,
    :func:`~bindscope.evaluation.scenes.run_scenes`).

    Args:
        dataset: a dataset folder or an open :class:`Dataset`.
        adapter: the encoder (IOR, I2TOR, matching, binding, IOC and retrieval need an image tower).
        tasks: task names (list or comma-separated string); default: those that run by default and whose needs
            the split holds (IOR only with a ``references`` split or external references).
        options: per task name its options (the task's options dataclass or a dict of its fields), e.g.
            ``{"matching": {"matching_negatives": 5}, "ior": {"references": "domainnet/real"}, "tor":
            {"protocol": "both"}}``; a field several tasks share takes one value.
        text_transform: optional callable on L2-normalised text embeddings (N, D) -> (N, D'), applied wherever
            text embeddings are compared; rows re-normalised after.
        cache / embedder: as in :func:`bindscope.evaluation.madman.evaluate_madman`.
        seed: seed of samplings (matching negatives) and bootstraps.
        progress: tqdm bars. The shards of the splits read are verified (sha256) first.
        split: the scenes' split (default: :func:`bindscope.evaluation.scenes.scene_split`).
        rows: when a list is given, the per-sample output is appended: one row per caption for ``tor`` and per
            scene for ``ior`` and ``i2tor`` (see :func:`retrieval_shares`), and one per (scene, scenario, wrong
            caption) for ``matching`` (``{"task": "matching", "scenario", "sample", "correct", "wrong_caption",
            "correct_similarity", "wrong_similarity", "passed", ...}``); ``sample`` is the scene's index. The
            clip-oscope protocol adds one ``clip-oscope-tor`` / ``clip-oscope-ior`` row per query
            (:func:`~bindscope.evaluation.clip_oscope.oscope_rows`).
        workers: processes that read and decompress the scene images
            (:func:`bindscope.evaluation.feed.reader_workers`; None: chosen by size and CPUs). The result does
            not depend on it.

    Returns:
        A result dict valid against ``eval_result`` (``kind = "comco-eval"``).

    Raises:
        BadInput: unknown task or option, a task the split does not hold what it needs for (binding without
            stored negatives, IOR without references), a text-only adapter for an image task.
        DatasetError: missing split, corrupt shard.
    """
    from bindscope.evaluation.results import open_dataset
    from bindscope.evaluation.scenes import plan_scenes, run_scenes

    ds = open_dataset(dataset, validate=False)
    plan = plan_scenes(ds, tasks, split, options, seed)
    ds.check(plan.splits)
    return run_scenes(plan, adapter, text_transform=text_transform, embedder=embedder, cache=cache, seed=seed,
                      progress=progress, rows=rows, workers=workers)


def evaluate_tor_sampled(adapter: EncoderAdapter, source=None, tasks: list[str] | str = ("tor",), *,
                         options: dict | None = None, seed: int = 0, text_transform: TextTransform | None = None,
                         cache: EmbeddingCache | None = None, embedder: Embedder | None = None,
                         progress: bool = True, rows: list | None = None) -> dict:
    """TOR (and the Claim-1 test, and TOC) on captions sampled from a vocabulary or given, without a dataset
    (:mod:`bindscope.evaluation.sampled`).

    Args:
        adapter: any encoder with a text tower.
        source: a :class:`~bindscope.evaluation.sampled.SampledCaptions` (default: 2000 captions of 4 ``comco72``
            categories).
        tasks: ``tor``, ``claim1`` and/or ``toc`` (position heads on the caption embeddings, split by caption
            text).
        options: per task name its options (``{"tor": {"protocol": "both"}, "toc": {"head_epochs": 10}}``).
        seed: sampling seed. text_transform, cache, embedder: as in :func:`evaluate_comco`. progress: tqdm bars.
        rows: when a list is given, one row per caption is appended (see :func:`retrieval_shares`; ``task`` is
            ``tor``, ``claim1_large_first`` or ``claim1_small_first``, ``sample`` the caption's index).

    Returns:
        A result dict valid against ``eval_result`` (``kind = "comco-eval"``, ``dataset = null``).

    Raises:
        BadInput: unknown task, set or option, ``objects`` < 2 or larger than the set, ``n`` out of range,
            claim1 with given captions.
    """
    from bindscope.evaluation.sampled import plan_sampled, run_sampled

    plan = plan_sampled(source, tasks, options, seed)
    return run_sampled(plan, adapter, text_transform=text_transform, embedder=embedder, cache=cache, seed=seed,
                       progress=progress, rows=rows)
