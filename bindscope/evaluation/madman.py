"""MADMAN recognition and binding accuracy (Gurung, Hoffmann, Brox, GCPR 2025, Sec. "Evaluation").

Each evaluation sample is a two-digit image whose caption describes both digits, with its stored negatives
(see docs/madman.md and docs/evaluation.md):

- a ``recognition`` negative replaces one attribute value of one digit by another value of that attribute;
- a ``binding`` negative swaps one attribute's values between the two digits
  ("small yellow 7 and large blue 4" -> "small blue 7 and large yellow 4").

A negative is passed when ``cos(image, caption) > cos(image, negative)`` (strict: a tie is a failure).

- Recognition accuracy of attribute ``a``: passed / all recognition negatives of ``a``.
- Binding accuracy of attribute ``a`` (the paper's measure, chance 50%): over the binding negatives of ``a``
  whose sample passed every recognition negative of ``a`` for *both* digits; samples where recognition failed
  for either digit are left out (reported as ``excluded``). ``binding_unconditional`` counts every binding
  negative, for reference.
- Each split is reported on its own: ``test`` (in-distribution) and ``ood`` (object–attribute combinations held
  out of training). Averages: ``macro`` = mean of the per-attribute accuracies; ``micro`` = pooled counts.
- 95% intervals: ``ci95`` is the Wilson score interval per comparison; ``ci95_cluster`` a bootstrap over images,
  because one image contributes several negatives that are not independent (:mod:`bindscope.evaluation.stats`).
"""

from __future__ import annotations

import os
from collections import defaultdict

import numpy as np

from bindscope.encoders.embedding_cache import Embedder, EmbeddingCache
from bindscope.encoders.interface import EncoderAdapter
from bindscope.errors import BadInput
from bindscope.evaluation.feed import paused_gc
from bindscope.evaluation.results import TextTransform, open_dataset
from bindscope.evaluation.stats import averages, clustered_proportion, proportion
from bindscope.evaluation.splits import NegativeColumns  # noqa: F401 (part of this API)
from bindscope.format.reader import Dataset
from bindscope.generators.madman.attributes import ATTRIBUTES

DIGITS = tuple(str(d) for d in range(10))
INTERVALS = ("ci95: Wilson score 95% per comparison (treats comparisons as independent); ci95_cluster: 95% "
             "percentile bootstrap over images, all comparisons of one image resampled together (2,000 resamples)")
SPLIT_ROLES = {"test": "in-distribution", "ood": "out-of-distribution (held-out object-attribute combinations)"}


def score_split(image_emb: np.ndarray, caption_emb: np.ndarray, negatives: list[list] | NegativeColumns,
                negative_emb: list[np.ndarray], attributes: list[str], sample_ids: list[int] | None = None,
                rows: list | None = None, seed: int = 0, row_fields: dict | None = None) -> dict:
    """Recognition and binding counts for one split from embeddings (pure numpy; the protocol's core).

    Args:
        image_emb: (N, D) float32 unit-norm image embeddings.
        caption_emb: (N, D) float32 unit-norm embeddings of the true captions.
        negatives: per sample, its :class:`~bindscope.format.records.Negative` records (or the same as
            :class:`NegativeColumns`).
        negative_emb: per sample, (K_i, D) embeddings of its negatives (same order).
        attributes: attribute names in report order (the manifest's ``object_attributes``).
        sample_ids: per sample its index in the split (default 0..N-1): the cluster of its comparisons and the
            ``sample`` field of the rows.
        rows: when a list is given, one dict per comparison is appended (see :func:`evaluate_madman`).
        seed: seed of the cluster bootstrap.
        row_fields: keys and values put first in every row (e.g. ``{"split": "test"}``).

    Returns:
        ``{"recognition", "binding", "binding_unconditional"}``, each ``{"per_attribute": {a: proportion},
        "average": {"macro", "micro", "macro_over"}}``; ``binding`` also has ``excluded`` per attribute. Every
        proportion carries the per-comparison Wilson ``ci95`` and ``ci95_cluster``, a bootstrap over images (all
        comparisons of one image resampled together), with ``clusters`` = the number of images.

    A sample's similarities are the products ``image_emb[i] @ caption_emb[i]`` and ``negative_emb[i] @
    image_emb[i]``, computed per sample; the bookkeeping over the comparisons is vectorised.
    """
    cols = negatives if isinstance(negatives, NegativeColumns) else NegativeColumns.from_records(negatives)
    bounds = np.asarray(cols.bounds, dtype=np.int64)
    count = len(bounds) - 1
    sample_list = list(range(count)) if sample_ids is None else list(sample_ids)
    sizes = np.diff(bounds)
    positive = np.zeros(count, np.float64)  # float32 and float64 products are held exactly
    scores = np.zeros(int(bounds[-1]), np.float64)
    for i in np.flatnonzero(sizes).tolist():
        positive[i] = image_emb[i] @ caption_emb[i]
        scores[bounds[i]:bounds[i + 1]] = negative_emb[i] @ image_emb[i]
    owner = np.repeat(np.arange(count), sizes)  # the sample (position) of each comparison
    positive_row = positive[owner]
    passed = positive_row > scores
    sids = np.asarray(sample_list)[owner] if count else np.zeros(0, np.int64)
    kind = np.asarray(cols.kind, dtype=object)
    is_rec, is_bind = kind == "recognition", kind == "binding"
    codes = {a: k for k, a in enumerate(dict.fromkeys(cols.attribute))}
    attr = np.fromiter((codes[a] for a in cols.attribute), np.int64, len(cols.attribute))
    counted = _counted_in_binding(owner, attr, cols.objects, passed, is_rec, is_bind)

    def outcomes(mask) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        return {a: (passed[mask & (attr == k)], sids[mask & (attr == k)]) for a, k in codes.items()
                if np.any(mask & (attr == k))}

    rec, bind, bind_all = outcomes(is_rec), outcomes(is_bind & counted), outcomes(is_bind)
    if rows is not None:
        flags = [None if not b else f for b, f in zip(is_bind.tolist(), counted.tolist())]
        samples = [sample_list[i] for i in owner.tolist()]
        first = dict(row_fields or {})
        with paused_gc():  # ~10 containers per comparison: the cyclic collector would rescan them many times
            rows.extend([{**first, "sample": i, "task": k, "attribute": a, "objects": list(o), "negative": c,
                          "caption_similarity": p, "negative_similarity": v, "passed": ok, "counted_in_binding": f}
                         for i, k, a, o, c, p, v, ok, f in zip(samples, cols.kind, cols.attribute, cols.objects,
                                                                cols.caption, positive_row.tolist(), scores.tolist(),
                                                                passed.tolist(), flags)])

    def clustered(oks, ids):
        return clustered_proportion(oks, ids, seed=seed)

    def block(groups):
        names = [a for a in attributes if a in groups] + sorted(set(groups) - set(attributes))
        per = {a: clustered(*groups[a]) for a in names}
        pooled = (np.concatenate([groups[a][0] for a in names]) if names else np.zeros(0, bool),
                  np.concatenate([groups[a][1] for a in names]) if names else np.zeros(0, np.int64))
        return {"per_attribute": per, "average": averages(per, clustered(*pooled))}

    binding = block(bind)
    names = [a for a in attributes if a in bind_all] + sorted(set(bind_all) - set(attributes))
    binding["excluded"] = {a: int(len(bind_all[a][0]) - (len(bind[a][0]) if a in bind else 0)) for a in names}
    for a in names:  # an attribute whose binding negatives were all excluded still appears, with total 0
        binding["per_attribute"].setdefault(a, clustered([], []))
    return {"recognition": block(rec), "binding": binding, "binding_unconditional": block(bind_all)}


def _counted_in_binding(owner: np.ndarray, attr: np.ndarray, objects: list[tuple[int, ...]], passed: np.ndarray,
                        is_rec: np.ndarray, is_bind: np.ndarray) -> np.ndarray:
    """Per comparison: a binding negative counts when, for each of its objects, the same sample has a
    recognition negative of the same attribute on that object and passed all of them (False elsewhere)."""
    lengths = np.fromiter(map(len, objects), np.int64, len(objects))
    flat = np.fromiter((x for o in objects for x in o), np.int64, int(lengths.sum()))
    row = np.repeat(np.arange(len(objects)), lengths)  # the comparison of each (comparison, object) pair
    uniq, obj = np.unique(flat, return_inverse=True)
    sizes = (int(owner.max(initial=0)) + 1, int(attr.max(initial=0)) + 1, max(1, len(uniq)))
    if sizes[0] * sizes[1] * sizes[2] < 2 ** 62:  # one int64 key per (sample, attribute, object)
        key = (owner[row] * sizes[1] + attr[row]) * sizes[2] + obj.reshape(-1)
    else:
        key = np.unique(np.stack([owner[row], attr[row], flat], axis=1), axis=0, return_inverse=True)[1]
        key = key.reshape(-1)
    rec_pairs, bind_pairs = is_rec[row], is_bind[row]
    known, inverse = np.unique(key[rec_pairs], return_inverse=True)
    failed = np.bincount(inverse, weights=~passed[row[rec_pairs]], minlength=len(known)) > 0
    bad_pairs = ~np.isin(key[bind_pairs], known[~failed])  # an object without (passed) recognition
    bad = np.bincount(row[bind_pairs], weights=bad_pairs, minlength=len(objects)) > 0
    return is_bind & ~bad


def evaluate_madman(dataset: str | os.PathLike | Dataset, adapter: EncoderAdapter, splits: list[str] | None = None,
                    text_transform: TextTransform | None = None, cache: EmbeddingCache | None = None,
                    embedder: Embedder | None = None, progress: bool = True, check: bool = True,
                    rows: list | None = None, seed: int = 0, workers: int | None = None) -> dict:
    """Recognition and binding accuracy of ``adapter`` on a dataset that stores negatives (see the module
    docstring): the ``binding`` task of :mod:`bindscope.evaluation.splits`, split by split.

    Args:
        dataset: a dataset folder (MADMAN, or any whose evaluation splits store recognition and binding
            negatives) or an open :class:`Dataset`.
        adapter: an encoder with an image tower.
        splits: splits to evaluate; default: those of ``("test", "ood")`` the dataset has.
        text_transform: optional callable applied to the L2-normalised text embeddings (N, D) -> (N, D')
            before scoring (rows re-normalised after), e.g. a fitted LABCLIP map.
        cache: on-disk embedding cache for ``adapter.cache_key`` (ignored when ``embedder`` is given).
        embedder: an :class:`Embedder` to reuse (shares de-duplication and counters across calls).
        progress: show a tqdm bar per split.
        check: verify the shards' sha256 against the manifest first.
        rows: when a list is given, one dict per comparison is appended (the per-sample output, see
            docs/evaluation.md): ``{"split", "sample", "task": "recognition" | "binding", "attribute", "objects",
            "negative", "caption_similarity", "negative_similarity", "passed", "counted_in_binding"}``
            (similarities are cosines; ``counted_in_binding`` is None for recognition rows).
        seed: seed of the cluster bootstrap over images.
        workers: processes that read and decompress the images (:func:`bindscope.evaluation.feed.reader_workers`;
            None: chosen by the split's size and the CPUs). The result does not depend on it.

    Returns:
        A result dict valid against ``eval_result`` (``kind = "madman-eval"``); ``metrics["splits"][name]``
        holds ``role``, ``num_samples``, ``num_scored`` and the :func:`score_split` blocks.

    Raises:
        DatasetError: a requested split is missing, no split to evaluate, a split that stores no negatives, a
            corrupt shard.
        BadInput: the adapter is text-only.
    """
    from bindscope.evaluation.splits import plan_splits, run_splits

    ds = open_dataset(dataset, validate=False)
    plan = plan_splits(ds, ["binding"], splits)
    if check:
        ds.check(plan.splits)  # every shard's sha256 and header, once; the opened readers are reused
    return run_splits(plan, adapter, text_transform=text_transform, embedder=embedder, cache=cache, seed=seed,
                      progress=progress, rows=rows, workers=workers)


def digit_negative(caption: str, present: set[int], rng: np.random.Generator) -> str:
    """``caption`` with the digit of one described object replaced by a digit that is not in the image.

    A diagnostic negative for digit recognition (not part of the paper's protocol, which tests the six
    attributes only). Captions are " and "-joined descriptions each ending with its digit (the generator's
    :func:`~bindscope.generators.madman.captions.describe`). Which description (uniform over them) and which
    replacement (uniform over the ``10 - len(present)`` absent digits) come from ``rng``, in that order.

    Raises:
        BadInput: a description that does not end with a digit 0-9.
    """
    parts = caption.split(" and ")
    for part in parts:
        if part.rsplit(" ", 1)[-1] not in DIGITS:
            raise BadInput(f"caption {caption!r}: description {part!r} does not end with a digit 0-9")
    k = int(rng.integers(len(parts)))
    absent = [d for d in range(10) if d not in present]
    words = parts[k].split(" ")
    words[-1] = str(absent[int(rng.integers(len(absent)))])
    parts[k] = " ".join(words)
    return " and ".join(parts)


def digit_recognition(dataset: str | os.PathLike | Dataset, adapter: EncoderAdapter, split: str = "test",
                      limit: int | None = None, seed: int = 0) -> dict:
    """Digit recognition of ``adapter`` on a MADMAN split: does the image prefer its caption to the same caption
    with one described digit replaced by a digit absent from the image (:func:`digit_negative`)?

    A diagnostic beside the paper's protocol: binding of an attribute between two digits presupposes that the
    model tells the digits apart, and a small CLIP trained from scratch may not (docs/training.md). One negative
    per image, drawn with ``numpy.random.default_rng(seed)`` in sample order, so the comparisons are independent
    and the Wilson interval applies. Chance is 50%.

    Args:
        dataset: a MADMAN dataset folder or an open :class:`Dataset`.
        adapter: an encoder with an image tower.
        split: the split to score; every sample with a caption is used (up to ``limit``, in order).
        limit: at most this many samples (None: all).
        seed: seed of the negatives.

    Returns:
        ``{"correct", "total", "accuracy" (0..1), "ci95" (Wilson), "split", "seed"}``.

    Raises:
        DatasetError: no such split. BadInput: a text-only adapter or a caption that
        does not end its descriptions with digits.
    """
    ds = open_dataset(dataset)
    if not adapter.supports_images:
        raise BadInput(f"digit recognition needs an image encoder; {adapter.name!r} is text-only")
    rng = np.random.default_rng(seed)
    images, captions, negatives = [], [], []
    try:
        for sample in ds.split(split):
            if limit is not None and len(images) >= limit:
                break
            if not sample.caption:
                continue
            images.append(sample.image)
            captions.append(sample.caption)
            negatives.append(digit_negative(sample.caption, {o.category_id for o in sample.objects}, rng))
    finally:
        if ds is not dataset:  # opened here
            ds.close()
    if not images:
        return {**proportion(0, 0), "split": split, "seed": seed}
    image_emb = adapter.encode_images(np.stack(images))
    text_emb = adapter.encode_texts(captions + negatives)
    true, false = text_emb[:len(captions)], text_emb[len(captions):]
    passed = (image_emb * true).sum(1) > (image_emb * false).sum(1)
    return {**proportion(int(passed.sum()), len(passed)), "split": split, "seed": seed}


def size_pairs(dataset: str | os.PathLike | Dataset, split: str = "test") -> dict[int, tuple[str, ...]]:
    """The size level of each digit, in object order, of every two-digit image of a MADMAN split:
    ``{sample index: (size of digit 1, size of digit 2)}`` (the input of :func:`binding_by_size_relation`).

    Raises:
        DatasetError: no such split.
    """
    ds = open_dataset(dataset)
    try:
        part = ds.split(split)
        pairs = {}
        for shard in part.shards():
            for local in range(shard.count):
                objects = shard.objects(local)
                if len(objects) == 2:
                    pairs[shard.first_index + local] = tuple(o.attributes["size"] for o in objects)
        return pairs
    finally:
        if ds is not dataset:  # opened here
            ds.close()


def binding_by_size_relation(rows: list[dict], sizes: dict[int, tuple[str, ...]], split: str = "test",
                             seed: int = 0) -> dict:
    """Binding per attribute (conditional on recognition, the paper's measure) with the images split by whether
    their two digits share a size level.

    A diagnostic beside the paper's protocol. Binding an attribute to a digit needs the model to tell the two
    digits apart. Where they differ in size, size is a cue that can stand in for the digit's shape ("the large
    one is red"); where they share a size, only the shape and the other attributes tell them apart. A model
    that binds through the digit scores alike in both groups; one that leans on size scores lower on same-size
    pairs. Size itself is bound only where the sizes differ.

    Args:
        rows: per-comparison rows of :func:`evaluate_madman` (``rows=``); rows of other splits (``"split"``
            key) are ignored, rows without a ``"split"`` key are taken to be of ``split``.
        sizes: :func:`size_pairs` of the same split (sample index -> the two digits' size levels).
        split: the split the rows are to be taken from.
        seed: seed of the cluster bootstrap.

    Returns:
        ``{"same_size": {attribute: p}, "different_size": {attribute: p}}``, each ``p`` a
        :func:`~bindscope.evaluation.stats.clustered_proportion` over the binding rows counted in binding
        (one comparison per image and attribute); attributes without such rows in a group are left out.

    Raises:
        BadInput: a counted binding row whose sample is not a two-digit image of ``sizes``.
    """
    outcomes: dict[str, dict[str, list]] = {"same_size": defaultdict(list), "different_size": defaultdict(list)}
    for row in rows:
        if row.get("split", split) != split or row["task"] != "binding" or not row["counted_in_binding"]:
            continue
        pair = sizes.get(row["sample"])
        if pair is None:
            raise BadInput(f"binding row of sample {row['sample']} of split {split!r}: not a two-digit image of "
                           "the size pairs given")
        group = "same_size" if pair[0] == pair[1] else "different_size"
        outcomes[group][row["attribute"]].append((row["passed"], row["sample"]))
    return {group: {a: clustered_proportion([ok for ok, _ in per[a]], [s for _, s in per[a]], seed=seed)
                    for a in sorted(per, key=_attribute_order)} for group, per in outcomes.items()}


def _attribute_order(attribute: str) -> tuple[int, str]:
    """Sort key: the MADMAN attributes in their order, then any other name alphabetically."""
    return (ATTRIBUTES.index(attribute) if attribute in ATTRIBUTES else len(ATTRIBUTES), attribute)


def binding_additivity(rows: list[dict], split: str = "test") -> dict:
    """How far a model's binding comparisons are the sum of its two recognition comparisons, per attribute.

    A diagnostic of the paper's conditional measure. Margins are ``cos(image, negative) - cos(image, caption)``
    (a comparison passes when its margin is < 0). For each image and attribute with a recognition negative of
    each digit and a binding negative, ``x`` = the sum of the two recognition margins and ``y`` = the binding
    margin. When each recognition negative gives its digit the other digit's value (always so for a two-valued
    attribute such as swelling or fracture), the binding negative makes both changes at once; a model whose
    caption score adds up over the two descriptions then has ``y = x``, and passing both recognition
    comparisons (``x < 0``) makes it pass binding whatever it binds. The conditional binding of an attribute
    whose Pearson ``r`` is near 1 therefore says little about binding.

    Args:
        rows: per-comparison rows of :func:`evaluate_madman` (``rows=``); only those of ``split`` (rows without a
            ``"split"`` key count as ``split``).
        split: the split to use.

    Returns:
        ``{attribute: {"r": Pearson r of (x, y) or None (fewer than 3 images, or no spread), "n": images}}`` in
        the MADMAN attribute order.
    """
    margins: dict[tuple[int, str], dict[str, float]] = defaultdict(dict)
    for row in rows:
        if row.get("split", split) != split:
            continue
        kind = "binding" if row["task"] == "binding" else f"recognition{row['objects'][0]}"
        margins[(row["sample"], row["attribute"])][kind] = row["negative_similarity"] - row["caption_similarity"]
    pairs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for (_, attribute), m in margins.items():
        if {"binding", "recognition1", "recognition2"} <= set(m):
            pairs[attribute].append((m["recognition1"] + m["recognition2"], m["binding"]))
    out = {}
    for attribute in sorted(pairs, key=_attribute_order):
        x, y = np.array(pairs[attribute]).T
        spread = len(x) >= 3 and x.std() > 0 and y.std() > 0
        out[attribute] = {"r": float(np.corrcoef(x, y)[0, 1]) if spread else None, "n": len(x)}
    return out
