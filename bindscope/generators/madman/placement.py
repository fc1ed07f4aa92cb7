"""Where two MADMAN digits go when their ink boxes cannot be held apart: a search over whole-pixel shifts of their
drawn ink (numpy and scipy).

The layout (:meth:`~bindscope.generators.madman.render.Renderer.layout`) first keeps the two ink boxes
:data:`GAP` + 1 pixels apart along one axis. Where no turn of object 2's direction and no move of object 1 gives
that room (two large digits, at least one turned, on a small canvas), :func:`fit_ink` looks at the ink itself:
each digit is drawn once at its reference centre, and the search finds whole-pixel shifts of the two drawings that
keep every pixel either digit inks (coverage > 0) more than :data:`GAP` pixels from every pixel of the other, along
rows, columns and diagonals, and both inside the canvas margin. Whole-pixel shifts move a drawing without changing
it (a digit is drawn relative to the integer part of its centre), so the image is exactly the two shifted drawings.
"""

from __future__ import annotations

import math

import numpy as np

#: Empty pixels kept between the ink of the two digits of an image (in every direction, diagonals included): no
#: pixel that either digit inks, however faintly (coverage > 0), lies within ``GAP`` pixels of one the other inks.
GAP = 2


def ink_box(support: np.ndarray) -> tuple[int, int, int, int]:
    """``(y0, x0, y1, x1)`` (inclusive pixel rows and columns) of the True pixels of a non-empty ``(H, W)`` array."""
    ys, xs = np.nonzero(support)
    return int(ys.min()), int(xs.min()), int(ys.max()), int(xs.max())


def _grow(support: np.ndarray, gap: int) -> np.ndarray:
    """``support`` ``(h, w)`` bool padded by ``gap`` and grown by ``gap`` pixels in every direction (Chebyshev)."""
    from scipy import ndimage

    padded = np.pad(support, gap)
    return ndimage.maximum_filter(padded, size=2 * gap + 1, mode="constant", cval=False) if gap else padded


def fit_ink(one: tuple[np.ndarray, int, int], two: tuple[np.ndarray, int, int], size: int, margin: float,
            gap: int = GAP) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """Whole-pixel shifts ``((dy1, dx1), (dy2, dx2))`` of two drawn digits that keep their ink ``gap`` pixels apart.

    Args:
        one, two: each ``(coverage, top, left)``: a digit's ink coverage ``(h, w)`` (> 0 where it inks) drawn at
            its reference centre, and the canvas pixel of its top-left element (object 1 at the canvas centre plus
            its jitter, object 2 at its far point along the plan's direction).
        size: the canvas side (pixels); margin: every inked pixel stays at least ``ceil(margin)`` pixels from the
            canvas edge; gap: pixels, as :data:`GAP`.

    Returns:
        The shifts that move object 1 least (squared distance), then object 2 least among those, the first in
        row-major order of the relative shift among equals; None when no shift keeps the ink apart and inside (the
        digits are too large for the canvas). Both shifts are 0 when the reference centres keep the ink apart.
    """
    from scipy import signal

    boxes, crops = [], []
    for coverage, top, left in (one, two):
        y0, x0, y1, x1 = ink_box(coverage > 0)
        boxes.append((top + y0, left + x0, top + y1, left + x1))
        crops.append(coverage[y0:y1 + 1, x0:x1 + 1] > 0)
    grown = _grow(crops[0], gap)
    # hits[d] = pixels where object 2, placed d pixels below/right of grown's origin, meets grown object 1
    hits = signal.correlate(grown.astype(np.float64), crops[1].astype(np.float64), mode="full", method="fft") > 0.5
    low, high = math.ceil(margin - 1e-9), size - 1 - math.ceil(margin - 1e-9)
    shifts = np.arange(-size, size + 1)  # r = shift of object 2 relative to object 1, per axis
    best1, room = [], []
    for axis in (0, 1):
        lo = np.minimum(boxes[0][axis], boxes[1][axis] + shifts)
        hi = np.maximum(boxes[0][axis + 2], boxes[1][axis + 2] + shifts)
        first, last = low - lo, high - hi  # object 1's shifts that keep the pair inside
        room.append(first <= last)
        best1.append(np.clip(0, first, last))
    # offset of object 2's crop from grown's origin at relative shift r: d = r + (box2 - box1 + gap)
    d = [shifts + boxes[1][axis] - boxes[0][axis] + gap for axis in (0, 1)]
    index = [d[axis] + crops[1].shape[axis] - 1 for axis in (0, 1)]
    inside = [(i >= 0) & (i < hits.shape[axis]) for axis, i in enumerate(index)]
    clash = np.zeros((len(shifts), len(shifts)), bool)
    rows, cols = np.flatnonzero(inside[0]), np.flatnonzero(inside[1])
    clash[np.ix_(rows, cols)] = hits[np.ix_(index[0][rows], index[1][cols])]
    ok = room[0][:, None] & room[1][None, :] & ~clash
    if not ok.any():
        return None
    t1y, t1x = best1[0][:, None], best1[1][None, :]
    t2y, t2x = t1y + shifts[:, None], t1x + shifts[None, :]
    cost = (t1y ** 2 + t1x ** 2) * (16 * size * size + 1) + t2y ** 2 + t2x ** 2
    flat = int(np.argmin(np.where(ok, cost, np.iinfo(np.int64).max)))
    ry, rx = divmod(flat, len(shifts))
    return (int(best1[0][ry]), int(best1[1][rx])), (int(best1[0][ry] + shifts[ry]), int(best1[1][rx] + shifts[rx]))
