"""Realise a MADMAN plan as pixels (numpy + scipy.ndimage): image, instance mask and the object table.

Geometry (canvas pixel ``(i, j)`` is centred at ``(i, j)``; angles counter-clockwise as seen):

- **size**: the digit is scaled by ``s = size * canvas / ink_height`` where ``ink_height`` is the height of
  the digit's binarised ink before any change (:class:`~bindscope.generators.madman.morpho.MorphoTable`),
  so an upright digit's ink is ``size * canvas`` pixels tall (thickening adds the added stroke width).
- **rotation**: by the value's angle about the centre of the ink box.
- **placement**: object 1 (salient) has its ink-box centre at the canvas centre plus the plan's jitter;
  object 2's centre lies along the plan's direction, as far from the centre as keeps its rotated ink box
  ``margin`` pixels inside the canvas. Object 1 is drawn over object 2.
- **colour**: a digit's ink coverage ``a`` (0..1) is painted as ``a * rgb`` over black; with two digits,
  object 1 covers ``c1 = a1`` and object 2 ``c2 = a2 * (1 - a1)``; the image is ``round(c1 * rgb1 + c2 *
  rgb2)``.
- **mask**: pixel value k where object k's coverage ``c_k >= 0.5`` (object 1 wins a tie), else 0.

Each output pixel is the mean of ss x ss bilinear samples (:func:`scipy.ndimage.map_coordinates`) of the
digit's thickness variant, ss = min(``render.supersample`` (default 2), ceil(1 / s)) so that a minified digit
is sampled at least once per frame pixel; each sample's source point is found by inverting, in this order,
placement/rotation/scale and swelling, and the fracture factor is evaluated at that same source point.
Supersampling is a box-filter anti-aliasing: strokes thinner than a pixel stay continuous.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import ndimage as ndi

from bindscope.dataset.records import ObjectRecord, mask_bbox_area, size_ranks
from bindscope.generators.madman.morpho import MorphoTable, fracture_factor, swell_inverse

_TURNS = tuple(math.radians(a) for a in (0, 45, -45, 90, -90, 135, -135, 180))
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
            ``(alpha, placement)`` with placement ``{"centre": [y, x], "scale": s, "box": [y0, x0, y1, x1]}``
            (the rotated ink box, pixels).
        """
        t = self.table
        n = digit["source"]
        attrs = digit["attributes"]
        amount = float(self.values["thickness"][attrs["thickness"]])
        strength = float(self.values["swelling"][attrs["swelling"]])
        theta = math.radians(float(self.values["rotation"][attrs["rotation"]]))
        box = t.ink_box[n]
        scale = float(self.values["size"][attrs["size"]]) * self.size / float(box[2] - box[0])
        thickness = float(t.thickness[n])
        grow = 1.5 + max(0.0, amount) * thickness / 2 + (2.0 if strength > 1 else 0.0)
        ey, ex, cy, cx = _extent(box, scale, theta, max(0.0, amount) * thickness / 2 + (1.0 if strength > 1 else 0.0))
        gy, gx, _, _ = _extent(box, scale, theta, grow)
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
        top, left = max(0, int(math.floor(py - gy))), max(0, int(math.floor(px - gx)))
        bottom, right = min(self.size, int(math.ceil(py + gy)) + 1), min(self.size, int(math.ceil(px + gx)) + 1)
        alpha = np.zeros((self.size, self.size), np.float32)
        if bottom <= top or right <= left:
            return alpha, {"centre": [py, px], "scale": scale, "box": [py - ey, px - ex, py + ey, px + ex]}
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
        points, tangent, halfwidth, interior = t.skeleton(n)
        if strength > 1.0 and len(points):
            p = points[min(int(digit["swell"] * len(points)), len(points) - 1)]
            qy, qx = swell_inverse(qy, qx, (float(p[0]), float(p[1])), float(self.morpho["swelling_radius"]),
                                   strength)
        variant = t.variants[n, t.amounts.index(amount)].astype(np.float32) * np.float32(1 / 255)
        patch = ndi.map_coordinates(variant, [qy, qx], order=1, mode="constant", cval=0.0, prefilter=False)
        if digit["cuts"] and len(points):
            choices = np.flatnonzero(interior) if interior.any() else np.arange(len(points))
            cuts = []
            for u in digit["cuts"]:
                i = choices[min(int(u * len(choices)), len(choices) - 1)]
                half = max(1.0, float(halfwidth[i]) + amount * thickness / 2 + 1.0)
                cuts.append((float(points[i, 0]), float(points[i, 1]), float(tangent[i]), half))
            patch *= fracture_factor(qy, qx, np.array(cuts), float(self.morpho["fracture_width"]), 1.0 / scale)
        patch = patch.reshape(ss * ss, h, w)
        patch = patch[0] if ss == 1 else patch.sum(axis=0) * np.float32(1.0 / (ss * ss))
        np.clip(patch, 0.0, 1.0, out=patch)
        alpha[top:bottom, left:right] = patch
        return alpha, {"centre": [py, px], "scale": scale, "box": [py - ey, px - ex, py + ey, px + ex]}

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
            amount = float(self.values["thickness"][digit["attributes"]["thickness"]])
            n = digit["source"]
            objects.append(ObjectRecord(
                index=k, category=str(digit["digit"]), category_id=int(digit["digit"]),
                attributes=dict(digit["attributes"]), bbox=bbox, area=area, size_rank=ranks[k - 1],
                salient=k == 1, mention_position=mention.get(k, 0),
                extras={"source_index": float(n), "scale": placement["scale"],
                        "centre_y": placement["centre"][0], "centre_x": placement["centre"][1],
                        "stroke_thickness": float(self.table.thickness[n]) * (1 + amount) * placement["scale"]}))
        return image, mask, objects, placements
