"""Paired tests of models scored on the same evaluation items, and the compact form in which benchmarks keep
per-item outcomes (shared by ``madman_sweeps.py``, ``bias_transfer.py`` and ``simco_origin_of_bias.py``).

The statistics are the library's, those ``bindscope compare`` reports (:mod:`bindscope.evaluation.paired`,
:func:`bindscope.evaluation.stats.seed_interval`); this module only shapes the benchmarks' outcomes for them:

- :func:`mcnemar`: the exact McNemar test (:func:`~bindscope.evaluation.paired.mcnemar_exact`) of paired binary
  outcomes over one or more strata of pairs (one stratum per training seed: seed s at one setting against seed s at
  the other). The strata's discordant counts are added up, the stratified form of the test; it treats items as
  independent and says nothing about the spread between seeds, which the scripts report beside it
  (:func:`seed_interval`).
- :func:`paired_bootstrap`: a share per item (e.g. the share of seeds whose model prefers the larger digit of
  image i) under two settings, resampled over items together
  (:func:`~bindscope.evaluation.paired.paired_bootstrap`, each item its own sampling unit).
- :func:`pack` / :func:`unpack`: boolean outcomes as base64 of their packed bits (8 items a byte).
"""

from __future__ import annotations

import base64

import numpy as np

from bindscope.evaluation import paired as library
from bindscope.evaluation.stats import seed_interval as library_seed_interval


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
    return {"n": n, "first": first / n if n else None, "second": second / n if n else None,
            "difference": (second - first) / n if n else None, "first_only": first_only,
            "second_only": second_only, "p": library.mcnemar_exact(first_only, second_only)}


def paired_bootstrap(first, second, seed: int = 0) -> dict:
    """Difference of two shares measured on the same items, with a bootstrap over items.

    Args:
        first, second: ``(N,)`` floats in [0, 1], the share of item i under each setting (e.g. averaged over
            seeds).
        seed: seed of the resampling.

    Returns:
        ``{"n", "first", "second", "difference", "ci95", "p"}``: the mean shares, ``second - first``, its 95 %
        percentile interval and two-sided p value over 2,000 resamples of the items (as
        :func:`bindscope.evaluation.paired.paired_bootstrap` computes them; ``ci95`` None for fewer than 2
        items).

    Raises:
        ValueError: ``first`` and ``second`` differ in length.
    """
    a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired shares differ in length: {a.shape} and {b.shape}")
    ones = np.ones_like(a)
    out = library.paired_bootstrap((a, ones), (b, ones), np.arange(a.size), seed=seed)
    return {"n": out.units, "first": out.first, "second": out.second, "difference": out.difference,
            "ci95": None if out.low is None else [out.low, out.high], "p": out.p_value}


def seed_interval(values, limits: tuple[float, float] | None = None) -> dict:
    """Mean of per-seed figures with a 95 % t interval over seeds
    (:func:`bindscope.evaluation.stats.seed_interval`), and the seeds' range (the plots' bands).

    Args:
        values: the figure of each seed (None entries are left out).
        limits: ``(low, high)`` the figure cannot leave (``(0, 1)`` for a share): the interval is clipped to them.

    Returns:
        ``{"mean", "ci95", "n", "min", "max"}``; ``ci95`` is None for fewer than two seeds.
    """
    kept = [float(v) for v in values if v is not None]
    out = library_seed_interval(kept)
    ci = None if out["low"] is None else [out["low"], out["high"]]
    if ci is not None and limits is not None:
        ci = [max(ci[0], limits[0]), min(ci[1], limits[1])]
    return {"mean": out["mean"], "ci95": ci, "n": out["n"], "min": min(kept) if kept else None,
            "max": max(kept) if kept else None}
