"""MADMAN attribute levels measured on a few hundred generated objects: every attribute's classes are disjoint in
what the eye measures (stroke width / glyph height, glyph extent, fracture gaps, swellings, upright slant)."""

import math

import numpy as np
import pytest
from madman_support import make_generator, small_source

from bindscope.generators.madman.measure import extent, height, measure_objects
from bindscope.generators.madman.measure import slant as glyph_slant
from bindscope.generators.madman.morpho import FRAME, SWELL_MIN, build_table, slant

SAMPLES = 160  # two objects each


@pytest.fixture(scope="module")
def measured():
    gen = make_generator({"image_size": 64})
    return gen, measure_objects(gen, "test", SAMPLES)


def disjoint(bands: list[np.ndarray]) -> bool:
    return all(a.max() < b.min() for a, b in zip(bands, bands[1:]))


def ordered(values: dict) -> list[str]:
    return sorted(values, key=values.get)


def test_measures_on_hand_made_shapes():
    bar = np.zeros((40, 40), np.float32)
    bar[10:30, 18:22] = 1.0                                   # 20 tall, 4 wide
    assert height(bar >= 0.5, 0.0) == 20.0
    assert abs(height(bar >= 0.5, math.pi / 2) - 4.0) < 1e-9  # "up" is then along x
    assert abs(extent(bar >= 0.5) - (math.hypot(19, 3) + 1)) < 1e-9
    assert abs(glyph_slant(bar, 0.0)) < 1e-9
    leaning = np.zeros((40, 40), np.float32)
    for row in range(10, 30):                                 # one pixel right every 5 rows up: atan(1/5)
        start = 18 + (30 - row) // 5
        leaning[row, start:start + 4] = 1.0
    assert abs(glyph_slant(leaning, 0.0) - math.degrees(math.atan(0.2))) < 1.5


def test_stroke_width_over_glyph_height_is_disjoint_per_thickness_at_every_size(measured):
    gen, rows = measured
    levels = gen.config["attributes"]["thickness"]
    plain = [r for r in rows if r["swelling"] == "unswollen"]  # a swelling widens the stroke on purpose
    for size in gen.config["attributes"]["size"]:
        bands = [np.array([r["ratio"] for r in plain if r["size"] == size and r["thickness"] == t])
                 for t in ordered(levels)]
        assert all(len(b) >= 5 for b in bands), (size, [len(b) for b in bands])
        assert disjoint(bands), (size, [(round(b.min(), 3), round(b.max(), 3)) for b in bands])
    overall = [np.array([r["ratio"] for r in plain if r["thickness"] == t]) for t in ordered(levels)]
    assert disjoint(overall), [(round(b.min(), 3), round(b.max(), 3)) for b in overall]
    for t, band in zip(ordered(levels), overall):  # and each band sits on its level
        assert abs(np.median(band) - levels[t]) < 0.025, (t, np.median(band))


def test_glyph_extents_are_disjoint_per_size_after_rotation(measured):
    gen, rows = measured
    sizes = gen.config["attributes"]["size"]
    extents = [np.array([r["extent"] for r in rows if r["size"] == s]) for s in ordered(sizes)]
    assert all(len(b) >= 40 for b in extents)
    assert disjoint(extents), [(b.min(), b.max()) for b in extents]
    for s, band in zip(ordered(sizes), extents):  # no glyph is wider than 1.25 times its size level
        assert band.max() <= 1.25 * sizes[s] * 64 + 1.0, (s, band.max())
    # the height along the glyph's own upward axis is the size level, except for glyphs so wide that their
    # largest diameter sets the scale (a swelling may stick out a little)
    for s in ordered(sizes):
        band = np.array([r["height"] for r in rows if r["size"] == s])
        assert abs(np.median(band) - sizes[s] * 64) <= 1.5 and band.min() >= 0.7 * sizes[s] * 64, (s, band.min())


def test_fracture_gaps_are_at_least_two_pixels_across_the_stroke(measured):
    gen, rows = measured
    gaps = []
    for r in rows:
        if r["fracture"] == "intact":
            assert r["cuts"] == 0
        else:
            assert 1 <= r["cuts"] <= 2
            gaps += r["gaps"]
    assert len(gaps) >= 100
    assert min(gaps) >= 2.0, sorted(gaps)[:5]


def test_cuts_keep_away_from_stroke_ends():
    gen = make_generator({"image_size": 64})
    t = gen.table
    clearance = []
    for n in range(0, len(t.legible), 7):
        for v in range(len(t.amounts)):
            points, tangent, reach, room = t.skeleton(n, v)
            stroke = float(t.stroke[n, v])
            for size in gen.config["attributes"]["size"].values():
                scale = size * 64 / float(t.ink_box[n, v, 2] - t.ink_box[n, v, 0])
                morpho = gen.config["morpho"]
                gap = max(morpho["fracture_min_gap"], morpho["fracture_gap"] * size * 64) / scale
                half = stroke / 2 + max(1.0, 1.0 / scale)
                cuts = gen.renderer._cuts([0.1, 0.6], points, tangent, reach, room, stroke, half, gap, None, 0.0)
                assert 1 <= len(cuts) <= 2
                for y, x, _ in cuts:
                    i = int(np.argmin(((points - [y, x]) ** 2).sum(1)))
                    clearance.append(reach[i] - (stroke + gap) / 2)
    # a cut's centre lies at least half a stroke, half a gap and one pixel along the skeleton from any stroke
    # end or junction (the rare digit without such a point gets its cut at the farthest point it has)
    assert np.mean(np.array(clearance) >= 1.0 - 1e-4) >= 0.97


def test_swellings_are_at_least_swell_min_strokes_wide(measured):
    gen, rows = measured
    intact = [r for r in rows if r["fracture"] == "intact"]
    swollen = np.array([r["widest"] / r["nominal"] for r in intact if r["swelling"] == "swollen"])
    plain = np.array([r["widest"] / r["nominal"] for r in intact if r["swelling"] == "unswollen"])
    assert len(swollen) >= 30 and len(plain) >= 30
    # SWELL_MIN (2.0) stroke widths, less the measuring noise of a pixelised stroke
    assert swollen.min() >= 0.9 * SWELL_MIN, np.sort(swollen)[:5]
    assert np.median(swollen) >= 1.3 * np.median(plain), (np.median(swollen), np.median(plain))


def test_upright_means_upright_after_deslanting(measured):
    gen, rows = measured
    angles = np.array([r["slant"] for r in rows if r["swelling"] == "unswollen" and r["fracture"] == "intact"])
    assert len(angles) >= 40
    assert np.abs(angles).max() <= 3.0, np.sort(np.abs(angles))[-5:]
    # the sources themselves lean: a median of more than 5 degrees
    lean = np.abs([math.degrees(math.atan(slant(image)[0])) for image in small_source().images])
    assert np.median(lean) > 5.0


def test_table_glyphs_are_upright_fixed_height_and_canonical_stroke():
    source = small_source()
    amounts = [0.07, 0.12, 0.18]
    table = build_table(source.images[:120], source.labels[:120], amounts, use_cache=False)
    assert table.variants.shape == (120, 3, FRAME, FRAME)
    for v, t in enumerate(amounts):
        tall = table.ink_box[:, v, 2] - table.ink_box[:, v, 0]
        np.testing.assert_allclose(table.stroke[:, v] / tall, t, atol=0.012)
        lean = np.abs([math.degrees(math.atan(slant(g)[0])) for g in table.variants[:, v]])
        assert np.percentile(lean, 95) <= 1.5 and lean.max() <= 6.0, np.sort(lean)[-3:]
