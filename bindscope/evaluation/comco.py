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
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from bindscope.encoders.embedding_cache import Embedder, EmbeddingCache, stored_image_key
from bindscope.encoders.interface import EncoderAdapter
from bindscope.errors import BadInput, check_int
from bindscope.evaluation.feed import IMAGE_BATCH, reader_workers
from bindscope.evaluation.references import ReferenceSet
from bindscope.evaluation.results import (
    TextTransform,
    apply_text_transform,
    dataset_info,
    encoder_counts,
    envelope,
    open_dataset,
    transform_name,
    truncation_counts,
)
from bindscope.evaluation.stats import clustered_proportion, share, strict_top1
from bindscope.format.reader import Dataset

TASKS = ("tor", "ior", "i2tor", "matching", "binding")
HEAD_TASKS = ("toc", "ioc")
"""Linear position heads (:mod:`bindscope.evaluation.position_heads`); asked for by name, never a default."""
RETRIEVAL_TASKS = ("retrieval",)
"""Image–text retrieval R@k over every caption and image (:mod:`bindscope.evaluation.retrieval`); by name only."""
ALL_TASKS = TASKS + HEAD_TASKS + RETRIEVAL_TASKS
SAMPLED_TASKS = ("tor", "claim1", "toc")
IMAGE_TASKS = ("ior", "i2tor", "matching", "binding", "ioc", "retrieval")
JOIN = " and "
MATCHING_INTERVALS = ("ci95 = Wilson score 95% per (image, wrong caption) pair; ci95_cluster = 95% percentile "
                      "bootstrap over images (an image's wrong captions resampled together)")


@dataclass(frozen=True)
class VocabEntry:
    """A category as the evaluation needs it: caption name and size class (``""`` when unknown)."""

    name: str
    size_class: str = ""


def parse_tasks(text: str | list[str], allowed: tuple[str, ...]) -> list[str]:
    """Split ``"tor,ior"`` into task names, in the given order, without duplicates.

    Raises:
        BadInput: an unknown task (the allowed ones are listed) or an empty list.
    """
    items = list(text) if isinstance(text, (list, tuple)) else [t.strip() for t in text.split(",")]
    tasks: list[str] = []
    for task in items:
        if not task:
            continue
        if task not in allowed:
            raise BadInput(f"tasks {text!r}: unknown task {task!r}; allowed here: {', '.join(allowed)}",
                           param="tasks")
        if task not in tasks:
            tasks.append(task)
    if not tasks:
        raise BadInput(f"tasks is empty; allowed: {', '.join(allowed)}", param="tasks")
    return tasks


def load_vocabulary(spec: str) -> list[VocabEntry]:
    """Categories of a set: ``comco72``, ``simco18`` or an imported asset folder, in registry order.

    Reads them with :func:`bindscope.generators.comco.registry.load_set` (pure Python, no Blender).

    Raises:
        BadInput: an unknown set or a broken asset folder (the message names the registry's ``set`` parameter).
    """
    from bindscope.generators.comco.registry import load_set

    return [VocabEntry(c.name, c.size_class) for c in load_set(spec)]


def retrieval_shares(query_emb: np.ndarray, candidate_emb: np.ndarray, candidate_names: list[str],
                     ordered: list[list[str]], rows: list | None = None, task: str = "",
                     sample_ids: list[int] | None = None) -> dict:
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
        task, sample_ids: the ``task`` and per-query ``sample`` written into the rows (default 0..N-1).

    Returns:
        ``{"<n>": block}`` per number of objects n, where block = ``{"num_queries", "top1_in_query",
        "top1_not_in_query", "ties", "positions": [{"position": k, "unconditional": share,
        "conditional": share}, ...]}``; unconditional = count / num_queries, conditional = count / top1_in_query.
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
    for names, best in zip(ordered, top):
        n = len(names)
        g = groups.setdefault(n, {"num_queries": 0, "ties": 0, "not_in": 0, "hits": [0] * n})
        g["num_queries"] += 1
        if best < 0:
            g["ties"] += 1
        elif candidate_names[best] in names:
            g["hits"][names.index(candidate_names[best])] += 1
        else:
            g["not_in"] += 1
    out = {}
    for n in sorted(groups):
        g = groups[n]
        inside = sum(g["hits"])
        out[str(n)] = {"num_queries": g["num_queries"], "top1_in_query": inside, "top1_not_in_query": g["not_in"],
                       "ties": g["ties"],
                       "positions": [{"position": k + 1, "unconditional": share(c, g["num_queries"]),
                                      "conditional": share(c, inside)} for k, c in enumerate(g["hits"])]}
    return out


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
    """``[(caption, category names in mention order), ...]`` for TOR: every caption of a COCO import
    (``spec["captions"]``), else the sample's caption with its ``mention_position`` column."""
    captions = sample.spec.get("captions") if isinstance(sample.spec, dict) else None
    if isinstance(captions, list):
        return [(c["text"], sorted(c["mentions"], key=c["mentions"].get)) for c in captions]
    mentioned = sorted((o for o in sample.objects if o.mention_position > 0), key=lambda o: o.mention_position)
    return [(sample.caption, [o.category for o in mentioned])]


def scene_split(ds: Dataset, split: str | None = None) -> str:
    """The split holding the scenes: ``split`` if given, ``scenes`` for ComCO, else the dataset's only split.

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
    """``(category names, where they come from)``: the ``references`` split's categories (ComCO) if present,
    else the categories of the split ``scenes`` ordered by category id."""
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


def default_tasks(ds: Dataset) -> list[str]:
    """Every task of :data:`TASKS` but ``binding`` unless the dataset's scenes carry attribute negatives
    (``comco render --attributes``)."""
    return [t for t in TASKS if t != "binding" or ds.manifest.get("config", {}).get("attributes")]


def _check_tasks(ds: Dataset, tasks: list[str], adapter: EncoderAdapter, matching_negatives: int | None,
                 references) -> None:
    """BadInput unless ``tasks`` can run on ``ds`` with ``adapter`` (see :func:`evaluate_comco`)."""
    if "binding" in tasks and "binding" not in default_tasks(ds):
        raise BadInput("tasks: binding needs a dataset whose scenes store negatives (rendered with attributes "
                       "colour,material); this one has none", param="tasks")
    needs_images = [t for t in tasks if t in IMAGE_TASKS]
    if needs_images and not adapter.supports_images:
        raise BadInput(f"task(s) {', '.join(needs_images)} need an image encoder; {adapter.name!r} is text-only "
                       "(use tasks='tor')", param="tasks")
    if matching_negatives is not None and matching_negatives < 1:
        raise BadInput(f"matching_negatives must be at least 1, got {matching_negatives}",
                       param="matching_negatives")
    if "ior" in tasks and references is None and "references" not in ds.split_names:
        raise BadInput(f"ior needs single-object reference images: dataset {str(ds.path)!r} has no 'references' "
                       "split; give an external reference folder (references=DIR, the DomainNet layout)",
                       param="references")


def _matching(embedder: Embedder, text_transform, scene_emb: np.ndarray, objects: list, ids: list[int],
              vocab: list[str], matching_negatives: int | None, seed: int, rows: list | None,
              bias_position: int | None = None, object_order: str = "mention"):
    """Image-text matching in both scenarios (:func:`matching_captions`, :func:`matching_accuracy`) on the
    scenes with two or more objects; returns ``(metrics, texts encoded)`` and appends the per-pair rows. With
    ``bias_position`` K the captions are :func:`~bindscope.evaluation.clip_oscope.matching_captions_at` (object
    K of ``object_order`` biased) on the scenes with at least K objects."""
    from bindscope.evaluation.clip_oscope import matching_captions_at, ordered_objects

    metrics, texts = {}, []
    plans = []
    for sample, sample_objects in enumerate(objects):
        present = {o.category for o in sample_objects}
        absent = [v for v in vocab if v not in present]
        if matching_negatives is not None and matching_negatives < len(absent):
            rng = np.random.default_rng([seed, sample])
            keep = np.sort(rng.choice(len(absent), size=matching_negatives, replace=False))
            absent = [absent[i] for i in keep]
        if bias_position is not None:
            names = [o.category for o in ordered_objects(sample_objects, object_order)]
            usable_scene = len(names) >= max(2, bias_position)
            plans.append(matching_captions_at(names, absent, bias_position) if usable_scene else None)
            continue
        plans.append(matching_captions(sample_objects, absent) if len(sample_objects) >= 2 else None)
    usable = [i for i, p in enumerate(plans) if p is not None]
    for scenario in ("scenario_1", "scenario_2"):
        correct = [plans[i][scenario][0] for i in usable]
        wrong = [plans[i][scenario][1] for i in usable]
        flat = [w for ws in wrong for w in ws]
        emb = apply_text_transform(embedder.texts(correct + flat), text_transform)
        bounds = np.cumsum([len(correct)] + [len(ws) for ws in wrong])
        wrong_emb = [emb[bounds[k]:bounds[k + 1]] for k in range(len(wrong))]
        pair_rows = [] if rows is not None else None
        metrics[scenario] = matching_accuracy(
            scene_emb[usable], emb[:len(correct)], wrong_emb, [len(objects[i]) for i in usable],
            [ids[i] for i in usable], pair_rows, seed)
        position = {ids[i]: j for j, i in enumerate(usable)}
        for row in pair_rows or []:
            j = position[row["sample"]]
            rows.append({"task": "matching", "scenario": scenario, "correct": correct[j],
                         "wrong_caption": wrong[j][row["wrong"]], **row})
        texts += correct + flat
    return metrics, texts


def _binding(embedder: Embedder, text_transform, scene_emb: np.ndarray, scene_negatives: list,
             attribute_names: list[str]):
    """MADMAN's recognition and binding scoring (:func:`bindscope.evaluation.madman.score_split`) on the scenes
    that store negatives; returns ``(metrics, texts encoded)``."""
    from bindscope.evaluation.madman import score_split

    scored = [i for i, (_, negs) in enumerate(scene_negatives) if negs]
    negatives = [scene_negatives[i][1] for i in scored]
    neg_texts = [n.caption for negs in negatives for n in negs]
    emb = apply_text_transform(embedder.texts([scene_negatives[i][0] for i in scored] + neg_texts), text_transform)
    bounds = np.cumsum([len(scored)] + [len(negs) for negs in negatives])
    metrics = {"num_scored": len(scored), **score_split(
        scene_emb[scored], emb[:len(scored)], negatives,
        [emb[bounds[k]:bounds[k + 1]] for k in range(len(scored))], attribute_names)}
    return metrics, neg_texts


def evaluate_comco(dataset: str | os.PathLike | Dataset, adapter: EncoderAdapter, tasks: list[str] | str | None = None,
                   text_transform: TextTransform | None = None, cache: EmbeddingCache | None = None,
                   embedder: Embedder | None = None, matching_negatives: int | None = None, seed: int = 0,
                   progress: bool = True, check: bool = True, split: str | None = None,
                   references: ReferenceSet | None = None, rows: list | None = None, protocol: str = "bindscope",
                   object_order: str = "mention", bias_position: int | None = None, heads=None,
                   workers: int | None = None) -> dict:
    """TOR, IOR, I2TOR and matching on a ComCO/SimCO dataset or a COCO import (see the module docstring).

    Args:
        dataset: a ComCO dataset folder (splits ``scenes`` and ``references``), a COCO import
            (``bindscope import coco``; one split), or an open :class:`Dataset`.
        adapter: the encoder (IOR, I2TOR and matching need an image tower).
        tasks: a subset of ``tor, ior, i2tor, matching, binding`` (list or comma-separated string); default
            :func:`default_tasks`.
        text_transform: optional callable on L2-normalised text embeddings (N, D) -> (N, D'), applied wherever
            text embeddings are compared with images (I2TOR, matching) and in TOR; rows re-normalised after.
        cache / embedder: as in :func:`bindscope.evaluation.madman.evaluate_madman`.
        matching_negatives: wrong captions per scene and scenario: None = every absent category (the protocol);
            K = a seeded sample of K absent categories per scene.
        seed: seed of that sample and of the cluster bootstrap over images.
        progress: tqdm bars. check: verify shard sha256 first.
        split: the scenes' split (default: :func:`scene_split`).
        references: external single-object references for IOR (:func:`load_references`, e.g. DomainNet);
            default: the dataset's ``references`` split (ComCO).
        rows: when a list is given, the per-sample output is appended: one row per caption for ``tor`` and per
            scene for ``ior`` and ``i2tor`` (see :func:`retrieval_shares`), and one per (scene, scenario, wrong
            caption) for ``matching`` (``{"task": "matching", "scenario", "sample", "correct", "wrong_caption",
            "correct_similarity", "wrong_similarity", "passed", ...}``); ``sample`` is the scene's index. The
            clip-oscope protocol adds one ``clip-oscope-tor`` / ``clip-oscope-ior`` row per query
            (:func:`~bindscope.evaluation.clip_oscope.oscope_rows`).
        protocol: ``bindscope`` (this module's TOR and IOR), ``clip-oscope`` (the authors' statistics,
            :mod:`bindscope.evaluation.clip_oscope`, under ``metrics["clip_oscope"]``) or ``both``.
        object_order: the order standing in for the authors' file name, for clip-oscope IOR, IOC and a
            ``bias_position``: ``mention`` (caption order) or ``size`` (size rank); see
            :func:`~bindscope.evaluation.clip_oscope.ordered_objects`.
        bias_position: matching with the biased object at this 1-based position of ``object_order`` and the
            authors' captions (:func:`~bindscope.evaluation.clip_oscope.matching_captions_at`); scenes with fewer
            objects are left out (``settings["matching_scenes_without_position"]``). None: the largest object
            (:func:`matching_captions`).
        heads: :class:`~bindscope.evaluation.position_heads.HeadSettings` for ``toc`` / ``ioc`` (default values
            when None).
        workers: processes that read and decompress the scene images
            (:func:`bindscope.evaluation.feed.reader_workers`; None: chosen by size and CPUs). The result does
            not depend on it.

    Returns:
        A result dict valid against ``eval_result`` (``kind = "comco-eval"``).

    Raises:
        BadInput: unknown task, text-only adapter for an image task, bad ``matching_negatives``, IOR on a dataset
            without a ``references`` split and no ``references``.
        DatasetError: not a ComCO/COCO dataset, missing split, corrupt shard.
    """
    ds = open_dataset(dataset, ("comco", "coco"), "comco eval", validate=False)
    from bindscope.evaluation import clip_oscope as oscope
    from bindscope.evaluation.position_heads import IOC_SOURCE, TOC_SOURCE, HeadSettings, position_classification

    tasks = parse_tasks(default_tasks(ds) if tasks is None else tasks, ALL_TASKS)
    _check_tasks(ds, tasks, adapter, matching_negatives, references)
    oscope.check_protocol(protocol)
    oscope.ordered_objects([], object_order)
    if bias_position is not None:
        check_int("bias_position", bias_position, 1)
    heads = (heads or HeadSettings(seed=seed)).check()
    needs_images = [t for t in tasks if t in IMAGE_TASKS]
    scene_name = scene_split(ds, split)
    splits = [scene_name] + (["references"] if "references" in ds.split_names and references is None else [])
    if check:
        ds.check(splits)
    vocab, vocab_source = dataset_vocabulary(ds, scene_name)
    embedder = embedder or Embedder(adapter, cache, progress=progress)
    scenes = ds.split(scene_name)
    captions, mentions, by_rank, objects, ids, caption_ids, scene_negatives = [], [], [], [], [], [], []
    in_order: list[list[str]] = []  # per scene, its categories in object_order (the authors' file-name order)

    def read_scenes():
        """One pass over the scenes: collect captions and objects, yield ``(keys, images)`` of each batch (read
        from disk once)."""
        batches = scene_batches(scenes, reader_workers(len(scenes), workers) if needs_images else 0,
                                images=bool(needs_images), negatives="binding" in tasks)
        with tqdm(total=len(scenes), desc="comco eval: scenes", disable=not progress, unit="img") as bar:
            for batch, pixels, keys in batches:
                for sample in batch:
                    for caption, mentioned in caption_mentions(sample):
                        captions.append(caption)
                        mentions.append(mentioned)
                        caption_ids.append(sample.index)
                    distinct = distinct_by_rank(sample.objects)
                    by_rank.append([o.category for o in distinct])
                    in_order.append([o.category for o in oscope.ordered_objects(distinct, object_order)])
                    objects.append(distinct)
                    ids.append(sample.index)
                    scene_negatives.append((sample.caption, sample.negatives))
                bar.update(len(batch))
                yield keys, pixels

    metrics: dict = {}
    texts_used: list[str] = list(vocab)
    try:
        if needs_images:
            scene_emb = embedder.image_batches(read_scenes(), total=len(scenes))
        else:
            for _ in read_scenes():
                pass
        name_emb = apply_text_transform(embedder.texts(vocab), text_transform)
        if "tor" in tasks or "toc" in tasks or "retrieval" in tasks:
            cap_emb = apply_text_transform(embedder.texts(captions), text_transform)
            texts_used += captions
        if "tor" in tasks and protocol != "clip-oscope":
            metrics["tor"] = {"candidates": len(vocab), "ordered_by": "mention position",
                              "by_num_objects": retrieval_shares(cap_emb, name_emb, vocab, mentions, rows, "tor",
                                                                 caption_ids)}
        if "tor" in tasks and protocol != "bindscope":
            sims = cap_emb @ name_emb.T
            metrics.setdefault("clip_oscope", {})["tor"] = oscope.oscope_block(
                sims, vocab, mentions, "tor", captions, "mention position")
            if rows is not None:
                oscope.oscope_rows(sims, vocab, mentions, "tor", captions, caption_ids, rows)
        if "ior" in tasks:
            if references is None:
                refs = list(scene_batches(ds.split("references"), negatives=False))
                ref_names = [(s.objects[0].category if s.objects else s.caption) for batch, _, _ in refs for s in batch]
                ref_emb = embedder.image_batches((keys, pixels) for _, pixels, keys in refs)
            else:
                ref_names, ref_emb = references.prototypes(embedder)
            if protocol != "clip-oscope":
                metrics["ior"] = {"candidates": len(ref_names), "ordered_by": "size rank (1 = largest visible area)",
                                  "by_num_objects": retrieval_shares(scene_emb, ref_emb, ref_names, by_rank, rows,
                                                                     "ior", ids)}
            if protocol != "bindscope":
                sims = scene_emb @ ref_emb.T
                metrics.setdefault("clip_oscope", {})["ior"] = oscope.oscope_block(
                    sims, ref_names, in_order, "ior", ordered_by=ORDER_LABELS[object_order])
                if rows is not None:
                    oscope.oscope_rows(sims, ref_names, in_order, "ior", None, ids, rows)
        if "i2tor" in tasks:
            metrics["i2tor"] = {"candidates": len(vocab), "ordered_by": "size rank (1 = largest visible area)",
                                "by_num_objects": retrieval_shares(scene_emb, name_emb, vocab, by_rank, rows,
                                                                   "i2tor", ids)}
        if "matching" in tasks:
            metrics["matching"], used = _matching(embedder, text_transform, scene_emb, objects, ids, vocab,
                                                  matching_negatives, seed, rows, bias_position, object_order)
            texts_used += used
        if "binding" in tasks:
            metrics["binding"], used = _binding(embedder, text_transform, scene_emb, scene_negatives,
                                                ds.attribute_names)
            texts_used += used
        if "toc" in tasks:
            metrics["toc"] = position_classification(cap_emb, mentions, vocab, captions, heads, TOC_SOURCE,
                                                     "mention position")
        if "ioc" in tasks:
            metrics["ioc"] = position_classification(scene_emb, in_order, vocab, ids, heads, IOC_SOURCE,
                                                     ORDER_LABELS[object_order])
        if "retrieval" in tasks:
            metrics["retrieval"] = _retrieval(embedder, text_transform, scene_emb, cap_emb, captions, caption_ids,
                                              ids, seed, rows)
    finally:
        embedder.flush()
    counts = encoder_counts(embedder)
    counts["truncation"] = truncation_counts(adapter, texts_used, captions if "tor" in tasks else [])
    settings = {"task": "comco", "tasks": tasks, "vocabulary": {"source": vocab_source, "size": len(vocab)},
                "scenes": scene_name, "references": None if references is None else references.describe(),
                "objects": "one per category (its largest instance)",
                "text_transform": transform_name(text_transform), "matching_negatives": matching_negatives,
                "seed": seed, "comparison": "strict > (ties count as wrong)",
                "interval": "shares: Wilson score 95% (one query per scene); matching: " + MATCHING_INTERVALS,
                "caption_form": "dataset captions for TOR; category names joined with ' and ' for matching"}
    settings.update(_extra_settings(protocol, object_order, tasks, heads))
    if bias_position is not None and "matching" in tasks:
        settings["matching_bias_position"] = bias_position
        settings["object_order"] = object_order
        settings["matching_captions"] = f"{oscope.REPOSITORY}: {oscope.MATCHING_SOURCE}"
        settings["matching_scenes_without_position"] = sum(len(o) < max(2, bias_position) for o in objects)
    return envelope("comco-eval", adapter, dataset_info(ds, splits), settings, metrics, counts)


def _retrieval(embedder, text_transform, scene_emb, cap_emb, captions, caption_ids, ids, seed, rows) -> dict:
    """``metrics["retrieval"]``: R@k of every caption against every scene (and, with a text transform, the same
    before it under ``before_text_transform``)."""
    from bindscope.evaluation.retrieval import recall_at_k

    row_of = {sid: r for r, sid in enumerate(ids)}
    owner = np.array([row_of[c] for c in caption_ids], np.int64)
    block = recall_at_k(cap_emb, scene_emb, owner, seed=seed, rows=rows, image_ids=ids, captions=captions)
    if text_transform is not None:
        block["before_text_transform"] = recall_at_k(apply_text_transform(embedder.texts(captions), None),
                                                     scene_emb, owner, seed=seed)
    return block


ORDER_LABELS = {"mention": "caption mention order (unmentioned objects last)",
                "size": "size rank (1 = largest visible area)"}


def _extra_settings(protocol: str, object_order: str, tasks: list[str], heads) -> dict:
    """The settings entries of the clip-oscope protocol and the position heads (none with the defaults)."""
    out: dict = {}
    if protocol != "bindscope":
        out["protocol"] = protocol
    if protocol != "bindscope" or "ioc" in tasks:
        out["object_order"] = object_order
    if "toc" in tasks or "ioc" in tasks:
        out["heads"] = heads.to_dict()
    if "retrieval" in tasks:
        from bindscope.evaluation.retrieval import INTERVALS, SOURCE, TIE_RULE

        out["retrieval"] = {"definition": SOURCE, "ties": TIE_RULE, "interval": INTERVALS}
    return out


def sample_captions(vocab: list[VocabEntry], objects: int, n: int, seed: int) -> list[list[str]]:
    """``n`` lists of ``objects`` distinct category names in uniformly random order; caption i uses the seed
    sequence ``(seed, i)`` alone.

    Raises:
        BadInput: fewer categories than ``objects``.
    """
    if objects > len(vocab):
        raise BadInput(f"objects {objects} is more than the {len(vocab)} categories of the vocabulary",
                       param="objects")
    names = [v.name for v in vocab]
    out = []
    for i in range(n):
        rng = np.random.default_rng([seed, i])
        out.append([names[j] for j in rng.choice(len(names), size=objects, replace=False)])
    return out


def claim1_captions(vocab: list[VocabEntry], objects: int, n: int, seed: int, first: str) -> list[list[str]]:
    """Claim-1 captions: a ``first``-class category (``large`` or ``small``) first, then ``objects - 1``
    distinct ``medium`` categories in random order; caption i uses the seed sequence ``(seed, i, group)``.

    Raises:
        BadInput: the vocabulary has no size classes, no ``first`` category or too few medium ones.
    """
    firsts = [v.name for v in vocab if v.size_class == first]
    mediums = [v.name for v in vocab if v.size_class == "medium"]
    if not firsts or len(mediums) < objects - 1:
        raise BadInput(f"claim1 needs categories of size class {first!r} and at least {objects - 1} 'medium' ones; "
                       f"the vocabulary has {len(firsts)} {first} and {len(mediums)} medium (SimCO has no size "
                       "classes: use comco72)")
    group = 1 if first == "large" else 2
    out = []
    for i in range(n):
        rng = np.random.default_rng([seed, i, group])
        rest = [mediums[j] for j in rng.choice(len(mediums), size=objects - 1, replace=False)]
        out.append([firsts[int(rng.integers(len(firsts)))]] + rest)
    return out


def evaluate_tor_sampled(adapter: EncoderAdapter, vocab: str = "comco72", objects: int = 4, n: int = 2000,
                         seed: int = 0, tasks: list[str] | str = ("tor",), text_transform: TextTransform | None = None,
                         cache: EmbeddingCache | None = None, embedder: Embedder | None = None,
                         vocabulary: list[VocabEntry] | None = None, progress: bool = True,
                         rows: list | None = None, protocol: str = "bindscope",
                         captions: list[list[str]] | None = None, caption_source: str = "", heads=None) -> dict:
    """TOR (and the Claim-1 test, and TOC) on captions sampled from a vocabulary, without a dataset.

    Args:
        adapter: any encoder with a text tower.
        vocab: category set (``comco72``, ``simco18``, an asset folder); ignored if ``vocabulary`` is given.
        objects: objects per caption (>= 2). n: captions (per group for claim1, >= 1). seed: sampling seed.
        tasks: ``tor``, ``claim1`` and/or ``toc`` (position heads on the caption embeddings,
            :func:`~bindscope.evaluation.position_heads.position_classification`, split by caption text).
        text_transform, cache, embedder: as in :func:`evaluate_comco`.
        vocabulary: explicit categories (for tests, custom sets and given captions: the candidates).
        progress: tqdm bars while encoding.
        rows: when a list is given, one row per sampled caption is appended (see :func:`retrieval_shares`;
            ``task`` is ``tor``, ``claim1_large_first`` or ``claim1_small_first``, ``sample`` the caption's index).
        protocol: ``bindscope``, ``clip-oscope`` or ``both`` for TOR (as in :func:`evaluate_comco`).
        captions: given captions instead of sampled ones, per caption its object names in order (e.g.
            :func:`~bindscope.evaluation.clip_oscope.combination_captions`, the authors' caption set, or
            :func:`~bindscope.evaluation.clip_oscope.read_caption_file`); ``objects``, ``n`` and ``seed`` then do
            not choose captions; claim1 is not allowed. caption_source: how they were made, for the settings.
        heads: :class:`~bindscope.evaluation.position_heads.HeadSettings` for ``toc``.

    Returns:
        A result dict valid against ``eval_result`` (``kind = "comco-eval"``, ``dataset = null``).

    Raises:
        BadInput: unknown task or set, ``objects`` < 2 or larger than the set, ``n`` < 1, claim1 with given
            captions, an unknown protocol.
    """
    from bindscope.evaluation import clip_oscope as oscope
    from bindscope.evaluation.position_heads import TOC_SOURCE, HeadSettings, position_classification

    tasks = parse_tasks(tasks, SAMPLED_TASKS)
    oscope.check_protocol(protocol)
    heads = (heads or HeadSettings(seed=seed)).check()
    if captions is not None and "claim1" in tasks:
        raise BadInput("tasks claim1 draws its own captions; it cannot run on given captions (use tasks tor or toc)",
                       param="tasks")
    if objects < 2:
        raise BadInput(f"objects must be at least 2 for TOR, got {objects}", param="objects")
    if n < 1:
        raise BadInput(f"n must be at least 1, got {n}", param="n")
    entries = vocabulary if vocabulary is not None else load_vocabulary(vocab)
    names = [v.name for v in entries]
    groups = {}
    if "tor" in tasks or "toc" in tasks:
        groups["tor"] = captions if captions is not None else sample_captions(entries, objects, n, seed)
    if "claim1" in tasks:
        groups["claim1_large_first"] = claim1_captions(entries, objects, n, seed, "large")
        groups["claim1_small_first"] = claim1_captions(entries, objects, n, seed, "small")
    embedder = embedder or Embedder(adapter, cache, progress=progress)
    metrics: dict = {}
    texts_used = list(names)
    all_captions: list[str] = []
    try:
        name_emb = apply_text_transform(embedder.texts(names), text_transform)
        for key, lists in groups.items():
            texts = [JOIN.join(c) for c in lists]
            emb = apply_text_transform(embedder.texts(texts), text_transform)
            all_captions += texts
            if key == "tor":
                if "toc" in tasks:
                    metrics["toc"] = position_classification(emb, lists, names, texts, heads, TOC_SOURCE,
                                                             "mention position")
                if "tor" not in tasks:
                    continue
                if protocol != "bindscope":
                    sims = emb @ name_emb.T
                    metrics.setdefault("clip_oscope", {})["tor"] = oscope.oscope_block(
                        sims, names, lists, "tor", texts, "mention position")
                    if rows is not None:
                        oscope.oscope_rows(sims, names, lists, "tor", texts, None, rows)
                if protocol == "clip-oscope":
                    continue
            block = {"candidates": len(names), "ordered_by": "mention position",
                     "by_num_objects": retrieval_shares(emb, name_emb, names, lists, rows, key)}
            if key == "tor":
                metrics["tor"] = block
            else:
                metrics.setdefault("claim1", {})[key.removeprefix("claim1_")] = block
    finally:
        embedder.flush()
    counts = encoder_counts(embedder)
    counts["truncation"] = truncation_counts(adapter, texts_used + all_captions, all_captions)
    settings = {"task": "comco-sampled", "tasks": tasks,
                "vocabulary": {"source": "explicit" if vocabulary is not None else vocab, "size": len(names)},
                "objects": objects, "n": n, "seed": seed, "order": "uniformly random (seeded), distinct categories",
                "text_transform": transform_name(text_transform), "comparison": "strict > (ties count as wrong)",
                "interval": "Wilson score, 95%", "caption_form": "category names joined with ' and '"}
    if captions is not None:
        settings.update({"captions": caption_source or "given", "n": len(captions),
                         "order": "as given (combinations: itertools.combinations of the name list, in list order)"})
        settings.pop("objects")
        settings.pop("seed")
    settings.update(_extra_settings(protocol, "mention", tasks, heads))
    settings.pop("object_order", None)
    return envelope("comco-eval", adapter, None, settings, metrics, counts)
