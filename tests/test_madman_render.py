"""MADMAN pixels: masks, colour, size, rotation, thickness, fracture and swelling measured on real digits."""

import math

import numpy as np
import pytest
from scipy import ndimage as ndi
from skimage.measure import label, moments_central

from madman_support import make_generator, small_source

from bindscope.generators.madman.morpho import measure_thickness

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
        bulge = max(gen128.config["attributes"]["swelling"]["swollen"] * glyph, 1.8 * place["stroke"])
        span = np.sqrt(((changed[:, None, :] - changed[None, :, :]) ** 2).sum(-1)).max()
        assert span <= 2 * 1.6 * bulge / 2 + 2 * bulge / 2 + 2, (n, span, bulge)  # only near one skeleton point
        widest = lambda a: 2 * ndi.distance_transform_edt(a >= 0.5).max()  # noqa: E731
        assert widest(swollen) >= 0.85 * bulge and widest(swollen) > widest(plain), (n, widest(swollen), bulge,
                                                                                   widest(plain))
