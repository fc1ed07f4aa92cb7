"""The renderer's per-pixel work, compiled with numba: sampling a posed digit's ink, reading one glyph, the ink's
extent, the cut sites and the compositing of an image.

Each function handles one digit or image and loops over its pixels in a fixed order (float64 unless a docstring
says float32), without fast-math (no reassociation), so a sample's pixels and reads never depend on how many
samples a process draws or in which order: the generator's byte-identical output for any ``--jobs`` rests on
that. Numba rather than numpy because one digit is a few thousand samples, where numpy's cost is mostly the
overhead of its calls on small arrays; batching many samples into one numpy call would instead make the rounding
of a matrix product depend on the batch. Compiled code is cached on disk (numba's ``cache=True``: next to this
file, or in numba's user cache folder where that is read-only; without either, each process compiles); compiling
takes about 6 s.

The geometry (see :mod:`~bindscope.generators.madman.render`):

- ink: the glyph variant (uint8, 0..255 -> 0..1) sampled bilinearly, zero outside the frame;
- swelling: the union of disks ``(y, x, r)`` along the skeleton, anti-aliased over one canvas pixel: coverage
  ``clip(max_k(r_k - |q - p_k|) * aa + 0.5, 0, 1)``, ``aa`` canvas pixels per frame pixel; the ink is the larger
  of glyph and swelling;
- cuts: rows ``(y, x, t)``, t the stroke's tangent: where a point is at most ``cut_half`` across the stroke
  from a cut's centre line, the ink is multiplied by ``clip((along - width / 2) / ramp + 0.5, 0, 1)``, ``along``
  its distance along the stroke from that line (the factors of several cuts multiply).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


def _compiled(function):
    """``numba.njit`` with numba's on-disk cache where numba finds a writable folder for it (next to this file, or
    ``NUMBA_CACHE_DIR``, or the user's cache folder), else without it: compiled once per process."""
    try:
        return njit(cache=True, error_model="numpy")(function)
    except RuntimeError:  # "cannot cache function ...: no locator available" (read-only install and home)
        return njit(error_model="numpy")(function)


@_compiled
def ink_patch(variant, out, top, left, ss, affine, points, swell_centre, swell_length, half, bulge, aa, cuts,
              cut_half, width, ramp):
    """Fill ``out`` ``(h, w)`` float32 with the mean ink coverage (0..1) of ``ss x ss`` samples per pixel.

    Pixel ``(i, j)`` of ``out`` is canvas pixel ``(top + i, left + j)``; its samples lie at canvas points
    ``(Y, X) = (top + i + (a + 0.5) / ss - 0.5, left + j + (b + 0.5) / ss - 0.5)``, which map to frame points
    ``qy = affine[0] + Y * affine[1] + X * affine[2]``, ``qx = affine[3] + Y * affine[4] + X * affine[5]``.

    Args:
        variant: ``(F, F)`` uint8 glyph.
        points: ``(P, 2)`` skeleton points (frame pixels); swell_centre: ``(2,)``; swell_length: ``L``; half: the
            stroke's half-width; bulge: the swelling's half-width (0: no swelling). Every skeleton point q closer
            than L to the centre c carries a disk of radius ``half + (bulge - half) * (1 - (|q - c| / L)^2)^2``.
        aa: canvas pixels per frame pixel (the swelling's anti-aliasing).
        cuts: ``(M, 3)`` float64 rows ``(y, x, tangent)`` (radians); cut_half, width, ramp: frame pixels.

    The arguments are flat arrays and numbers on purpose: numba's nopython mode compiles those, not a settings
    object (``bindscope.generators.madman.render.Renderer._ink`` gathers them from one digit's pose).
    """
    h, w = out.shape
    side_y, side_x = variant.shape
    glyph = np.zeros((side_y + 2, side_x + 2))  # zero border: every bilinear read stays inside
    for y in range(side_y):
        for x in range(side_x):
            glyph[y + 1, x + 1] = variant[y, x] / 255.0
    disks = np.empty((points.shape[0], 3))
    count, reach = 0, 0.0
    if bulge > 0.0:
        for k in range(points.shape[0]):
            d2 = ((points[k, 0] - swell_centre[0]) ** 2 + (points[k, 1] - swell_centre[1]) ** 2) / (
                swell_length * swell_length)
            if d2 < 1.0:
                radius = half + (bulge - half) * (1.0 - d2) ** 2
                disks[count, 0], disks[count, 1], disks[count, 2] = points[k, 0], points[k, 1], radius
                reach = max(reach, math.sqrt(d2) * swell_length + radius)
                count += 1
    reach2 = (reach + 0.5 / aa + 1e-6) ** 2  # no disk covers a point farther than this from the centre
    sines, cosines = np.sin(cuts[:, 2]), np.cos(cuts[:, 2])
    offsets = np.empty(ss)  # of the samples within a pixel
    for a in range(ss):
        offsets[a] = (a + 0.5) / ss - 0.5
    for i in range(h):
        for j in range(w):
            total = 0.0
            for a in range(ss):
                y_canvas = top + i + offsets[a]
                for b in range(ss):
                    x_canvas = left + j + offsets[b]
                    qy = affine[0] + y_canvas * affine[1] + x_canvas * affine[2]
                    qx = affine[3] + y_canvas * affine[4] + x_canvas * affine[5]
                    value = 0.0
                    # bilinear in the bordered glyph, where row / column iy, ix hold the frame's iy - 1, ix - 1
                    gy, gx = qy + 1.0, qx + 1.0
                    if 0.0 < gy < side_y + 1.0 and 0.0 < gx < side_x + 1.0:
                        iy, ix = int(gy), int(gx)  # floor, as both are positive
                        wy, wx = gy - iy, gx - ix
                        value = ((1.0 - wy) * ((1.0 - wx) * glyph[iy, ix] + wx * glyph[iy, ix + 1])
                                 + wy * ((1.0 - wx) * glyph[iy + 1, ix] + wx * glyph[iy + 1, ix + 1]))
                    if count and (qy - swell_centre[0]) ** 2 + (qx - swell_centre[1]) ** 2 <= reach2:
                        margin = -np.inf
                        for k in range(count):
                            m = disks[k, 2] - math.sqrt((qy - disks[k, 0]) ** 2 + (qx - disks[k, 1]) ** 2)
                            if m > margin:
                                margin = m
                        value = max(value, min(max(margin * aa + 0.5, 0.0), 1.0))
                    for k in range(cuts.shape[0]):
                        dy, dx = qy - cuts[k, 0], qx - cuts[k, 1]
                        if abs(dx * sines[k] - dy * cosines[k]) <= cut_half:
                            along = abs(dy * sines[k] + dx * cosines[k])
                            value *= min(max((along - width / 2.0) / ramp + 0.5, 0.0), 1.0)
                    total += value
            out[i, j] = min(max(total / (ss * ss), 0.0), 1.0)


@_compiled
def nearest(ink, project, offset, ref_zt, ref_sq, labels, own, k):
    """The classes of the ``k`` nearest references of one glyph, nearest first (ties: the lower reference row).

    Squared distances are ``|z|^2 + |r|^2 - 2 z.r``: z in float64, the products ``z.r`` summed over the
    components in order in float32, the rest in float64.

    Args:
        ink: ``(F, F)`` float32 coverage 0..1.
        project: ``(F*F, C)`` float32, features times the PCA basis; offset: ``(C,)`` the mean's projection.
        ref_zt: ``(C, R)`` float32 reference coordinates (transposed); ref_sq: ``(R,)`` their squared norms.
        labels: ``(R,)`` int64 reference classes; own: the glyph's own reference row, left out (-1: none).

    Returns:
        ``(k,)`` int64.
    """
    flat = ink.ravel()
    components = project.shape[1]
    z = np.zeros(components)
    for p in range(flat.size):
        v = flat[p]
        if v != 0.0:
            for c in range(components):
                z[c] += v * project[p, c]
    zz = 0.0
    for c in range(components):
        z[c] -= offset[c]
        zz += z[c] * z[c]
    refs = ref_zt.shape[1]
    cross = np.zeros(refs, np.float32)  # float32 as the references: the loop over references vectorises
    for c in range(components):
        zc = np.float32(z[c])
        for r in range(refs):
            cross[r] += zc * ref_zt[c, r]
    best_d = np.full(k, np.inf)
    best_r = np.full(k, -1, np.int64)
    for r in range(refs):
        if r == own:
            continue
        d = zz + ref_sq[r] - 2.0 * cross[r]
        if d < best_d[k - 1]:
            slot = k - 1
            while slot > 0 and d < best_d[slot - 1]:
                best_d[slot] = best_d[slot - 1]
                best_r[slot] = best_r[slot - 1]
                slot -= 1
            best_d[slot] = d
            best_r[slot] = r
    out = np.empty(k, np.int64)
    for slot in range(k):
        out[slot] = labels[best_r[slot]]
    return out


@_compiled
def ink_extent(variant, points, swell_centre, swell_length, bulge, pivot_y, pivot_x, cos, sin, scale):
    """How far a posed digit's ink reaches from its pivot, in canvas pixels: ``(up, left, down, right)``.

    The ink lies in disks (frame centre, frame radius): radius 1 around every ink pixel of ``variant`` ``(F, F)``
    uint8 (bilinear sampling spreads a frame pixel over one frame pixel around its centre; of each row, its first
    and last ink pixels reach farthest along any direction) and, where ``bulge > 0``, radius ``bulge`` around
    every skeleton point of ``points`` ``(P, 2)`` closer than ``swell_length`` to ``swell_centre``. A frame
    offset ``(dy, dx)`` from the pivot lands at canvas offset ``scale * (dy cos - dx sin, dx cos + dy sin)``;
    every disk is padded by one canvas pixel of anti-aliasing.
    """
    reach = np.full(4, -np.inf)  # up, left, down, right
    limit = swell_length * swell_length
    side_y, side_x = variant.shape
    for row in range(side_y):
        first = -1
        for col in range(side_x):
            if variant[row, col]:
                first = col
                break
        if first < 0:
            continue
        last = side_x - 1
        while not variant[row, last]:
            last -= 1
        _reach(reach, row, first, 1.0, pivot_y, pivot_x, cos, sin, scale)
        _reach(reach, row, last, 1.0, pivot_y, pivot_x, cos, sin, scale)
    if bulge > 0:
        for k in range(points.shape[0]):
            if (points[k, 0] - swell_centre[0]) ** 2 + (points[k, 1] - swell_centre[1]) ** 2 < limit:
                _reach(reach, points[k, 0], points[k, 1], bulge, pivot_y, pivot_x, cos, sin, scale)
    return reach[0], reach[1], reach[2], reach[3]


@_compiled
def _reach(reach, y, x, radius, pivot_y, pivot_x, cos, sin, scale):
    """Grow ``reach`` ``(up, left, down, right)`` to hold the disk at frame ``(y, x)`` (see :func:`ink_extent`)."""
    dy, dx = y - pivot_y, x - pivot_x
    oy, ox = scale * (dy * cos - dx * sin), scale * (dx * cos + dy * sin)
    pad = scale * radius + 1.0
    reach[0], reach[1] = max(reach[0], pad - oy), max(reach[1], pad - ox)
    reach[2], reach[3] = max(reach[2], oy + pad), max(reach[3], ox + pad)


@_compiled
def composite(alphas, windows, colours, image, mask, boxes):
    """Paint up to two digits over black and label the mask (see :mod:`~bindscope.generators.madman.render`).

    Args:
        alphas: ``(k, S, S)`` float32 ink coverage 0..1, object 1 first (drawn on top); k is 1 or 2.
        windows: ``(k, 4)`` int64 rows ``(top, left, bottom, right)``: object k's coverage is 0 outside them.
        colours: ``(k, 3)`` float32 RGB 0..255.
        image: ``(S, S, 3)`` uint8 zeros, filled with ``round(c1 * rgb1 + c2 * rgb2)`` (halves round up), ``c1 =
            a1``, ``c2 = a2 (1 - a1)``.
        mask: ``(S, S)`` uint8 zeros, filled with k where ``c_k >= 0.5`` (object 1 first), else 0.
        boxes: ``(k, 5)`` int64, filled with each object's mask ``(x0, y0, x1, y1, area)`` (half-open box,
            pixels; all 0 for an object without mask pixels).
    """
    count, side = alphas.shape[0], alphas.shape[1]
    half, one, full = np.float32(0.5), np.float32(1.0), np.float32(255.0)
    for k in range(count):
        boxes[k, 0], boxes[k, 1], boxes[k, 2], boxes[k, 3], boxes[k, 4] = side, side, 0, 0, 0
    for w in range(count):
        for i in range(windows[w, 0], windows[w, 2]):
            for j in range(windows[w, 1], windows[w, 3]):
                if w == 1 and windows[0, 0] <= i < windows[0, 2] and windows[0, 1] <= j < windows[0, 3]:
                    continue  # done with window 0
                c1 = alphas[0, i, j]
                c2 = alphas[1, i, j] * (one - c1) if count == 2 else np.float32(0.0)
                for channel in range(3):
                    value = c1 * colours[0, channel]
                    if count == 2:
                        value += c2 * colours[1, channel]
                    value += half
                    image[i, j, channel] = np.uint8(min(value, full))
                label = 1 if c1 >= half else (2 if c2 >= half else 0)
                mask[i, j] = label
                if label:
                    box = boxes[label - 1]
                    box[0], box[1] = min(box[0], j), min(box[1], i)
                    box[2], box[3] = max(box[2], j + 1), max(box[3], i + 1)
                    box[4] += 1
    for k in range(count):
        if boxes[k, 4] == 0:
            boxes[k, :] = 0


@_compiled
def cut_sites(draws, points, reach, clearance, stroke, half, gap, swell_at, swell_length):
    """Skeleton rows of the fracture cuts for ``draws`` ``(D,)`` float64 in [0, 1) (rules: ``Renderer._cuts``).

    ``points`` ``(P, 2)``, ``reach`` and ``clearance`` ``(P,)`` are float32, and so is ``swell_at`` ``(2,)``
    (ignored when ``swell_length`` < 0); thresholds are rounded to float32 and distances squared in float32, as
    numpy 1.x compares a float32 array with a Python float. Returns ``(M,)`` int64 point rows, M <= D.
    """
    clear = (stroke + gap) / 2
    free = np.zeros(points.shape[0], np.bool_)
    low_reach, low_clearance = np.float32(clear + 1.0), np.float32(half + stroke / 2 + 0.5)
    away = np.float32((swell_length + clear) ** 2)
    for p in range(points.shape[0]):
        free[p] = reach[p] >= low_reach and clearance[p] > low_clearance
        if free[p] and swell_length >= 0.0:
            dy, dx = points[p, 0] - swell_at[0], points[p, 1] - swell_at[1]
            free[p] = dy * dy + dx * dx >= away
    apart = np.float32((4 * clear) ** 2)
    rows = np.empty(draws.shape[0], np.int64)
    count = 0
    for k in range(draws.shape[0]):
        left = free.sum()
        if left == 0:
            if k == 0 and points.shape[0]:
                rows[0] = np.argmax(reach)
                count = 1
            break
        pick = min(int(draws[k] * left), left - 1)
        i = np.flatnonzero(free)[pick]
        rows[count] = i
        count += 1
        for p in range(points.shape[0]):
            if free[p]:
                dy, dx = points[p, 0] - points[i, 0], points[p, 1] - points[i, 1]
                free[p] = dy * dy + dx * dx >= apart
    return rows[:count]


def warm_up() -> None:
    """Compile (or load from the cache) every kernel for the argument types the renderer passes, on tiny inputs.

    The renderer calls this once when it is built, so the compiling (about 6 s and a few hundred MB the first
    time, well under a second from the cache) happens before any sample is drawn: a worker process then never
    compiles in the middle of a shard, where joblib's workers would take the growth in memory for a leak."""
    glyph = np.zeros((4, 4), np.uint8)
    points, point = np.zeros((1, 2), np.float32), np.zeros(2, np.float32)
    cuts = np.zeros((1, 3))
    frame = np.empty((4, 4), np.float32)
    ink_patch(glyph, frame, 0, 0, 1, np.zeros(6), points, point, 1.0, 0.5, 1.0, 1.0, cuts, 1.0, 1.0, 1.0)
    canvas = np.zeros((2, 4, 4), np.float32)  # draw fills a window of a canvas: a non-contiguous view
    ink_patch(glyph, canvas[0, 1:3, 1:3], 1, 1, 2, np.zeros(6), points, point, 1.0, 0.5, 1.0, 1.0, cuts, 1.0,
              1.0, 1.0)
    nearest(frame, np.zeros((16, 2), np.float32), np.zeros(2), np.zeros((2, 3), np.float32), np.zeros(3),
            np.zeros(3, np.int64), -1, 2)
    ink_extent(glyph, points, point, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0)
    composite(canvas, np.zeros((2, 4), np.int64), np.zeros((2, 3), np.float32), np.zeros((4, 4, 3), np.uint8),
              np.zeros((4, 4), np.uint8), np.zeros((2, 5), np.int64))
    cut_sites(np.zeros(1), points, np.zeros(1, np.float32), np.zeros(1, np.float32), 1.0, 1.0, 1.0, point, -1.0)
