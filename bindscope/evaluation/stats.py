"""Accuracy counts with 95% confidence intervals, shares, macro and micro averages.

Intervals are Wilson score intervals (Wilson, 1927) computed by :func:`scipy.stats.binomtest` (``method="wilson"``,
no continuity correction). They stay inside [0, 1] and behave well for small counts and for accuracies near 0 or
1, which the normal-approximation (Wald) interval does not.
"""

from __future__ import annotations

import numpy as np

CONFIDENCE = 0.95


def wilson_interval(successes: int, total: int, confidence: float = CONFIDENCE) -> list[float] | None:
    """Wilson score interval ``[low, high]`` (fractions in [0, 1]) for ``successes`` out of ``total``.

    Returns None when ``total`` is 0 (no interval exists).

    Raises:
        ValueError: ``successes`` is negative or larger than ``total``.
    """
    if total == 0:
        return None
    if not 0 <= successes <= total:
        raise ValueError(f"successes must be in 0..{total}, got {successes}")
    from scipy.stats import binomtest  # here: scipy.stats takes most of a second to import (the commands' --help)

    ci = binomtest(int(successes), int(total)).proportion_ci(confidence_level=confidence, method="wilson")
    return [float(ci.low), float(ci.high)]


def proportion(successes: int, total: int) -> dict:
    """``{"correct", "total", "accuracy", "ci95"}`` for a count; accuracy and ci95 are None when total is 0."""
    return {"correct": int(successes), "total": int(total),
            "accuracy": (successes / total) if total else None,
            "ci95": wilson_interval(successes, total)}


def clustered_proportion(outcomes, clusters, seed: int = 0) -> dict:
    """:func:`proportion` of boolean ``outcomes`` plus a cluster-bootstrap interval over their ``clusters``.

    Several comparisons from one image (its recognition or matching negatives) are not independent; the Wilson
    ``ci95`` treats them as if they were, ``ci95_cluster`` (:func:`cluster_bootstrap`, resampling whole clusters,
    seeded) does not. ``clusters`` counts the distinct units.

    Args:
        outcomes: (M,) bool, one per comparison. clusters: (M,) the unit (e.g. image index) of each comparison.
        seed: bootstrap seed.

    Returns:
        ``{"correct", "total", "accuracy", "ci95", "ci95_cluster", "clusters"}`` (intervals None when M = 0).
    """
    outcomes = np.asarray(outcomes, dtype=bool)
    codes, count = cluster_codes(np.asarray(clusters))
    out = proportion(int(outcomes.sum()), int(outcomes.size))
    out["ci95_cluster"] = cluster_bootstrap(outcomes.astype(np.float64), np.ones(outcomes.size), codes, seed=seed)
    out["clusters"] = count
    return out


def cluster_codes(labels: np.ndarray) -> tuple[np.ndarray, int]:
    """``(codes, K)``: each label's rank among the K distinct ``labels`` (what ``np.unique(labels,
    return_inverse=True)`` gives as its inverse, int64), by counting when the labels are small non-negative
    integers (sample indices), else by sorting."""
    labels = np.asarray(labels).reshape(-1)
    if labels.dtype.kind in "iu" and labels.size and 0 <= labels.min() and labels.max() < 4 * labels.size + 1024:
        present = np.zeros(int(labels.max()) + 1, bool)
        present[labels] = True
        rank = np.cumsum(present, dtype=np.int64) - 1
        return rank[labels], int(rank[-1]) + 1
    uniq, inverse = np.unique(labels, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64, copy=False), len(uniq)


def share(count: int, total: int) -> dict:
    """``{"count", "of", "share", "ci95"}``: the share ``count / of`` with its Wilson interval (None when of = 0)."""
    return {"count": int(count), "of": int(total), "share": (count / total) if total else None,
            "ci95": wilson_interval(count, total)}


def averages(per_key: dict[str, dict], micro: dict | None = None) -> dict:
    """Macro and micro averages over :func:`proportion` dicts.

    ``macro`` is the unweighted mean of the per-key accuracies (keys with total 0 are skipped); ``micro`` pools
    the counts (total correct / total trials) and carries a Wilson interval, or is ``micro`` when given (e.g. a
    :func:`clustered_proportion` of the pooled outcomes).
    """
    accs = [p["accuracy"] for p in per_key.values() if p["total"]]
    if micro is None:
        micro = proportion(sum(p["correct"] for p in per_key.values()), sum(p["total"] for p in per_key.values()))
    return {"macro": float(np.mean(accs)) if accs else None, "micro": micro,
            "macro_over": [k for k, p in per_key.items() if p["total"]]}


def strict_top1(scores: np.ndarray) -> np.ndarray:
    """Row-wise top-1 index of ``scores`` (N, C), or -1 where the maximum is shared by several columns.

    Ties count as wrong everywhere in bindscope (a strict ``>`` comparison), so a tied row has no top-1.
    """
    scores = np.asarray(scores)
    best = scores.argmax(axis=1)
    top = scores[np.arange(len(scores)), best]
    tied = (scores == top[:, None]).sum(axis=1) > 1
    return np.where(tied, -1, best)


BOOTSTRAP_RESAMPLES = 2000


def cluster_bootstrap(numerators, denominators, clusters, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
                      confidence: float = CONFIDENCE) -> list[float] | None:
    """Percentile interval of a ratio ``sum(numerators) / sum(denominators)`` under a cluster bootstrap.

    Use it when several observations come from one sampling unit (several negatives of one image, several
    objects of one scene): whole clusters are resampled with replacement, so the interval reflects the number of
    independent units, not the number of comparisons (Davison & Hinkley, *Bootstrap Methods*, 1997, section 3.8).
    For a proportion, numerators are successes (0/1) and denominators 1; for a mean, numerators are the values.

    A replicate depends only on how often each cluster is drawn, and clusters with equal (numerator sum,
    denominator sum) are interchangeable, so the draw is made over the distinct pairs: a multinomial of K draws
    with probabilities (clusters of that pair) / K, the same distribution as K draws over the K clusters, at a
    cost of resamples x distinct pairs (a proportion over images with up to m comparisons each has at most
    (m + 1)(m + 2) / 2 pairs, whatever K).

    Args:
        numerators, denominators: (M,) float arrays, one entry per observation.
        clusters: (M,) cluster labels (any hashable numpy dtype), e.g. the image index of each comparison.
        resamples: bootstrap replicates (>= 1). seed: numpy seed (the interval is deterministic).
        confidence: in (0, 1).

    Returns:
        ``[low, high]`` (the (1 - confidence)/2 and (1 + confidence)/2 percentiles of the replicated ratio, same
        unit as the ratio), or None when there are no observations or the denominators sum to 0.
    """
    num = np.asarray(numerators, dtype=np.float64)
    den = np.asarray(denominators, dtype=np.float64)
    labels = np.asarray(clusters)
    if not (num.shape == den.shape == labels.shape) or num.ndim != 1:
        raise ValueError(f"numerators, denominators and clusters need one equal length, got {num.shape}, "
                         f"{den.shape}, {labels.shape}")
    if num.size == 0 or den.sum() == 0:
        return None
    inverse, k = cluster_codes(labels)
    num_c = np.bincount(inverse, weights=num, minlength=k)
    den_c = np.bincount(inverse, weights=den, minlength=k)
    pairs, sizes = _distinct_pairs(num_c, den_c)
    rng = np.random.default_rng(seed)
    stats = []
    step = max(1, min(resamples, 2_000_000 // len(pairs)))  # replicates per draw (bounded memory)
    for start in range(0, resamples, step):
        counts = rng.multinomial(k, sizes / k, size=min(step, resamples - start))
        with np.errstate(invalid="ignore", divide="ignore"):
            stats.append((counts @ pairs[:, 0]) / (counts @ pairs[:, 1]))
    values = np.concatenate(stats)
    values = values[~np.isnan(values)]
    alpha = (1.0 - confidence) / 2
    low, high = np.quantile(values, [alpha, 1.0 - alpha])
    return [float(low), float(high)]


def _distinct_pairs(num: np.ndarray, den: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of ``(num, den)`` in lexicographic order, ``(P, 2)`` float64, and how often each occurs
    (what ``np.unique(np.stack([num, den], axis=1), axis=0, return_counts=True)`` gives): by counting one
    integer key per row when both are small non-negative integers (counts of comparisons), else by sorting."""
    if num.size and min(num.min(), den.min()) >= 0 and max(num.max(), den.max()) < 4096 \
            and np.array_equal(num, np.floor(num)) and np.array_equal(den, np.floor(den)):
        width = int(den.max()) + 1
        counts = np.bincount((num.astype(np.int64) * width + den.astype(np.int64)))
        keys = np.flatnonzero(counts)
        return np.stack([keys // width, keys % width], axis=1).astype(np.float64), counts[keys]
    return np.unique(np.stack([num, den], axis=1), axis=0, return_counts=True)


def seed_interval(values, confidence: float = CONFIDENCE) -> dict:
    """Mean of one figure over training or evaluation seeds, with a Student t interval over the seeds.

    The interval is ``mean ± t_{(1 + confidence) / 2, n - 1} * s / sqrt(n)`` with ``s`` the sample standard
    deviation over the n seeds (n - 1 degrees of freedom): it says how much the figure moves between seeds, not
    how precisely one run measures it.

    Args:
        values: the figure of each seed (floats; None entries are left out).

    Returns:
        ``{"mean", "low", "high", "n"}``; ``low`` and ``high`` are None for fewer than 2 values, ``mean`` None for
        none.
    """
    from scipy.stats import t

    kept = np.asarray([v for v in values if v is not None], dtype=np.float64)
    n = int(kept.size)
    if n == 0:
        return {"mean": None, "low": None, "high": None, "n": 0}
    mean = float(kept.mean())
    if n < 2:
        return {"mean": mean, "low": None, "high": None, "n": n}
    half = float(t.ppf((1 + confidence) / 2, n - 1) * kept.std(ddof=1) / np.sqrt(n))
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}
