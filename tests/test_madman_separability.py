"""MADMAN attribute levels measured on a few hundred generated objects: every attribute's classes are disjoint in
what the eye measures (stroke width / glyph height, glyph extent, fracture gaps, swellings, upright slant)."""

import math

import numpy as np
import pytest
from scipy import ndimage as ndi
from skimage.morphology import skeletonize

from madman_support import make_generator, small_source

from bindscope.generators.madman.morpho import FRAME, build_table, slant, upsample_binary

SAMPLES = 160  # two objects each


def feret(mask: np.ndarray) -> float:
    """Largest distance between two ink pixel centres, + 1 pixel (the glyph's extent, rotation-free)."""
    edge = mask & ~ndi.binary_erosion(mask)
    pts = np.argwhere(edge).astype(np.float64)
    return float(np.sqrt(((pts[:, None] - pts[None]) ** 2).sum(-1)).max()) + 1.0


def glyph_frame(alpha: np.ndarray, theta: float):
    """Ink-weighted coordinates of ``alpha`` turned back by ``theta`` (radians, counter-clockwise as seen):
    ``(up, right, weight)`` with ``up`` along the glyph's own upward axis."""
    ys, xs = np.nonzero(alpha > 0)
    w = alpha[ys, xs].astype(np.float64)
    up = -ys * math.cos(theta) - xs * math.sin(theta)
    right = -ys * math.sin(theta) + xs * math.cos(theta)
    return up, right, w


def slant_degrees(alpha: np.ndarray, theta: float) -> float:
    """Slant of a glyph in its own frame from its ink moments: ``atan(mu11 / mu02)`` in degrees (0 = upright)."""
    up, right, w = glyph_frame(alpha, theta)
    up = up - (w * up).sum() / w.sum()
    right = right - (w * right).sum() / w.sum()
    return math.degrees(math.atan((w * up * right).sum() / (w * up * up).sum()))


def stroke_width(alpha: np.ndarray) -> float:
    """Median stroke width (pixels): twice the median distance-to-background over the skeleton (4x upsampled)."""
    ink = upsample_binary(alpha, 4)
    return float(2.0 * np.median(ndi.distance_transform_edt(ink)[skeletonize(ink)]) / 4)


def cut_gap(alpha: np.ndarray, placement: dict, box: np.ndarray, theta: float, cut) -> tuple[float, bool]:
    """Width (pixels) of the run of coverage < 0.5 through a cut, measured along the stroke, and whether ink
    (coverage >= 0.5) lies on both sides of it within 8 pixels."""
    y, x, tangent = cut
    cy, cx = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    c, s = math.cos(theta), math.sin(theta)
    vx, vy = (x - cx) * c + (y - cy) * s, -(x - cx) * s + (y - cy) * c     # inverse of the renderer's rotation
    py, px = placement["centre"][0] + vy * placement["scale"], placement["centre"][1] + vx * placement["scale"]
    ty, tx = math.sin(tangent), math.cos(tangent)
    dx, dy = tx * c + ty * s, -tx * s + ty * c
    steps = np.arange(-8.0, 8.0001, 0.05)
    line = ndi.map_coordinates(alpha, [py + steps * dy, px + steps * dx], order=1)
    mid = len(steps) // 2
    if line[mid] >= 0.5:
        return 0.0, False
    lo, hi = mid, mid
    while lo > 0 and line[lo - 1] < 0.5:
        lo -= 1
    while hi < len(steps) - 1 and line[hi + 1] < 0.5:
        hi += 1
    return (hi - lo + 1) * 0.05, bool(lo > 0 and hi < len(steps) - 1)


@pytest.fixture(scope="module")
def objects():
    gen = make_generator({"image_size": 64})
    values = gen.config["attributes"]
    table = gen.table
    rows = []
    for sample in gen.make_samples("test", 0, SAMPLES):
        for digit, placed in zip(sample.spec["digits"], sample.spec["placements"]):
            alpha, placement = gen.renderer.digit_alpha(digit, tuple(placed["centre"]))
            attrs = digit["attributes"]
            theta = math.radians(values["rotation"][attrs["rotation"]])
            v = table.amounts.index(values["thickness"][attrs["thickness"]])
            up, _, _ = glyph_frame(alpha >= 0.5, theta)
            mask = alpha >= 0.5
            rows.append({**attrs, "digit": digit["digit"], "alpha": alpha, "placement": placement,
                         "theta": theta, "box": table.ink_box[digit["source"], v],
                         "height": float(up.max() - up.min() + 1), "extent": feret(mask)})
    return gen, rows


def disjoint(bands: list[np.ndarray]) -> bool:
    return all(a.max() < b.min() for a, b in zip(bands, bands[1:]))


def test_stroke_width_over_glyph_height_is_disjoint_per_thickness_at_every_size(objects):
    gen, rows = objects
    order = sorted(gen.config["attributes"]["thickness"], key=gen.config["attributes"]["thickness"].get)
    # the swelling widens the stroke on purpose: measure the stroke on unswollen digits
    plain = [r for r in rows if r["swelling"] == "unswollen"]
    for size in gen.config["attributes"]["size"]:
        bands = [np.array([stroke_width(r["alpha"]) / r["height"] for r in plain
                           if r["size"] == size and r["thickness"] == t]) for t in order]
        assert all(len(b) >= 5 for b in bands), (size, [len(b) for b in bands])
        assert disjoint(bands), (size, [(round(b.min(), 3), round(b.max(), 3)) for b in bands])
    overall = [np.array([stroke_width(r["alpha"]) / r["height"] for r in plain if r["thickness"] == t]) for t in order]
    assert disjoint(overall), [(round(b.min(), 3), round(b.max(), 3)) for b in overall]
    for t, band in zip(order, overall):  # and each band sits on its level
        assert abs(np.median(band) - gen.config["attributes"]["thickness"][t]) < 0.025, (t, np.median(band))


def test_glyph_extents_are_disjoint_per_size_after_rotation(objects):
    gen, rows = objects
    sizes = gen.config["attributes"]["size"]
    order = sorted(sizes, key=sizes.get)
    extents = [np.array([r["extent"] for r in rows if r["size"] == s]) for s in order]
    assert all(len(b) >= 40 for b in extents)
    assert disjoint(extents), [(b.min(), b.max()) for b in extents]
    # the height along the glyph's own upward axis is the size level (swellings may stick out a little)
    for s, band in zip(order, [np.array([r["height"] for r in rows if r["size"] == s]) for s in order]):
        assert sizes[s] * 64 - 2.0 <= band.min() and np.median(band) <= sizes[s] * 64 + 1.5, (s, band.min())


def test_fracture_gaps_are_at_least_two_pixels_across_the_stroke(objects):
    gen, rows = objects
    gaps = []
    for r in rows:
        cuts = r["placement"]["cuts"]
        if r["fracture"] == "intact":
            assert cuts == []
            continue
        assert len(cuts) >= 1
        for cut in cuts:
            gap, both_sides = cut_gap(r["alpha"], r["placement"], r["box"], r["theta"], cut)
            gaps.append(gap)
            assert gap >= 2.0, (r["digit"], r["size"], gap)
    assert len(gaps) >= 100


def test_cuts_keep_away_from_stroke_ends():
    gen = make_generator({"image_size": 64})
    t = gen.table
    stroke_gap = []
    for n in range(0, len(t.legible), 7):
        for v in range(len(t.amounts)):
            points, tangent, reach = t.skeleton(n, v)
            for size in gen.config["attributes"]["size"].values():
                scale = size * 64 / float(t.ink_box[n, v, 2] - t.ink_box[n, v, 0])
                gap = max(2.5, 0.12 * size * 64) / scale
                cuts = gen.renderer._cuts([0.1, 0.6], points, tangent, reach, float(t.stroke[n, v]), gap, None, 0.0)
                assert 1 <= len(cuts) <= 2
                for y, x, _ in cuts:
                    i = int(np.argmin(((points - [y, x]) ** 2).sum(1)))
                    stroke_gap.append(reach[i] / (float(t.stroke[n, v]) + gap))
    # a cut's centre lies at least half a stroke and half a gap plus one pixel from any stroke end or junction
    assert np.mean(np.array(stroke_gap) >= 0.5) >= 0.98


def test_swellings_are_at_least_one_and_a_half_strokes_wide(objects):
    gen, rows = objects
    ratio = {"swollen": [], "unswollen": []}
    for r in rows:
        if r["fracture"] != "intact":
            continue
        ink = upsample_binary(r["alpha"], 4)
        widest = 2.0 * ndi.distance_transform_edt(ink).max() / 4
        ratio[r["swelling"]].append(widest / r["placement"]["stroke"])
    swollen, plain = np.array(ratio["swollen"]), np.array(ratio["unswollen"])
    assert len(swollen) >= 30 and len(plain) >= 30
    assert swollen.min() >= 1.5, np.sort(swollen)[:5]
    assert np.median(swollen) >= 1.3 * np.median(plain), (np.median(swollen), np.median(plain))


def test_upright_means_upright_after_deslanting(objects):
    gen, rows = objects
    plain = [r for r in rows if r["swelling"] == "unswollen" and r["fracture"] == "intact"]
    angles = np.array([slant_degrees(r["alpha"], r["theta"]) for r in plain])
    assert len(angles) >= 40
    assert np.abs(angles).max() <= 3.0, np.sort(np.abs(angles))[-5:]
    # the sources themselves lean: a median of about 10 degrees
    source = small_source()
    lean = np.abs([math.degrees(math.atan(slant(image)[0])) for image in source.images])
    assert np.median(lean) > 5.0


def test_table_glyphs_are_upright_fixed_height_and_canonical_stroke():
    source = small_source()
    amounts = [0.07, 0.13, 0.22]
    table = build_table(source.images[:120], source.labels[:120], amounts, use_cache=False)
    assert table.variants.shape == (120, 3, FRAME, FRAME)
    for v, t in enumerate(amounts):
        height = table.ink_box[:, v, 2] - table.ink_box[:, v, 0]
        np.testing.assert_allclose(table.stroke[:, v] / height, t, atol=0.012)
        lean = np.abs([math.degrees(math.atan(slant(g)[0])) for g in table.variants[:, v]])
        assert np.percentile(lean, 95) <= 1.5 and lean.max() <= 6.0, np.sort(lean)[-3:]
