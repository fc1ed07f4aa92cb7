"""What the eye measures on a MADMAN object: stroke width, glyph extent, slant, fracture gaps, swellings.

Used to show that every attribute's classes are separable (``tests/test_madman_separability.py``,
``benchmarks/madman_separability.py``). Every measure works on one object's ink coverage ``alpha`` ``(S, S)``
float in [0, 1] drawn alone (:meth:`~bindscope.generators.madman.render.Renderer.digit_alpha`); "ink" is
``alpha >= 0.5``. Lengths are canvas pixels, angles degrees.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import ndimage as ndi
from skimage.morphology import skeletonize

from bindscope.generators.madman.morpho import upsample_binary


def extent(mask: np.ndarray) -> float:
    """The glyph's largest diameter: the largest distance between two ink pixel centres + 1 (rotation-free)."""
    edge = mask & ~ndi.binary_erosion(mask)
    pts = np.argwhere(edge).astype(np.float64)
    return float(np.sqrt(((pts[:, None] - pts[None]) ** 2).sum(-1)).max()) + 1.0


def _glyph_frame(alpha: np.ndarray, theta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(up, right, weight)`` of the ink turned back by ``theta`` (radians, counter-clockwise as seen)."""
    ys, xs = np.nonzero(alpha > 0)
    up = -ys * math.cos(theta) - xs * math.sin(theta)
    right = -ys * math.sin(theta) + xs * math.cos(theta)
    return up, right, alpha[ys, xs].astype(np.float64)


def height(mask: np.ndarray, theta: float) -> float:
    """Ink extent along the glyph's own upward axis (``theta`` its rotation, radians), + 1 pixel."""
    up, _, _ = _glyph_frame(mask.astype(np.float64), theta)
    return float(up.max() - up.min() + 1.0)


def slant(alpha: np.ndarray, theta: float) -> float:
    """Slant of the glyph in its own frame, ``atan(mu11 / mu02)`` of its ink coverage (degrees, 0 = upright)."""
    up, right, w = _glyph_frame(alpha, theta)
    up = up - (w * up).sum() / w.sum()
    right = right - (w * right).sum() / w.sum()
    return math.degrees(math.atan((w * up * right).sum() / (w * up * up).sum()))


def stroke_width(alpha: np.ndarray) -> float:
    """Median stroke width: twice the median distance-to-background over the skeleton of the 4x upsampled ink
    (Morpho-MNIST's thickness with a median, so one swelling or junction does not move it)."""
    ink = upsample_binary(alpha, 4)
    return float(2.0 * np.median(ndi.distance_transform_edt(ink)[skeletonize(ink)]) / 4)


def widest(alpha: np.ndarray) -> float:
    """Diameter of the largest disk inside the ink (4x upsampled)."""
    return float(2.0 * ndi.distance_transform_edt(upsample_binary(alpha, 4)).max() / 4)


def cut_gap(alpha: np.ndarray, placement: dict, box: np.ndarray, theta: float, cut: list[float]) -> float:
    """Width of the run of coverage < 0.5 through a fracture cut, measured along the stroke (0 if the cut's
    centre is inked).

    Args:
        placement: the renderer's placement of the object (``centre``, ``scale``).
        box: the glyph variant's ink box in frame coordinates; theta: its rotation (radians).
        cut: ``[y, x, tangent]`` in frame coordinates (``placement["cuts"]``).
    """
    y, x, tangent = cut
    cy, cx = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    c, s = math.cos(theta), math.sin(theta)
    vx, vy = (x - cx) * c + (y - cy) * s, -(x - cx) * s + (y - cy) * c     # the renderer's map, inverted
    py, px = placement["centre"][0] + vy * placement["scale"], placement["centre"][1] + vx * placement["scale"]
    ty, tx = math.sin(tangent), math.cos(tangent)
    dx, dy = tx * c + ty * s, -tx * s + ty * c
    steps = np.arange(-8.0, 8.0001, 0.05)
    line = ndi.map_coordinates(alpha, [py + steps * dy, px + steps * dx], order=1)
    mid = len(steps) // 2
    if line[mid] >= 0.5:
        return 0.0
    lo, hi = mid, mid
    while lo > 0 and line[lo - 1] < 0.5:
        lo -= 1
    while hi < len(steps) - 1 and line[hi + 1] < 0.5:
        hi += 1
    return (hi - lo + 1) * 0.05


def measure_objects(generator, split: str = "test", count: int = 100) -> list[dict]:
    """Every object of samples ``0 .. count-1`` of ``split``, drawn alone and measured.

    Returns:
        One dict per object: its six attribute values, ``digit``, ``height`` (along its own upward axis),
        ``extent``, ``stroke`` (median stroke width), ``ratio`` (stroke / height), ``widest`` / ``nominal``
        (the largest inscribed disk and the glyph's stroke width, pixels), ``slant`` (degrees), ``cuts`` and
        ``gaps`` (pixels, one per cut).
    """
    values = generator.config["attributes"]
    table = generator.table
    rows = []
    for sample in generator.make_samples(split, 0, count):
        for digit, placed in zip(sample.spec["digits"], sample.spec["placements"]):
            alpha, placement = generator.renderer.digit_alpha(digit, tuple(placed["centre"]))
            attrs = digit["attributes"]
            theta = math.radians(values["rotation"][attrs["rotation"]])
            box = table.ink_box[placement["source"], table.amounts.index(values["thickness"][attrs["thickness"]])]
            mask = alpha >= 0.5
            tall = height(mask, theta)
            stroke = stroke_width(alpha)
            rows.append({**attrs, "digit": digit["digit"], "height": tall, "extent": extent(mask),
                         "stroke": stroke, "ratio": stroke / tall, "widest": widest(alpha),
                         "nominal": placement["stroke"], "slant": slant(alpha, theta),
                         "cuts": len(placement["cuts"]),
                         "gaps": [cut_gap(alpha, placement, box, theta, cut) for cut in placement["cuts"]]})
    return rows
