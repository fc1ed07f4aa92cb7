"""A numpy-only digit reader that decides which normalised source digits are legible at every thickness level.

The reader is k-nearest-neighbours (k = 5, majority vote, ties to the nearest) in a PCA space (40
components) of the normalised glyphs of one thickness level, 2x2 area-averaged to 18x18 and blurred (Gaussian,
sigma 1 pixel). It is fitted on the source's own digits (at most 1,000 per class, the first in source order)
and reads each digit leaving the digit itself out; a source with fewer than 30 digits of some class is not
judged (every digit counts as legible). A digit is legible when every thickness variant of it is
read as its label; the generator draws only legible digits and records the others in the manifest.
This is a project choice, a cheap stand-in for "a model can read it" that needs no training framework.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage as ndi

from bindscope.generators.madman.kernels import nearest

NEIGHBOURS = 5
COMPONENTS = 40
REFERENCE_PER_CLASS = 1000
SMALL_BATCH = 8  # Reader.neighbours: up to this many glyphs are read without BLAS (same path, same result)
MIN_PER_CLASS = 30  # with fewer digits of some class the reader is no fair judge: every digit counts as legible


def _coverage(glyphs: np.ndarray) -> np.ndarray:
    """Glyphs as float32 ink coverage 0..1 (uint8 0..255 is scaled; floats are taken as coverage)."""
    if glyphs.dtype == np.uint8:
        return glyphs.astype(np.float32) * np.float32(1 / 255)
    return glyphs.astype(np.float32)


def features(glyphs: np.ndarray) -> np.ndarray:
    """``(N, F, F)`` glyphs (F even; uint8 0..255 or float ink coverage 0..1) -> ``(N, F*F/4)`` float32 reader
    features (area-averaged, blurred)."""
    g = _coverage(glyphs)
    n, h, w = g.shape
    g = g.reshape(n, h // 2, 2, w // 2, 2).mean(axis=(2, 4))
    g = ndi.gaussian_filter(g, sigma=(0, 1.0, 1.0), mode="constant")
    return g.reshape(n, -1)


class Reader:
    """The k-nearest-neighbour reader fitted on reference glyphs, one PCA space per thickness variant.

    Args:
        variants: ``(N, V, F, F)`` uint8 normalised glyphs of the whole source.
        labels: ``(N,)`` digit classes.
        reference: indices of the reference digits (for :func:`legible_digits`: at most
            :data:`REFERENCE_PER_CLASS` per class).
    """

    def __init__(self, variants: np.ndarray, labels: np.ndarray, reference: np.ndarray):
        self.reference = np.asarray(reference, np.int64)
        self.labels = np.asarray(labels, np.int64)[self.reference]
        self.position = -np.ones(len(labels), np.int64)  # digit index -> row in the reference set (-1: none)
        self.position[self.reference] = np.arange(len(self.reference))
        self.spaces = []
        side = variants.shape[-1]
        # features() is linear, so features + projection is one (F*F, COMPONENTS) matrix: the features of the
        # F*F one-pixel images times the PCA basis
        pixels = features(np.eye(side * side, dtype=np.float32).reshape(-1, side, side))
        for variant in range(variants.shape[1]):
            ref = features(variants[self.reference, variant])
            mean = ref.mean(axis=0)
            basis = np.linalg.svd(ref - mean, full_matrices=False)[2][:COMPONENTS].T
            ref_z = (ref - mean) @ basis
            self.spaces.append((pixels @ basis, mean @ basis, ref_z, (ref_z * ref_z).sum(1)))
        # the same spaces laid out for nearest_one (references by column, float64 norms)
        self._compiled = [(np.ascontiguousarray(project, np.float32), offset.astype(np.float64),
                           np.ascontiguousarray(ref_z.T, np.float32), ref_sq.astype(np.float64))
                          for project, offset, ref_z, ref_sq in self.spaces]

    def neighbours(self, glyphs: np.ndarray, variant: int, sources: np.ndarray | None = None) -> np.ndarray:
        """The classes of the :data:`NEIGHBOURS` nearest references of each of ``glyphs`` ``(M, F, F)`` (uint8 or
        float coverage, the frame of the normalised glyphs) at thickness ``variant``, nearest first: ``(M,
        NEIGHBOURS)`` int64. ``sources`` ``(M,)``: the source digit each glyph was drawn from, left out of its own
        neighbours (None: keep all)."""
        project, offset, ref_z, ref_sq = self.spaces[variant]
        flat = _coverage(glyphs).reshape(len(glyphs), -1)
        if len(flat) <= SMALL_BATCH:  # numpy's own loops: BLAS would wake its threads for a few rows
            z = np.einsum("mf,fc->mc", flat, project) - offset
            cross = np.einsum("mc,rc->mr", z, ref_z)
        else:
            z = flat @ project - offset
            cross = z @ ref_z.T
        d2 = (z * z).sum(1)[:, None] + ref_sq[None, :] - 2.0 * cross
        if sources is not None:
            own = self.position[np.asarray(sources, np.int64)]
            rows = np.flatnonzero(own >= 0)
            d2[rows, own[rows]] = np.inf  # leave the digit itself out
        near = np.argpartition(d2, NEIGHBOURS, axis=1)[:, :NEIGHBOURS]
        rows = np.arange(len(z))[:, None]
        return self.labels[near[rows, np.lexsort((near, d2[rows, near]), axis=1)]]

    def nearest_one(self, glyph: np.ndarray, variant: int, source: int = -1) -> np.ndarray:
        """:meth:`neighbours` of one glyph ``(F, F)`` float32 coverage 0..1, leaving out reference digit
        ``source`` (-1: none), compiled (:func:`~bindscope.generators.madman.kernels.nearest`): ``(NEIGHBOURS,)``
        int64. Distances are summed in a fixed order, so the result never depends on other glyphs read in the same
        process; at exact ties of distance the lower reference row comes first."""
        project, offset, ref_zt, ref_sq = self._compiled[variant]
        own = int(self.position[source]) if source >= 0 else -1
        return nearest(np.ascontiguousarray(glyph, np.float32), project, offset, ref_zt, ref_sq, self.labels, own,
                       NEIGHBOURS)

    def read(self, glyphs: np.ndarray, variant: int, sources: np.ndarray | None = None) -> np.ndarray:
        """The digit class read in each of ``glyphs`` (see :meth:`neighbours`): ``(M,)`` int64, the majority of
        the :data:`NEIGHBOURS` nearest references; a tie goes to the class of the nearest neighbour among the
        tied ones."""
        votes = self.neighbours(glyphs, variant, sources)
        counts = np.stack([(votes == d).sum(1) for d in range(10)], axis=1)
        tied = counts == counts.max(1)[:, None]
        rows = np.arange(len(votes))
        return votes[rows, np.argmax(tied[rows[:, None], votes], axis=1)]


def pool_reader(variants: np.ndarray, pools: list[np.ndarray]) -> Reader | None:
    """The reader whose references are the digits of ``pools`` (``pools[d]``: source indices of class d, at
    most :data:`REFERENCE_PER_CLASS` used per class); None when a class has fewer than :data:`MIN_PER_CLASS`."""
    if min(len(p) for p in pools) < MIN_PER_CLASS:
        return None
    labels = np.full(len(variants), -1, np.int64)
    for d, pool in enumerate(pools):
        labels[np.asarray(pool, np.int64)] = d
    return Reader(variants, labels, np.concatenate([np.asarray(p, np.int64)[:REFERENCE_PER_CLASS] for p in pools]))


def legible_digits(variants: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Which digits the reader reads correctly at every thickness variant (each variant is read against the
    same variant of the reference digits, leaving the digit itself out).

    Args:
        variants: ``(N, V, F, F)`` uint8 normalised glyphs (:class:`~bindscope.generators.madman.morpho.MorphoTable`).
        labels: ``(N,)`` digit classes.

    Returns:
        ``(N,)`` bool; all True when some class has fewer than :data:`MIN_PER_CLASS` digits.
    """
    labels = np.asarray(labels, np.int64)
    n, v = variants.shape[:2]
    if min((labels == d).sum() for d in range(10)) < MIN_PER_CLASS:
        return np.ones(n, bool)
    reader = Reader(variants, labels, np.concatenate([np.flatnonzero(labels == d)[:REFERENCE_PER_CLASS]
                                                      for d in range(10)]))
    ok = np.ones(n, bool)
    for variant in range(v):
        for start in range(0, n, 2000):
            idx = np.arange(start, min(start + 2000, n))
            ok[idx] &= reader.read(variants[idx, variant], variant, idx) == labels[idx]
    return ok
