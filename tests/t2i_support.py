"""Tiny random-weight models for the text-to-image and unannotated caption-bias tests, built from configs (no
download): a Stable Diffusion pipeline (UNet, VAE, CLIP text encoder, a CLIP tokenizer from a vocabulary written
here, an Euler scheduler), an OWLv2 and an OWL-ViT detector with their processors, and a SAM segmenter. Each is
written once per test session with ``save_pretrained`` (safetensors) and read back by the code under test."""

from __future__ import annotations

import json
import tempfile
from functools import cache
from pathlib import Path

WORDS = ["a", "an", "photo", "of", "and", "the", "dog", "cat", "pizza", "car", "apple", "umbrella", "person", "cup"]
ROOT = Path(tempfile.mkdtemp(prefix="bindscope-t2i-models-"))


def _tokenizer(max_length: int, **extra):
    from transformers import CLIPTokenizer

    folder = ROOT / "vocab"
    if not folder.is_dir():
        folder.mkdir()
        vocab = {"!": 0, "<|startoftext|>": 1, "<|endoftext|>": 2}  # OWL reads a first token 0 as padding
        for word in WORDS:
            vocab[f"{word}</w>"] = len(vocab)
        for letter in "abcdefghijklmnopqrstuvwxyz":
            vocab.setdefault(letter, len(vocab))
            vocab.setdefault(f"{letter}</w>", len(vocab))
        (folder / "vocab.json").write_text(json.dumps(vocab))
        (folder / "merges.txt").write_text("#version: 0.2\n")
    return CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), model_max_length=max_length,
                         **extra)


TEXT = dict(vocab_size=100, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            bos_token_id=1, eos_token_id=2, pad_token_id=2)


@cache
def tiny_pipeline() -> Path:
    """A StableDiffusionPipeline folder: 32 px images (a VAE of scale 2 over a 16 x 16 latent), 4 latent channels."""
    import torch
    from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
                                block_out_channels=(8, 16), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=16,
                                attention_head_dim=2, norm_num_groups=4)
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16), latent_channels=4,
                        layers_per_block=1, norm_num_groups=4, sample_size=32)
    text = CLIPTextModel(CLIPTextConfig(**TEXT, max_position_embeddings=77, projection_dim=16))
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=text, tokenizer=_tokenizer(77), unet=unet,
                                   scheduler=EulerDiscreteScheduler(steps_offset=1), safety_checker=None,
                                   feature_extractor=None, requires_safety_checker=False)
    folder = ROOT / "pipeline"
    pipe.save_pretrained(folder, safe_serialization=True)
    return folder


@cache
def tiny_detector(kind: str = "owlv2") -> Path:
    """An Owlv2ForObjectDetection (``owlv2``) or OwlViTForObjectDetection (``owlvit``) folder with its processor:
    32 px inputs, 8 px patches (16 boxes), 16-token queries."""
    import torch
    import transformers as tf

    torch.manual_seed(1)
    text = dict(TEXT, max_position_embeddings=16)
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=32,
                  patch_size=8)
    config, model, processor, images = {"owlv2": (tf.Owlv2Config, tf.Owlv2ForObjectDetection, tf.Owlv2Processor,
                                                  tf.Owlv2ImageProcessor),
                                        "owlvit": (tf.OwlViTConfig, tf.OwlViTForObjectDetection, tf.OwlViTProcessor,
                                                   tf.OwlViTImageProcessor)}[kind]
    net = model(config(text_config=text, vision_config=vision, projection_dim=16)).eval()
    sizes = {"size": {"height": 32, "width": 32}}
    if kind == "owlvit":
        sizes["crop_size"] = {"height": 32, "width": 32}
    folder = ROOT / kind
    net.save_pretrained(folder)
    processor(image_processor=images(**sizes), tokenizer=_tokenizer(16, pad_token="!")).save_pretrained(folder)
    return folder


@cache
def tiny_segmenter() -> Path:
    """A SamModel folder with its processor: 64 px inputs, 16 px masks."""
    import torch
    from transformers import SamConfig, SamImageProcessor, SamModel, SamProcessor

    torch.manual_seed(2)
    config = SamConfig(vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                          num_attention_heads=2, image_size=64, patch_size=16, output_channels=16,
                                          global_attn_indexes=[0], mlp_dim=32, num_pos_feats=8),
                       prompt_encoder_config=dict(hidden_size=16, image_size=64, patch_size=16, mask_input_channels=4),
                       mask_decoder_config=dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, mlp_dim=16,
                                                iou_head_hidden_dim=8))
    folder = ROOT / "sam"
    SamModel(config).eval().save_pretrained(folder)
    SamProcessor(SamImageProcessor(size={"longest_edge": 64}, pad_size={"height": 64, "width": 64},
                                   mask_size={"longest_edge": 16},
                                   mask_pad_size={"height": 16, "width": 16})).save_pretrained(folder)
    return folder


@cache
def tiny_clip() -> Path:
    """A CLIPModel folder (``hf-vlm`` encoder) with 32 px images, 16-dimensional embeddings and the tokenizer above."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    torch.manual_seed(3)
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=32,
                  patch_size=8)
    net = CLIPModel(CLIPConfig(text_config=dict(TEXT, max_position_embeddings=77), vision_config=vision,
                               projection_dim=16))
    folder = ROOT / "clip"
    net.save_pretrained(folder)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)
    _tokenizer(77).save_pretrained(folder)
    return folder
