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


ROTATION_IOU_MAX = 0.25  # the digits 1-9 of the bundled source stay at or below 0.26 (98th percentile) at 45 degrees
END_GAP_MIN = 4.0        # frame pixels (a fifth of the glyph height): a loop left open by less looks fractured


def rotation_overlap(variants: np.ndarray, angles: list[float]) -> np.ndarray:
    """How alike a digit's rotations look: for each digit, the largest intersection-over-union of its ink
    (thinnest variant, binarised at half ink, centred on its ink box) with itself turned by the difference of
    any two of ``angles`` (degrees). ``(N,)`` float64 in [0, 1]; 0 when there is a single angle.

    On the bundled digits at 45 degrees: "0" median 0.25 (a round 0 covers much of itself), every other class
    median 0.08-0.15, 98th percentile at most 0.26.
    """
    turns = sorted({abs(float(a) - float(b)) % 360 for a in angles for b in angles if a != b})
    out = np.zeros(len(variants))
    if not turns:
        return out
    size = variants.shape[-1]
    for n, glyph in enumerate(variants[:, 0] >= 128):
        rows, cols = np.nonzero(glyph)
        if not len(rows):
            continue
        shift = (int(round((size - 1) / 2 - (rows.min() + rows.max()) / 2)),
                 int(round((size - 1) / 2 - (cols.min() + cols.max()) / 2)))
        glyph = np.roll(glyph, shift, (0, 1))
        for turn in turns:
            turned = ndi.rotate(glyph.astype(np.float32), turn, reshape=False, order=1) >= 0.5
            out[n] = max(out[n], (glyph & turned).sum() / max(1, (glyph | turned).sum()))
    return out


def visible_attributes(table, values: dict) -> np.ndarray:
    """Which digits can show every attribute value of the config, ``(N,)`` bool (see docs/madman.md).

    - rotation: :func:`rotation_overlap` of the config's angles is at most :data:`ROTATION_IOU_MAX` (rejects
      about half of the bundled "0"s and nothing else);
    - swelling: at every thickness level, some skeleton point has room for the largest swelling
      (:func:`~bindscope.generators.madman.morpho.swelling_room`), so the bulge never fills a loop or
      touches another stroke;
    - fracture: no stroke end comes within :data:`END_GAP_MIN` frame pixels of another stroke
      (``table.end_gap``): an intact digit shows no gap that could pass for a cut.

    Args:
        table: the source's :class:`~bindscope.generators.madman.morpho.MorphoTable`.
        values: the config's ``attributes`` (value name -> parameter per attribute).
    """
    from bindscope.generators.madman.morpho import bulge_half_width, swelling_room

    ok = rotation_overlap(table.variants, list(values["rotation"].values())) <= ROTATION_IOU_MAX
    if max(int(v) for v in values["fracture"].values()) > 0:
        ok &= table.end_gap >= END_GAP_MIN
    swelling = max(float(v) for v in values["swelling"].values())
    if swelling > 0:
        for n in np.flatnonzero(ok):
            for v in range(len(table.amounts)):
                _, _, reach, clearance = table.skeleton(n, v)
                box = table.ink_box[n, v]
                stroke = float(table.stroke[n, v])
                bulge = bulge_half_width(swelling, float(box[2] - box[0]), stroke)
                if not swelling_room(reach, clearance, bulge, stroke).any():
                    ok[n] = False
                    break
    return ok
