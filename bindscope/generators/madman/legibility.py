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

NEIGHBOURS = 5
COMPONENTS = 40
REFERENCE_PER_CLASS = 1000
MIN_PER_CLASS = 30  # with fewer digits of some class the reader is no fair judge: every digit counts as legible


def features(glyphs: np.ndarray) -> np.ndarray:
    """``(N, F, F)`` uint8 glyphs (F even) -> ``(N, F*F/4)`` float32 reader features (area-averaged, blurred)."""
    g = glyphs.astype(np.float32) * np.float32(1 / 255)
    n, h, w = g.shape
    g = g.reshape(n, h // 2, 2, w // 2, 2).mean(axis=(2, 4))
    g = ndi.gaussian_filter(g, sigma=(0, 1.0, 1.0), mode="constant")
    return g.reshape(n, -1)


def legible_digits(variants: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Which digits the reader reads correctly at every thickness variant (each variant is read against the
    same variant of the reference digits).

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
    reference = np.concatenate([np.flatnonzero(labels == d)[:REFERENCE_PER_CLASS] for d in range(10)])
    ref_labels = labels[reference]
    position = -np.ones(n, np.int64)
    position[reference] = np.arange(len(reference))
    ok = np.ones(n, bool)
    for variant in range(v):
        ref = features(variants[reference, variant])
        mean = ref.mean(axis=0)
        basis = np.linalg.svd(ref - mean, full_matrices=False)[2][:COMPONENTS].T
        ref_z = (ref - mean) @ basis
        ref_sq = (ref_z * ref_z).sum(1)
        for start in range(0, n, 2000):
            idx = np.arange(start, min(start + 2000, n))
            z = (features(variants[idx, variant]) - mean) @ basis
            d2 = (z * z).sum(1)[:, None] + ref_sq[None, :] - 2.0 * z @ ref_z.T
            own = np.flatnonzero(position[idx] >= 0)
            d2[own, position[idx][own]] = np.inf  # leave the digit itself out
            votes = ref_labels[np.argsort(d2, axis=1, kind="stable")[:, :NEIGHBOURS]]
            counts = np.stack([(votes == d).sum(1) for d in range(10)], axis=1)
            tied = counts == counts.max(1)[:, None]
            # majority; a tie goes to the class of the nearest neighbour among the tied classes
            rows = np.arange(len(idx))
            first = votes[rows, np.argmax(tied[rows[:, None], votes], axis=1)]
            ok[idx] &= first == labels[idx]
    return ok

