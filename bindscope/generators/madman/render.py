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
- **placement** (:meth:`Renderer.layout`): object 1 (salient) has its ink-box centre at the canvas centre plus
  the plan's jitter; object 2's centre lies along the plan's direction (or that direction turned by a multiple
  of 45 degrees), as far from the centre as keeps its ink ``margin`` pixels inside the canvas and its ink
  extent at least a pixel clear of object 1's along one axis. Where only a move of object 1 makes room (two
  large digits), object 1 moves as little as that needs (generator version 4; before, the two digits
  overlapped). Object 1 is drawn over object 2.
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
from dataclasses import dataclass, replace

import numpy as np
from scipy import ndimage as ndi

from bindscope.dataset.records import ObjectRecord, mask_bbox_area, size_ranks
from bindscope.generators.madman.legibility import Reader
from bindscope.generators.madman.morpho import (SWELL_LENGTH, MorphoTable, bulge_half_width, fracture_factor,
                                               swelling_centre, swelling_cover)

_TURNS = tuple(math.radians(a) for a in (0, 45, -45, 90, -90, 135, -135, 180))
WIDEST = 1.25  # no glyph's largest diameter exceeds this many times its size level
CONFIDENT = 4  # of the reader's 5 nearest references must read a drawn digit as its class (Renderer.choose)
EXTRAS = ["source_index", "scale", "centre_y", "centre_x", "stroke_thickness"]


def _extent(box: tuple[float, float, float, float], scale: float, theta: float, grow: float) -> tuple[float, float]:
    """Half extents ``(ey, ex)`` (canvas pixels) of the rotated, scaled ink box grown by ``grow`` frame pixels."""
    y0, x0, y1, x1 = box
    hy, hx = (y1 - y0) / 2 + grow, (x1 - x0) / 2 + grow
    c, s = abs(math.cos(theta)), abs(math.sin(theta))
    return scale * (hy * c + hx * s), scale * (hx * c + hy * s)


def _square(point, radius: float, side: int) -> tuple[slice, slice]:
    """Rows and columns of a ``side``-pixel square frame within ``radius`` (frame pixels, plus one) of ``point``
    ``(y, x)`` along each axis."""
    y, x = float(point[0]), float(point[1])
    return (slice(max(0, int(math.floor(y - radius)) - 1), min(side, int(math.ceil(y + radius)) + 2)),
            slice(max(0, int(math.floor(x - radius)) - 1), min(side, int(math.ceil(x + radius)) + 2)))


def _grid(rows: slice, cols: slice) -> tuple[np.ndarray, np.ndarray]:
    """Frame coordinates of the pixels ``rows x cols`` as float32 ``(h, 1)`` and ``(1, w)`` (broadcast)."""
    return (np.arange(rows.start, rows.stop, dtype=np.float32)[:, None],
            np.arange(cols.start, cols.stop, dtype=np.float32)[None, :])


@dataclass
class Pose:
    """One planned digit's geometry before it is placed (frame pixels unless noted).

    ``n``/``v``: source digit and glyph variant (thickness); ``theta``: rotation (radians); ``scale``: canvas
    pixels per frame pixel; ``target``: the size level's height (canvas pixels); ``stroke``: stroke width;
    ``bulge``: the swelling's half-width (0 without); ``box``: the variant's ink box ``(y0, x0, y1, x1)``;
    ``extent``: ``(up, left, down, right)``, how far the drawn ink (swelling included, plus one canvas pixel
    of anti-aliasing) reaches from the ink-box centre (canvas pixels, after rotation and scaling); ``guard``: half
    extents ``(ey, ex)`` of the rotated, scaled ink box grown by the swelling and 1.5 canvas pixels (the window
    that is drawn); ``skeleton``: ``(points, tangent, reach, clearance)`` of :meth:`MorphoTable.skeleton` when a
    swelling or a cut needs it, else None; ``swell_at``: the swelling's centre ``(y, x)`` or None; ``cuts``:
    the fracture cuts ``[y, x, tangent]`` (radians); ``gap``: their width (canvas pixels); ``cut_half``: how far
    a cut runs to each side of the centre line. ``extent`` and ``guard`` are None on a candidate that
    :meth:`Renderer.choose` only reads (they matter only where a digit is placed).
    """

    n: int
    v: int
    theta: float
    scale: float
    target: float
    stroke: float
    bulge: float
    box: tuple[float, float, float, float]
    skeleton: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None
    swell_at: np.ndarray | None
    cuts: list[list[float]]
    gap: float
    cut_half: float
    extent: tuple[float, float, float, float] | None = None
    guard: tuple[float, float] | None = None

    @property
    def pivot(self) -> tuple[float, float]:
        """The ink box's centre ``(y, x)`` in the frame: the point rotated about and placed at the canvas centre."""
        return (self.box[0] + self.box[2]) / 2, (self.box[1] + self.box[3]) / 2


class Renderer:
    """Draws planned digits. Holds the digit source's :class:`MorphoTable`, the config's value sets and the
    reader that picks among a digit's candidate sources (:meth:`choose`; None: always the planned source)."""

    def __init__(self, config: dict, table: MorphoTable, reader: Reader | None = None):
        self.config = config
        self.table = table
        self.reader = reader
        self.size = int(config["image_size"])
        self.values = config["attributes"]
        self.morpho = config["morpho"]
        self.margin = float(config["layout"]["margin"])
        self.supersample = int(config["render"]["supersample"])
        self._outlines: dict[tuple[int, int], np.ndarray] = {}

    def pose(self, digit: dict) -> Pose:
        """The geometry of one planned digit (an entry of a plan's ``digits``): see :class:`Pose`."""
        return self._placeable(self._shape(digit))

    def _shape(self, digit: dict) -> Pose:
        """:meth:`pose` without ``extent`` and ``guard``: all that drawing the digit in its frame needs."""
        t = self.table
        n = digit["source"]
        attrs = digit["attributes"]
        v = t.amounts.index(float(self.values["thickness"][attrs["thickness"]]))
        theta = math.radians(float(self.values["rotation"][attrs["rotation"]]))
        box = tuple(float(b) for b in t.ink_box[n, v])
        glyph = box[2] - box[0]
        target = float(self.values["size"][attrs["size"]]) * self.size
        # the glyph is size * canvas tall, unless it is so wide that its largest diameter would exceed WIDEST times
        # that: then its largest diameter is WIDEST * size * canvas (sizes stay apart after any rotation)
        scale = target / max(glyph, float(t.diameter[n, v]) / WIDEST)
        stroke = float(t.stroke[n, v])
        bulge = bulge_half_width(float(self.values["swelling"][attrs["swelling"]]), glyph, stroke)
        skeleton = t.skeleton(n, v) if bulge > 0 or digit["cuts"] else None
        swell_at = None
        if bulge > 0 and len(skeleton[0]):
            points, _, reach, clearance = skeleton
            swell_at = swelling_centre(points, reach, clearance, bulge, stroke, digit["swell"])
        gap = max(float(self.morpho["fracture_min_gap"]), float(self.morpho["fracture_gap"]) * target)
        half = stroke / 2 + max(1.0, 1.0 / scale)  # a cut runs a canvas pixel beyond the stroke on each side
        cuts = []
        if digit["cuts"]:
            points, tangent, reach, clearance = skeleton
            cuts = self._cuts(digit["cuts"], points, tangent, reach, clearance, stroke, half, gap / scale, swell_at,
                              SWELL_LENGTH * bulge)
        return Pose(n, v, theta, scale, target, stroke, bulge, box, skeleton, swell_at, cuts, gap, half)

    def _placeable(self, pose: Pose) -> Pose:
        """``pose`` with its ``extent`` and ``guard`` (see :class:`Pose`)."""
        box, scale, bulge, stroke = pose.box, pose.scale, pose.bulge, pose.stroke
        # disks (frame centre, radius) that hold all drawn ink: a frame pixel of the variant (bilinear sampling
        # spreads it over one frame pixel around its centre) and the swelling's disks. Of the pixels, each row's
        # two ends suffice (the same maxima).
        centres = self._outline(pose.n, pose.v)
        radii = np.ones(len(centres))
        if pose.swell_at is not None:
            points = pose.skeleton[0]
            near = points[((points - pose.swell_at) ** 2).sum(1) < (SWELL_LENGTH * bulge) ** 2]
            centres, radii = np.concatenate([centres, near]), np.concatenate([radii, np.full(len(near), bulge)])
        cy, cx = pose.pivot
        cos, sin = math.cos(pose.theta), math.sin(pose.theta)
        dx, dy = centres[:, 1] - cx, centres[:, 0] - cy
        oy, ox = scale * (-dx * sin + dy * cos), scale * (dx * cos + dy * sin)  # canvas offsets (see _window)
        pad = scale * radii + 1.0
        extent = (float(np.max(pad - oy)), float(np.max(pad - ox)), float(np.max(oy + pad)), float(np.max(ox + pad)))
        guard = _extent(box, scale, pose.theta, max(0.0, bulge - stroke / 2) + 1.5 / scale)
        return replace(pose, extent=extent, guard=guard)

    def _outline(self, n: int, v: int) -> np.ndarray:
        """Frame centres ``(K, 2)`` float64 of the first and the last ink pixel of each row of digit ``n``'s
        variant ``v``: along any direction, the farthest ink pixel of a row is one of its two ends (kept once
        computed)."""
        if (n, v) not in self._outlines:
            ink = self.table.variants[n, v] > 0
            rows = np.flatnonzero(ink.any(axis=1))
            first = ink[rows].argmax(axis=1)
            last = ink.shape[1] - 1 - ink[rows, ::-1].argmax(axis=1)
            self._outlines[(n, v)] = np.concatenate([np.stack([rows, first], 1),
                                                     np.stack([rows, last], 1)]).astype(np.float64)
        return self._outlines[(n, v)]

    def frame_ink(self, pose: Pose) -> np.ndarray:
        """The posed digit's ink coverage in the frame of the normalised glyphs, before rotation and scaling:
        ``(FRAME, FRAME)`` float32 in [0, 1], swelling and cuts applied as :meth:`draw` applies them (one sample
        per frame pixel). The swelling and each cut are evaluated only in the square of frame pixels they can
        reach, where their cover is above 0 or their factor below 1."""
        frame = self.table.variants.shape[-1]
        ink = self.table.variants[pose.n, pose.v].astype(np.float32) * np.float32(1 / 255)
        if pose.swell_at is not None:
            rows, cols = _square(pose.swell_at, (SWELL_LENGTH + 1.0) * pose.bulge + 0.5 / pose.scale, frame)
            qy, qx = _grid(rows, cols)
            part = ink[rows, cols]
            np.maximum(part, swelling_cover(qy, qx, pose.skeleton[0], pose.swell_at, pose.stroke / 2, pose.bulge,
                                            pose.scale), out=part)
        width, ramp = pose.gap / pose.scale, 1.0 / pose.scale
        for y, x, angle in pose.cuts:
            rows, cols = _square((y, x), math.hypot(pose.cut_half, (width + ramp) / 2), frame)
            qy, qx = _grid(rows, cols)
            ink[rows, cols] *= fracture_factor(qy, qx, np.array([[y, x, angle, pose.cut_half]], np.float32),
                                               width, ramp)
        return ink

    def choose(self, digit: dict) -> Pose:
        """The pose of the most legible of the digit's candidate sources (``source``, then ``alternates``) once
        thickness, swelling and cuts are applied (:meth:`frame_ink`): the first that at least
        :data:`CONFIDENT` of the reader's :data:`~bindscope.generators.madman.legibility.NEIGHBOURS` nearest
        references read as the planned class, else the one with the most such votes (the earliest among equals).
        Without a reader, the planned source. A candidate without swelling and cuts is taken unread: its glyph is
        the table's variant, which the table's reader
        (:func:`~bindscope.generators.madman.legibility.legible_digits`) already read.
        """
        best = None
        for n in [digit["source"], *digit.get("alternates", [])]:
            pose = self._shape(digit if n == digit["source"] else {**digit, "source": n})
            if self.reader is None or (pose.swell_at is None and not pose.cuts):
                return self._placeable(pose)
            votes = int((self.reader.neighbours(self.frame_ink(pose)[None], pose.v, np.array([n]))[0]
                         == digit["digit"]).sum())
            if votes >= CONFIDENT:
                return self._placeable(pose)
            if best is None or votes > best[0]:
                best = (votes, pose)
        return self._placeable(best[1])

    def layout(self, poses: list[Pose], jitter: tuple[float, float], direction: float) -> list[tuple[float, float]]:
        """Canvas centres ``(y, x)`` (pixels) of the posed digits' ink boxes.

        Object 1 (salient) sits at the canvas centre plus ``jitter``. Object 2 goes as far out as the canvas
        allows (``margin`` pixels inside) along ``direction`` (radians, 0 = right, counter-clockwise) turned by
        0, 45, -45, 90, -90, 135, -135 or 180 degrees; the two ink extents (:attr:`Pose.extent`) must be at least
        a pixel apart along one axis. Where object 1 would have to move for that, it moves straight up, down, left or right, away
        from object 2, only as far as needed and never out of the canvas: the turn that needs the least such
        move wins (ties: the order above), so object 1 stays as near the centre as two digits allow. Where no
        turn gives room (digits too large for the canvas), object 1 stays put and object 2 takes the turn of
        least overlap of the extents.
        """
        mid = (self.size - 1) / 2.0
        first = (mid + jitter[0], mid + jitter[1])
        if len(poses) == 1:
            return [first]
        one, two = poses[0].extent, poses[1].extent  # (up, left, down, right)
        low, high = self.margin, self.size - 1 - self.margin
        best, fallback = None, None
        for turn in _TURNS:
            second = self._far_point(direction + turn, two)
            gaps = [max(second[a] - two[a] - first[a] - one[a + 2], first[a] - one[a] - second[a] - two[a + 2])
                    for a in (0, 1)]  # per axis: free pixels between the two ink extents (< 0: they overlap)
            if max(gaps) >= 1.0:
                best = (0.0, first, second)
                break
            overlap = max(0.0, -gaps[0]) * max(0.0, -gaps[1])
            if fallback is None or overlap < fallback[0] - 1e-9:
                fallback = (overlap, first, second)
            for a in (0, 1):
                # object 1 moved along axis a to one pixel beyond object 2's extent, on its own side
                if first[a] >= second[a]:
                    moved = second[a] + two[a + 2] + 1.0 + one[a]
                else:
                    moved = second[a] - two[a] - 1.0 - one[a + 2]
                if low - 1e-9 <= moved - one[a] and moved + one[a + 2] <= high + 1e-9:
                    shift = abs(moved - first[a])
                    if best is None or shift < best[0] - 1e-9:
                        best = (shift, (moved, first[1]) if a == 0 else (first[0], moved), second)
        _, one_centre, two_centre = best if best is not None else fallback
        return [one_centre, two_centre]

    def draw(self, pose: Pose, centre: tuple[float, float]) -> tuple[np.ndarray, dict]:
        """Ink coverage ``(S, S)`` float32 in [0, 1] of one posed digit with its ink-box centre at canvas
        ``centre`` ``(y, x)`` (pixels), and its placement ``{"source": n, "centre": [y, x], "scale": s, "box": [y0, x0, y1,
        x1], "stroke": w, "cuts": [[y, x, tangent], ...], "gap": g}``: the rotated ink box (canvas pixels), the
        stroke width (canvas pixels), the fracture cuts (frame coordinates, radians) and their width (canvas
        pixels)."""
        scale, stroke, bulge = pose.scale, pose.stroke, pose.bulge
        gy, gx = pose.guard
        py, px = centre
        gap, half, swell_at, cuts = pose.gap, pose.cut_half, pose.swell_at, pose.cuts
        up, left_, down, right_ = pose.extent
        placement = {"source": pose.n, "centre": [py, px], "scale": scale, "box": [py - up, px - left_, py + down, px + right_],
                     "stroke": stroke * scale, "cuts": cuts, "gap": gap}
        top, left = max(0, int(math.floor(py - gy))), max(0, int(math.floor(px - gx)))
        bottom, right = min(self.size, int(math.ceil(py + gy)) + 1), min(self.size, int(math.ceil(px + gx)) + 1)
        alpha = np.zeros((self.size, self.size), np.float32)
        if bottom <= top or right <= left:
            return alpha, placement
        qy, qx, ss = self._sample_points(pose, centre, top, left, bottom, right)
        variant = self.table.variants[pose.n, pose.v].astype(np.float32) * np.float32(1 / 255)
        patch = ndi.map_coordinates(variant, [qy, qx], order=1, mode="constant", cval=0.0, prefilter=False)
        if swell_at is not None:
            rows, cols = self._window(pose, centre, top, left, swell_at, (SWELL_LENGTH + 1.0) * bulge)
            part = patch[..., rows, cols]
            np.maximum(part, swelling_cover(qy[..., rows, cols], qx[..., rows, cols], pose.skeleton[0], swell_at,
                                            stroke / 2, bulge, scale), out=part)
        for y, x, angle in cuts:
            rows, cols = self._window(pose, centre, top, left, (y, x), math.hypot(half, gap / scale / 2 + 1.0 / scale))
            patch[..., rows, cols] *= fracture_factor(qy[..., rows, cols], qx[..., rows, cols],
                                                      np.array([[y, x, angle, half]], np.float32),
                                                      gap / scale, 1.0 / scale)
        h, w = bottom - top, right - left
        patch = patch.reshape(ss * ss, h, w)
        patch = patch[0] if ss == 1 else patch.sum(axis=0) * np.float32(1.0 / (ss * ss))
        np.clip(patch, 0.0, 1.0, out=patch)
        alpha[top:bottom, left:right] = patch
        return alpha, placement

    def digit_alpha(self, digit: dict, centre: tuple[float, float]) -> tuple[np.ndarray, dict]:
        """:meth:`draw` of one planned digit (an entry of a plan's ``digits``; the source :meth:`choose` picks)
        at canvas ``centre`` ``(y, x)``."""
        return self.draw(self.choose(digit), centre)

    def _sample_points(self, pose: Pose, centre: tuple[float, float], top: int, left: int, bottom: int,
                       right: int) -> tuple[np.ndarray, np.ndarray, int]:
        """Frame coordinates ``(qy, qx)``, each ``(ss, ss, h, w)`` float32, of the ``ss x ss`` samples of every
        canvas pixel of rows ``top:bottom`` and columns ``left:right``, and ``ss``: samples at ``(i + (k + 0.5)
        / ss - 0.5)``, enough for at least one sample per frame pixel."""
        scale, (py, px) = pose.scale, centre
        ss = max(1, min(self.supersample, math.ceil(1.0 / scale - 1e-6)))
        sub = (np.arange(ss, dtype=np.float32) + 0.5) / ss - 0.5
        h, w = bottom - top, right - left
        # sub-sample offsets first, so averaging adds whole planes
        vy = ((np.arange(top, bottom, dtype=np.float32)[None, :] + sub[:, None] - py) / scale).reshape(ss, 1, h, 1)
        vx = ((np.arange(left, right, dtype=np.float32)[None, :] + sub[:, None] - px) / scale).reshape(1, ss, 1, w)
        cy, cx = pose.pivot
        cos, sin = math.cos(pose.theta), math.sin(pose.theta)
        return (cy + vx * sin) + vy * cos, (cx + vx * cos) - vy * sin, ss

    @staticmethod
    def _window(pose: Pose, centre: tuple[float, float], top: int, left: int, point, radius: float
                ) -> tuple[slice, slice]:
        """The rows and columns of the drawn patch (its corner at canvas ``(top, left)``) within ``radius``
        frame pixels of the frame point ``point`` ``(y, x)``."""
        y, x = float(point[0]), float(point[1])
        cy, cx = pose.pivot
        cos, sin = math.cos(pose.theta), math.sin(pose.theta)
        vx_, vy_ = (x - cx) * cos + (y - cy) * sin, -(x - cx) * sin + (y - cy) * cos
        ry, rx = centre[0] + vy_ * pose.scale - top, centre[1] + vx_ * pose.scale - left
        reach = radius * pose.scale + 1.0
        return (slice(max(0, int(math.floor(ry - reach))), max(0, int(math.ceil(ry + reach)) + 1)),
                slice(max(0, int(math.floor(rx - reach))), max(0, int(math.ceil(rx + reach)) + 1)))

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

    def _far_point(self, direction: float, extent: tuple[float, float, float, float]) -> tuple[float, float]:
        """The point farthest from the canvas centre along ``direction`` (radians, 0 = right, counter-clockwise)
        where ink of ``extent`` ``(up, left, down, right)`` stays ``margin`` pixels inside the canvas."""
        mid = (self.size - 1) / 2.0
        room = mid - self.margin
        dy, dx = -math.sin(direction), math.cos(direction)
        reach = [(room - (extent[a + 2] if d > 0 else extent[a])) / abs(d)
                 for a, d in ((0, dy), (1, dx)) if abs(d) > 1e-9]
        r = max(0.0, min(reach))
        return mid + r * dy, mid + r * dx

    def render(self, spec: dict) -> tuple[np.ndarray, np.ndarray, list[ObjectRecord], list[dict]]:
        """Realise a plan: ``(image (S,S,3) uint8, mask (S,S) uint8, objects, placements)``."""
        poses = [self.choose(digit) for digit in spec["digits"]]
        centres = self.layout(poses, tuple(spec["layout"]["jitter"]), spec["layout"]["direction"])
        alphas, placements = [], []
        for pose, centre in zip(poses, centres):
            alpha, placement = self.draw(pose, centre)
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
            n = placement["source"]
            objects.append(ObjectRecord(
                index=k, category=str(digit["digit"]), category_id=int(digit["digit"]),
                attributes=dict(digit["attributes"]), bbox=bbox, area=area, size_rank=ranks[k - 1],
                salient=k == 1, mention_position=mention.get(k, 0),
                extras={"source_index": float(n), "scale": placement["scale"],
                        "centre_y": placement["centre"][0], "centre_x": placement["centre"][1],
                        "stroke_thickness": placement["stroke"]}))
        return image, mask, objects, placements
