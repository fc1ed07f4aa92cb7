"""The source-digit rules (legibility and visibility), on hand-made shapes: stroke clearance, open loops, one connected
stroke, rotation overlap, and room for a swelling."""

import math

import numpy as np
import pytest
from skimage.draw import circle_perimeter, line

from bindscope.generators.madman.morpho import FRAME, GLYPH, SWELL_MIN, bulge_half_width, digit_record, swelling_room
from bindscope.generators.madman.visibility import ROTATION_IOU_MAX, elongation, rotation_overlap, tallness

THICKNESS = [0.07, 0.12, 0.18]


def drawn(*strokes) -> np.ndarray:
    """A 28x28 uint8 "digit": the given pixel lists drawn 2 pixels wide at full ink."""
    img = np.zeros((28, 28), np.uint8)
    for rows, cols in strokes:
        for dy in (0, 1):
            img[np.clip(rows + dy, 0, 27), cols] = 255
            img[rows, np.clip(cols + dy, 0, 27)] = 255
    return img


def ring() -> np.ndarray:
    return drawn(circle_perimeter(14, 14, 8))


def test_a_bar_has_no_other_stroke_and_a_ring_sees_its_far_side():
    bar = digit_record(drawn(line(4, 14, 23, 14)), THICKNESS)
    assert bar.connected and (bar.clearance >= 1e6).all() and bar.end_gap >= 1e6
    o = digit_record(ring(), THICKNESS)
    assert o.connected and o.end_gap >= 1e6  # a closed loop has no stroke end
    # the ring is scaled to GLYPH frame pixels tall: each point's nearest other stroke is the far side of the
    # ring, about one diameter away, never the neighbouring points of its own stroke
    far = o.clearance[o.clearance < 1e6]
    assert len(far) >= 0.9 * len(o.clearance)
    assert 0.6 * GLYPH <= np.median(far) <= 1.1 * GLYPH, np.median(far)


def test_a_loop_left_open_has_a_small_end_gap_and_a_detached_bar_is_not_connected():
    rows, cols = circle_perimeter(14, 14, 8)
    opened = drawn((rows[cols < 21], cols[cols < 21]))  # a "C": the ring without its right-most arc
    c = digit_record(opened, THICKNESS)
    assert c.connected
    assert 3.0 < c.end_gap < 0.6 * GLYPH, c.end_gap  # the two ends face each other across the opening
    two = digit_record(drawn(line(4, 10, 23, 10), line(4, 18, 23, 18)), THICKNESS)
    assert not two.connected


def test_rotation_overlap_is_high_for_a_disk_and_low_for_a_bar():
    disk = np.zeros((1, 1, FRAME, FRAME), np.uint8)
    yy, xx = np.mgrid[:FRAME, :FRAME]
    disk[0, 0][(yy - 17.5) ** 2 + (xx - 17.5) ** 2 <= 64] = 255
    bar = np.zeros((1, 1, FRAME, FRAME), np.uint8)
    bar[0, 0, 8:28, 16:20] = 255
    assert rotation_overlap(disk, [0, 45, -45])[0] > 0.9
    assert rotation_overlap(bar, [0, 45, -45])[0] < ROTATION_IOU_MAX
    # bar 20 x 4 turned by 45 degrees: the overlap is about the 4 x 4 square where they cross over the union
    assert rotation_overlap(bar, [0, 45, -45])[0] == pytest.approx(4 * 4 / (2 * 80 - 4 * 4 * math.sqrt(2)), abs=0.06)
    assert rotation_overlap(bar, [0])[0] == 0.0  # a single angle: nothing to tell apart


def test_elongation_of_hand_made_ellipses_and_a_ring():
    yy, xx = np.mgrid[:FRAME, :FRAME]
    shapes = np.zeros((3, FRAME, FRAME), np.uint8)
    shapes[0][((yy - 17.5) / 12) ** 2 + ((xx - 17.5) / 6) ** 2 <= 1] = 255   # filled ellipse, axes 12 x 6
    shapes[1][((yy - 17.5) / 6) ** 2 + ((xx - 17.5) / 9) ** 2 <= 1] = 255    # axes 6 x 9, lying
    r = np.hypot(yy - 17.5, xx - 17.5)
    shapes[2][(r >= 8) & (r <= 10)] = 255                                      # a ring
    e = elongation(shapes)
    # a filled ellipse's second moments are a^2 / 4 and b^2 / 4: the ratio of the axes (pixelised)
    assert e[0] == pytest.approx(2.0, abs=0.05)
    assert e[1] == pytest.approx(1.5, abs=0.05)
    assert e[2] == pytest.approx(1.0, abs=0.02)
    # tallness: vertical over horizontal axis, so the standing ellipse is 2, the lying one 6 / 9, the ring 1
    h = tallness(shapes)
    assert h[0] == pytest.approx(2.0, abs=0.05)
    assert h[1] == pytest.approx(6 / 9, abs=0.03)
    assert h[2] == pytest.approx(1.0, abs=0.02)
    # a round ring is rejected for rotation (its turns look alike), an elongated ring (a "0" of axes 2:1) is kept
    from bindscope.generators.madman.visibility import ROUND_ELONGATION, ROUND_IOU
    thick = np.zeros((2, 1, FRAME, FRAME), np.uint8)
    thick[0, 0][(r >= 6) & (r <= 11)] = 255
    oval = np.hypot((yy - 17.5) / 1.0, (xx - 17.5) * 2.0)
    thick[1, 0][(oval >= 10) & (oval <= 15)] = 255
    assert rotation_overlap(thick[:1], [0, 45, -45])[0] >= ROUND_IOU and elongation(thick[0])[0] < ROUND_ELONGATION
    assert elongation(thick[1])[0] >= ROUND_ELONGATION


def test_swelling_room_needs_reach_and_clearance():
    stroke, glyph = 3.0, 23.0
    bulge = bulge_half_width(0.3, glyph, stroke)
    assert bulge == pytest.approx(max(0.3 * glyph, SWELL_MIN * stroke) / 2)
    assert bulge_half_width(0.0, glyph, stroke) == 0.0
    reach = np.array([100.0, 100.0, 1.0])
    clearance = np.array([1e6, bulge + stroke / 2 + 1.0, 1e6])
    # point 0: far from ends and strokes; point 1: would leave less than half a stroke width to another
    # stroke; point 2: too near a stroke end for the swelling's length
    assert swelling_room(reach, clearance, bulge, stroke).tolist() == [True, False, False]


def test_visibility_rules_are_cached_per_table_and_config(tmp_path, monkeypatch):
    from madman_support import small_source

    from bindscope.generators.madman.config import DEFAULTS
    from bindscope.generators.madman.morpho import build_table
    from bindscope.generators.madman.visibility import cached_visible_attributes, visible_attributes
    from bindscope.io.cache_dir import CacheWarning

    monkeypatch.setenv("BINDSCOPE_CACHE", str(tmp_path))
    source = small_source(8, 2)
    table = build_table(source.images, source.labels, THICKNESS, use_cache=False)
    values = DEFAULTS["attributes"]
    expected = visible_attributes(table, values)
    assert cached_visible_attributes(table, values, None).tolist() == expected.tolist()
    assert not list(tmp_path.iterdir())                      # no key: nothing cached
    first = cached_visible_attributes(table, values, "k")
    files = list(tmp_path.glob("madman-visible-*.npz"))
    assert first.tolist() == expected.tolist() and len(files) == 1
    with np.load(files[0]) as data:
        binding = data["binding"].copy()
    np.savez(files[0], ok=~expected, binding=binding)        # an edited answer is not used...
    with pytest.warns(CacheWarning, match="not the answer for this glyph table"):
        assert cached_visible_attributes(table, values, "k").tolist() == expected.tolist()
    np.savez(files[0], ok=np.ones(3, bool), binding=binding)  # ...nor one whose shape does not fit the table
    with pytest.warns(CacheWarning, match="not the answer for this glyph table"):
        assert cached_visible_attributes(table, values, "k").tolist() == expected.tolist()
    other = {**values, "rotation": {"upright": 0, "tilted": 30}}
    cached_visible_attributes(table, other, "k")             # another config: another entry
    assert len(list(tmp_path.glob("madman-visible-*.npz"))) == 2


def test_a_lying_digit_is_left_out_for_rotation_and_kept_without_rotation():
    from bindscope.generators.madman.config import DEFAULTS
    from bindscope.generators.madman.morpho import build_table
    from bindscope.generators.madman.visibility import visible_attributes

    # a standing bar and the same bar lying: with rotation values, only the lying one is left out
    standing, lying = drawn(line(4, 14, 23, 14)), drawn(line(14, 4, 14, 23))
    table = build_table(np.stack([standing, lying]), np.array([1, 1]), THICKNESS, use_cache=False)
    values = {**DEFAULTS["attributes"], "swelling": {"unswollen": 0.0}, "fracture": {"intact": 0}}
    assert visible_attributes(table, values).tolist() == [True, False]
    assert visible_attributes(table, {**values, "rotation": {"upright": 0}}).tolist() == [True, True]
