"""Morpho-MNIST-style morphometry and perturbations (thickness, swelling, fracture) with scipy / scikit-image.

Follows the operations of Morpho-MNIST (Castro et al., "Morpho-MNIST: Quantitative Assessment and
Diagnostics for Representation Learning", JMLR 2019), written here from their description:

1. **Morphometry** (once per source digit, :func:`digit_record`): the 28x28 digit is padded to a
   :data:`FRAME` x :data:`FRAME` frame, upsampled ``upsample`` times (bilinear, :func:`scipy.ndimage.zoom`),
   binarised at ``threshold`` (fraction of full ink), skeletonised (:func:`skimage.morphology.skeletonize`) and
   distance-transformed (:func:`scipy.ndimage.distance_transform_edt`). The **mean stroke thickness** is twice the
   mean distance-to-background over skeleton pixels (frame pixels = 28x28-digit pixels).
2. **Thickness** (thinning / thickening): erosion or dilation of the binary digit with a Euclidean disk of
   radius ``|amount| * thickness / 2``, so the stroke width changes by about ``amount * thickness``
   (``amount`` -0.5 halves it, +1.0 doubles it; defaults: thin -0.35, thick +0.8). Computed exactly by thresholding the distance transforms
   (dilation by a disk of radius r = pixels within r of ink; erosion = ink pixels farther than r from
   background). Erosion keeps a core one frame pixel wide along the skeleton, so no stroke vanishes or
   breaks where it was thinner than ``2 r``. The result is area-averaged back to the
   frame resolution (a grey image, 0..255). One image per thickness value per digit is kept in the
   :class:`MorphoTable`.
3. **Swelling** (:func:`swell_inverse`): a local radial warp around a skeleton point ``c``: a point at
   distance ``rho < R`` from ``c`` shows the source at distance ``R * (rho / R) ** strength``, magnifying the
   stroke near ``c`` (strength 1 = identity).
4. **Fracture** (:func:`fracture_factor`): at sampled skeleton points away from stroke ends and junctions,
   a line of width ``fracture_width`` perpendicular to the local stroke direction, reaching one pixel beyond
   the local stroke half-width, is erased.

Swelling and fracture depend on the sample and are applied at render time, as coordinate maps composed with
the digit's scale, rotation and placement (see :mod:`bindscope.generators.madman.render`). Order:
thickness, fracture, swelling, then scale / rotate / place.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np
from scipy import ndimage as ndi
from skimage.morphology import disk, skeletonize

from bindscope.atomic import atomic_open
from bindscope.cache import cache_root

TABLE_VERSION = 2
FRAME = 32          # frame side in pixels: the 28x28 digit padded by 2 on each side
PAD = (FRAME - 28) // 2
MAX_POINTS = 64     # skeleton points kept per digit (evenly subsampled)


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


@dataclass
class DigitRecord:
    """Morphometry of one digit in frame coordinates (pixel ``(i, j)`` of the frame is centred at ``(i, j)``).

    Attributes:
        variants: ``(V, FRAME, FRAME)`` uint8, the digit after each thickness amount.
        ink_box: ``(y0, x0, y1, x1)`` float, the binarised ink's extent (pixel edges) before any change.
        thickness: mean stroke thickness (frame pixels).
        points: ``(P, 2)`` float32 skeleton points ``(y, x)``; tangent ``(P,)`` radians (direction of the
            stroke, ``atan2(dy, dx)``); halfwidth ``(P,)`` local stroke half-width; interior ``(P,)`` bool,
            points away from stroke ends and junctions.
    """

    variants: np.ndarray
    ink_box: np.ndarray
    thickness: float
    points: np.ndarray
    tangent: np.ndarray
    halfwidth: np.ndarray
    interior: np.ndarray


def digit_record(digit: np.ndarray, amounts: list[float], upsample: int = 4, threshold: float = 0.5) -> DigitRecord:
    """Morphometry and thickness variants of one ``(28, 28)`` uint8 MNIST digit (see the module docstring)."""
    u = upsample
    frame = np.zeros((FRAME, FRAME), np.uint8)
    frame[PAD:PAD + 28, PAD:PAD + 28] = digit
    ink = upsample_binary(frame, u, threshold)
    if not ink.any():  # an empty digit: keep a single dot so that every table entry is usable
        ink[FRAME * u // 2, FRAME * u // 2] = True
    side = FRAME * u
    rows = np.flatnonzero(ink.any(axis=1))
    cols = np.flatnonzero(ink.any(axis=0))
    # work on the ink's bounding box (+ margin): the transforms are exact there and 2-3x cheaper than the frame
    crop = (slice(max(rows[0] - 1, 0), rows[-1] + 2), slice(max(cols[0] - 1, 0), cols[-1] + 2))
    inside = np.zeros(ink.shape, np.float64)
    inside[crop] = ndi.distance_transform_edt(ink[crop])
    skeleton = np.zeros(ink.shape, bool)
    skeleton[crop] = skeletonize(ink[crop])
    if not skeleton.any():
        skeleton = ink.copy()
    thickness_hi = float(2.0 * inside[skeleton].mean())
    reach = int(np.ceil(max(max(amounts), 0.0) * thickness_hi / 2.0)) + 2
    crop_out = (slice(max(rows[0] - reach, 0), min(rows[-1] + reach + 1, side)),
                slice(max(cols[0] - reach, 0), min(cols[-1] + reach + 1, side)))
    outside = np.full(ink.shape, np.inf)
    outside[crop_out] = ndi.distance_transform_edt(~ink[crop_out])
    variants = np.empty((len(amounts), FRAME, FRAME), np.uint8)
    if min(amounts) < 0:  # erosion keeps a core one frame pixel wide along the skeleton: no stroke vanishes
        core = np.zeros(ink.shape, bool)
        core[crop] = ndi.binary_dilation(skeleton[crop], disk(max(1, u // 2)), border_value=0) & ink[crop]
    for k, amount in enumerate(amounts):
        radius = abs(amount) * thickness_hi / 2.0
        if amount > 0:
            shape = outside <= radius
        elif amount < 0:
            shape = (inside > radius) | core
        else:
            shape = ink
        covered = shape.view(np.uint8).reshape(side, FRAME, u).sum(axis=2, dtype=np.int32)
        covered = covered.reshape(FRAME, u, FRAME).sum(axis=1)
        variants[k] = ((covered * 510 + u * u) // (2 * u * u)).astype(np.uint8)  # round(255 * covered / u^2)
    to_frame = lambda i: (i + 0.5) / u - 0.5  # noqa: E731 - hi-res pixel centre -> frame coordinate
    ink_box = np.array([rows[0] / u - 0.5, cols[0] / u - 0.5, (rows[-1] + 1) / u - 0.5, (cols[-1] + 1) / u - 0.5],
                       np.float32)
    neighbours = np.zeros(ink.shape, np.uint8)
    neighbours[crop] = ndi.convolve(skeleton[crop].astype(np.uint8), np.ones((3, 3), np.uint8), mode="constant")
    ys, xs = np.nonzero(skeleton)
    step = max(1, int(np.ceil(len(ys) / MAX_POINTS)))
    keep = np.arange(0, len(ys), step)
    py, px = ys[keep], xs[keep]
    # local stroke direction: principal axis of the skeleton pixels within 2 frame pixels of each kept point
    dy = ys[None, :] - py[:, None]
    dx = xs[None, :] - px[:, None]
    near = (dy * dy + dx * dx) <= (2 * u) ** 2
    syy = (near * dy * dy).sum(1)
    sxx = (near * dx * dx).sum(1)
    sxy = (near * dx * dy).sum(1)
    tangent = 0.5 * np.arctan2(2.0 * sxy, sxx - syy)
    return DigitRecord(
        variants=variants, ink_box=ink_box, thickness=thickness_hi / u,
        points=np.stack([to_frame(py), to_frame(px)], axis=1).astype(np.float32),
        tangent=tangent.astype(np.float32),
        halfwidth=(inside[py, px] / u).astype(np.float32),
        interior=(neighbours[py, px] == 3))


@dataclass
class MorphoTable:
    """Per-digit morphometry of a whole digit source (computed once, reused by every sample).

    Attributes:
        amounts: the thickness amounts, sorted; ``variants[:, amounts.index(a)]`` is the digit after amount a.
        variants: ``(N, V, FRAME, FRAME)`` uint8.
        ink_box: ``(N, 4)`` float32; thickness ``(N,)`` float32 (frame pixels).
        offsets: ``(N + 1,)`` int64 row ranges of digit n's skeleton points in points ``(P, 2)`` float32,
            tangent ``(P,)``, halfwidth ``(P,)`` float32 and interior ``(P,)`` bool.
    """

    amounts: list[float]
    variants: np.ndarray
    ink_box: np.ndarray
    thickness: np.ndarray
    offsets: np.ndarray
    points: np.ndarray
    tangent: np.ndarray
    halfwidth: np.ndarray
    interior: np.ndarray

    ARRAYS = ("variants", "ink_box", "thickness", "offsets", "points", "tangent", "halfwidth", "interior")

    def skeleton(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(points, tangent, halfwidth, interior)`` of digit ``n``."""
        a, b = self.offsets[n], self.offsets[n + 1]
        return self.points[a:b], self.tangent[a:b], self.halfwidth[a:b], self.interior[a:b]


def _records(images: np.ndarray, amounts: list[float], upsample: int, threshold: float) -> list[DigitRecord]:
    return [digit_record(d, amounts, upsample, threshold) for d in images]


def table_key(source_sha256: str, amounts: list[float], upsample: int, threshold: float) -> str:
    """Cache key of a table: sha256 of the source fingerprint, the parameters and :data:`TABLE_VERSION`."""
    text = json.dumps({"source": source_sha256, "amounts": sorted(float(a) for a in amounts), "upsample": upsample,
                       "threshold": float(threshold), "version": TABLE_VERSION}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def build_table(images: np.ndarray, amounts: list[float], upsample: int = 4, threshold: float = 0.5,
                jobs: int = 1, source_sha256: str | None = None, use_cache: bool = True,
                progress: bool = False) -> MorphoTable:
    """Morphometry of every digit of ``images`` ``(N, 28, 28)`` uint8, in ``jobs`` processes (joblib).

    With ``source_sha256`` and ``use_cache``, the table is read from / written (atomically) to
    ``cache_root()/madman-morpho-<key>.npz``, so it is computed once per digit source and parameters. It is
    identical whatever ``jobs``. ``progress`` shows a tqdm bar (digits) on stderr while building.
    """
    amounts = sorted(float(a) for a in set(amounts))
    path = None
    if source_sha256 and use_cache:
        path = cache_root() / f"madman-morpho-{table_key(source_sha256, amounts, upsample, threshold)[:24]}.npz"
        if path.is_file():
            try:
                with np.load(path) as data:
                    return MorphoTable(amounts, **{k: data[k] for k in MorphoTable.ARRAYS})
            except (OSError, ValueError, KeyError):
                pass  # unreadable cache: rebuild it
    from tqdm.auto import tqdm

    chunks = np.array_split(np.arange(len(images)), max(1, min(len(images), 50)))
    if jobs == 1:
        parts = (_records(images[c], amounts, upsample, threshold) for c in chunks)
    else:
        import joblib

        parts = joblib.Parallel(n_jobs=jobs, return_as="generator")(
            joblib.delayed(_records)(images[c], amounts, upsample, threshold) for c in chunks)
    records = []
    with tqdm(total=len(images), unit="digit", desc="morphometry (once per digit source)",
              disable=not progress) as bar:
        for part in parts:
            records.extend(part)
            bar.update(len(part))
    counts = [len(r.points) for r in records]
    table = MorphoTable(
        amounts=amounts,
        variants=np.stack([r.variants for r in records]),
        ink_box=np.stack([r.ink_box for r in records]).astype(np.float32),
        thickness=np.array([r.thickness for r in records], np.float32),
        offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        points=np.concatenate([r.points for r in records]).astype(np.float32),
        tangent=np.concatenate([r.tangent for r in records]).astype(np.float32),
        halfwidth=np.concatenate([r.halfwidth for r in records]).astype(np.float32),
        interior=np.concatenate([r.interior for r in records]).astype(bool))
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_open(path) as handle:
                np.savez(handle, **{k: getattr(table, k) for k in MorphoTable.ARRAYS})
        except OSError:
            pass  # a read-only cache folder only costs time
    return table


def swell_inverse(qy: np.ndarray, qx: np.ndarray, centre: tuple[float, float], radius: float,
                  strength: float) -> tuple[np.ndarray, np.ndarray]:
    """Inverse swelling warp: for output points ``(qy, qx)`` (frame pixels), the source points to sample.

    Within ``radius`` of ``centre`` a point at distance rho samples the source at distance
    ``radius * (rho / radius) ** strength`` along the same ray; farther points are unchanged.
    """
    if strength == 1.0:
        return qy, qx
    dy = qy - centre[0]
    dx = qx - centre[1]
    rho = np.sqrt(dy * dy + dx * dx)
    factor = np.where(rho < radius, (np.minimum(rho, radius) / radius) ** (strength - 1.0), 1.0)
    return centre[0] + dy * factor, centre[1] + dx * factor


def fracture_factor(qy: np.ndarray, qx: np.ndarray, cuts: np.ndarray, width: float, ramp: float) -> np.ndarray:
    """Multiplicative ink factor (0 inside a cut, 1 outside) at frame points ``(qy, qx)``.

    Args:
        cuts: ``(F, 4)`` rows ``(y, x, tangent, half_length)``: a cut centred at ``(y, x)`` runs across the
            stroke (perpendicular to ``tangent``) for ``half_length`` on each side.
        width: cut width (frame pixels).
        ramp: width (frame pixels) of the linear anti-aliasing ramp at the cut's long edges.
    """
    cuts = np.asarray(cuts, np.float32).reshape(-1, 4)
    shape = (-1,) + (1,) * qy.ndim
    y, x, tangent, half = (cuts[:, i].reshape(shape) for i in range(4))
    ty, tx = np.sin(tangent), np.cos(tangent)
    dy, dx = qy[None] - y, qx[None] - x
    along = np.abs(dy * ty + dx * tx)          # distance along the stroke from each cut's centre line
    across = np.abs(dx * ty - dy * tx)         # distance across the stroke
    edge = (along - np.float32(width / 2.0)) * np.float32(1.0 / ramp) + np.float32(0.5)
    np.clip(edge, 0.0, 1.0, out=edge)
    edge[across > half] = 1.0
    return edge.min(axis=0)
