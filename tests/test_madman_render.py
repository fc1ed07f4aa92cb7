"""MADMAN pixels: masks, colour, size, rotation, thickness, fracture and swelling measured on real digits."""

import math

import numpy as np
import pytest
from madman_support import make_generator, small_source
from scipy import ndimage as ndi
from skimage.measure import label, moments_central

from bindscope.format.records import crowded_pairs
from bindscope.generators.madman.morpho import SWELL_MIN, measure_thickness
from bindscope.generators.madman.placement import GAP

BASE = {"colour": "white", "size": "large", "thickness": "regular", "rotation": "upright",
        "swelling": "unswollen", "fracture": "intact"}


@pytest.fixture(scope="module")
def gen128():
    return make_generator({"image_size": 128})


@pytest.fixture(scope="module")
def gen64():
    return make_generator({"image_size": 64})


def spec_for(gen, n, cuts=(0.1, 0.45, 0.8), swell=0.5, second=None, **attrs):
    """A one-digit (or two-digit) plan for source digit n with BASE attributes overridden by ``attrs``."""
    source = small_source()
    a = {**BASE, **attrs}
    k = int(gen.config["attributes"]["fracture"][a["fracture"]])
    digits = [{"digit": int(source.labels[n]), "source": int(n), "attributes": a, "swell": swell,
               "cuts": list(cuts[:k])}]
    if second is not None:
        digits.append(second)
    return {"digits": digits, "layout": {"jitter": [0.0, 0.0], "direction": 0.3},
            "mentions": [{"index": 1, "attributes": []}]}


def train_digits(klass=None, count=8):
    source = small_source()
    pool = np.concatenate(source.train_pool) if klass is None else source.train_pool[klass]
    return [int(n) for n in pool[:count]]


def test_mask_equals_the_digit_pixels(gen64):
    for n in train_digits(count=10):
        alpha, _ = gen64.renderer.digit_alpha(spec_for(gen64, n)["digits"][0], (31.5, 31.5))
        image, mask, objects, _ = gen64.renderer.render(spec_for(gen64, n))
        np.testing.assert_array_equal(mask == 1, alpha >= 0.5)
        assert set(np.unique(mask)) == {0, 1}
        grey = image[:, :, 0].astype(int)  # white ink: the three channels are equal
        assert (image[:, :, 0] == image[:, :, 2]).all()
        assert (grey[mask == 1] >= 127).all() and (grey[mask == 0] <= 128).all()
        assert objects[0].area == int((mask == 1).sum()) > 20


def test_two_digit_masks_follow_coverage(gen64):
    samples = gen64.make_samples("test", 0, 20)
    for s in samples:
        spec = s.spec
        a1, _ = gen64.renderer.digit_alpha(spec["digits"][0], tuple(spec["placements"][0]["centre"]))
        a2, _ = gen64.renderer.digit_alpha(spec["digits"][1], tuple(spec["placements"][1]["centre"]))
        np.testing.assert_array_equal(s.mask == 1, a1 >= 0.5)
        np.testing.assert_array_equal(s.mask == 2, (a2 * (1 - a1) >= 0.5) & (a1 < 0.5))
        assert {o.index for o in s.objects} == {1, 2}
        assert s.objects[0].salient and not s.objects[1].salient
        for o in s.objects:
            assert o.area == int((s.mask == o.index).sum()) > 0


def test_colour_is_applied_as_stated(gen64):
    colours = gen64.config["attributes"]["colour"]
    n = train_digits(count=1)[0]
    for name, rgb in colours.items():
        spec = spec_for(gen64, n, colour=name)
        alpha, _ = gen64.renderer.digit_alpha(spec["digits"][0], (31.5, 31.5))
        image, mask, _, _ = gen64.renderer.render(spec)
        full = alpha >= 0.999
        assert full.sum() > 10
        assert (image[full] == np.array(rgb, np.uint8)).all(), name
        # every ink pixel is alpha * rgb, rounded
        expected = np.floor(alpha[..., None] * np.array(rgb, np.float32) + 0.5)
        assert np.abs(image.astype(np.float32) - expected).max() <= 1


@pytest.mark.parametrize("size", ["small", "medium", "large"])
def test_size_sets_the_ink_height(gen128, size):
    want = gen128.config["attributes"]["size"][size] * 128
    for n in train_digits(count=12):
        _, mask, objects, _ = gen128.renderer.render(spec_for(gen128, n, size=size))
        x0, y0, x1, y1 = objects[0].bbox
        assert abs((y1 - y0) - want) <= 2.0, (n, y1 - y0, want)


def orientation(alpha):
    """Major-axis angle in degrees, counter-clockwise from the x axis as seen (image y points down)."""
    mu = moments_central(alpha.astype(np.float64), order=2)  # mu[i, j]: i along rows (y), j along columns (x)
    mu20, mu02, mu11 = mu[0, 2], mu[2, 0], mu[1, 1]        # x-x, y-y, x-y
    return math.degrees(0.5 * math.atan2(-2 * mu11, mu20 - mu02))  # y flipped to point up


@pytest.mark.parametrize("rotation", ["tilted-left", "tilted-right"])
def test_rotation_matches_the_requested_angle(gen128, rotation):
    angle = gen128.config["attributes"]["rotation"][rotation]
    checked = 0
    for n in train_digits(count=40):
        upright, _ = gen128.renderer.digit_alpha(spec_for(gen128, n)["digits"][0], (63.5, 63.5))
        mu = moments_central(upright.astype(np.float64), order=2)
        ratio = np.linalg.eigvalsh(np.array([[mu[0, 2], mu[1, 1]], [mu[1, 1], mu[2, 0]]]))
        if ratio[1] < 2.5 * ratio[0]:
            continue  # orientation is ill-defined for round digits
        turned, _ = gen128.renderer.digit_alpha(spec_for(gen128, n, rotation=rotation)["digits"][0], (63.5, 63.5))
        delta = (orientation(turned) - orientation(upright) + 90) % 180 - 90
        assert abs(delta - angle) <= 3.0, (n, delta, angle)
        checked += 1
    assert checked >= 8


def test_thickening_raises_and_thinning_lowers_stroke_thickness(gen128):
    for n in train_digits(count=10):
        t = {}
        for value in ("thin", "regular", "thick"):
            alpha, _ = gen128.renderer.digit_alpha(spec_for(gen128, n, thickness=value)["digits"][0], (63.5, 63.5))
            t[value] = measure_thickness(alpha)
        assert t["thick"] > 1.3 * t["regular"], (n, t)
        assert t["thin"] < 0.85 * t["regular"], (n, t)


def test_fracture_cuts_strokes(gen128):
    extra = []
    for n in train_digits(count=20):
        intact, _ = gen128.renderer.digit_alpha(spec_for(gen128, n)["digits"][0], (63.5, 63.5))
        broken, _ = gen128.renderer.digit_alpha(spec_for(gen128, n, fracture="fractured")["digits"][0], (63.5, 63.5))
        assert (broken <= intact + 1e-6).all()          # a cut only removes ink
        assert intact.sum() - broken.sum() > 5         # and it removes some
        extra.append(label(broken >= 0.5).max() - label(intact >= 0.5).max())
    assert np.mean(extra) >= 1.0 and sum(e > 0 for e in extra) >= 15, extra


def test_swelling_widens_strokes_locally(gen128):
    for n in train_digits(count=12):
        plain, place = gen128.renderer.digit_alpha(spec_for(gen128, n)["digits"][0], (63.5, 63.5))
        swollen, _ = gen128.renderer.digit_alpha(spec_for(gen128, n, swelling="swollen")["digits"][0], (63.5, 63.5))
        assert (swollen >= plain - 1e-6).all()                 # a swelling only adds ink
        changed = np.argwhere(swollen - plain > 0.05)
        assert len(changed) > 0
        glyph = gen128.config["attributes"]["size"]["large"] * 128
        bulge = max(gen128.config["attributes"]["swelling"]["swollen"] * glyph, SWELL_MIN * place["stroke"])
        span = np.sqrt(((changed[:, None, :] - changed[None, :, :]) ** 2).sum(-1)).max()
        assert span <= 2 * 1.6 * bulge / 2 + 2 * bulge / 2 + 2, (n, span, bulge)  # only near one skeleton point
        widest = lambda a: 2 * ndi.distance_transform_edt(a >= 0.5).max()  # noqa: E731
        assert widest(swollen) >= 0.85 * bulge and widest(swollen) > widest(plain), (n, widest(swollen), bulge,
                                                                                   widest(plain))


@pytest.fixture(scope="module")
def gen96():
    return make_generator({"image_size": 96})


@pytest.fixture(scope="module")
def gen96r():
    return make_generator({"image_size": 96}, train_per_class=150)  # enough digits of every class for the reader


def test_two_large_digits_never_overlap(gen96):
    """The layout: the hardest pairs (two large, swollen digits, most of them turned 45 degrees) keep their
    ink GAP pixels apart, nothing of object 2 is hidden, the recorded boxes hold the ink, and where the ink extents
    alone keep them apart object 1 moves off the centre only in some images and never farther out than object 2;
    the others are placed by the ink search."""
    r = gen96.renderer
    mid = (96 - 1) / 2
    moved = []
    drawn = [int(n) for pool in gen96.pools["train"] for n in pool[:4]]  # 4 drawable digits of each class
    tight = 0
    for i, (n1, n2) in enumerate(zip(drawn[::2], drawn[1::2])):
        rotation = ("tilted-left", "tilted-right", "upright")[i % 3]
        second = spec_for(gen96, n2, swelling="swollen", rotation=rotation)["digits"][0]
        spec = spec_for(gen96, n1, swelling="swollen", rotation=rotation, second=second)
        spec["layout"]["direction"] = 2 * math.pi * i / 20
        image, mask, objects, placements = r.render(spec)
        a1, _ = r.digit_alpha(spec["digits"][0], tuple(placements[0]["centre"]))
        a2, _ = r.digit_alpha(spec["digits"][1], tuple(placements[1]["centre"]))
        assert crowded_pairs([a1 > 0, a2 > 0], GAP) == []
        assert objects[1].area == int((a2 >= 0.5).sum()) > 100
        for a, p in ((a1, placements[0]), (a2, placements[1])):  # the recorded box holds all the ink
            ys, xs = np.nonzero(a > 0)
            y0, x0, y1, x1 = p["box"]
            assert y0 <= ys.min() and ys.max() <= y1 and x0 <= xs.min() and xs.max() <= x1
        if r.layout([r.choose(d) for d in spec["digits"]], (0.0, 0.0), spec["layout"]["direction"]) is None:
            tight += 1  # the canvas cannot hold the two ink extents apart along either axis: the ink search
            continue
        moved.append(math.dist(placements[0]["centre"], (mid, mid)))
        # at most as far out as object 2 (the tightest pairs end up side by side, about equally far)
        assert moved[-1] < math.dist(placements[1]["centre"], (mid, mid)) + 1.0
    assert max(moved) < 96 / 4 and 0 < sum(m > 0.5 for m in moved) < len(moved) and 0 < tight <= 6


def test_drawn_source_is_the_most_legible_candidate(gen96r):
    """Each digit is drawn from the first of its source and seven alternates (same class, same pool)
    that at least 4 of the reader's 5 nearest references read as the class with the digit's swelling and cuts,
    else from the candidate with the most such votes; plain digits are never re-drawn."""
    r = gen96r.renderer
    assert r.reader is not None
    switched, judged, reads, agree, votes_drawn, votes_planned = 0, 0, 0, 0, [], []
    for sample in gen96r.make_samples("train", 0, 60):
        for digit, obj, placed in zip(sample.spec["digits"], sample.objects, sample.spec["placements"]):
            candidates = [digit["source"], *digit["alternates"]]
            assert len(candidates) == 8 and set(candidates) <= set(gen96r.pools["train"][digit["digit"]].tolist())
            votes = []
            for n in candidates:
                pose = r.pose({**digit, "source": n})
                ink = r.frame_ink(pose)
                if pose.swell_at is None and not pose.cuts:
                    np.testing.assert_array_equal(ink, (gen96r.table.variants[n, pose.v] / 255.0).astype(np.float32))
                    votes.append(None)
                else:
                    near = r.reader.nearest_one(ink, pose.v, n)
                    # the compiled read agrees with the reader's numpy one (up to ties of distance)
                    reads += 1
                    agree += (near == r.reader.neighbours(ink[None], pose.v, np.array([n]))[0]).all()
                    votes.append(int((near == digit["digit"]).sum()))
            if votes[0] is None:
                expected = candidates[0]
            else:
                confident = [n for n, v in zip(candidates, votes) if v >= 4]
                expected = confident[0] if confident else candidates[votes.index(max(votes))]
                judged += 1
                votes_planned.append(votes[0])
                votes_drawn.append(votes[candidates.index(expected)])
            assert placed["source"] == expected == int(obj.extras["source_index"])
            switched += expected != candidates[0]
    assert switched > 0 and judged > 40 and agree == reads >= judged
    assert np.mean(votes_drawn) > np.mean(votes_planned) and np.mean(np.array(votes_drawn) >= 3) >= 0.9


def test_frame_ink_cuts_the_stroke(gen96):
    n = int(gen96.pools["train"][7][0])
    pose = gen96.renderer.pose(spec_for(gen96, n, fracture="fractured")["digits"][0])
    ink = gen96.renderer.frame_ink(pose)
    plain = gen96.table.variants[n, pose.v] / 255.0
    assert pose.cuts and ink.sum() < plain.sum() - 2
    for y, x, _ in pose.cuts:  # nothing left at a cut's centre; ink remains elsewhere
        assert ink[int(round(y)), int(round(x))] == 0.0 and plain[int(round(y)), int(round(x))] > 0.5
    assert (ink <= plain + 1e-6).all()
