"""The shared rules every part uses: one L2 normalisation and one image preprocessing rule (pad a non-square
image to a centred square, never crop or stretch), checked on hand-made inputs."""

from __future__ import annotations

import numpy as np
import torch

from bindscope.evaluation.encoder import l2_normalise, square_resize


def test_l2_normalise_rows_keeps_dtype_and_zero_rows():
    x = np.array([[3.0, 4.0], [0.0, 0.0], [0.0, -2.0]], np.float32)
    y = l2_normalise(x)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, [[0.6, 0.8], [0.0, 0.0], [0.0, -1.0]], rtol=1e-6)
    assert l2_normalise(x.astype(np.float64)).dtype == np.float64


def test_square_resize_pads_a_wide_image_to_a_centred_square():
    x = torch.arange(1, 9, dtype=torch.float32).view(1, 1, 2, 4).repeat(1, 3, 1, 1) / 10  # 2 rows, 4 columns
    y = square_resize(x, 4)  # already 4 wide: padded only
    assert y.shape == (1, 3, 4, 4)
    assert torch.equal(y[0, 0, 1:3], x[0, 0]) and y[0, :, 0].abs().sum() == 0 and y[0, :, 3].abs().sum() == 0
    tall = x.transpose(2, 3)  # 4 rows, 2 columns: one black column either side
    z = square_resize(tall, 4)
    assert torch.equal(z[0, 0, :, 1:3], tall[0, 0]) and z[0, :, :, 0].abs().sum() == 0


def test_training_and_evaluation_preprocess_non_square_images_alike():
    from open_clip.constants import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD

    from bindscope.training.model import preprocess_images

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (2, 24, 48, 3), dtype=np.uint8)
    got = preprocess_images(images, 32)
    mean = torch.tensor(OPENAI_DATASET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(OPENAI_DATASET_STD).view(1, 3, 1, 1)
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255
    want = (square_resize(x, 32, "bilinear") - mean) / std
    assert got.shape == (2, 3, 32, 32) and torch.allclose(got, want)
    # the padding rows are black (0 before normalisation), not stretched image content
    assert torch.allclose(got[:, :, 0, :], ((torch.zeros(1, 3, 1) - mean[..., 0]) / std[..., 0]).expand(2, 3, 32),
                          atol=1e-6)
