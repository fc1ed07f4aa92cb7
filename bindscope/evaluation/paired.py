"""Paired tests between two results on the same samples, and the Holm correction over several tests.

- :func:`mcnemar_exact`: the exact McNemar test for paired binary outcomes that are independent of each other (one
  outcome per sampling unit: a TOR query of a ComCO scene, a first-mention caption, a large-object image). Under
  the null hypothesis each discordant pair is equally likely to favour either result, so the number favouring B is
  binomial(b + c, 1/2) (McNemar, *Psychometrika* 1947; the exact form: Mosteller, 1952); the two-sided p-value is
  :func:`scipy.stats.binomtest`'s.
- :func:`paired_bootstrap`: the difference of two shares measured on the same samples, resampled together over the
  sampling unit (whole images, whole clusters; Davison & Hinkley, *Bootstrap Methods*, 1997, section 3.8): the
  percentile interval of the replicated difference and a two-sided bootstrap p-value. It serves every share whose
  outcomes are not one independent binary pair per unit: several comparisons per image, conditional shares (whose
  denominators differ between the two results), macro averages.
- :func:`holm`: Holm's step-down adjustment (Holm, *Scand. J. Statistics* 1979) of the p-values of one call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import binomtest

from bindscope.evaluation.stats import BOOTSTRAP_RESAMPLES, CONFIDENCE, cluster_codes


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` pairs where only the first result is right and ``c`` where only
    the second is: ``binomtest(c, b + c, 0.5)``, i.e. twice the smaller binomial tail, at most 1 (1.0 when there
    is no discordant pair). Example: b = 1, c = 6 gives 2 * (1 + 7) / 2**7 = 0.125.

    Raises:
        ValueError: a negative count.
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    if b + c == 0:
        return 1.0
    return float(binomtest(int(c), int(b + c), 0.5).pvalue)


def holm(p_values: list[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given: the i-th smallest (0-based) of m becomes the running maximum of
    ``(m - j) * p_(j)`` over j <= i, capped at 1. Controls the family-wise error rate over the m tests."""
    order = np.argsort(np.asarray(p_values, dtype=np.float64), kind="stable")
    m, running, out = len(order), 0.0, [0.0] * len(order)
    for rank, index in enumerate(order.tolist()):
        running = max(running, min(1.0, (m - rank) * float(p_values[index])))
        out[index] = running
    return out


@dataclass(frozen=True)
class PairedShares:
    """The outcome of :func:`paired_bootstrap`.

    Attributes:
        first / second: the share of each result on all the samples (0..1; a macro average: the mean over its
            components of their shares).
        difference: ``second - first``, in 0..1 units.
        low / high: the 95% percentile interval of the replicated difference (None with fewer than 2 units or
            without a finite replicate).
        p_value: the two-sided bootstrap p-value, ``min(1, 2 * min(1 + #{d* <= 0}, 1 + #{d* >= 0}) / (R + 1))``
            over the R finite replicates d* (1.0 where there is no interval). Like the interval it needs many
            units: with a handful, both are too narrow.
        units: the number of sampling units resampled.
    """

    first: float | None
    second: float | None
    difference: float | None
    low: float | None
    high: float | None
    p_value: float
    units: int


def _shares(sums: np.ndarray, parts: int) -> np.ndarray:
    """(..., 2 * parts) sums (numerators, then denominators) -> (...,) mean over the parts with a denominator of
    their ratios (NaN when none has one)."""
    num, den = sums[..., :parts], sums[..., parts:]
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
    present = ~np.isnan(ratio)
    counted = present.sum(axis=-1)
    total = np.where(present, ratio, 0.0).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counted > 0, total / np.maximum(counted, 1), np.nan)


def paired_bootstrap(first: tuple, second: tuple, clusters, parts=None, resamples: int = BOOTSTRAP_RESAMPLES,
                     seed: int = 0, confidence: float = CONFIDENCE) -> PairedShares:
    """The difference of two shares measured on the same observations, with a paired cluster bootstrap.

    Each result's share is ``sum(numerators) / sum(denominators)`` (a proportion: 0/1 numerators, denominators 1;
    a conditional share: denominators 0/1 that differ between the results), or with ``parts`` the unweighted mean
    of that ratio over the parts (a macro average over attributes; a part without a denominator is left out).
    Whole clusters are drawn with replacement (K draws over the K clusters) and both shares are recomputed on the
    same draw, so the interval of the difference reflects the pairing and the number of independent units.

    Args:
        first / second: ``(numerators, denominators)`` per observation, each (M,) array-like of floats.
        clusters: (M,) the sampling unit of each observation (image or scene id).
        parts: (M,) part label per observation (macro average), or None (one ratio).
        resamples: replicates R (>= 1). seed: numpy seed (deterministic). confidence: in (0, 1).

    Returns:
        :class:`PairedShares`.

    Raises:
        ValueError: arrays of different lengths.
    """
    arrays = [np.asarray(a, dtype=np.float64) for a in (*first, *second)]
    labels = np.asarray(clusters)
    if any(a.shape != labels.shape for a in arrays) or labels.ndim != 1:
        raise ValueError("numerators, denominators and clusters need one equal length")
    part_codes, count = cluster_codes(np.zeros(labels.size, np.int64) if parts is None else np.asarray(parts))
    codes, k = cluster_codes(labels) if labels.size else (np.zeros(0, np.int64), 0)
    # per cluster: numerators and denominators of each part, for each result -> (K, 4 * parts)
    columns = []
    for values in arrays:
        table = np.zeros((k, count))
        np.add.at(table, (codes, part_codes), values)
        columns.append(table)
    per_cluster = np.concatenate(columns, axis=1)
    totals = per_cluster.sum(axis=0)
    a = float(_shares(totals[:2 * count], count))
    b = float(_shares(totals[2 * count:], count))
    a, b = (None if np.isnan(v) else v for v in (a, b))
    difference = None if a is None or b is None else b - a
    if k < 2 or difference is None:  # one unit: nothing to resample
        return PairedShares(a, b, difference, None, None, 1.0, k)
    distinct, sizes = np.unique(per_cluster, axis=0, return_counts=True)
    rng = np.random.default_rng(seed)
    replicates = []
    step = max(1, min(resamples, 2_000_000 // len(distinct)))
    for start in range(0, resamples, step):
        counts = rng.multinomial(k, sizes / k, size=min(step, resamples - start)).astype(np.float64)
        sums = counts @ distinct
        replicates.append(_shares(sums[:, 2 * count:], count) - _shares(sums[:, :2 * count], count))
    values = np.concatenate(replicates)
    values = values[~np.isnan(values)]
    if not values.size:
        return PairedShares(a, b, difference, None, None, 1.0, k)
    alpha = (1.0 - confidence) / 2
    low, high = np.quantile(values, [alpha, 1.0 - alpha])
    below, above = int((values <= 0).sum()), int((values >= 0).sum())
    p = min(1.0, 2 * (1 + min(below, above)) / (values.size + 1))
    return PairedShares(a, b, difference, float(low), float(high), p, k)
