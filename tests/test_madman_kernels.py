"""The compiled per-pixel work of the MADMAN renderer (bindscope.generators.madman.kernels), on hand-made inputs
whose expected values are worked out by hand in the comments."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from tiny_madman import tiny_madman

from bindscope.generators.madman.kernels import composite, cut_sites, ink_extent, ink_patch, nearest

IDENTITY = np.array([0.0, 1.0, 0.0, 0.0, 0.0, 1.0])
NO_POINTS = np.zeros((0, 2), np.float32)
NO_CUTS = np.zeros((0, 3))


def patch(glyph, shape=None, top=0, left=0, ss=1, affine=IDENTITY, points=NO_POINTS, centre=(0.0, 0.0),
          length=0.0, half=0.0, bulge=0.0, aa=1.0, cuts=NO_CUTS, cut_half=0.0, width=1.0, ramp=1.0):
    out = np.full(shape or glyph.shape, -1.0, np.float32)
    ink_patch(np.asarray(glyph, np.uint8), out, top, left, ss, np.asarray(affine, np.float64),
              np.asarray(points, np.float32), np.asarray(centre, np.float32), length, half, bulge, aa,
              np.asarray(cuts, np.float64), cut_half, width, ramp)
    return out


def test_identity_map_returns_the_glyph():
    glyph = np.arange(0, 256, 16, dtype=np.uint8).reshape(4, 4)
    np.testing.assert_array_equal(patch(glyph), (glyph / 255.0).astype(np.float32))


def test_bilinear_sampling_with_a_zero_border():
    glyph = np.array([[0, 255], [255, 255]], np.uint8)
    # canvas (0, 0) -> frame (0.5, 0.5): the mean of the four pixels = 0.75
    assert patch(glyph, (1, 1), affine=[0.5, 1, 0, 0.5, 0, 1])[0, 0] == pytest.approx(0.75)
    # frame (1.5, 1.0): half of pixel (1, 1) and half of the zero border below it
    assert patch(glyph, (1, 1), affine=[1.5, 1, 0, 1.0, 0, 1])[0, 0] == pytest.approx(0.5)
    # frame (-1.5, -1.5): outside the bordered frame
    assert patch(glyph, (1, 1), affine=[-1.5, 1, 0, -1.5, 0, 1])[0, 0] == 0.0


def test_supersampling_averages_ss_by_ss_samples():
    glyph = np.array([[255, 0], [0, 0]], np.uint8)
    # ss = 2: the samples of canvas pixel (0, 0) lie at (+-0.25, +-0.25) around it; with the identity map, the
    # bilinear weight of pixel (0, 0) is (1 - |dy|)(1 - |dx|) = 0.75 * 0.75 at each, so the mean is 0.5625
    assert patch(glyph, (1, 1), ss=2)[0, 0] == pytest.approx(0.5625)


def test_swelling_disks_and_their_antialiasing():
    blank = np.zeros((12, 12), np.uint8)
    # one skeleton point at the centre (5, 5): a disk of radius bulge = 2; coverage clip((2 - r) * aa + 0.5, 0, 1)
    out = patch(blank, points=[[5, 5]], centre=(5, 5), length=1.0, half=0.5, bulge=2.0, aa=1.0)
    assert out[5, 7] == pytest.approx(0.5)    # r = 2
    assert out[6, 6] == 1.0                   # r = 1.41: 1.09, clipped
    assert out[5, 8] == 0.0 and out[7, 7] == 0.0   # r = 3, 2.83
    # aa = 2 canvas pixels per frame pixel: r = 2.25 gives (2 - 2.25) * 2 + 0.5 = 0
    steep = patch(blank, (1, 1), affine=[5, 1, 0, 7.25, 0, 1], points=[[5, 5]], centre=(5, 5), length=1.0,
                  half=0.5, bulge=2.0, aa=2.0)
    assert steep[0, 0] == pytest.approx(0.0, abs=1e-7)
    # a second point at 0.5 of L = 1 from the centre: radius 0.5 + 1.5 * (1 - 0.25)^2 = 1.34375; a point 4 away
    # (beyond L) carries no disk
    out = patch(blank, points=[[5, 5], [5, 5.5], [5, 9]], centre=(5, 5), length=1.0, half=0.5, bulge=2.0)
    # pixel (5, 7): r = 2 from the centre (margin 0), 1.5 from the second point (margin -0.15625)
    assert out[5, 7] == pytest.approx(0.5)
    assert out[5, 9] == 0.0
    np.testing.assert_array_equal(out[:, 10:], 0.0)


def test_cut_multiplies_the_ink_across_the_stroke():
    full = np.full((11, 11), 255, np.uint8)
    # stroke along x (tangent 0): along = |dx|, across = |dy|; width 2, ramp 1: factor clip(|dx| - 1 + 0.5, 0, 1)
    out = patch(full, cuts=[[5, 5, 0.0]], cut_half=3.0, width=2.0, ramp=1.0)
    assert out[5, 5] == 0.0 and out[5, 6] == pytest.approx(0.5) and out[5, 4] == pytest.approx(0.5)
    assert out[5, 7] == 1.0
    assert out[8, 5] == 0.0 and out[9, 5] == 1.0    # |dy| = 3 is inside the cut's half-length, 4 outside
    # turned by 90 degrees, the cut runs along x instead
    turned = patch(full, cuts=[[5, 5, math.pi / 2]], cut_half=3.0, width=2.0, ramp=1.0)
    np.testing.assert_allclose(turned, out.T, atol=1e-6)


def dot(y, x):
    """A 9 x 9 glyph with one ink pixel."""
    glyph = np.zeros((9, 9), np.uint8)
    glyph[y, x] = 200
    return glyph


def test_ink_extent_rotates_and_pads():
    pivot = (4.0, 4.0)
    # one ink pixel at the pivot, scale 2: radius 1 frame pixel = 2 canvas pixels, plus 1 = 3 on every side
    assert ink_extent(dot(4, 4), NO_POINTS, np.zeros(2, np.float32), 0.0, 0.0, *pivot, 1.0, 0.0,
                      2.0) == pytest.approx((3, 3, 3, 3))
    # a pixel one frame pixel right of the pivot, turned 90 degrees counter-clockwise: 2 canvas pixels up
    up, left, down, right = ink_extent(dot(4, 5), NO_POINTS, np.zeros(2, np.float32), 0.0, 0.0, *pivot, 0.0, 1.0,
                                       2.0)
    assert (up, left, down, right) == pytest.approx((5, 3, 1, 3))
    # a row of ink: its two ends decide, unturned at scale 1 (2 = 1 + 1 beyond each end)
    row = np.zeros((9, 9), np.uint8)
    row[4, 1:8] = 9
    assert ink_extent(row, NO_POINTS, np.zeros(2, np.float32), 0.0, 0.0, *pivot, 1.0, 0.0,
                      1.0) == pytest.approx((2, 5, 2, 5))
    # swelling disks of radius bulge = 2 around skeleton points closer than 1.5 to the centre (4, 4)
    skeleton = np.array([[4, 4], [4, 6]], np.float32)   # the second is 2 away: no disk
    extent = ink_extent(dot(4, 4), skeleton, np.array([4, 4], np.float32), 1.5, 2.0, *pivot, 1.0, 0.0, 1.0)
    assert extent == pytest.approx((3, 3, 3, 3))   # 1 * 2 + 1


def test_composite_paints_labels_and_boxes():
    alphas = np.array([[[1.0, 0.5], [0.0, 0.0]],
                       [[1.0, 1.0], [0.6, 0.2]]], np.float32)
    colours = np.array([[255, 0, 0], [0, 255, 0]], np.float32)
    image, mask = np.zeros((2, 2, 3), np.uint8), np.zeros((2, 2), np.uint8)
    boxes = np.empty((2, 5), np.int64)
    windows = np.array([[0, 0, 2, 2], [0, 0, 2, 2]], np.int64)
    composite(alphas, windows, colours, image, mask, boxes)
    # (0, 1): c1 = 0.5, c2 = 1 * 0.5 -> 127.5 + 0.5 = 128 each; (1, 0): c2 = 0.6 -> 153; (1, 1): 0.2 * 255 = 51
    np.testing.assert_array_equal(image, [[[255, 0, 0], [128, 128, 0]], [[0, 153, 0], [0, 51, 0]]])
    np.testing.assert_array_equal(mask, [[1, 1], [2, 0]])
    np.testing.assert_array_equal(boxes, [[0, 0, 2, 1, 2], [0, 1, 1, 2, 1]])   # (x0, y0, x1, y1, area)
    # one object without mask pixels: its box is all 0; pixels outside every window stay black
    image, mask = np.zeros((2, 2, 3), np.uint8), np.zeros((2, 2), np.uint8)
    faint = np.array([[[0.4, 0.0], [0.0, 0.9]]], np.float32)
    composite(faint, np.array([[0, 0, 1, 1]], np.int64), colours[:1], image, mask, boxes[:1])
    np.testing.assert_array_equal(boxes[0], 0)
    assert image[0, 0, 0] == 102 and image[1, 1].sum() == 0 and not mask.any()


def test_nearest_matches_brute_force_and_leaves_out_its_own_row():
    rng = np.random.default_rng(0)
    side, comps, refs = 6, 4, 50
    project = rng.normal(size=(side * side, comps)).astype(np.float32)
    offset = rng.normal(size=comps)
    ref_z = rng.normal(size=(refs, comps)).astype(np.float32)
    labels = rng.integers(0, 10, refs)
    for trial in range(5):
        ink = rng.random((side, side)).astype(np.float32)
        z = ink.reshape(-1).astype(np.float64) @ project.astype(np.float64) - offset
        d = ((ref_z.astype(np.float64) - z) ** 2).sum(1)
        own = trial * 7
        d[own] = np.inf
        expected = labels[np.argsort(d, kind="stable")[:5]]
        got = nearest(ink, project, offset, np.ascontiguousarray(ref_z.T), (ref_z.astype(np.float64) ** 2).sum(1),
                      labels, own, 5)
        np.testing.assert_array_equal(got, expected)


def test_cut_sites_follow_the_rules():
    # a straight stroke of 21 points along x; reach = distance to the nearer end; clearance everywhere 10
    xs = np.arange(21, dtype=np.float32)
    points = np.stack([np.zeros(21, np.float32), xs], 1)
    reach = np.minimum(xs, 20 - xs).astype(np.float32)
    clearance = np.full(21, 10.0, np.float32)
    # stroke 2, gap 2: clear = 2, so reach >= 3 (points 3..17 free); half 2 < 10 - 1 - 0.5
    rows = cut_sites(np.array([0.0, 0.0]), points, reach, clearance, 2.0, 2.0, 2.0, np.zeros(2, np.float32), -1.0)
    # the first draw takes the first free point (3); the next must be (4 * clear)^2 = 64 away in squared
    # distance, i.e. 8 along: point 11
    np.testing.assert_array_equal(rows, [3, 11])
    # a swelling at x = 10 of length 3: points closer than 3 + 2 = 5 to it are taken (6..14 out)
    rows = cut_sites(np.array([0.99, 0.0]), points, reach, clearance, 2.0, 2.0, 2.0,
                     np.array([0, 10], np.float32), 3.0)
    np.testing.assert_array_equal(rows, [17, 3])
    # no room anywhere: one cut at the point of largest reach
    rows = cut_sites(np.array([0.5, 0.5]), points, reach, np.zeros(21, np.float32), 2.0, 2.0, 2.0,
                     np.zeros(2, np.float32), -1.0)
    np.testing.assert_array_equal(rows, [10])


def test_generator_pickles_without_its_renderer():
    """Workers get the generator without planner and renderer (and their caches) and build them once."""
    gen = tiny_madman()
    first = gen.make_samples("train", 3, 2)
    assert "renderer" in gen.__dict__
    state = pickle.loads(pickle.dumps(gen)).__dict__
    assert "renderer" not in state and "planner" not in state
    again = pickle.loads(pickle.dumps(gen)).make_samples("train", 3, 2)
    for a, b in zip(first, again):
        assert a.image.tobytes() == b.image.tobytes() and a.mask.tobytes() == b.mask.tobytes()


def test_renderer_compiles_everything_before_the_first_sample():
    """Building the renderer compiles every kernel signature that drawing needs (kernels.warm_up), so a worker
    never compiles mid-shard."""
    from bindscope.generators.madman import kernels

    gen = tiny_madman({"train": 40})
    gen.renderer  # noqa: B018 (builds it)
    functions = (kernels.ink_patch, kernels.nearest, kernels.ink_extent, kernels.composite, kernels.cut_sites)
    before = [len(f.signatures) for f in functions]
    samples = gen.make_samples("train", 0, 40)
    assert [len(f.signatures) for f in functions] == before
    digits = [d for s in samples for d in s.spec["digits"]]
    assert any(d["cuts"] for d in digits) and any(d["attributes"]["swelling"] == "swollen" for d in digits)
    assert any(len(s.objects) == 2 for s in samples)


def test_kernels_compile_without_a_writable_cache_folder():
    """Where numba finds no writable folder for its cache (read-only install and home), the kernels still import
    and run, compiled in the process (numba's locators are narrowed to one that never applies)."""
    import os
    import subprocess
    import sys

    code = ("from bindscope.generators.madman import kernels; kernels.warm_up(); "
            "print(type(kernels.ink_patch._cache).__name__)")
    env = {**os.environ, "NUMBA_CACHE_LOCATOR_CLASSES": "ZipCacheLocator"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["NullCache"]


def test_a_sample_does_not_depend_on_what_was_drawn_before():
    """Samples are a pure function of their index: drawn alone, after others, or in another order, the bytes agree
    (the kernels keep no state between digits and sum in a fixed order)."""
    gen = tiny_madman({"train": 12})
    batch = gen.make_samples("train", 0, 12)
    alone = [gen.make_samples("train", i, 1)[0] for i in reversed(range(12))][::-1]
    for a, b in zip(batch, alone):
        assert a.image.tobytes() == b.image.tobytes() and a.mask.tobytes() == b.mask.tobytes()
        assert [o.area for o in a.objects] == [o.area for o in b.objects]
