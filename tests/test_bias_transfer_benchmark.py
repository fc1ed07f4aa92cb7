"""benchmarks/bias_transfer.py's ink control: the images it keeps are exactly those whose two digits differ in size
level and carry equal ink (counted here from the masks), with each digit's render alone."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bias_transfer():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bias_transfer

    yield bias_transfer
    sys.path.remove(str(ROOT / "benchmarks"))


def test_equal_ink_pairs_are_two_sizes_with_equal_ink(bias_transfer, tmp_path):
    import bindscope
    from bindscope.format.reader import Dataset

    config = bias_transfer.data_config("size", 0.5, 0, 300, bias_transfer.INK_THICKNESS)
    bindscope.madman.generate(tmp_path / "ink", seed=0, jobs=1, progress=False, **config)
    pairs = bias_transfer.equal_ink_pairs(tmp_path / "ink", 0.1)
    kept = {index: k for k, index in enumerate(pairs["samples"])}
    two_sizes = 0
    for sample in Dataset(tmp_path / "ink").split("test"):
        ink = [int((sample.mask == k).sum()) for k in (1, 2)]
        sizes = [o.attributes["size"] for o in sample.objects]
        if sizes[0] == sizes[1]:
            assert sample.index not in kept
            continue
        two_sizes += 1
        equal = abs(ink[0] - ink[1]) <= 0.1 * min(ink)
        assert (sample.index in kept) == equal, (sample.index, ink, sizes)
        if equal:
            k = kept[sample.index]
            assert pairs["sizes"][k] == tuple(sizes)
            assert np.array_equal(pairs["images"][k], sample.image)
            # equal ink at two sizes: the larger digit is the thin one
            larger = sizes.index("large")
            assert [o.attributes["thickness"] for o in sample.objects][larger] == "thin"
            for j in (1, 2):  # each render is its digit alone: the image's pixels on that digit's mask
                on = sample.mask == j
                assert np.array_equal(pairs["renders"][k][j - 1][on], sample.image[on])
    assert pairs["candidates"] == two_sizes and 0 < len(kept) < two_sizes
    assert pairs["levels"] == {"small": 0.2, "large": 0.41}
