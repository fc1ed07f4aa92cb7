"""Caption bias (ComCO Claim 2): where do captions mention an image's largest object?

Abbasi et al. (CVPR 2025, Claim 2) measure, on COCO and LAION, how often a caption names the image's largest object
first among the objects it names (about 40 % of captions). :func:`caption_bias` does the same on any bindscope
dataset with captions and an object table:

- the largest object is the object of size rank 1 (largest visible mask area; ties broken by object index);
- a caption's mentioned objects: for a COCO import every caption in ``spec["captions"]`` with its per-category
  mention positions (:mod:`bindscope.importers.mentions`; the largest object counts by its category); for
  MADMAN/ComCO the sample's caption and the ``mention_position`` column;
- the position of the largest object = its rank among the mentioned objects (1 = first), or *not mentioned*.

Image-caption pairs without annotations (web data as img2dataset writes it, :mod:`bindscope.importers.image_captions`;
the paper's LAION experiment): :func:`caption_bias_pairs`. A caption's objects are found in its text
(:data:`CAPTION_OBJECTS`: the category lexicon of :mod:`bindscope.importers.mentions`, or spaCy's noun chunks,
:mod:`bindscope.text.noun_chunks`), each is looked for in the image by an open-vocabulary detector
(:class:`bindscope.evaluation.detection.OpenVocabularyDetector`: its best box, found when the score reaches the
threshold) and its area is that box's (pixels), or the mask a segmenter draws in it
(:class:`~bindscope.evaluation.detection.BoxSegmenter`). The largest object is the found object of the largest area
(equal areas: the earlier mention), and its position is its rank among the caption's found objects, so it is never
*not mentioned*. The result records the method (``method``).

Sampling unit. Each caption is one observation, but the captions of one image (five per COCO image) share the
image and are not independent. Every share carries two 95 % intervals, labelled: ``ci95`` (Wilson score, treating
captions as independent: too narrow when images have several captions) and ``ci95_cluster`` (percentile cluster
bootstrap resampling whole images, :func:`bindscope.evaluation.stats.cluster_bootstrap`, seeded). ``ci95_cluster``
is the one to quote.
"""

from __future__ import annotations

import os
from itertools import islice
from pathlib import Path

import numpy as np

from bindscope.errors import BadInput
from bindscope.evaluation import DETECTION_THRESHOLD
from bindscope.evaluation.detection import check_threshold, query
from bindscope.evaluation.results import SCHEMA_VERSION, dataset_info
from bindscope.evaluation.stats import cluster_bootstrap, share
from bindscope.format.reader import Dataset
from bindscope.schemas import validate

NOT_MENTIONED = "not_mentioned"
INTERVALS = {"ci95": "Wilson score, 95 %, captions treated as independent (too narrow when an image has several "
                     "captions)",
             "ci95_cluster": "percentile cluster bootstrap over images, 95 %, 2000 resamples, seeded"}


def caption_observations(sample) -> list[tuple[int, int]]:
    """``[(position of the largest object, number of objects mentioned), ...]``, one per caption of ``sample``.

    Position 0 = the largest object is not mentioned. Empty when the sample has no object or no caption.
    """
    if not sample.objects:
        return []
    largest = min(sample.objects, key=lambda o: (o.size_rank, o.index))
    captions = sample.spec.get("captions") if isinstance(sample.spec, dict) else None
    if isinstance(captions, list):  # COCO import: mention positions per category, every caption
        return [(int(c["mentions"].get(largest.category, 0)), len(c["mentions"])) for c in captions]
    if not sample.caption:
        return []
    mentioned = sorted(o.mention_position for o in sample.objects if o.mention_position > 0)
    if largest.mention_position <= 0:
        return [(0, len(mentioned))]
    return [(mentioned.index(largest.mention_position) + 1, len(mentioned))]


def _shares(positions: np.ndarray, images: np.ndarray, seed: int) -> dict:
    """Share of each position (1..max, then not mentioned) among these captions, with both intervals."""
    out = {}
    keys = [str(k) for k in range(1, int(positions.max(initial=0)) + 1)] + [NOT_MENTIONED]
    for key in keys:
        hit = positions == (0 if key == NOT_MENTIONED else int(key))
        block = share(int(hit.sum()), int(positions.size))
        block["ci95_cluster"] = cluster_bootstrap(hit.astype(float), np.ones(hit.size), images, seed=seed)
        out[key] = block
    return out


def summarise(positions: list[int], counts: list[int], images: list[int], seed: int) -> dict:
    """The shares of a result from one entry per caption: the largest object's position (0: not mentioned), the
    number of objects the caption mentions, and the caption's image (the bootstrap's cluster).

    Returns:
        ``num_captions``, ``num_images``, ``largest_first_share``, ``largest_first_share_when_mentioned``,
        ``positions`` and ``by_num_mentioned`` (see :func:`caption_bias`).
    """
    positions, counts, images = np.array(positions, int), np.array(counts, int), np.array(images)
    first = int((positions == 1).sum())
    mentioned = int((positions > 0).sum())
    by_num = {}
    for m in sorted(set(counts.tolist())):
        keep = counts == m
        by_num[str(m)] = {"captions": int(keep.sum()), "images": int(np.unique(images[keep]).size),
                          "positions": _shares(positions[keep], images[keep], seed)}
    return {"num_captions": int(positions.size), "num_images": int(np.unique(images).size),
            "largest_first_share": first / positions.size,
            "largest_first_share_when_mentioned": (first / mentioned) if mentioned else None,
            "positions": _shares(positions, images, seed), "by_num_mentioned": by_num}


def caption_bias(dataset: str | os.PathLike | Dataset, splits: list[str] | None = None, seed: int = 0,
                 check: bool = True) -> dict:
    """The position at which captions mention the image's largest object (see the module docstring).

    Args:
        dataset: a bindscope dataset folder or an open :class:`Dataset` (COCO import, ComCO, MADMAN, ...).
        splits: the splits to read; None = every split except ``references`` (ComCO's single-object images).
        seed: seed of the cluster bootstrap.
        check: verify the shards' sha256 first.

    Returns:
        A JSON-serialisable dict validated by ``bindscope/schemas/caption_bias_result.json`` (``kind``
        ``"caption-bias"``, ``schema_version`` 1): ``largest_first_share`` (0..1: captions naming the largest object first / all
        captions analysed), ``largest_first_share_when_mentioned`` (the same among captions that mention it),
        ``positions`` (key ``"1"``, ``"2"``, ..., ``"not_mentioned"`` -> ``{"count", "of", "share", "ci95",
        "ci95_cluster"}``, shares of all captions), ``by_num_mentioned`` (``"<m>"`` -> ``{"captions", "images",
        "positions"}``: the same restricted to captions mentioning m objects), ``num_captions``, ``num_images``,
        ``skipped`` (samples without object or caption), ``dataset``, ``unit``, ``intervals``, ``method`` (where
        objects and areas come from).

    Raises:
        DatasetError: missing/corrupt dataset or an unknown split.
        BadInput: no caption with an object to analyse.
    """
    ds = dataset if isinstance(dataset, Dataset) else Dataset(dataset)
    names = list(splits) if splits else [s for s in ds.split_names if s != "references"]
    for name in names:
        ds.split(name)
    if check:
        ds.check(names)
    positions, counts, images = [], [], []
    skipped = 0
    image_id = 0
    for name in names:
        for sample in ds.split(name):
            observations = caption_observations(sample)
            if not observations:
                skipped += 1
                continue
            for position, mentioned in observations:
                positions.append(position)
                counts.append(mentioned)
                images.append(image_id)
            image_id += 1
    if not positions:
        raise BadInput(f"dataset {str(ds.path)!r} has no caption of an image with objects in split(s) "
                       f"{', '.join(names)}; caption-bias needs captions and an object table")
    result = {"schema_version": SCHEMA_VERSION, "kind": "caption-bias", "analysis": "caption-bias",
              "dataset": dataset_info(ds, names), "unit": "caption (clustered by image)", "intervals": dict(INTERVALS),
              "seed": seed, **summarise(positions, counts, images, seed), "skipped": {"samples": skipped},
              "largest": "object of size rank 1 (largest visible mask area)",
              "method": {"objects": "the dataset's object table (mention positions of its captions)",
                         "areas": "visible pixels of each object's instance mask"}}
    validate(result, "caption_bias_result", "caption-bias result (internal error)", error=RuntimeError)
    return result


CAPTION_OBJECTS = {"lexicon": "category names and their synonyms found in the caption (bindscope/assets/"
                              "coco_mentions.json for COCO names; a name and its plural otherwise), longest phrase "
                              "first, each category once",
                   "spacy": "spaCy noun chunks of the caption, named by their root's lemma, each name once"}
"""How :func:`caption_bias_pairs` finds a caption's objects (its ``caption_objects``)."""
PAIR_BATCH = 16  # images detected at a time


def objects_finder(source: str = "lexicon", names: str | os.PathLike = "coco", nlp=None):
    """``find(caption) -> [(object name, phrase), ...]`` in reading order, each object once (see
    :data:`CAPTION_OBJECTS`).

    Args:
        source: ``lexicon`` or ``spacy``. names: the lexicon's categories (``coco``, ``comco72``, a file of names;
            :func:`bindscope.generators.comco.registry.read_names`). nlp: with ``spacy``, the pipeline to use (None:
            ``en_core_web_sm`` with its parser, :func:`bindscope.text.noun_chunks.spacy_parser`).

    Raises:
        BadInput: another ``source``, unknown ``names``, spaCy or its model not installed.
    """
    if source == "lexicon":
        from bindscope.generators.comco.registry import read_names
        from bindscope.importers.mentions import MentionFinder

        finder = MentionFinder(read_names(names))

        def find(caption: str) -> list[tuple[str, str]]:
            first: dict[str, str] = {}
            for category, phrase in finder.find(caption):
                first.setdefault(category, phrase)
            return list(first.items())
        return find
    if source == "spacy":
        from bindscope.text.noun_chunks import noun_chunks, spacy_parser

        parser = nlp if nlp is not None else spacy_parser()
        return lambda caption: noun_chunks(parser, caption)
    raise BadInput(f"caption_objects {source!r} is not allowed; use one of {', '.join(CAPTION_OBJECTS)}",
                   param="caption_objects")


def caption_bias_pairs(pairs, detector, segmenter=None, *, caption_objects: str = "lexicon",
                       names: str | os.PathLike = "coco", nlp=None, threshold: float = DETECTION_THRESHOLD,
                       seed: int = 0, limit: int | None = None, progress: bool = True,
                       rows: list | None = None) -> dict:
    """Caption bias on image-caption pairs without annotations (see the module docstring).

    Args:
        pairs: a :class:`bindscope.importers.image_captions.PairSource` (:func:`~bindscope.importers.image_captions.
            open_pairs`). detector: an object with ``detect(images, queries)`` and ``info()``
            (:class:`~bindscope.evaluation.detection.OpenVocabularyDetector`). segmenter: one with
            ``areas(image, boxes)`` and ``info()`` (:class:`~bindscope.evaluation.detection.BoxSegmenter`), or None
            (areas of the boxes).
        caption_objects, names, nlp: how objects are found in captions (:func:`objects_finder`).
        threshold: detector score (0..1) from which an object is found. seed: bootstrap seed. limit: read at most
            this many pairs. progress: a tqdm bar. rows: a list to append one row per caption to (``key``,
            ``caption``, ``objects`` with their score, box, area and ``found``, ``position``), or None.

    Returns:
        The result (schema ``caption_bias_result``) as :func:`caption_bias`'s, with ``dataset`` the pairs' path,
        layout and files, one image per caption, ``method`` (objects, areas, detector, segmenter, threshold) and
        ``skipped`` (``samples``: pairs not analysed, and why).

    Raises:
        BadInput: a threshold outside 0..1, a bad ``caption_objects`` / ``names``, no caption with a found
            object.
    """
    from tqdm.auto import tqdm

    threshold = check_threshold(threshold)
    find = objects_finder(caption_objects, names, nlp)
    positions, counts, images = [], [], []
    skipped = {"captions_without_objects": 0, "captions_without_found_objects": 0}
    with tqdm(unit="pair", desc="caption-bias", disable=not progress) as bar:
        read = pairs.pairs(limit)
        while batch := list(islice(read, PAIR_BATCH)):
            named = [(key, image, caption, find(caption)) for key, image, caption in batch]
            skipped["captions_without_objects"] += sum(not objects for *_, objects in named)
            named = [entry for entry in named if entry[3]]
            detected = detector.detect([image for _, image, _, _ in named],
                                       [[query(name) for name, _ in objects] for *_, objects in named]) if named else []
            for (key, image, caption, objects), (scores, boxes) in zip(named, detected):
                found = np.flatnonzero(np.asarray(scores) >= threshold)
                chosen = set(found.tolist())
                boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
                areas = np.clip(boxes[:, 2] - boxes[:, 0], 0, None) * np.clip(boxes[:, 3] - boxes[:, 1], 0, None)
                if segmenter is not None and found.size:
                    areas[found] = segmenter.areas(image, boxes[found])
                position = int(np.argmax(areas[found])) + 1 if found.size else 0
                if rows is not None:
                    rows.append({"key": key, "caption": caption, "position": position,
                                 "objects": [{"name": name, "phrase": phrase, "score": float(scores[k]),
                                              "box": [round(float(v), 2) for v in boxes[k]],
                                              "area": float(areas[k]), "found": k in chosen}
                                             for k, (name, phrase) in enumerate(objects)]})
                if not found.size:
                    skipped["captions_without_found_objects"] += 1
                    continue
                positions.append(position)
                counts.append(int(found.size))
                images.append(len(images))
            bar.update(len(batch))
    if not positions:
        raise BadInput(f"data {str(pairs.path)!r}: no caption names an object the detector finds (threshold "
                       f"{threshold:g}); caption-bias needs at least one")
    skipped.update(pairs.skipped)
    skipped["samples"] = sum(skipped.values())
    areas_from = ("masks of the segmenter prompted by the detector's boxes (pixels)" if segmenter is not None
                  else "the detector's best box (pixels)")
    result = {"schema_version": SCHEMA_VERSION, "kind": "caption-bias", "analysis": "caption-bias",
              "dataset": {"generator": f"image-caption pairs ({pairs.layout})", **pairs.info()},
              "unit": "caption (one per image)", "intervals": dict(INTERVALS), "seed": seed,
              **summarise(positions, counts, images, seed), "skipped": skipped,
              "largest": "the caption's found object of the largest area (equal areas: the earlier mention)",
              "method": {"objects": f"{caption_objects}: {CAPTION_OBJECTS[caption_objects]}",
                         "names": str(names) if caption_objects == "lexicon" else None,
                         "areas": areas_from, "detector": detector.info(), "threshold": float(threshold),
                         "query": query("<name>"),
                         "segmenter": segmenter.info() if segmenter is not None else None}}
    validate(result, "caption_bias_result", "caption-bias result (internal error)", error=RuntimeError)
    return result


def format_caption_bias(result: dict) -> str:
    """A terminal table of a :func:`caption_bias` result: share (Wilson, cluster intervals) per position."""
    lines = [f"{result['num_captions']} captions of {result['num_images']} images; largest object mentioned "
             f"first in {result['largest_first_share']:.1%} of captions", "",
             f"{'position':<14}{'share':>8}  {'95% CI (images)':<17} {'95% CI (Wilson, captions)':<17}"]
    for key, block in result["positions"].items():
        cluster, wilson = block["ci95_cluster"], block["ci95"]
        lines.append(f"{key:<14}{block['share']:>8.1%}  {cluster[0]:.1%}..{cluster[1]:.1%}".ljust(41)
                     + f"{wilson[0]:.1%}..{wilson[1]:.1%}")
    return "\n".join(lines)


def plot_caption_bias(result: dict, path: str | os.PathLike) -> Path:
    """Bar plot of the share per position (all captions), error bars = the image-cluster bootstrap interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bindscope.io.atomic import save_figure

    keys = list(result["positions"])
    shares = [result["positions"][k]["share"] for k in keys]
    low = [s - result["positions"][k]["ci95_cluster"][0] for s, k in zip(shares, keys)]
    high = [result["positions"][k]["ci95_cluster"][1] - s for s, k in zip(shares, keys)]
    fig, ax = plt.subplots(figsize=(1.2 * len(keys) + 2, 3.2))
    ax.bar([k.replace("_", " ") for k in keys], shares, yerr=[low, high], capsize=4, color="#4878a8")
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of captions")
    ax.set_xlabel("mention position of the largest object")
    ax.set_title(f"{result['dataset']['generator']}: {result['num_captions']} captions, "
                 f"{result['num_images']} images (95 % CI: image bootstrap)", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, path)
