"""Image–text retrieval recall R@k (text→image and image→text), as CLIP-style papers report it on COCO.

Definitions (those of LAION's CLIP_benchmark, ``clip_benchmark/metrics/zeroshot_retrieval.py``, and of the CLIP
paper's COCO table): every caption and every image of the split is embedded (L2-normalised) and compared by
cosine similarity, all captions against all images.

* **text→image R@k** (CLIP_benchmark's ``image_retrieval_recall@k``): one query per caption; the caption counts
  when its own image is among the ``k`` images most similar to it. The sampling unit is the caption; captions of
  one image are not independent, so next to the Wilson interval over captions (``ci95``) the cluster bootstrap
  over images (``ci95_cluster``, all captions of an image resampled together,
  :func:`bindscope.evaluation.stats.clustered_proportion`) is given.
* **image→text R@k** (CLIP_benchmark's ``text_retrieval_recall@k``): one query per image that has a caption;
  the image counts when ANY of its captions is among the ``k`` captions most similar to it. The sampling unit is
  the image: a Wilson interval over images.

Ties (bindscope's rule everywhere: a tie counts against the query): the rank of a query's best matching
candidate is ``1 +`` the number of non-matching candidates whose similarity is at least as high, so a
non-matching candidate tied with the best match ranks before it. CLIP_benchmark's ``torch.topk`` breaks ties
by position instead; with real-valued embeddings ties are rare and the two agree.

Pure numpy; the similarity matrix is processed in blocks of rows, so 25,000 captions x 5,000 images need
no more than a block of it in memory.
"""

from __future__ import annotations

import numpy as np

from bindscope.errors import BadInput
from bindscope.evaluation.stats import clustered_proportion, proportion

KS = (1, 5, 10)
BLOCK = 512
TIE_RULE = ("a non-matching candidate as similar as the best match ranks before it (ties count against the "
            "query)")
INTERVALS = ("text->image: Wilson score 95% over captions (ci95) and a 95% percentile bootstrap over images "
             "(ci95_cluster: an image's captions resampled together); image->text: Wilson score 95% over images")
SOURCE = "LAION-AI/CLIP_benchmark, clip_benchmark/metrics/zeroshot_retrieval.py (recall@k as in CLIP papers)"


def best_match_ranks(scores: np.ndarray, positive: np.ndarray) -> np.ndarray:
    """Per row of ``scores``, the 1-based rank of its best-scoring positive column under the tie rule of the
    module docstring: ``1 + #{non-positive c : scores[r, c] >= max_positive_score[r]}``.

    Args:
        scores: ``(Q, C)`` similarities (queries x candidates). positive: ``(Q, C)`` bool, True where the
            candidate matches the query; every row needs at least one.

    Returns:
        ``(Q,)`` int64 ranks in ``1..C``.

    Raises:
        BadInput: shapes differ, or a row has no positive.
    """
    scores = np.asarray(scores, np.float64)
    positive = np.asarray(positive, bool)
    if scores.shape != positive.shape or scores.ndim != 2:
        raise BadInput(f"scores {scores.shape} and positive {positive.shape} must be one (queries, candidates) shape")
    if not positive.any(axis=1).all():
        raise BadInput("every query needs at least one matching candidate")
    best = np.where(positive, scores, -np.inf).max(axis=1)
    return 1 + ((scores >= best[:, None]) & ~positive).sum(axis=1)


def retrieval_ranks(text_emb: np.ndarray, image_emb: np.ndarray,
                    caption_image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ranks of both directions (see :func:`best_match_ranks`), computed in blocks of :data:`BLOCK` rows.

    Args:
        text_emb: ``(T, D)`` unit-norm caption embeddings. image_emb: ``(I, D)`` unit-norm image embeddings.
        caption_image: ``(T,)`` ints, the row of ``image_emb`` each caption describes.

    Returns:
        ``(text_to_image, image_to_text)``: ``(T,)`` rank of each caption's image among the I images, and
        ``(I,)`` rank of each image's best caption among the T captions (0 for an image without a caption).
    """
    text_emb = np.asarray(text_emb, np.float32)
    image_emb = np.asarray(image_emb, np.float32)
    owner = np.asarray(caption_image, np.int64)
    if owner.shape != (len(text_emb),) or (len(owner) and (owner.min() < 0 or owner.max() >= len(image_emb))):
        raise BadInput(f"caption_image must give, for each of the {len(text_emb)} captions, an image row in "
                       f"0..{len(image_emb) - 1}")
    t2i = np.zeros(len(text_emb), np.int64)
    for start in range(0, len(text_emb), BLOCK):
        rows = slice(start, start + BLOCK)
        block = text_emb[rows] @ image_emb.T
        positive = np.zeros(block.shape, bool)
        positive[np.arange(len(block)), owner[rows]] = True
        t2i[rows] = best_match_ranks(block, positive)
    i2t = np.zeros(len(image_emb), np.int64)
    has_caption = np.bincount(owner, minlength=len(image_emb)) > 0
    for start in range(0, len(image_emb), BLOCK):
        rows = np.arange(start, min(start + BLOCK, len(image_emb)))
        rows = rows[has_caption[rows]]
        if not len(rows):
            continue
        block = image_emb[rows] @ text_emb.T
        i2t[rows] = best_match_ranks(block, owner[None, :] == rows[:, None])
    return t2i, i2t


def recall_at_k(text_emb: np.ndarray, image_emb: np.ndarray, caption_image, ks=KS, seed: int = 0,
                rows: list | None = None, image_ids=None, captions: list[str] | None = None) -> dict:
    """Text→image and image→text R@k with intervals (see the module docstring).

    Args:
        text_emb, image_emb, caption_image: as in :func:`retrieval_ranks`.
        ks: the cut-offs (ints >= 1). seed: seed of the cluster bootstrap.
        rows: when a list is given, one dict per query is appended: ``{"task": "retrieval-text-to-image",
            "sample", "caption", "rank"}`` per caption and ``{"task": "retrieval-image-to-text", "sample",
            "rank"}`` per image with a caption. image_ids: per image row its ``sample`` (default the row).
            captions: the caption texts for those rows.

    Returns:
        ``{"images", "captions", "images_without_captions", "text_to_image": {"unit": "caption", "queries",
        "recall": {"<k>": clustered proportion}, "median_rank"}, "image_to_text": {"unit": "image", "queries",
        "recall": {"<k>": proportion}, "median_rank"}}``; proportions are
        :func:`~bindscope.evaluation.stats.proportion` dicts (``accuracy`` = R@k in [0, 1], Wilson ``ci95``),
        text→image's also ``ci95_cluster`` and ``clusters``.
    """
    ks = [int(k) for k in ks]
    if not ks or any(k < 1 for k in ks):
        raise BadInput(f"ks {ks!r}: cut-offs must be integers >= 1")
    owner = np.asarray(caption_image, np.int64)
    t2i, i2t = retrieval_ranks(text_emb, image_emb, owner)
    queried = i2t > 0
    ids = np.arange(len(i2t)) if image_ids is None else np.asarray(image_ids)
    if rows is not None:
        for t, rank in enumerate(t2i):
            rows.append({"task": "retrieval-text-to-image", "sample": int(ids[owner[t]]),
                         "caption": None if captions is None else captions[t], "rank": int(rank)})
        for i in np.flatnonzero(queried):
            rows.append({"task": "retrieval-image-to-text", "sample": int(ids[i]), "rank": int(i2t[i])})

    def median(ranks):
        return float(np.median(ranks)) if len(ranks) else None

    return {"images": int(len(i2t)), "captions": int(len(t2i)), "images_without_captions": int((~queried).sum()),
            "text_to_image": {"unit": "caption", "queries": int(len(t2i)), "median_rank": median(t2i),
                              "recall": {str(k): clustered_proportion(t2i <= k, owner, seed=seed) for k in ks}},
            "image_to_text": {"unit": "image", "queries": int(queried.sum()), "median_rank": median(i2t[queried]),
                              "recall": {str(k): proportion(int((i2t[queried] <= k).sum()), int(queried.sum()))
                                         for k in ks}}}


def format_retrieval(metrics: dict) -> list[str]:
    """Report lines of ``metrics["retrieval"]`` (empty when absent): R@k in % with the Wilson interval, with the
    text transform and before it when both are present."""
    block = metrics.get("retrieval")
    if not block:
        return []
    lines = [f"image-text retrieval: {block['images']} images, {block['captions']} captions "
             "(R@k %, [Wilson 95%]; text->image's bootstrap over images is ci95_cluster in the JSON)"]
    for label, part in (("", block), ("before the text transform: ", block.get("before_text_transform"))):
        if not part:
            continue
        for key, name in (("text_to_image", "text->image"), ("image_to_text", "image->text")):
            cells = []
            for k, p in part[key]["recall"].items():
                cell = f"R@{k} {100 * p['accuracy']:.1f}" if p["accuracy"] is not None else f"R@{k} -"
                if p.get("ci95"):
                    cell += f" [{100 * p['ci95'][0]:.1f}, {100 * p['ci95'][1]:.1f}]"
                cells.append(cell)
            lines.append(f"  {label}{name} ({part[key]['queries']} {part[key]['unit']}s): " + "  ".join(cells))
    return lines
