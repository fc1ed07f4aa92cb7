"""Realise a MADMAN plan as pixels (numpy, and numba for the per-pixel work): image, instance mask and the object
table.

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
  either side: every skeleton point q within ``L = SWELL_LENGTH * bulge`` of the centre c carries a disk of
  radius ``stroke / 2 + (bulge - stroke / 2) * (1 - (|q - c| / L)^2)^2``, and the ink is at least the union of
  those disks (anti-aliased over one canvas pixel).
- **fracture** ``n``: ``n`` cuts across the stroke, each ``max(morpho.fracture_min_gap, morpho.fracture_gap *
  size * canvas)`` canvas pixels wide, at skeleton points at least one stroke width plus one gap along the
  skeleton from any stroke end or junction, two (stroke + gap) apart and clear of the swelling (seeded draws;
  fewer cuts if the glyph has no room left).
- **placement** (:meth:`Renderer.layout`): object 1 (salient) has its ink-box centre at the canvas centre plus
  the plan's jitter; object 2's centre lies along the plan's direction (or that direction turned by a multiple
  of 45 degrees), as far from the centre as keeps its ink ``margin`` pixels inside the canvas and its ink
  extent at least a pixel clear of object 1's along one axis. Where only a move of object 1 makes room (two
  large digits), object 1 moves as little as that needs, so the two digits never overlap. Object 1 is drawn
  over object 2.
- **colour**: a digit's ink coverage ``a`` (0..1) is painted as ``a * rgb`` over black; with two digits,
  object 1 covers ``c1 = a1`` and object 2 ``c2 = a2 * (1 - a1)``; the image is ``round(c1 * rgb1 + c2 *
  rgb2)``.
- **mask**: pixel value k where object k's coverage ``c_k >= 0.5`` (object 1 wins a tie), else 0.

Each output pixel is the mean of ss x ss bilinear samples (zero outside the frame) of the glyph variant, ss =
min(``render.supersample`` (default 2), ceil(1 / s)) so that a minified glyph is sampled at least once per frame
pixel; each sample's source point is found by inverting placement/rotation/scale, and the swelling's coverage
and the fracture factor are evaluated at that same source point.
Supersampling is a box-filter anti-aliasing: strokes thinner than a pixel stay continuous. The per-pixel work
is :func:`~bindscope.generators.madman.kernels.ink_patch` (compiled, float64 inside).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from bindscope.format.records import ObjectRecord, crowded_pairs, size_ranks
from bindscope.generators.madman.kernels import composite, cut_sites, ink_extent, ink_patch, warm_up
from bindscope.generators.madman.legibility import Reader
from bindscope.generators.madman.morpho import SWELL_LENGTH, MorphoTable, bulge_half_width, swelling_centre
from bindscope.generators.madman.placement import GAP, fit_ink
from bindscope.generators.madman.planning import salient_object

_TURNS = tuple(math.radians(a) for a in (0, 45, -45, 90, -90, 135, -135, 180))
WIDEST = 1.25  # no glyph's largest diameter exceeds this many times its size level
CONFIDENT = 4  # of the reader's 5 nearest references must read a drawn digit as its class (Renderer.choose)
EXTRAS = ["source_index", "scale", "centre_y", "centre_x", "stroke_thickness"]
_NO_POINTS = np.zeros((0, 2), np.float32)
_NO_POINT = np.zeros(2, np.float32)


class Unplaceable(Exception):
    """A plan's two digits cannot be placed :data:`~bindscope.generators.madman.placement.GAP` pixels apart inside
    the canvas (:meth:`Renderer.place`): the planner draws other sources for them
    (:meth:`~bindscope.generators.madman.planning.Planner.replan`)."""


def _extent(box: tuple[float, float, float, float], scale: float, theta: float, grow: float) -> tuple[float, float]:
    """Half extents ``(ey, ex)`` (canvas pixels) of the rotated, scaled ink box grown by ``grow`` frame pixels."""
    y0, x0, y1, x1 = box
    hy, hx = (y1 - y0) / 2 + grow, (x1 - x0) / 2 + grow
    c, s = abs(math.cos(theta)), abs(math.sin(theta))
    return scale * (hy * c + hx * s), scale * (hx * c + hy * s)


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
    def swelling(self) -> tuple[np.ndarray, np.ndarray]:
        """``(skeleton points, swelling centre)`` as the kernels take them: empty arrays without a swelling."""
        return (self.skeleton[0], self.swell_at) if self.swell_at is not None else (_NO_POINTS, _NO_POINT)

    @cached_property
    def cut_rows(self) -> np.ndarray:
        """``cuts`` as the kernels take them: ``(M, 3)`` float64 rows ``(y, x, tangent)``, built once per pose."""
        return np.array(self.cuts, np.float64).reshape(-1, 3)

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
        self._skeletons: dict[tuple[int, int], tuple] = {}
        warm_up()

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
        skeleton = self._skeleton(n, v) if bulge > 0 or digit["cuts"] else None
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
        """``pose`` (fresh from :meth:`_shape`) given its ``extent`` and ``guard`` (see :class:`Pose`)."""
        scale, bulge = pose.scale, pose.bulge
        points, centre = pose.swelling
        cy, cx = pose.pivot
        pose.extent = ink_extent(self.table.variants[pose.n, pose.v], points, centre, SWELL_LENGTH * bulge, bulge,
                                 cy, cx, math.cos(pose.theta), math.sin(pose.theta), scale)
        pose.guard = _extent(pose.box, scale, pose.theta, max(0.0, bulge - pose.stroke / 2) + 1.5 / scale)
        return pose

    def _skeleton(self, n: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`MorphoTable.skeleton` of digit ``n``'s variant ``v`` (kept once computed; read only)."""
        if (n, v) not in self._skeletons:
            self._skeletons[(n, v)] = self.table.skeleton(n, v)
        return self._skeletons[(n, v)]

    def frame_ink(self, pose: Pose) -> np.ndarray:
        """The posed digit's ink coverage in the frame of the normalised glyphs, before rotation and scaling:
        ``(FRAME, FRAME)`` float32 in [0, 1], swelling and cuts applied as :meth:`draw` applies them (one sample
        per frame pixel, at the pixel's centre)."""
        frame = self.table.variants.shape[-1]
        ink = np.empty((frame, frame), np.float32)
        self._ink(pose, ink, 0, 0, 1, (0.0, 1.0, 0.0, 0.0, 0.0, 1.0))
        return ink

    def _ink(self, pose: Pose, out: np.ndarray, top: int, left: int, ss: int, affine: tuple) -> None:
        """:func:`~bindscope.generators.madman.kernels.ink_patch` of ``pose`` into ``out`` (canvas pixel ``(top
        + i, left + j)`` at ``out[i, j]``; ``affine`` maps canvas to frame points)."""
        scale = pose.scale
        points, centre = pose.swelling
        ink_patch(self.table.variants[pose.n, pose.v], out, top, left, ss, np.array(affine, np.float64), points,
                  centre, SWELL_LENGTH * pose.bulge, pose.stroke / 2, pose.bulge, scale, pose.cut_rows, pose.cut_half,
                  pose.gap / scale, 1.0 / scale)

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
            votes = int((self.reader.nearest_one(self.frame_ink(pose), pose.v, n) == digit["digit"]).sum())
            if votes >= CONFIDENT:
                return self._placeable(pose)
            if best is None or votes > best[0]:
                best = (votes, pose)
        return self._placeable(best[1])

    def layout(self, poses: list[Pose], jitter: tuple[float, float],
               direction: float) -> list[tuple[float, float]] | None:
        """Canvas centres ``(y, x)`` (pixels) of the posed digits' ink boxes, kept apart by their ink extents.

        Object 1 (salient) sits at the canvas centre plus ``jitter``. Object 2 goes as far out as the canvas
        allows (``margin`` pixels inside) along ``direction`` (radians, 0 = right, counter-clockwise) turned by
        0, 45, -45, 90, -90, 135, -135 or 180 degrees; the two ink extents (:attr:`Pose.extent`) must be at least
        :data:`~bindscope.generators.madman.placement.GAP` + 1 pixels apart along one axis. Where object 1 would
        have to move for that, it moves straight up, down, left or right, away from object 2, only as far as needed
        and never out of the canvas: the turn that needs the least such move wins (ties: the order above), so
        object 1 stays as near the centre as two digits allow. None where no turn and move gives room (then
        :meth:`place` looks at the ink itself).
        """
        mid = (self.size - 1) / 2.0
        first = (mid + jitter[0], mid + jitter[1])
        if len(poses) == 1:
            return [first]
        one, two = poses[0].extent, poses[1].extent  # (up, left, down, right)
        low, high = self.margin, self.size - 1 - self.margin
        need = GAP + 1.0  # extents this far apart leave GAP pixel columns (or rows) between the two digits' ink
        best = None
        for turn in _TURNS:
            second = self._far_point(direction + turn, two)
            gaps = [max(second[a] - two[a] - first[a] - one[a + 2], first[a] - one[a] - second[a] - two[a + 2])
                    for a in (0, 1)]  # per axis: free pixels between the two ink extents (< 0: they overlap)
            if max(gaps) >= need:
                return [first, second]
            for a in (0, 1):
                # object 1 moved along axis a to `need` pixels beyond object 2's extent, on its own side
                if first[a] >= second[a]:
                    moved = second[a] + two[a + 2] + need + one[a]
                else:
                    moved = second[a] - two[a] - need - one[a + 2]
                if low - 1e-9 <= moved - one[a] and moved + one[a + 2] <= high + 1e-9:
                    shift = abs(moved - first[a])
                    if best is None or shift < best[0] - 1e-9:
                        best = (shift, (moved, first[1]) if a == 0 else (first[0], moved), second)
        return None if best is None else [best[1], best[2]]

    def place(self, poses: list[Pose], jitter: tuple[float, float],
              direction: float) -> tuple[list[tuple[float, float]], list[tuple[np.ndarray, int, int]]]:
        """Centres ``(y, x)`` of the posed digits and their drawings ``(coverage, top, left)`` (:meth:`drawing`).

        :meth:`layout` where it finds room and the drawn ink is then
        :data:`~bindscope.generators.madman.placement.GAP` pixels apart (always, as the extents hold the ink);
        else the whole-pixel shifts of :func:`~bindscope.generators.madman.placement.fit_ink` from object 1 at the
        canvas centre plus ``jitter`` and object 2 at its far point along ``direction``.

        Raises:
            Unplaceable: no placement keeps the two digits' ink GAP pixels apart inside the canvas.
        """
        centres = self.layout(poses, jitter, direction)
        if centres is not None:
            drawings = [self.drawing(p, c) for p, c in zip(poses, centres)]
            if len(poses) == 1 or not self._crowded(drawings):
                return centres, drawings
        mid = (self.size - 1) / 2.0
        centres = [(mid + jitter[0], mid + jitter[1]), self._far_point(direction, poses[1].extent)]
        drawings = [self.drawing(p, c) for p, c in zip(poses, centres)]
        shifts = fit_ink(drawings[0], drawings[1], self.size, self.margin)
        if shifts is not None:
            centres = [(c[0] + dy, c[1] + dx) for c, (dy, dx) in zip(centres, shifts)]
            drawings = [(ink, top + dy, left + dx) for (ink, top, left), (dy, dx) in zip(drawings, shifts)]
            if not self._crowded(drawings):
                return centres, drawings
        raise Unplaceable(f"two digits of sizes {[round(p.target, 2) for p in poses]} px cannot be placed {GAP} "
                          f"pixels apart on a {self.size}-pixel canvas")

    def _crowded(self, drawings: list[tuple[np.ndarray, int, int]]) -> bool:
        """Whether the inked pixels of two drawings on the canvas are fewer than GAP pixels apart
        (:func:`~bindscope.format.records.crowded_pairs`, the check ``bindscope verify`` runs on the masks)."""
        inked = [self.paste(d, np.zeros((self.size, self.size), np.float32)) > 0 for d in drawings]
        return bool(crowded_pairs(inked, GAP))

    def draw(self, pose: Pose, centre: tuple[float, float], out: np.ndarray | None = None) -> tuple[np.ndarray, dict]:
        """Ink coverage ``(S, S)`` float32 in [0, 1] of one posed digit with its ink-box centre at canvas
        ``centre`` ``(y, x)`` (pixels), and its placement (:meth:`placement`). ``out``: an ``(S, S)`` float32 array
        of zeros to draw into (returned), else a new one."""
        alpha = np.zeros((self.size, self.size), np.float32) if out is None else out
        self.paste(self.drawing(pose, centre), alpha)
        return alpha, self.placement(pose, centre)

    @staticmethod
    def placement(pose: Pose, centre: tuple[float, float]) -> dict:
        """``{"source": n, "centre": [y, x], "scale": s, "box": [y0, x0, y1, x1], "stroke": w, "cuts": [[y, x,
        tangent], ...], "gap": g}`` of a posed digit at canvas ``centre``: the rotated ink box (canvas pixels), the
        stroke width (canvas pixels), the fracture cuts (frame coordinates, radians) and their width (canvas
        pixels)."""
        py, px = centre
        up, left, down, right = pose.extent
        return {"source": pose.n, "centre": [py, px], "scale": pose.scale,
                "box": [py - up, px - left, py + down, px + right],
                "stroke": pose.stroke * pose.scale, "cuts": pose.cuts, "gap": pose.gap}

    def drawing(self, pose: Pose, centre: tuple[float, float]) -> tuple[np.ndarray, int, int]:
        """The posed digit drawn with its ink-box centre at canvas ``centre`` ``(y, x)``: ``(coverage, top,
        left)``, its ink coverage ``(h, w)`` float32 in [0, 1] over its ``guard`` window, not clipped to the canvas,
        whose element ``(i, j)`` is canvas pixel ``(top + i, left + j)`` (ink is 0 outside the window).

        The digit is drawn relative to the integer part of ``centre``, so centres a whole number of pixels apart
        give the same coverage, shifted.
        """
        scale = pose.scale
        iy, ix = math.floor(centre[0]), math.floor(centre[1])
        py, px = centre[0] - iy, centre[1] - ix
        gy, gx = pose.guard
        top, left = math.floor(py - gy), math.floor(px - gx)
        coverage = np.zeros((math.ceil(py + gy) + 1 - top, math.ceil(px + gx) + 1 - left), np.float32)
        ss = max(1, min(self.supersample, math.ceil(1.0 / scale - 1e-6)))
        cy, cx = pose.pivot
        cos, sin = math.cos(pose.theta) / scale, math.sin(pose.theta) / scale
        # canvas (Y, X) -> frame: q = pivot + R(theta) ((Y, X) - centre) / scale
        affine = (cy - py * cos - px * sin, cos, sin, cx - px * cos + py * sin, -sin, cos)
        self._ink(pose, coverage, top, left, ss, affine)
        return coverage, iy + top, ix + left

    def paste(self, drawing: tuple[np.ndarray, int, int], out: np.ndarray) -> np.ndarray:
        """Copy a :meth:`drawing` into ``out`` ``(S, S)`` (its part inside the canvas); return ``out``."""
        top, left, bottom, right = self._window(drawing)
        coverage, y, x = drawing
        out[top:bottom, left:right] = coverage[top - y:bottom - y, left - x:right - x]
        return out

    def _window(self, drawing: tuple[np.ndarray, int, int]) -> tuple[int, int, int, int]:
        """The canvas rows ``top:bottom`` and columns ``left:right`` that a :meth:`drawing` covers (clipped to the
        canvas; possibly empty)."""
        coverage, y, x = drawing
        top, left = min(max(0, y), self.size), min(max(0, x), self.size)
        return top, left, max(top, min(self.size, y + coverage.shape[0])), max(left, min(self.size, x + coverage.shape[1]))

    def digit_alpha(self, digit: dict, centre: tuple[float, float]) -> tuple[np.ndarray, dict]:
        """:meth:`draw` of one planned digit (an entry of a plan's ``digits``; the source :meth:`choose` picks)
        at canvas ``centre`` ``(y, x)``."""
        return self.draw(self.choose(digit), centre)

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
        rows = cut_sites(np.asarray(draws, np.float64), points, reach, clearance, stroke, half, gap,
                         _NO_POINT if swell_at is None else swell_at, -1.0 if swell_at is None else swell_length)
        return [[float(points[i, 0]), float(points[i, 1]), float(tangent[i])] for i in rows]

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

    def _compose(self, spec: dict, keep: int | None = None) -> tuple:
        """Poses, placements, image, mask and mask boxes of a plan; with ``keep`` (1 or 2) the other digit's ink
        coverage is zero (it is posed and placed, so the kept digit stays where it is)."""
        poses = [self.choose(digit) for digit in spec["digits"]]
        centres, drawings = self.place(poses, tuple(spec["layout"]["jitter"]), spec["layout"]["direction"])
        alphas = np.zeros((len(poses), self.size, self.size), np.float32)
        for drawing, alpha in zip(drawings, alphas):
            self.paste(drawing, alpha)
        placements = [self.placement(pose, centre) for pose, centre in zip(poses, centres)]
        if keep is not None:
            alphas[2 - keep] = 0.0
        colours = np.array([self.values["colour"][d["attributes"]["colour"]] for d in spec["digits"]], np.float32)
        image = np.zeros((self.size, self.size, 3), np.uint8)
        mask = np.zeros((self.size, self.size), np.uint8)
        boxes = np.empty((len(alphas), 5), np.int64)
        composite(alphas, np.array([self._window(d) for d in drawings], np.int64), colours, image, mask, boxes)
        return poses, placements, image, mask, boxes

    def render_alone(self, spec: dict, keep: int) -> tuple[np.ndarray, np.ndarray]:
        """A two-digit plan drawn with only object ``keep`` (1 or 2): ``(image (S,S,3) uint8, mask (S,S) uint8)``.

        The kept digit has the same source, attributes and place as in :meth:`render` (both digits are posed and
        laid out as there; only the other digit's ink is left out), so where the other digit has no ink the image
        equals :meth:`render`'s pixel for pixel and everywhere else it is background (0). The mask holds ``keep``
        where the kept digit covers at least half a pixel. The single-object references of the large-object
        evaluation (:mod:`bindscope.evaluation.saliency`).

        Raises:
            ValueError: ``spec`` is not a two-digit plan or ``keep`` is not 1 or 2.
        """
        if len(spec["digits"]) != 2 or keep not in (1, 2):
            raise ValueError(f"render_alone needs a two-digit plan and keep 1 or 2, got {len(spec['digits'])} "
                             f"digit(s) and keep {keep!r}")
        _, _, image, mask, _ = self._compose(spec, keep)
        return image, mask

    def render(self, spec: dict) -> tuple[np.ndarray, np.ndarray, list[ObjectRecord], list[dict]]:
        """Realise a plan: ``(image (S,S,3) uint8, mask (S,S) uint8, objects, placements)``. An object's ``salient``
        flag is :func:`~bindscope.generators.madman.planning.salient_object`."""
        poses, placements, image, mask, boxes = self._compose(spec)
        salient = salient_object(self.config, spec["digits"])
        mention = {m["index"]: pos for pos, m in enumerate(spec["mentions"], start=1)}
        boxes = [(tuple(int(b) for b in box[:4]), int(box[4])) for box in boxes]
        ranks = size_ranks([area for _, area in boxes])
        objects = []
        for k, (digit, (bbox, area), placement) in enumerate(zip(spec["digits"], boxes, placements), start=1):
            n = placement["source"]
            objects.append(ObjectRecord(
                index=k, category=str(digit["digit"]), category_id=int(digit["digit"]),
                attributes=dict(digit["attributes"]), bbox=bbox, area=area, size_rank=ranks[k - 1],
                salient=k == salient, mention_position=mention.get(k, 0),
                extras={"source_index": float(n), "scale": placement["scale"],
                        "centre_y": placement["centre"][0], "centre_x": placement["centre"][1],
                        "stroke_thickness": placement["stroke"]}))
        return image, mask, objects, placements


def _typical(renderer: Renderer, pool: np.ndarray, thickness: str, rotation: str) -> int:
    """The digit of ``pool`` of median area of its ink box scaled to its size level and turned by ``rotation``, at
    ``thickness`` (the lower median; among equals, the first in ``pool`` order)."""
    t, values = renderer.table, renderer.values
    v = t.amounts.index(float(values["thickness"][thickness]))
    box = t.ink_box[pool, v].astype(np.float64)
    glyph = box[:, 2] - box[:, 0]
    scale = 1.0 / np.maximum(glyph, t.diameter[pool, v] / WIDEST)
    theta = math.radians(float(values["rotation"][rotation]))
    c, s = abs(math.cos(theta)), abs(math.sin(theta))
    hy, hx = (box[:, 2] - box[:, 0]) * scale, (box[:, 3] - box[:, 1]) * scale
    order = np.argsort((hy * c + hx * s) * (hx * c + hy * s), kind="stable")
    return int(pool[order[(len(order) - 1) // 2]])


def room_problem(config: dict, table: MorphoTable, pools: dict[str, list[np.ndarray]]) -> str | None:
    """Whether a resolved config leaves room for two digits: None, or the one-line reason why not.

    For every pair of the config's rotation values, two typical digits of the widest classes at the config's
    largest size level, thickest stroke, largest swelling and fewest cuts must be placed
    :data:`~bindscope.generators.madman.placement.GAP` pixels apart inside the canvas by :meth:`Renderer.place`:
    for each rotation, of each class the digit of the pools (``{"train": [10 arrays], "eval": [...]}``, source
    indices per class) of median turned ink-box area (:func:`_typical`), and of those the two classes whose ink
    extents (:attr:`Pose.extent`) cover the most area, object 1 the largest. Where typical digits fit, a plan whose
    sources do not is re-planned with others
    (:meth:`~bindscope.generators.madman.planning.Planner.replan`); where they do not, most plans of two large
    digits would need that, and the config is refused.
    """
    renderer = Renderer(config, table)
    values = config["attributes"]
    pick = {a: sorted(values[a], key=lambda k: (values[a][k], k)) for a in ("size", "thickness", "swelling",
                                                                             "fracture")}
    size, thickness, swelling = pick["size"][-1], pick["thickness"][-1], pick["swelling"][-1]
    fracture = pick["fracture"][0]
    cuts = [0.5] * int(values["fracture"][fracture])
    classes = [np.concatenate([np.asarray(pools[name][d], np.int64) for name in pools]) for d in range(10)]
    hardest = {}
    for rotation in values["rotation"]:
        poses = [renderer.pose({"digit": d, "source": _typical(renderer, classes[d], thickness, rotation),
                                "swell": 0.5, "cuts": cuts,
                                "attributes": {"size": size, "thickness": thickness, "rotation": rotation,
                                               "swelling": swelling, "fracture": fracture}}) for d in range(10)]
        spans = [(e[0] + e[2]) * (e[1] + e[3]) for e in (p.extent for p in poses)]
        hardest[rotation] = [(d, poses[d]) for d in sorted(range(10), key=lambda d: (-spans[d], d))[:2]]
    for first in sorted(values["rotation"]):
        for second in sorted(values["rotation"]):
            d1, one = hardest[first][0]
            d2, two = hardest[second][0] if hardest[second][0][0] != d1 else hardest[second][1]
            try:
                renderer.place([one, two], (0.0, 0.0), 0.0)
            except Unplaceable:
                return (f"image_size {renderer.size} leaves no room for two digits of size {size!r} "
                        f"({values['size'][size]} of the canvas) {GAP} pixels apart: a {first} {d1} and a {second} "
                        f"{d2} ({thickness}, {swelling}) do not fit; allowed: a larger image_size or smaller size "
                        "values")
    return None
