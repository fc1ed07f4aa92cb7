"""CLS attention by object size: q/k recomputation, masks on the patch grid, hand-set attention, end to end."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from eval_fakes import SpecGenerator, build, obj

from bindscope.errors import BadInput
from bindscope.evaluation.attention import (
    attention_probs,
    cls_attention_by_size,
    object_attention,
    patch_coverage,
    record_attention,
    rollout,
)
from bindscope.format.records import Sample


def tiny_vit(layers=2, heads=4, width=32, image_size=32, patch=8):
    from open_clip.transformer import VisionTransformer

    torch.manual_seed(0)
    return VisionTransformer(image_size=image_size, patch_size=patch, width=width, layers=layers, heads=heads,
                             mlp_ratio=2.0, output_dim=16).eval()


def test_attention_probs_equal_torch_weights():
    vit = tiny_vit()
    attn = vit.transformer.resblocks[0].attn
    x = torch.randn(3, 17, 32)
    _, expected = attn(x, x, x, need_weights=True, average_attn_weights=False)
    got = attention_probs(x, attn)
    assert got.shape == (3, 4, 17, 17)
    assert torch.allclose(got, expected, atol=1e-5)
    assert torch.allclose(got.sum(-1), torch.ones(3, 4, 17), atol=1e-5)


def test_hooks_record_every_block_without_changing_outputs():
    vit = tiny_vit(layers=3)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        plain = vit(x)
        with record_attention(vit) as records:
            hooked = vit(x)
    assert torch.equal(plain, hooked)
    assert [tuple(r.shape) for r in records] == [(2, 4, 17, 17)] * 3
    with torch.no_grad():
        vit(x)
    assert len(records) == 3  # hooks removed on exit


def test_patch_coverage_by_hand():
    mask = np.zeros((4, 4), np.uint8)
    mask[0:2, 0:2] = 1        # object 1 fills patch (0, 0)
    mask[0, 2] = 1            # and one pixel of patch (0, 1)
    mask[2:4, 2:4] = 2        # object 2 fills patch (1, 1)
    cov = patch_coverage(mask, 2, (2, 2))
    assert cov.shape == (3, 4)
    np.testing.assert_allclose(cov[1], [1.0, 0.25, 0.0, 0.0])
    np.testing.assert_allclose(cov[2], [0.0, 0.0, 0.0, 1.0])
    np.testing.assert_allclose(cov.sum(axis=0), 1.0)
    # a 2x4 (H x W) mask is padded to a centred 4x4 square: one background row above and below
    wide = np.full((2, 4), 1, np.uint8)
    np.testing.assert_allclose(patch_coverage(wide, 1, (2, 2))[1], [0.5, 0.5, 0.5, 0.5])


def test_object_attention_by_hand():
    cov = np.array([[0.0, 0.75, 1.0, 0.5],    # background
                    [1.0, 0.25, 0.0, 0.0],    # object 1
                    [0.0, 0.0, 0.0, 0.5]])    # object 2 (ties with background in patch 3: argmax -> background)
    cls = np.array([0.4, 0.2, 0.1, 0.2])
    f = object_attention(cls, cov, top_k=2)
    np.testing.assert_allclose(f["mass"], [0.4 + 0.05, 0.1])
    np.testing.assert_allclose(f["patch_area"], [1.25, 0.5])
    np.testing.assert_allclose(f["mass_per_patch"], [0.45 / 1.25, 0.2])
    np.testing.assert_allclose(f["patches"], [1, 0])
    # top-2 patches: 0 (0.4) and 1 (0.2, first of the tied pair): majority labels object 1 and background
    np.testing.assert_allclose(f["top_k_patches"], [1, 0])


def test_rollout_of_identity_attention_is_identity():
    eye = np.broadcast_to(np.eye(5), (2, 5, 5)).copy()
    np.testing.assert_allclose(rollout([eye, eye]), eye)
    a = np.full((1, 3, 3), 1 / 3)
    np.testing.assert_allclose(rollout([a])[0], 0.5 * a[0] + 0.5 * np.eye(3))


class HandSetAdapter:
    """A one-block, one-head ViT whose CLS token attends (almost) only to patch ``target`` by construction.

    Patch embeddings are zero, so every token is its positional embedding; with W_q = 0 and b_q = t * LN(p_target),
    W_k = I, the CLS scores are t <LN(p_target), LN(p_j)> / sqrt(D), largest for j = target.
    """

    name = "hand-set"
    pretrained = "hand-set"
    embed_dim = 16
    cache_key = "hand-set"
    supports_images = True

    def __init__(self, target: int, t: float = 60.0):
        self.vit = tiny_vit(layers=1, heads=1, width=8, image_size=16, patch=8)  # 2 x 2 patches
        with torch.no_grad():
            self.vit.conv1.weight.zero_()
            self.vit.class_embedding.zero_()
            pos = torch.randn(5, 8, generator=torch.Generator().manual_seed(3))
            self.vit.positional_embedding.copy_(pos)
            block = self.vit.transformer.resblocks[0]
            ln = torch.nn.functional.layer_norm
            tokens = ln(ln(pos, (8,)), (8,))  # ln_pre then ln_1 (unit weights, zero biases)
            dim = 8
            block.attn.in_proj_weight.zero_()
            block.attn.in_proj_weight[dim:2 * dim] = torch.eye(dim)
            block.attn.in_proj_bias.zero_()
            block.attn.in_proj_bias[:dim] = t * tokens[1 + target]
        self.scores = (t * tokens[1 + target] @ tokens.T / np.sqrt(dim)).numpy()
        self.model = self
        self.visual = self.vit

    def encode_image(self, x):
        return self.vit(x)

    def preprocess_images(self, images):
        return torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0


def _dataset(tmp_path, masks):
    samples = []
    for i, mask in enumerate(masks):
        labels = sorted(int(v) for v in np.unique(mask) if v)
        areas = {k: int((mask == k).sum()) for k in labels}
        ranks = {k: r for r, k in enumerate(sorted(labels, key=lambda k: (-areas[k], k)), start=1)}
        objects = [obj(k, f"c{k}", {}, ranks[k], k, areas[k]) for k in labels]
        samples.append(Sample(i, np.zeros((16, 16, 3), np.uint8), mask, "x", objects, [], {}))
    return build(tmp_path, "scenes", SpecGenerator({"scenes": samples}, name="comco", attribute_names=[],
                                                   image_size=(16, 16)))


def test_hand_set_attention_lands_on_the_target_object(tmp_path):
    adapter = HandSetAdapter(target=3)  # patch (1, 1): bottom right
    expected = np.exp(adapter.scores - adapter.scores.max())
    expected /= expected.sum()
    assert expected[4] > 0.99
    mask = np.zeros((16, 16), np.uint8)
    mask[8:, 8:] = 1          # object 1: the whole target patch (64 px, the largest)
    mask[:8, :4] = 2          # object 2: half of patch 0 (32 px)
    data = _dataset(tmp_path, [mask, mask])
    result = cls_attention_by_size(data, adapter, progress=False, top_k=1)
    ranks = result["metrics"]["layers"]["0"]["all"]
    assert [r["size_rank"] for r in ranks] == [1, 2]
    assert ranks[0]["objects"] == 2
    assert ranks[0]["mass"]["mean"] == pytest.approx(expected[4], abs=1e-5)
    assert ranks[1]["mass"]["mean"] == pytest.approx(0.5 * expected[1], abs=1e-5)
    assert ranks[0]["patch_area"]["mean"] == 1.0 and ranks[1]["patch_area"]["mean"] == 0.5
    assert ranks[0]["top_k_patches"]["mean"] == 1.0 and ranks[1]["top_k_patches"]["mean"] == 0.0
    assert ranks[0]["mass"]["ci95"] == pytest.approx([expected[4]] * 2, abs=1e-5)  # identical scenes
    assert result["kind"] == "comco-attention" and result["metrics"]["grid"] == [2, 2]


def test_rejects_models_without_a_vit_class_token(tmp_path):
    class TextOnly:
        name = "text"
        model = None

    data = _dataset(tmp_path, [np.ones((16, 16), np.uint8)])
    with pytest.raises(BadInput, match="no ViT image tower"):
        cls_attention_by_size(data, TextOnly(), progress=False)
    with pytest.raises(BadInput, match="^layers .first. is not allowed"):
        cls_attention_by_size(data, HandSetAdapter(0), layers="first", progress=False)
