"""Paired tests of models scored on the same evaluation items, and the compact form in which benchmarks keep
per-item outcomes (shared by ``madman_sweeps.py`` and ``bias_transfer.py``; every paired test of those scripts is
a call of :func:`mcnemar` or :func:`paired_bootstrap`).

- :func:`mcnemar`: the exact McNemar test of paired binary outcomes (item i passed by model A, by model B), over
  one or more strata of pairs (one stratum per training seed: seed s at one setting against seed s at the other).
  Under the null hypothesis every discordant pair is equally likely to favour either model, so the count of pairs
  only the first model passes is Binomial(discordant, 1/2) (:func:`scipy.stats.binomtest`, two-sided). Pooling the
  strata's discordant pairs is the stratified form of the test; it treats items as independent and says nothing
  about the spread between seeds, which the scripts report beside it (:func:`seed_interval`).
- :func:`paired_bootstrap`: a share per item averaged over seeds (e.g. the share of seeds whose model prefers the
  larger digit of image i) for two settings, resampled over items together (percentile interval of the
  difference, 2,000 resamples, seeded) with a two-sided bootstrap p value.
- :func:`pack` / :func:`unpack`: boolean outcomes as base64 of their packed bits (8 items a byte).
"""

from __future__ import annotations

import base64
import math

import numpy as np

RESAMPLES = 2000


def pack(outcomes) -> str:
    """``(N,)`` bool -> base64 text of ``numpy.packbits`` (first item in the highest bit of the first byte)."""
    return base64.b64encode(np.packbits(np.asarray(outcomes, dtype=bool)).tobytes()).decode("ascii")


def unpack(text: str, count: int) -> np.ndarray:
    """The ``(count,)`` bool array :func:`pack` wrote.

    Raises:
        ValueError: ``text`` holds fewer than ``count`` items or more than ``count`` rounded up to whole bytes.
    """
    raw = np.frombuffer(base64.b64decode(text.encode("ascii"), validate=True), dtype=np.uint8)
    if len(raw) != (count + 7) // 8:
        raise ValueError(f"packed outcomes hold {8 * len(raw)} bits; expected {count} items")
    return np.unpackbits(raw)[:count].astype(bool)


def mcnemar(strata) -> dict:
    """Exact McNemar test of paired binary outcomes, pooled over strata.

    Args:
        strata: pairs ``(first, second)`` of ``(N_k,)`` bool arrays, one pair per stratum, item i of ``first``
            and of ``second`` scored on the same evaluation item.

    Returns:
        ``{"n", "first", "second", "difference", "first_only", "second_only", "p"}``: pairs in all strata; the
        share passed by the first and by the second model (fractions, None when n = 0); ``second - first``;
        the discordant counts; the two-sided exact p value (1.0 without discordant pairs).

    Raises:
        ValueError: a stratum whose two arrays differ in length.
    """
    from scipy.stats import binomtest

    n = first = second = first_only = second_only = 0
    for a, b in strata:
        a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
        if a.shape != b.shape:
            raise ValueError(f"paired outcomes differ in length: {a.shape} and {b.shape}")
        n += a.size
        first += int(a.sum())
        second += int(b.sum())
        first_only += int((a & ~b).sum())
        second_only += int((~a & b).sum())
    discordant = first_only + second_only
    p = float(binomtest(first_only, discordant, 0.5).pvalue) if discordant else 1.0
    return {"n": n, "first": first / n if n else None, "second": second / n if n else None,
            "difference": (second - first) / n if n else None, "first_only": first_only,
            "second_only": second_only, "p": p}


def paired_bootstrap(first, second, seed: int = 0) -> dict:
    """Difference of two shares measured on the same items, with a bootstrap over items.

    Args:
        first, second: ``(N,)`` floats in [0, 1], the share of item i under each setting (e.g. averaged over
            seeds).
        seed: seed of the resampling.

    Returns:
        ``{"n", "first", "second", "difference", "ci95", "p"}``: the mean shares, ``second - first``, its 95 %
        percentile interval over 2,000 resamples of the items, and the two-sided bootstrap p value (twice the
        smaller share of resampled differences on either side of 0, at most 1; at least 1 / 2,000).
    """
    a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired shares differ in length: {a.shape} and {b.shape}")
    if not a.size:
        return {"n": 0, "first": None, "second": None, "difference": None, "ci95": None, "p": None}
    diff = b - a
    rng = np.random.default_rng(seed)
    draws = diff[rng.integers(0, diff.size, size=(RESAMPLES, diff.size))].mean(axis=1)
    side = min(float((draws <= 0).mean()), float((draws >= 0).mean()))
    return {"n": int(a.size), "first": float(a.mean()), "second": float(b.mean()), "difference": float(diff.mean()),
            "ci95": [float(v) for v in np.percentile(draws, [2.5, 97.5])],
            "p": min(1.0, max(2 * side, 1 / RESAMPLES))}


def seed_interval(values) -> dict:
    """Mean of per-seed figures with a 95 % t interval over seeds (Student's t, n - 1 degrees of freedom).

    Returns:
        ``{"mean", "ci95", "n", "min", "max"}``; ``ci95`` is None for fewer than two seeds.
    """
    from scipy.stats import t

    v = np.asarray([x for x in values if x is not None], dtype=np.float64)
    if not v.size:
        return {"mean": None, "ci95": None, "n": 0, "min": None, "max": None}
    mean = float(v.mean())
    ci = None
    if v.size > 1:
        half = float(t.ppf(0.975, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
        ci = [mean - half, mean + half]
    return {"mean": mean, "ci95": ci, "n": int(v.size), "min": float(v.min()), "max": float(v.max())}
