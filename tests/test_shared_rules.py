"""The shared rules every part uses: one L2 normalisation, one image preprocessing rule (pad a non-square
image to a centred square, never crop or stretch) and one config layer (defaults < preset < file < overrides,
validated once), checked on hand-made inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml

from bindscope.encoders.interface import l2_normalise, square_resize
from bindscope.errors import BadInput
from bindscope.generators.comco.config import resolve_render_config
from bindscope.generators.madman import config as madman_config


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


def test_one_config_layer_for_both_generators(tmp_path):
    # madman: defaults < preset < file < overrides; the file may name the preset, a flag replaces it
    file = {"preset": "realistic", "saliency_bias": 0.2, "layout": {"margin": 3.0}}
    cfg = madman_config.resolve(None, file, {"saliency_bias": 0.9})
    assert cfg["preset"] == "realistic" and cfg["saliency_bias"] == 0.9 and cfg["layout"]["margin"] == 3.0
    assert cfg["layout"]["centre_jitter"] == madman_config.DEFAULTS["layout"]["centre_jitter"]  # merged by key
    ideal = madman_config.resolve("ideal", file, None)
    assert ideal["preset"] == "ideal" and ideal["saliency_bias"] == 0.2
    # comco: the same merge, a file path or a mapping, tables replaced whole, one schema check
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"resolution": 96, "colours": {"red": [0.8, 0.0, 0.0]}}))
    for source in (path, {"resolution": 96, "colours": {"red": [0.8, 0.0, 0.0]}}):
        cfg = resolve_render_config(source, {"resolution": 64, "samples": None, "objects": "2-3"})
        assert cfg["resolution"] == 64 and cfg["colours"] == {"red": [0.8, 0.0, 0.0]}
        assert cfg["objects"]["min"] == 2 and cfg["objects"]["max"] == 3
    with pytest.raises(BadInput, match="resolution"):
        resolve_render_config({"resolution": "big"})
