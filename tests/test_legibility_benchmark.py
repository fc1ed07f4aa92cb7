"""benchmarks/madman_legibility.py without training: an object becomes an MNIST digit as MNIST was normalised (ink
from its colour, turned back by its rotation level, 20-pixel box, centre of mass at the centre), and the figures
are counted per level of every attribute."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
from scipy import ndimage

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
legibility = importlib.import_module("madman_legibility")


def bar(colour, coverage=1.0) -> np.ndarray:
    """A 56 x 56 crop holding a vertical bar 30 pixels tall and 4 wide, painted as coverage x colour."""
    crop = np.zeros((56, 56, 3), np.uint8)
    crop[10:40, 26:30] = np.round(coverage * np.asarray(colour)).astype(np.uint8)
    return crop


def extent(image: np.ndarray) -> tuple[int, int]:
    """(rows, columns) spanned by the pixels inked at least half as much as the most inked one."""
    ys, xs = np.nonzero(image >= 0.5 * image.max())
    return int(ys.max() - ys.min() + 1), int(xs.max() - xs.min() + 1)


def test_an_upright_object_fills_20_pixels_with_its_centre_of_mass_at_the_centre():
    digit = legibility.as_mnist(bar([255, 0, 255]), [255, 0, 255], 0.0)
    assert digit.shape == (28, 28) and digit.dtype == np.float32
    assert 0.0 <= digit.min() and digit.max() <= 1.0
    height, width = extent(digit)
    assert 19 <= height <= 21 and width <= 4  # 30 x 4 scaled by 20 / 30
    assert np.allclose(ndimage.center_of_mass(digit), (13.5, 13.5), atol=0.25)


def test_ink_is_the_coverage_of_the_objects_colour():
    # half coverage of orange (255, 128, 0) is drawn (128, 64, 0): ink 128 / 255 in the middle of the stroke
    digit = legibility.as_mnist(bar([255, 128, 0], 0.5), [255, 128, 0], 0.0)
    assert abs(float(digit.max()) - 128 / 255) < 0.02


def test_a_turned_object_is_turned_back_by_its_levels_angle():
    # the crop's bar stands upright; an object of a 90-degree level standing upright lies in its own frame
    height, width = extent(legibility.as_mnist(bar([255, 255, 255]), [255, 255, 255], 90.0))
    assert height <= 4 and 19 <= width <= 21


def test_per_level_counts_the_objects_of_each_level():
    correct = np.array([True, False, True, True, False])
    labels = {"size": np.array([0, 0, 1, 1, 1]), "fracture": np.array([1, 1, 1, 1, 1]),
              "digit": np.array([3, 3, 7, 7, 1])}
    classes = {"size": ["small", "large"], "fracture": ["intact", "fractured"], "digit": [str(d) for d in range(10)]}
    table = legibility.per_level(correct, labels, classes)
    assert set(table) == {"size", "fracture"}
    assert {k: (v["n"], v["correct"]) for k, v in table["size"].items()} == {"small": (2, 1), "large": (3, 2)}
    assert table["size"]["small"]["accuracy"] == 0.5 and table["size"]["large"]["accuracy"] == 2 / 3
    assert table["fracture"]["intact"] == {"n": 0, "correct": 0, "accuracy": None, "ci95": None}
    low, high = table["fracture"]["fractured"]["ci95"]
    assert table["fracture"]["fractured"]["accuracy"] == 0.6 and low < 0.6 < high
