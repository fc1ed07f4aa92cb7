"""Fine-tuning an open_clip model with ``bindscope train --init MODEL --pretrained FILE``: a random-weight ViT-B-32
saved as a local state-dict file, trained a few steps on a tiny MADMAN dataset, resumed exactly, frozen towers
left bit-identical, and the run evaluated by ``madman eval --model RUN``."""

from __future__ import annotations

import json
from pathlib import Path

import open_clip
import pytest
import torch
from click.testing import CliRunner
from tiny_madman import tiny_madman

import bindscope
from bindscope.build.builder import build_dataset
from bindscope.cli.main import bindscope as bindscope_cli
from bindscope.errors import BadInput
from bindscope.training.checkpoint import load_trained_adapter
from bindscope.training.config import build_train_config
from bindscope.training.options import FINETUNE_LR
from bindscope.training.train import Trainer

FAST = {"steps": 3, "batch_size": 4, "warmup_steps": 1, "lr": 1e-4, "device": "cpu", "threads": 2,
        "checkpoint_every": 100}


@pytest.fixture(scope="module")
def madman(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ft") / "madman"
    build_dataset(tiny_madman(splits={"train": 8, "test": 4, "ood": 2}), out, progress=False)
    return out


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    """A random-weight open_clip ViT-B-32 (seed 3) as a plain state-dict file."""
    torch.manual_seed(3)
    model = open_clip.create_model("ViT-B-32", pretrained=None)
    path = tmp_path_factory.mktemp("weights") / "vit-b-32-random.pt"
    torch.save(model.state_dict(), path)
    return path


def _train(madman, out, weights, **options):
    losses = {}
    config = build_train_config(str(madman), str(out), None, None, init="ViT-B-32", pretrained=str(weights),
                                **{**FAST, **options})
    summary = Trainer(config, progress=False).run(callback=lambda t, loss: losses.__setitem__(t.step, loss))
    return summary, losses


def test_fine_tuning_starts_from_the_file_and_lowers_the_loss_on_a_fixed_batch(madman, weights, tmp_path):
    config = build_train_config(str(madman), str(tmp_path / "run"), None, None, init="ViT-B-32",
                                pretrained=str(weights), **{**FAST, "lr": 1e-5, "steps": 10})
    assert (config.model.open_clip, config.model.embed_dim, config.model.image_size,
            config.model.context_length) == ("ViT-B-32", 512, 224, 77)
    trainer = Trainer(config, progress=False)
    start = torch.load(weights, weights_only=True)
    assert all(torch.equal(trainer.model.state_dict()[k], v) for k, v in start.items())
    batch = trainer.source[0]
    losses = [trainer.train_step(batch) for _ in range(6)]  # the same batch six times
    trainer.close()
    assert losses[5] < losses[4] < losses[3] < losses[0], losses


def test_resume_equals_an_uninterrupted_run_and_the_run_evaluates_with_madman_eval(madman, weights, tmp_path):
    full, losses = _train(madman, tmp_path / "full", weights, freeze="image")

    def interrupt(trainer, loss):
        if trainer.step == 2:
            raise KeyboardInterrupt

    config = build_train_config(str(madman), str(tmp_path / "cut"), None, None, init="ViT-B-32",
                                pretrained=str(weights), freeze="image", **FAST)
    with pytest.raises(KeyboardInterrupt):
        Trainer(config, progress=False).run(callback=interrupt)
    resumed, rest = _train(madman, tmp_path / "cut", weights, freeze="image")
    assert resumed["resumed_from"] == 2 and rest == {3: losses[3]}
    ours = torch.load(tmp_path / "cut" / "model.pt", weights_only=True)["model"]
    theirs = torch.load(tmp_path / "full" / "model.pt", weights_only=True)["model"]
    start = torch.load(weights, weights_only=True)
    assert all(torch.equal(ours[name], theirs[name]) for name in theirs)
    assert all(torch.equal(ours[k], start[k]) for k in start if k.startswith("visual."))  # frozen: bit-identical
    changed = [k for k in start if not k.startswith("visual.") and not torch.equal(ours[k], start[k])]
    assert "token_embedding.weight" in changed and "text_projection" in changed

    recorded = json.loads((tmp_path / "full" / "run.json").read_text())["config"]
    assert recorded["lr"] == 1e-4 and recorded["model"]["architecture"]["vision_cfg"] == \
        {"image_size": 224, "layers": 12, "width": 768, "patch_size": 32}
    adapter = load_trained_adapter(tmp_path / "full", device="cpu")
    assert (adapter.embed_dim, adapter.model_config.open_clip) == (512, "ViT-B-32")
    result = bindscope.evaluate(madman, bindscope.EncoderSettings(tmp_path / "full", device="cpu", use_cache=False),
                                out=False, progress=False).result
    stored = json.loads((tmp_path / "full" / "result.json").read_text())
    assert result["metrics"] == stored["metrics"] and result["kind"] == "madman-eval"
    assert result["metrics"]["splits"]["test"]["num_scored"] == 4


def test_freezing_text_keeps_every_text_weight(madman, weights, tmp_path):
    _train(madman, tmp_path / "run", weights, freeze="text", steps=1)
    ours = torch.load(tmp_path / "run" / "model.pt", weights_only=True)["model"]
    start = torch.load(weights, weights_only=True)
    text = [k for k in start if not k.startswith("visual.") and k != "logit_scale"]
    assert text and all(torch.equal(ours[k], start[k]) for k in text)
    assert not torch.equal(ours["visual.proj"], start["visual.proj"])


@pytest.mark.parametrize("options, message, param", [
    ({"init": "ViT-B-33"}, "init 'ViT-B-33' is not an open_clip model name", "init"),
    ({"init": "ViT-B-32", "pretrained": "missing.pt"}, "no such checkpoint file", "pretrained"),
    ({"init": "ViT-B-32", "pretrained": "laion9b"}, "is not a known tag for", "pretrained"),
    ({"init": "ViT-B-32", "pretrained": "none", "vision_width": 64}, "vision_width does not apply with init",
     "vision_width"),
    ({"pretrained": "openai"}, "pretrained weights need init=MODEL", "pretrained"),
    ({"freeze": "both"}, "freeze 'both' is not known; allowed: none, image, text", "freeze"),
])
def test_bad_fine_tuning_options_are_refused_before_anything_is_written(madman, tmp_path, options, message, param):
    with pytest.raises(BadInput, match=message) as caught:
        bindscope.train(madman, tmp_path / "run", progress=False, **{**FAST, **options})
    assert caught.value.param == param and not (tmp_path / "run").exists()


def test_the_cli_refuses_small_clip_options_with_init_and_exits_2(madman, tmp_path):
    result = CliRunner().invoke(bindscope_cli, ["train", str(madman), "--out", str(tmp_path / "run"), "--init",
                                                "ViT-B-32", "--pretrained", "none", "--text-layers", "2"])
    assert result.exit_code == 2 and "--text-layers does not apply with --init 'ViT-B-32'" in result.output
    assert not (tmp_path / "run").exists()


def test_the_config_records_the_real_architecture_and_the_fine_tuning_learning_rate(madman):
    config = build_train_config(str(madman), "run", None, None, init="ViT-B-32", pretrained="none")
    model = config.model.to_dict()
    assert model == {"open_clip": "ViT-B-32", "embed_dim": 512, "image_size": 224, "context_length": 77,
                     "interpolation": "bicubic",
                     "architecture": {"embed_dim": 512,
                                      "vision_cfg": {"image_size": 224, "layers": 12, "width": 768, "patch_size": 32},
                                      "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 512,
                                                   "heads": 8, "layers": 12}}}
    assert "patch_size" not in model and "vision_layers" not in model  # no small-CLIP settings for a ViT-B-32
    assert config.lr == FINETUNE_LR == 1e-6
    assert build_train_config(str(madman), "run", None, None, init="ViT-B-32", pretrained="none", lr=3e-5).lr == 3e-5
    assert build_train_config(str(madman), "run", None, None, canvas=96).lr == 1e-3  # from scratch


def test_the_cli_leaves_the_fine_tuning_learning_rate_to_the_library(madman, tmp_path, monkeypatch):
    from bindscope.training import api

    seen = []
    monkeypatch.setattr(api, "train", lambda *args, **options: seen.append(options) or _no_summary())
    for extra in ([], ["--lr", "2e-5"]):
        result = CliRunner().invoke(bindscope_cli, ["train", str(madman), "--out", str(tmp_path / "run"), "--init",
                                                    "ViT-B-32", "--pretrained", "none", *extra])
        assert result.exit_code == 0, result.output
    assert "lr" not in seen[0] and seen[1]["lr"] == 2e-5
    assert "embed_dim" not in seen[0] and seen[0]["init"] == "ViT-B-32"


def _no_summary() -> dict:
    return {"rank": 1}  # process 1 prints nothing


def test_unreadable_pretrained_weights_leave_no_run_folder_and_the_corrected_command_runs(madman, weights, tmp_path):
    bad = tmp_path / "truncated.pt"
    bad.write_bytes(weights.read_bytes()[:4096])
    out = tmp_path / "runs" / "ft"
    with pytest.raises(BadInput, match="truncated.pt"):
        bindscope.train(madman, out, progress=False, init="ViT-B-32", pretrained=str(bad), **FAST)
    assert not (tmp_path / "runs").exists()
    summary = bindscope.train(madman, out, progress=False, init="ViT-B-32", pretrained=str(weights),
                              **{**FAST, "steps": 1})
    assert summary["resumed_from"] == 0 and summary["steps"] == 1
