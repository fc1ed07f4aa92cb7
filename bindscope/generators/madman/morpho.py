"""Normalised MNIST glyphs and Morpho-MNIST-style morphometry (scipy / scikit-image), computed once per digit.

Every source digit is normalised before any attribute is applied, so that attribute levels are absolute:

1. **Deslant** (image moments): the 28x28 grey digit is sheared horizontally by ``x -> x - skew * (y - cy)``
   with ``skew = mu11 / mu02`` (central moments of the grey image), the classic MNIST deskewing; afterwards
   the ink's principal axes are the image axes, so "upright" means upright.
2. **Skeleton**: the deslanted digit is upsampled ``upsample`` times (bilinear), binarised at ``threshold`` of
   full ink, skeletonised (:func:`skimage.morphology.skeletonize`) and spurs shorter than 1.2 mean stroke
   widths that end in a junction are pruned (Morpho-MNIST morphometry: Castro et al., JMLR 2019).
3. **Fixed height**: the skeleton's own residual slant (``mu11 / mu02`` of its centre line) is
   sheared away and it is scaled so that its height is :data:`GLYPH` frame pixels, centred in a
   :data:`FRAME` x :data:`FRAME` frame.
4. **Canonical stroke**: for each thickness level ``t`` (stroke width / glyph height) the glyph is redrawn as
   every point within ``w / 2`` of the skeleton, ``w = GLYPH * t / (1 - t)`` frame pixels, so the glyph's
   outer height is ``GLYPH + w`` and its stroke width ÷ height is ``t`` whatever the source's own stroke.
   The hi-res drawing is area-averaged to the frame (grey 0..255); one image per level is kept.

Swelling and fracture depend on the sample and are applied at render time as coordinate maps composed with
the digit's scale, rotation and placement (:mod:`bindscope.generators.madman.render`), at skeleton points
kept here with their stroke direction, their distance along the skeleton to the nearest stroke end or
junction (``reach``) and their distance to the nearest *other* stroke (``clearance``), so cuts and swellings
keep away from stroke ends and never fill a loop or touch a neighbouring stroke.

A source whose skeleton is more than one connected stroke (a detached bar, a broken loop) would look fractured
while intact; it is marked not ``connected`` and never drawn.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np
from scipy import ndimage as ndi
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import dijkstra
from skimage.morphology import skeletonize

from bindscope.io.atomic import atomic_open
from bindscope.io.cache_dir import EntryRefused, cache_root, cache_unusable, read_npz, warn_entry, writable_folder

TABLE_VERSION = 6
FRAME = 36          # frame side in pixels (the normalised glyph's coordinate system)
GLYPH = 20.0        # skeleton height of every normalised glyph, frame pixels
MAX_POINTS = 64     # skeleton points kept per digit (evenly subsampled)
SWELL_MIN = 2.0     # a swelling is at least this many stroke widths wide (wider than most junctions)
SWELL_LENGTH = 1.8  # half-length of a swelling along the stroke, in bulge half-widths (a spindle, not a bulb)
FOREIGN = 1.5       # a skeleton point is on another stroke when the way to it along the skeleton is longer
FOREIGN_SLACK = 1.0  # than FOREIGN times the straight distance plus FOREIGN_SLACK frame pixels
_EIGHT = np.ones((3, 3), bool)
GLYPH_CACHE_FORMAT = b"bindscope-madman-glyphs/1"
SPOT_CHECKS = 8     # digits of a cached table recomputed from their source images at every read
POINT_ARRAYS = ("points", "tangent", "reach", "clearance")


def upsample_binary(grey: np.ndarray, upsample: int = 4, threshold: float = 0.5) -> np.ndarray:
    """Bilinear upsampling of a grey image (values 0..1 float or 0..255 uint8) by ``upsample``, binarised.

    Returns a bool array of shape ``(H * upsample, W * upsample)`` (pixel centres aligned with the input's).
    """
    g = grey.astype(np.float32)
    if grey.dtype == np.uint8:
        g /= 255.0
    if upsample > 1:
        g = ndi.zoom(g, upsample, order=1, grid_mode=True, mode="grid-constant")
    return g >= threshold


def mean_thickness(binary: np.ndarray, scale: float = 1.0) -> float:
    """Morpho-MNIST mean stroke thickness of a binary image: ``2 * mean(EDT over skeleton) / scale``.

    Args:
        binary: (H, W) bool ink mask.
        scale: pixels of ``binary`` per output unit (e.g. the upsampling factor).

    Returns:
        Thickness in output units (0.0 for an empty image).
    """
    skeleton = skeletonize(binary)
    if not skeleton.any():
        return 0.0
    return float(2.0 * ndi.distance_transform_edt(binary)[skeleton].mean() / scale)


def measure_thickness(image: np.ndarray, upsample: int = 4, threshold: float = 0.5) -> float:
    """Mean stroke thickness in pixels of a grey digit image (``(H, W)`` float 0..1 or uint8), Morpho-MNIST style."""
    return mean_thickness(upsample_binary(image, upsample, threshold), upsample)


def slant(grey: np.ndarray) -> tuple[float, float, float]:
    """``(skew, cy, cx)`` of a grey image: the shear ``mu11 / mu02`` (x pixels per y pixel) and the ink centroid.

    A digit leaning right (top to the right, y pointing down) has a negative skew. 0 for an empty image.
    """
    g = grey.astype(np.float64)
    total = g.sum()
    if total <= 0:
        return 0.0, (g.shape[0] - 1) / 2, (g.shape[1] - 1) / 2
    ys, xs = np.mgrid[:g.shape[0], :g.shape[1]]
    cy, cx = (g * ys).sum() / total, (g * xs).sum() / total
    mu02 = (g * (ys - cy) ** 2).sum()
    mu11 = (g * (ys - cy) * (xs - cx)).sum()
    return (float(mu11 / mu02) if mu02 > 0 else 0.0), float(cy), float(cx)


def _neighbours(skeleton: np.ndarray) -> np.ndarray:
    """Number of 8-neighbours of every skeleton pixel (0 off the skeleton)."""
    count = ndi.convolve(skeleton.astype(np.uint8), _EIGHT.astype(np.uint8), mode="constant") - 1
    return np.where(skeleton, count, 0)


def prune_spurs(skeleton: np.ndarray, length: float) -> np.ndarray:
    """Remove skeleton branches shorter than ``length`` pixels that run from a stroke end to a junction."""
    for _ in range(3):
        count = _neighbours(skeleton)
        junction = count >= 3
        if not junction.any():
            break
        near = ndi.binary_dilation(junction, _EIGHT)
        branches, n = ndi.label(skeleton & ~near, _EIGHT)
        if n == 0:
            break
        sizes = np.bincount(branches.ravel(), minlength=n + 1)[1:]
        has_end = np.bincount(branches[count == 1], minlength=n + 1)[1:] > 0
        touches = np.bincount(branches[ndi.binary_dilation(near, _EIGHT)], minlength=n + 1)[1:] > 0
        drop = np.flatnonzero(has_end & touches & (sizes < length)) + 1
        if not len(drop):
            break
        skeleton = skeletonize(skeleton & ~np.isin(branches, drop))
    return skeleton


def _edges(skeleton: np.ndarray, ys: np.ndarray, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8-neighbour pairs ``(i, j)`` (``i < j`` by scan order) of the skeleton pixels ``(ys, xs)``."""
    index = -np.ones(skeleton.shape, np.int64)
    index[ys, xs] = np.arange(len(ys))
    first, second = [], []
    for dy, dx in ((0, 1), (1, -1), (1, 0), (1, 1)):
        ty, tx = ys + dy, xs + dx
        ok = (ty < skeleton.shape[0]) & (tx >= 0) & (tx < skeleton.shape[1])
        other = np.full(len(ys), -1)
        other[ok] = index[ty[ok], tx[ok]]
        first.append(np.flatnonzero(other >= 0))
        second.append(other[other >= 0])
    return np.concatenate(first), np.concatenate(second)


def _graph(points: np.ndarray, edges: tuple[np.ndarray, np.ndarray]):
    """The skeleton as a sparse graph: ``points`` ``(P, 2)`` joined by ``edges``, weighted by their distance."""
    i, j = edges
    weights = np.sqrt(((points[i] - points[j]) ** 2).sum(1))
    return coo_matrix((weights, (i, j)), shape=(len(points), len(points))).tocsr()


def _reach(points: np.ndarray, graph, ends: np.ndarray) -> np.ndarray:
    """Distance along the skeleton ``graph`` (:func:`_graph`) from every point to the nearest of ``ends``
    (indices; stroke ends and junctions), ``inf`` where none is connected."""
    if not len(ends):
        return np.full(len(points), np.inf)
    return dijkstra(graph, directed=False, indices=ends, min_only=True)


def _clearance(points: np.ndarray, graph, keep: np.ndarray) -> np.ndarray:
    """Distance (frame pixels, centre line to centre line) from each point ``keep`` of the skeleton to the
    nearest point of another stroke: one whose way along the skeleton is longer than ``FOREIGN`` times the
    straight distance plus ``FOREIGN_SLACK`` (the other side of a loop, a neighbouring stroke, a stroke across a
    junction's far side). ``1e6`` where there is none. A swelling or a cut at a point must fit within it."""
    along = dijkstra(graph, directed=False, indices=keep)
    straight = np.sqrt(((points[keep, None, :] - points[None, :, :]) ** 2).sum(-1))
    foreign = along > FOREIGN * straight + FOREIGN_SLACK
    return np.where(foreign, straight, 1e6).min(axis=1)


@dataclass
class DigitRecord:
    """One normalised digit in frame coordinates (pixel ``(i, j)`` of the frame is centred at ``(i, j)``).

    Attributes:
        variants: ``(V, FRAME, FRAME)`` uint8, the glyph drawn at each thickness level.
        ink_box: ``(V, 4)`` float32 ``(y0, x0, y1, x1)``, each variant's ink extent (pixel edges).
        diameter: ``(V,)`` float32, each variant's largest diameter (frame pixels, any direction).
        stroke: ``(V,)`` float32 stroke width of each variant (frame pixels).
        shear: ``(V,)`` float32, variant v is drawn along the centre line ``x -> x - shear[v] * (y - c)``
            (c the frame's centre): the last deslanting step, per stroke width.
        skew: the deslanting shear applied (x pixels per y pixel of the source).
        fits: False if the widest variant touches the frame's border (the glyph is much wider than tall).
        points: ``(P, 2)`` float32 skeleton points ``(y, x)``; tangent ``(P,)`` radians (stroke direction,
            ``atan2(dy, dx)``); reach ``(P,)`` float32 distance along the skeleton to the nearest stroke end or
            junction (frame pixels; a large number on a closed loop); clearance ``(P,)`` float32 distance to
            the nearest other stroke (:func:`_clearance`, frame pixels between centre lines; 1e6 if none).
        end_gap: the smallest distance (frame pixels, centre lines) from a stroke end to another stroke (1e6
            if none): a loop left open by the writer looks fractured when this is small.
        connected: the skeleton is one connected stroke.
    """

    variants: np.ndarray
    ink_box: np.ndarray
    diameter: np.ndarray
    stroke: np.ndarray
    shear: np.ndarray
    skew: float
    fits: bool
    points: np.ndarray
    tangent: np.ndarray
    reach: np.ndarray
    clearance: np.ndarray
    end_gap: float
    connected: bool


def _diameter(shape: np.ndarray) -> float:
    """Largest distance between two pixel centres of a bool image (+ 1 pixel), through its convex hull."""
    from scipy.spatial import ConvexHull, QhullError

    pts = np.argwhere(shape).astype(np.float64)
    try:
        pts = pts[ConvexHull(pts).vertices]
    except (QhullError, ValueError):  # fewer than 3 points or all on a line: use them all
        pass
    return float(np.sqrt(((pts[:, None] - pts[None]) ** 2).sum(-1)).max()) + 1.0


def _distance(line: np.ndarray, u: int, width: float) -> tuple[np.ndarray, bool]:
    """Distance (hi-res pixels) from every pixel of the ``FRAME * u`` square hi-res grid to the nearest of the
    frame points ``line`` ``(L, 2)``, exact within ``width * u / 2 + 2`` of them (``inf`` farther), and whether
    every point lies inside the grid."""
    side = FRAME * u
    cells = np.rint((line + 0.5) * u - 0.5).astype(np.int64)
    fits = bool(((cells >= 0) & (cells < side)).all())
    cells = np.clip(cells, 0, side - 1)
    margin = int(np.ceil(width * u / 2)) + 2
    lo = np.maximum(cells.min(0) - margin, 0)
    hi = np.minimum(cells.max(0) + margin + 1, side)
    drawn = np.ones(tuple(hi - lo), bool)
    drawn[cells[:, 0] - lo[0], cells[:, 1] - lo[1]] = False
    grid = np.full((side, side), np.inf, np.float32)
    grid[lo[0]:hi[0], lo[1]:hi[1]] = ndi.distance_transform_edt(drawn)
    return grid, fits


def digit_record(digit: np.ndarray, amounts: list[float], upsample: int = 4, threshold: float = 0.5) -> DigitRecord:
    """Normalise one ``(28, 28)`` uint8 MNIST digit and draw it at each thickness level (see the module docstring).

    Args:
        amounts: thickness levels, stroke width ÷ glyph height (0 < t < 1).
    """
    u = upsample
    side = FRAME * u
    centre = (FRAME - 1) / 2
    grey = digit.astype(np.float32) * np.float32(1 / 255)
    skew, cy, cx = slant(grey)
    # hi-res pixel i <-> frame coordinate (i + 0.5) / u - 0.5 <-> deslanted source y' = cy + that - centre;
    # source x = x' + skew * (y' - cy)
    start = 0.5 / u - 0.5 - centre
    matrix = np.array([[1 / u, 0.0], [skew / u, 1 / u]])
    offset = [start + cy, start + cx + skew * start]
    deslanted = ndi.affine_transform(grey, matrix, offset=offset, output_shape=(side, side), order=1,
                                     mode="constant", cval=0.0, prefilter=False)
    ink = deslanted >= threshold
    if not ink.any():  # an empty digit: keep a single dot so that every table entry is usable
        ink[side // 2, side // 2] = True
    rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
    crop = (slice(max(rows[0] - 2, 0), rows[-1] + 3), slice(max(cols[0] - 2, 0), cols[-1] + 3))
    inside = ndi.distance_transform_edt(ink[crop])
    part = skeletonize(ink[crop])
    if not part.any():
        part = ink[crop].copy()
    part = prune_spurs(part, 1.2 * 2.0 * inside[part].mean())
    skeleton = np.zeros(ink.shape, bool)
    skeleton[crop] = part
    ys, xs = np.nonzero(skeleton)
    edges = _edges(skeleton, ys, xs)
    # the residual slant of the skeleton itself (moments of its edges weighted by length, i.e. of the redrawn
    # glyph's centre line), removed with the scaling below
    my, mx = (ys[edges[0]] + ys[edges[1]]) / 2, (xs[edges[0]] + xs[edges[1]]) / 2
    length = np.hypot(ys[edges[0]] - ys[edges[1]], xs[edges[0]] - xs[edges[1]])
    residual = 0.0
    if length.sum() > 0:
        dy = my - (length * my).sum() / length.sum()
        dx = mx - (length * mx).sum() / length.sum()
        if (length * dy * dy).sum() > 0:
            residual = float((length * dy * dx).sum() / (length * dy * dy).sum())
    sheared = xs - residual * (ys - ys.mean())
    height = max(float(ys.max() - ys.min()), 0.5 * float(sheared.max() - sheared.min()), float(u))
    k = GLYPH / height                                       # frame pixels per deslanted hi-res pixel
    points = np.stack([centre + (ys - (ys.max() + ys.min()) / 2) * k,
                       centre + (sheared - (sheared.max() + sheared.min()) / 2) * k], axis=1)
    # the skeleton in the normalised hi-res grid: every pixel and 3 points on each edge
    line = np.concatenate([points] + [points[edges[0]] * (1 - f) + points[edges[1]] * f for f in (0.25, 0.5, 0.75)])
    widths = [GLYPH * t / (1.0 - t) for t in amounts]
    first, fits = _distance(line, u, max(widths))
    variants = np.empty((len(amounts), FRAME, FRAME), np.uint8)
    boxes = np.empty((len(amounts), 4), np.float32)
    diameters = np.empty(len(amounts), np.float32)
    shears = np.empty(len(amounts), np.float32)
    for v, width in enumerate(widths):
        # each stroke width moves the glyph's moments a little: shear the centre line so that the drawn glyph
        # itself has mu11 = 0, then draw it again
        shears[v] = slant(first <= width * u / 2)[0]
        bent = line.copy()
        bent[:, 1] -= shears[v] * (bent[:, 0] - centre)
        grid, ok = _distance(bent, u, width)
        shape = grid <= width * u / 2
        covered = shape.view(np.uint8).reshape(FRAME, u, FRAME, u).sum(axis=(1, 3), dtype=np.int32)
        variants[v] = ((covered * 510 + u * u) // (2 * u * u)).astype(np.uint8)  # round(255 * covered / u^2)
        r, c = np.flatnonzero(shape.any(axis=1)), np.flatnonzero(shape.any(axis=0))
        boxes[v] = [r[0] / u - 0.5, c[0] / u - 0.5, (r[-1] + 1) / u - 0.5, (c[-1] + 1) / u - 0.5]
        diameters[v] = _diameter(shape) / u
        fits = fits and ok and r[0] > 0 and c[0] > 0 and r[-1] < side - 1 and c[-1] < side - 1
    count = _neighbours(skeleton)[ys, xs]
    graph = _graph(points, edges)
    reach = _reach(points, graph, np.flatnonzero((count == 1) | (count >= 3)))
    keep = np.arange(0, len(ys), max(1, int(np.ceil(len(ys) / MAX_POINTS))))
    clearance = _clearance(points, graph, keep)
    ends = np.flatnonzero(count == 1)
    end_gap = float(_clearance(points, graph, ends).min()) if len(ends) else 1e6
    # local stroke direction: principal axis of the skeleton points within 2 frame pixels of each kept point
    ey = points[None, :, 0] - points[keep, None, 0]
    ex = points[None, :, 1] - points[keep, None, 1]
    near = (ey * ey + ex * ex) <= 4.0
    tangent = 0.5 * np.arctan2(2.0 * (near * ex * ey).sum(1), (near * ex * ex).sum(1) - (near * ey * ey).sum(1))
    return DigitRecord(variants=variants, ink_box=boxes, diameter=diameters, stroke=np.array(widths, np.float32),
                       shear=shears, skew=skew + residual, fits=bool(fits),
                       points=points[keep].astype(np.float32), tangent=tangent.astype(np.float32),
                       reach=np.minimum(reach[keep], 1e6).astype(np.float32),
                       clearance=clearance.astype(np.float32), end_gap=end_gap,
                       connected=ndi.label(skeleton, _EIGHT)[1] == 1)


@dataclass
class MorphoTable:
    """Normalised glyphs of a whole digit source (computed once, reused by every sample).

    Attributes:
        amounts: the thickness levels, sorted; ``variants[:, amounts.index(a)]`` is the glyph at level a.
        variants: ``(N, V, FRAME, FRAME)`` uint8; ink_box ``(N, V, 4)`` float32; diameter ``(N, V)`` float32
            (largest diameter, frame pixels); stroke ``(N, V)`` float32
            (frame pixels); shear ``(N, V)`` float32 (see :class:`DigitRecord`); skew ``(N,)`` float32 (the
            deslanting shear of the source).
        legible: ``(N,)`` bool, the glyph fits the frame, its skeleton is one connected stroke and the reader of
            :mod:`~bindscope.generators.madman.legibility` reads every variant as its label.
        end_gap: ``(N,)`` float32 (see :class:`DigitRecord`).
        offsets: ``(N + 1,)`` int64 row ranges of digit n's skeleton points in points ``(P, 2)`` float32,
            tangent ``(P,)``, reach ``(P,)`` and clearance ``(P,)`` float32.
    """

    amounts: list[float]
    variants: np.ndarray
    ink_box: np.ndarray
    diameter: np.ndarray
    stroke: np.ndarray
    shear: np.ndarray
    skew: np.ndarray
    legible: np.ndarray
    end_gap: np.ndarray
    offsets: np.ndarray
    points: np.ndarray
    tangent: np.ndarray
    reach: np.ndarray
    clearance: np.ndarray

    ARRAYS = ("variants", "ink_box", "diameter", "stroke", "shear", "skew", "legible", "end_gap", "offsets", "points",
              "tangent", "reach", "clearance")

    def content_sha256(self) -> str:
        """Hex sha256 of the levels and every array (name, dtype, shape and bytes): what the table holds."""
        if getattr(self, "_content", None) is None:
            digest = hashlib.sha256(json.dumps([float(a) for a in self.amounts]).encode())
            for name in self.ARRAYS:
                array = np.ascontiguousarray(getattr(self, name))
                digest.update(f"\0{name}\0{array.dtype.str}\0{array.shape}\0".encode())
                digest.update(array.tobytes())
            self._content = digest.hexdigest()
        return self._content

    def subset(self, rows) -> "MorphoTable":
        """The table of the digits ``rows`` only (in that order), their skeleton points re-indexed."""
        rows = np.asarray(rows, np.int64)
        counts = self.offsets[rows + 1] - self.offsets[rows]
        pick = np.concatenate([np.arange(self.offsets[n], self.offsets[n + 1]) for n in rows] + [np.zeros(0, int)])
        per_digit = {k: getattr(self, k)[rows] for k in self.ARRAYS if k not in POINT_ARRAYS + ("offsets",)}
        return MorphoTable(self.amounts, offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                           **per_digit, **{k: getattr(self, k)[pick] for k in POINT_ARRAYS})

    def skeleton(self, n: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(points, tangent, reach, clearance)`` of digit ``n`` as drawn in variant ``v`` (its shear applied)."""
        a, b = self.offsets[n], self.offsets[n + 1]
        shear = float(self.shear[n, v])
        points = self.points[a:b].copy()
        points[:, 1] -= shear * (points[:, 0] - (FRAME - 1) / 2)
        tangent = self.tangent[a:b]
        tangent = np.arctan2(np.sin(tangent), np.cos(tangent) - shear * np.sin(tangent)).astype(np.float32)
        return points, tangent, self.reach[a:b], self.clearance[a:b]


def _records(images: np.ndarray, amounts: list[float], upsample: int, threshold: float) -> list[DigitRecord]:
    return [digit_record(d, amounts, upsample, threshold) for d in images]


def table_key(source_sha256: str, amounts: list[float], upsample: int, threshold: float) -> str:
    """Cache key of a table: sha256 of the source fingerprint, the parameters and :data:`TABLE_VERSION`."""
    text = json.dumps({"source": source_sha256, "amounts": sorted(float(a) for a in amounts), "upsample": upsample,
                       "threshold": float(threshold), "version": TABLE_VERSION}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def build_table(images: np.ndarray, labels: np.ndarray, amounts: list[float], upsample: int = 4,
                threshold: float = 0.5, jobs: int = 1, source_sha256: str | None = None, use_cache: bool = True,
                progress: bool = False) -> MorphoTable:
    """Normalised glyphs of every digit of ``images`` ``(N, 28, 28)`` uint8 (classes ``labels`` ``(N,)``), in
    ``jobs`` processes (joblib), and which of them are legible.

    With ``source_sha256`` (a fingerprint of images and labels) and ``use_cache``, the table is read from /
    written (atomically) to ``cache_root()/madman-glyphs-<key>.npz``, so it is computed once per digit source and
    parameters. It is identical whatever ``jobs``. ``progress`` shows a tqdm bar (digits) on stderr while building.

    A cached table is used only when it can be the table of these very digits: the file holds exactly the
    table's arrays (:func:`~bindscope.io.cache_dir.read_npz`: no pickle, dtypes, ranks and sizes bounded), their
    shapes fit ``len(images)`` digits, its ``binding`` is the sha256 of the cache format, the key, the digits'
    own bytes (:func:`digits_sha256`, recomputed here, not the claimed ``source_sha256``) and the table's content,
    and :data:`SPOT_CHECKS` digits drawn at random (every digit of a smaller source) recomputed from their images
    give the same bytes. Otherwise (corrupt, truncated, copied from another source, edited) it is not used: one
    :class:`~bindscope.io.cache_dir.CacheWarning`, the table is rebuilt and written again. An entry edited by
    someone who also recomputes the binding is caught when the edit touches a digit the spot check draws;
    which digits are drawn at all (``legible``, and the visibility rules) is recorded in the config's
    ``digits.rejected`` and so in the run id. A cache folder that cannot be written costs one warning.
    """
    from bindscope.generators.madman.legibility import legible_digits

    amounts = sorted(float(a) for a in set(amounts))
    path = key = digits = None
    if source_sha256 and use_cache:
        key = table_key(source_sha256, amounts, upsample, threshold)
        path = cache_root() / f"madman-glyphs-{key[:24]}.npz"
        digits = digits_sha256(images, labels)
        cached = _read_cached_table(path, key, digits, images, amounts, upsample, threshold)
        if cached is not None:
            return cached
    from tqdm.auto import tqdm

    chunks = np.array_split(np.arange(len(images)), max(1, min(len(images), 50)))
    if jobs == 1:
        parts = (_records(images[c], amounts, upsample, threshold) for c in chunks)
    else:
        import joblib

        parts = joblib.Parallel(n_jobs=jobs, return_as="generator")(
            joblib.delayed(_records)(images[c], amounts, upsample, threshold) for c in chunks)
    records = []
    with tqdm(total=len(images), unit="digit", desc="normalised glyphs (once per digit source)",
              disable=not progress) as bar:
        for part in parts:
            records.extend(part)
            bar.update(len(part))
    if jobs != 1:
        # let the dataset build start its own workers: joblib measures a worker's memory after its first task and
        # restarts it ("A worker stopped ...") once it grows by 300 MB, as these would when they go on to render
        # (numba alone maps about 120 MB)
        joblib.externals.loky.get_reusable_executor().shutdown(wait=True)
    counts = [len(r.points) for r in records]
    variants = np.stack([r.variants for r in records])
    fits = np.array([r.fits and r.connected for r in records], bool)
    table = MorphoTable(
        amounts=amounts,
        variants=variants,
        ink_box=np.stack([r.ink_box for r in records]).astype(np.float32),
        diameter=np.stack([r.diameter for r in records]).astype(np.float32),
        stroke=np.stack([r.stroke for r in records]).astype(np.float32),
        shear=np.stack([r.shear for r in records]).astype(np.float32),
        skew=np.array([r.skew for r in records], np.float32),
        legible=fits & legible_digits(variants, np.asarray(labels)),
        end_gap=np.array([r.end_gap for r in records], np.float32),
        offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        points=np.concatenate([r.points for r in records]).astype(np.float32),
        tangent=np.concatenate([r.tangent for r in records]).astype(np.float32),
        reach=np.concatenate([r.reach for r in records]).astype(np.float32),
        clearance=np.concatenate([r.clearance for r in records]).astype(np.float32))
    if path is not None and writable_folder(path.parent):
        try:
            with atomic_open(path) as handle:
                np.savez(handle, binding=_binding(key, digits, table), **{k: getattr(table, k) for k in MorphoTable.ARRAYS})
        except OSError as exc:
            cache_unusable(path.parent, exc)  # a cache that cannot be written only costs time
    return table


def digits_sha256(images: np.ndarray, labels: np.ndarray) -> bytes:
    """sha256 digest of the digits themselves (shape, uint8 images, int64 labels), recomputed on every read of the
    cache: a table is bound to the digits it was computed from, not to the fingerprint a source claims."""
    images = np.ascontiguousarray(images, np.uint8)
    digest = hashlib.sha256(f"digits\0{images.shape}\0".encode())
    digest.update(images.tobytes())
    digest.update(np.ascontiguousarray(labels, np.int64).tobytes())
    return digest.digest()


def _binding(key: str, digits: bytes, table: MorphoTable) -> np.ndarray:
    """``(32,)`` uint8: sha256 of the cache format, the table key, the digits and the table's content."""
    text = GLYPH_CACHE_FORMAT + b"\0" + key.encode() + b"\0" + digits + table.content_sha256().encode()
    return np.frombuffer(hashlib.sha256(text).digest(), np.uint8).copy()


def _array_kinds() -> dict[str, tuple[str, int]]:
    f4, u1, b1, i8 = (np.dtype(t).str for t in (np.float32, np.uint8, np.bool_, np.int64))
    return {"variants": (u1, 4), "ink_box": (f4, 3), "diameter": (f4, 2), "stroke": (f4, 2), "shear": (f4, 2),
             "skew": (f4, 1), "legible": (b1, 1), "end_gap": (f4, 1), "offsets": (i8, 1), "points": (f4, 2),
             "tangent": (f4, 1), "reach": (f4, 1), "clearance": (f4, 1), "binding": (u1, 1)}


def _shape_problem(table: MorphoTable, n: int) -> str | None:
    """Why the arrays of a table read from the cache cannot be a table of ``n`` digits (None: they can)."""
    levels = len(table.amounts)
    shapes = {"variants": (n, levels, FRAME, FRAME), "ink_box": (n, levels, 4), "diameter": (n, levels),
              "stroke": (n, levels), "shear": (n, levels), "skew": (n,), "legible": (n,), "end_gap": (n,),
              "offsets": (n + 1,)}
    for name, shape in shapes.items():
        if getattr(table, name).shape != shape:
            return f"has {name} of shape {getattr(table, name).shape}, not {shape}"
    counts = np.diff(table.offsets)
    if table.offsets[0] != 0 or (counts < 0).any() or (counts > MAX_POINTS).any():
        return "has skeleton offsets out of order"
    total = int(table.offsets[-1])
    for name, shape in (("points", (total, 2)), ("tangent", (total,)), ("reach", (total,)), ("clearance", (total,))):
        if getattr(table, name).shape != shape:
            return f"has {name} of shape {getattr(table, name).shape}, not {shape}"
    for name in MorphoTable.ARRAYS:
        array = getattr(table, name)
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            return f"has {name} values that are not finite"
    return None


def _spot_check(table: MorphoTable, images: np.ndarray, amounts: list[float], upsample: int,
                threshold: float) -> int | None:
    """Recompute :data:`SPOT_CHECKS` digits chosen at random (all of them in a smaller source) from their source
    images and compare them with the table, byte for byte: the first digit that differs, or None."""
    n = len(images)
    rows = np.arange(n) if n <= SPOT_CHECKS else np.sort(np.random.default_rng().choice(n, SPOT_CHECKS, replace=False))
    for row in rows:
        record = digit_record(images[row], amounts, upsample, threshold)
        a, b = int(table.offsets[row]), int(table.offsets[row + 1])
        pairs = [(table.variants[row], record.variants), (table.ink_box[row], record.ink_box),
                 (table.diameter[row], record.diameter), (table.stroke[row], record.stroke),
                 (table.shear[row], record.shear), (table.skew[row], np.float32(record.skew)),
                 (table.end_gap[row], np.float32(record.end_gap)), (table.points[a:b], record.points),
                 (table.tangent[a:b], record.tangent), (table.reach[a:b], record.reach),
                 (table.clearance[a:b], record.clearance)]
        same = all(np.asarray(x).shape == np.asarray(y).shape and np.asarray(x).tobytes() == np.asarray(y).tobytes()
                   for x, y in pairs)
        if not same or (table.legible[row] and not (record.fits and record.connected)):
            return int(row)
    return None


def _read_cached_table(path, key: str, digits: bytes, images: np.ndarray, amounts: list[float], upsample: int,
                       threshold: float) -> MorphoTable | None:
    """The cached table at ``path`` if it is sound and is the table of ``images`` (see :func:`build_table`);
    None when there is none, and None after a :class:`~bindscope.io.cache_dir.CacheWarning` when it fails a check
    (the caller rebuilds it and writes it again)."""
    n, levels = len(images), len(amounts)
    limit = n * (levels * (FRAME * FRAME + 28) + 21 + MAX_POINTS * 20) + (1 << 16)
    try:
        data = read_npz(path, _array_kinds(), limit)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except EntryRefused as exc:
        warn_entry(path, str(exc))
        return None
    binding = data.pop("binding")
    table = MorphoTable(amounts, **data)
    problem = _shape_problem(table, n)
    if problem is None and binding.tobytes() != _binding(key, digits, table).tobytes():
        problem = "does not match the digits it claims to come from (or was changed after it was written)"
    if problem is None:
        row = _spot_check(table, images, amounts, upsample, threshold)
        if row is not None:
            problem = f"holds glyphs for digit {row} that its source image does not give"
    if problem is not None:
        warn_entry(path, problem)
        return None
    return table


def bulge_half_width(swelling: float, glyph: float, stroke: float) -> float:
    """Half-width (frame pixels) of the swelling of value ``swelling`` (width / glyph height) on a glyph
    ``glyph`` frame pixels tall with strokes ``stroke`` wide: ``max(swelling * glyph, SWELL_MIN * stroke) / 2``;
    0 for no swelling."""
    return max(swelling * glyph, SWELL_MIN * stroke) / 2 if swelling > 0 else 0.0


def swelling_room(reach: np.ndarray, clearance: np.ndarray, bulge: float, stroke: float) -> np.ndarray:
    """Skeleton points that can carry a swelling of half-width ``bulge``: ``(P,)`` bool. Their ``reach``
    (distance along the skeleton to a stroke end or junction) is at least the swelling's half-length
    ``SWELL_LENGTH * bulge`` and their ``clearance`` leaves half a stroke width (at least a frame pixel) between
    the bulge and any other stroke (half-width ``stroke / 2``), so a swelling never fills a loop (frame pixels
    throughout)."""
    return (clearance >= bulge + stroke / 2 + max(1.0, stroke / 2)) & (reach >= SWELL_LENGTH * bulge)


def swelling_centre(points: np.ndarray, reach: np.ndarray, clearance: np.ndarray, bulge: float, stroke: float,
                    draw: float) -> np.ndarray:
    """The swelling's centre ``(y, x)``: the skeleton point ``draw`` (in [0, 1)) of the way through the points
    with room for it (:func:`swelling_room`); without any (only for digits the generator does not draw, see
    :func:`~bindscope.generators.madman.visibility.visible_attributes`), the point of largest clearance."""
    choices = np.flatnonzero(swelling_room(reach, clearance, bulge, stroke))
    if not len(choices):
        choices = np.array([int(np.argmax(clearance))])
    return points[choices[min(int(draw * len(choices)), len(choices) - 1)]]
