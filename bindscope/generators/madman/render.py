"""Realise a MADMAN plan as pixels (numpy + scipy.ndimage): image, instance mask and the object table.

A digit is its normalised glyph (:mod:`~bindscope.generators.madman.morpho`: deslanted, skeleton
:data:`~bindscope.generators.madman.morpho.GLYPH` frame pixels tall, redrawn with the thickness level's stroke).
Geometry (canvas pixel ``(i, j)`` is centred at ``(i, j)``; angles counter-clockwise as seen):

- **thickness** ``t``: the glyph variant whose stroke width is ``t`` times its outer height.
- **size**: the glyph is scaled by ``s = size * canvas / max(glyph_height, diameter / WIDEST)``,
  ``glyph_height`` the variant's ink height and ``diameter`` its largest diameter, so an upright digit's ink is
  ``size * canvas`` pixels tall at every thickness, unless it is wider than that allows: no glyph's largest
  diameter exceeds ``WIDEST`` = 1.25 times ``size * canvas``, which keeps size levels 1.4x apart disjoint in
  extent after any rotation.
- **rotation**: by the value's angle about the centre of the ink box.
- **swelling** ``v > 0``: around one skeleton point away from stroke ends and junctions (seeded draw), the
  stroke widens to ``max(v * glyph_height, SWELL_MIN * stroke)`` over ``SWELL_LENGTH`` bulge half-widths
  either side (:func:`~bindscope.generators.madman.morpho.swelling_cover`).
- **fracture** ``n``: ``n`` cuts across the stroke, each ``max(morpho.fracture_min_gap, morpho.fracture_gap *
  size * canvas)`` canvas pixels wide, at skeleton points at least one stroke width plus one gap along the
  skeleton from any stroke end or junction, two (stroke + gap) apart and clear of the swelling (seeded draws;
  fewer cuts if the glyph has no room left).
- **placement**: object 1 (salient) has its ink-box centre at the canvas centre plus the plan's jitter;
  object 2's centre lies along the plan's direction, as far from the centre as keeps its rotated ink box
  ``margin`` pixels inside the canvas. Object 1 is drawn over object 2.
- **colour**: a digit's ink coverage ``a`` (0..1) is painted as ``a * rgb`` over black; with two digits,
  object 1 covers ``c1 = a1`` and object 2 ``c2 = a2 * (1 - a1)``; the image is ``round(c1 * rgb1 + c2 *
  rgb2)``.
- **mask**: pixel value k where object k's coverage ``c_k >= 0.5`` (object 1 wins a tie), else 0.

Each output pixel is the mean of ss x ss bilinear samples (:func:`scipy.ndimage.map_coordinates`) of the
glyph variant, ss = min(``render.supersample`` (default 2), ceil(1 / s)) so that a minified glyph is sampled
at least once per frame pixel; each sample's source point is found by inverting placement/rotation/scale, and
the swelling's coverage and the fracture factor are evaluated at that same source point.
Supersampling is a box-filter anti-aliasing: strokes thinner than a pixel stay continuous.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import ndimage as ndi

from bindscope.dataset.records import ObjectRecord, mask_bbox_area, size_ranks
from bindscope.generators.madman.morpho import (SWELL_LENGTH, MorphoTable, bulge_half_width, fracture_factor,
                                               swelling_centre, swelling_cover)

_TURNS = tuple(math.radians(a) for a in (0, 45, -45, 90, -90, 135, -135, 180))
WIDEST = 1.25  # no glyph's largest diameter exceeds this many times its size level
EXTRAS = ["source_index", "scale", "centre_y", "centre_x", "stroke_thickness"]


def _extent(box: np.ndarray, scale: float, theta: float, grow: float) -> tuple[float, float, float, float]:
    """Half extents (ey, ex) of the rotated, scaled ink box (+ ``grow`` frame pixels) and its centre in the frame."""
    y0, x0, y1, x1 = (float(v) for v in box)
    cy, cx = (y0 + y1) / 2, (x0 + x1) / 2
    hy, hx = (y1 - y0) / 2 + grow, (x1 - x0) / 2 + grow
    c, s = abs(math.cos(theta)), abs(math.sin(theta))
    return scale * (hy * c + hx * s), scale * (hx * c + hy * s), cy, cx


class Renderer:
    """Draws planned digits. Holds the digit source's :class:`MorphoTable` and the config's value sets."""

    def __init__(self, config: dict, table: MorphoTable):
        self.config = config
        self.table = table
        self.size = int(config["image_size"])
        self.values = config["attributes"]
        self.morpho = config["morpho"]
        self.margin = float(config["layout"]["margin"])
        self.supersample = int(config["render"]["supersample"])

    def digit_alpha(self, digit: dict, centre: tuple[float, float] | None = None, direction: float = 0.0,
                    avoid: list[float] | None = None) -> tuple[np.ndarray, dict]:
        """Ink coverage ``(S, S)`` float32 in [0, 1] of one planned digit on the canvas, and its placement.

        Args:
            digit: one entry of a plan's ``digits``.
            centre: canvas position ``(y, x)`` (pixels) of the ink-box centre; None places the digit as far
                out as the canvas allows along ``direction`` (radians, 0 = right, counter-clockwise) or, if
                its box would overlap ``avoid``, along the first of ``direction`` + 45, -45, 90, -90, 135,
                -135, 180 degrees where it does not (the least overlap if it overlaps everywhere).
            avoid: a box ``(y0, x0, y1, x1)`` in canvas pixels to keep clear (object 1's rotated ink box).

        Returns:
            ``(alpha, placement)`` with placement ``{"centre": [y, x], "scale": s, "box": [y0, x0, y1, x1],
            "stroke": w, "cuts": [[y, x, tangent], ...], "gap": g}``: the rotated ink box (canvas pixels), the
            stroke width (canvas pixels), the fracture cuts (frame coordinates, radians) and their width
            (canvas pixels).
        """
        t = self.table
        n = digit["source"]
        attrs = digit["attributes"]
        v = t.amounts.index(float(self.values["thickness"][attrs["thickness"]]))
        swelling = float(self.values["swelling"][attrs["swelling"]])
        theta = math.radians(float(self.values["rotation"][attrs["rotation"]]))
        box = t.ink_box[n, v]
        glyph = float(box[2] - box[0])
        target = float(self.values["size"][attrs["size"]]) * self.size
        # the glyph is size * canvas tall, unless it is so wide that its largest diameter would exceed WIDEST times
        # that: then its largest diameter is WIDEST * size * canvas (sizes stay apart after any rotation)
        scale = target / max(glyph, float(t.diameter[n, v]) / WIDEST)
        stroke = float(t.stroke[n, v])
        bulge = bulge_half_width(swelling, glyph, stroke)
        if bulge > 0 or digit["cuts"]:
            points, tangent, reach, clearance = t.skeleton(n, v)
        ey, ex, cy, cx = _extent(box, scale, theta, max(0.0, bulge - stroke / 2))
        gy, gx, _, _ = _extent(box, scale, theta, max(0.0, bulge - stroke / 2) + 1.5 / scale)
        if centre is None:
            best = None
            for turn in _TURNS:
                cand = self._far_point(direction + turn, ey, ex)
                overlap = 0.0
                if avoid is not None:
                    oy = min(cand[0] + ey, avoid[2]) - max(cand[0] - ey, avoid[0])
                    ox = min(cand[1] + ex, avoid[3]) - max(cand[1] - ex, avoid[1])
                    overlap = max(0.0, oy) * max(0.0, ox)
                if best is None or overlap < best[0] - 1e-9:
                    best = (overlap, cand)
                if overlap == 0.0:
                    break
            centre = best[1]
        py, px = centre
        gap = max(float(self.morpho["fracture_min_gap"]), float(self.morpho["fracture_gap"]) * target)
        swell_at = (swelling_centre(points, reach, clearance, bulge, stroke, digit["swell"])
                    if bulge > 0 and len(points) else None)
        half = stroke / 2 + max(1.0, 1.0 / scale)  # a cut runs a canvas pixel beyond the stroke on each side
        cuts = []
        if digit["cuts"]:
            cuts = self._cuts(digit["cuts"], points, tangent, reach, clearance, stroke, half, gap / scale, swell_at,
                              SWELL_LENGTH * bulge)
        placement = {"centre": [py, px], "scale": scale, "box": [py - ey, px - ex, py + ey, px + ex],
                     "stroke": stroke * scale, "cuts": cuts, "gap": gap}
        top, left = max(0, int(math.floor(py - gy))), max(0, int(math.floor(px - gx)))
        bottom, right = min(self.size, int(math.ceil(py + gy)) + 1), min(self.size, int(math.ceil(px + gx)) + 1)
        alpha = np.zeros((self.size, self.size), np.float32)
        if bottom <= top or right <= left:
            return alpha, placement
        # ss x ss samples per pixel at (i + (k + 0.5) / ss - 0.5): enough for >= 1 sample per frame pixel
        ss = max(1, min(self.supersample, math.ceil(1.0 / scale - 1e-6)))
        sub = (np.arange(ss, dtype=np.float32) + 0.5) / ss - 0.5
        h, w = bottom - top, right - left
        # sample grids of shape (ss, ss, h, w): sub-sample offsets first, so averaging adds whole planes
        vy = ((np.arange(top, bottom, dtype=np.float32)[None, :] + sub[:, None] - py) / scale).reshape(ss, 1, h, 1)
        vx = ((np.arange(left, right, dtype=np.float32)[None, :] + sub[:, None] - px) / scale).reshape(1, ss, 1, w)
        cos, sin = math.cos(theta), math.sin(theta)
        qx = (cx + vx * cos) - vy * sin
        qy = (cy + vx * sin) + vy * cos
        variant = t.variants[n, v].astype(np.float32) * np.float32(1 / 255)
        patch = ndi.map_coordinates(variant, [qy, qx], order=1, mode="constant", cval=0.0, prefilter=False)

        def window(y: float, x: float, radius: float) -> tuple[slice, slice]:
            """The patch rows and columns within ``radius`` frame pixels of the frame point ``(y, x)``."""
            vx_, vy_ = (x - cx) * cos + (y - cy) * sin, -(x - cx) * sin + (y - cy) * cos
            ry, rx = py + vy_ * scale - top, px + vx_ * scale - left
            reach = radius * scale + 1.0
            return (slice(max(0, int(math.floor(ry - reach))), max(0, int(math.ceil(ry + reach)) + 1)),
                    slice(max(0, int(math.floor(rx - reach))), max(0, int(math.ceil(rx + reach)) + 1)))

        if swell_at is not None:
            rows, cols = window(float(swell_at[0]), float(swell_at[1]), (SWELL_LENGTH + 1.0) * bulge)
            part = patch[..., rows, cols]
            np.maximum(part, swelling_cover(qy[..., rows, cols], qx[..., rows, cols], points, swell_at, stroke / 2,
                                            bulge, scale), out=part)
        for y, x, angle in cuts:
            rows, cols = window(y, x, math.hypot(half, gap / scale / 2 + 1.0 / scale))
            patch[..., rows, cols] *= fracture_factor(qy[..., rows, cols], qx[..., rows, cols],
                                                      np.array([[y, x, angle, half]], np.float32),
                                                      gap / scale, 1.0 / scale)
        patch = patch.reshape(ss * ss, h, w)
        patch = patch[0] if ss == 1 else patch.sum(axis=0) * np.float32(1.0 / (ss * ss))
        np.clip(patch, 0.0, 1.0, out=patch)
        alpha[top:bottom, left:right] = patch
        return alpha, placement

    @staticmethod
    def _cuts(draws: list[float], points: np.ndarray, tangent: np.ndarray, reach: np.ndarray,
              clearance: np.ndarray, stroke: float, half: float, gap: float, swell_at: np.ndarray | None,
              swell_length: float) -> list[list[float]]:
        """Fracture cuts ``[y, x, tangent]`` (frame coordinates) for the plan's draws in [0, 1).

        A cut (``half`` frame pixels long on each side of the centre line) sits at a skeleton point whose
        distance along the skeleton to a stroke end or junction is at least ``(stroke + gap) / 2 + 1`` (frame
        pixels, so ink remains on both sides of it), whose clearance to any other stroke exceeds
        ``half + stroke / 2`` (the cut never touches, nor is bridged by, another stroke), ``2 * (stroke + gap)``
        from every earlier cut and ``swell_length + (stroke + gap) / 2`` from the swelling's centre. Where no
        point qualifies, the first cut goes to the point farthest along the skeleton from any end or junction
        and later cuts are dropped: a fractured digit always has at least one cut.
        """
        clear = (stroke + gap) / 2
        free = np.flatnonzero((reach >= clear + 1.0) & (clearance > half + stroke / 2 + 0.5))
        if swell_at is not None:
            free = free[((points[free] - swell_at) ** 2).sum(1) >= (swell_length + clear) ** 2]
        cuts = []
        for k, u in enumerate(draws):
            if not len(free):
                if k == 0 and len(points):
                    free = np.array([int(np.argmax(reach))])
                else:
                    break
            i = free[min(int(u * len(free)), len(free) - 1)]
            cuts.append([float(points[i, 0]), float(points[i, 1]), float(tangent[i])])
            free = free[((points[free] - points[i]) ** 2).sum(1) >= (4 * clear) ** 2]
        return cuts

    def _far_point(self, direction: float, ey: float, ex: float) -> tuple[float, float]:
        """The point farthest from the canvas centre along ``direction`` where a box of half extents
        ``(ey, ex)`` stays ``margin`` pixels inside the canvas."""
        mid = (self.size - 1) / 2.0
        half = mid - self.margin
        dy, dx = -math.sin(direction), math.cos(direction)
        reach = [(half - e) / abs(d) for e, d in ((ey, dy), (ex, dx)) if abs(d) > 1e-9]
        r = max(0.0, min(reach))
        return mid + r * dy, mid + r * dx

    def render(self, spec: dict) -> tuple[np.ndarray, np.ndarray, list[ObjectRecord], list[dict]]:
        """Realise a plan: ``(image (S,S,3) uint8, mask (S,S) uint8, objects, placements)``."""
        mid = (self.size - 1) / 2.0
        jy, jx = spec["layout"]["jitter"]
        alphas, placements = [], []
        for k, digit in enumerate(spec["digits"], start=1):
            centre = (mid + jy, mid + jx) if k == 1 else None
            avoid = placements[0]["box"] if k == 2 else None
            alpha, placement = self.digit_alpha(digit, centre, spec["layout"]["direction"], avoid)
            alphas.append(alpha)
            placements.append(placement)
        cover = [alphas[0]]
        if len(alphas) == 2:
            cover.append(alphas[1] * (1.0 - alphas[0]))
        colours = np.array([self.values["colour"][d["attributes"]["colour"]] for d in spec["digits"]], np.float32)
        rgb = np.stack(cover, axis=-1) @ colours  # (S, S, k) coverages x (k, 3) colours
        rgb += 0.5
        np.minimum(rgb, 255.0, out=rgb)
        image = rgb.astype(np.uint8)  # truncation of x + 0.5 = rounding half up (x >= 0)
        mask = np.zeros((self.size, self.size), np.uint8)
        for k in range(len(cover), 0, -1):
            mask[cover[k - 1] >= 0.5] = k
        mention = {m["index"]: pos for pos, m in enumerate(spec["mentions"], start=1)}
        boxes = [mask_bbox_area(mask, k) for k in range(1, len(cover) + 1)]
        ranks = size_ranks([area for _, area in boxes])
        objects = []
        for k, (digit, (bbox, area), placement) in enumerate(zip(spec["digits"], boxes, placements), start=1):
            n = digit["source"]
            objects.append(ObjectRecord(
                index=k, category=str(digit["digit"]), category_id=int(digit["digit"]),
                attributes=dict(digit["attributes"]), bbox=bbox, area=area, size_rank=ranks[k - 1],
                salient=k == 1, mention_position=mention.get(k, 0),
                extras={"source_index": float(n), "scale": placement["scale"],
                        "centre_y": placement["centre"][0], "centre_x": placement["centre"][1],
                        "stroke_thickness": placement["stroke"]}))
        return image, mask, objects, placements
