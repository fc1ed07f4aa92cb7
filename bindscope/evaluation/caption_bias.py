"""Caption bias (ComCO Claim 2): where do captions mention an image's largest object?

Abbasi et al. (CVPR 2025, Claim 2) measure, on COCO and LAION, how often a caption names the image's largest object
first among the objects it names (about 40 % of captions). :func:`caption_bias` does the same on any bindscope
dataset with captions and an object table:

- the largest object is the object of size rank 1 (largest visible mask area; ties broken by object index);
- a caption's mentioned objects: for a COCO import every caption in ``spec["captions"]`` with its per-category
  mention positions (:mod:`bindscope.importers.mentions`; the largest object counts by its category); for
  MADMAN/ComCO the sample's caption and the ``mention_position`` column;
- the position of the largest object = its rank among the mentioned objects (1 = first), or *not mentioned*.

Sampling unit. Each caption is one observation, but the captions of one image (five per COCO image) share the
image and are not independent. Every share carries two 95 % intervals, labelled: ``ci95`` (Wilson score, treating
captions as independent: too narrow when images have several captions) and ``ci95_cluster`` (percentile cluster
bootstrap resampling whole images, :func:`bindscope.evaluation.stats.cluster_bootstrap`, seeded). ``ci95_cluster``
is the one to quote.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from bindscope.errors import BadInput
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
        ``skipped`` (samples without object or caption), ``dataset``, ``unit``, ``intervals``.

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
    positions, counts, images = np.array(positions), np.array(counts), np.array(images)
    first = int((positions == 1).sum())
    mentioned = int((positions > 0).sum())
    by_num = {}
    for m in sorted(set(counts.tolist())):
        keep = counts == m
        by_num[str(m)] = {"captions": int(keep.sum()), "images": int(np.unique(images[keep]).size),
                          "positions": _shares(positions[keep], images[keep], seed)}
    result = {"schema_version": SCHEMA_VERSION, "kind": "caption-bias", "analysis": "caption-bias",
              "dataset": dataset_info(ds, names),
              "unit": "caption (clustered by image)", "intervals": dict(INTERVALS), "seed": seed,
              "num_captions": int(positions.size), "num_images": int(image_id), "skipped": {"samples": skipped},
              "largest": "object of size rank 1 (largest visible mask area)",
              "largest_first_share": first / positions.size,
              "largest_first_share_when_mentioned": (first / mentioned) if mentioned else None,
              "positions": _shares(positions, images, seed), "by_num_mentioned": by_num}
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
