"""Crafted model files and checkpoints: each is refused with BadInput naming the file and the problem, before any
model is built from it or any state restored, never a traceback and never code run from the file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from bindscope.cli.main import madman
from bindscope.errors import BadInput
from bindscope.training import checkpoint as checkpoint_module
from bindscope.training.checkpoint import MODEL_FORMAT, load_trained_adapter, load_weights
from bindscope.training.config import TrainConfig
from bindscope.training.model import ModelConfig, build_model
from bindscope.training.train import Trainer

TINY = ModelConfig(embed_dim=16, image_size=32, vision="cnn", vision_width=16, vision_layers=1, text_width=32,
                   text_layers=1, head_width=16, context_length=16)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


class Payload:
    """Unpickling this would create the file ``marker``: a stand-in for code a crafted pickle runs."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def model_blob() -> dict:
    torch.manual_seed(0)
    return {"format": MODEL_FORMAT, "version": 1, "step": 3, "model": build_model(TINY).state_dict(),
            "model_config": TINY.to_dict(), "train_config": {"steps": 3, "lr": 0.001}}


@pytest.fixture(scope="module")
def good_blob() -> dict:
    return model_blob()


def _save(blob, path: Path) -> Path:
    torch.save(blob, path)
    return path


def test_a_sound_model_file_loads(good_blob, tmp_path):
    state, config, info = load_weights(_save(good_blob, tmp_path / "model.pt"))
    assert config == TINY and info["step"] == 3 and info["train_config"] == {"steps": 3, "lr": 0.001}
    assert all(torch.equal(state[name], tensor) for name, tensor in good_blob["model"].items())
    adapter = load_trained_adapter(tmp_path / "model.pt", device="cpu")
    assert adapter.embed_dim == 16 and adapter.step == 3


def _edit_model(name, value):
    def edit(blob):
        blob["model"][name] = value
    return edit


def _edit_config(key, value):
    def edit(blob):
        blob["model_config"][key] = value
    return edit


def _edit(key, value):
    def edit(blob):
        blob[key] = value
    return edit


def _nan(blob):
    weight = blob["model"]["text_projection"].clone()
    weight[1, 2] = float("nan")
    blob["model"]["text_projection"] = weight


def _drop(name):
    def edit(blob):
        del blob["model"][name]
    return edit


CASES = {
    "wrong shape": (_edit_model("text_projection", torch.zeros(3, 3)),
                    "model entry 'text_projection' has shape (3, 3); the model needs (32, 16)"),
    "wrong dtype": (_edit_model("text_projection", torch.zeros(32, 16, dtype=torch.float64)),
                    "model entry 'text_projection' has dtype torch.float64; the model needs torch.float32"),
    "NaN weight": (_nan, "model entry 'text_projection' holds NaN or infinite values"),
    "non-tensor entry": (_edit_model("logit_scale", 2.0), "model entry 'logit_scale' is a float, not a tensor"),
    "string entry": (_edit_model("logit_scale", "import os"), "model entry 'logit_scale' is a str, not a tensor"),
    "missing weight": (_drop("text_projection"), "model does not fit the model (missing text_projection)"),
    "extra weight": (_edit_model("extra.weight", torch.zeros(2)), "model does not fit the model (unexpected "
                                                                  "'extra.weight')"),
    "state dict a list": (_edit("model", [1, 2]), "model is a list, not a mapping of names to tensors"),
    "huge declared dim": (_edit_config("embed_dim", 10 ** 9),
                          "model_config: embed_dim 1000000000 is not allowed; use an integer in 1..8192"),
    "huge declared depth": (_edit_config("text_layers", 10 ** 6),
                            "model_config: text_layers 1000000 is not allowed; use an integer in 1..64"),
    "huge parameter count": (lambda b: b["model_config"].update(text_width=8192, text_layers=64),
                             "model_config declares 34770543443 parameters; at most 2000000000"),
    "NaN config value": (_edit_config("mlp_ratio", float("nan")), "model_config.mlp_ratio holds the non-finite "
                                                                  "number nan"),
    "vocabulary not a list": (_edit_config("vocabulary", 5), "model_config: vocabulary must be a list of words"),
    "tensor in the config": (_edit_config("embed_dim", torch.tensor(16)), "model_config.embed_dim is a Tensor, not "
                                                                          "a plain value"),
    "unknown config key": (_edit_config("depth", 3), "model_config: unknown model config key(s) depth"),
    "config not a dict": (_edit("model_config", [1]), "model_config: a model config must be a mapping"),
    "unknown format": (_edit("format", "something-else"), "is not a madman train model or checkpoint (format "
                                                          "'something-else'"),
    "future version": (_edit("version", 2), "has format version 2; this bindscope reads version 1"),
    "negative step": (_edit("step", -4), "step -4 is not a step count"),
    "extra entry": (_edit("payload", b"\x00" * 8), "has unexpected entries 'payload'"),
    "tensor in train_config": (_edit("train_config", {"lr": torch.zeros(1)}), "train_config.lr is a Tensor"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_crafted_model_file_is_refused_before_a_model_is_built(good_blob, tmp_path, monkeypatch, case):
    edit, message = CASES[case]
    blob = {**good_blob, "model": dict(good_blob["model"]), "model_config": dict(good_blob["model_config"])}
    edit(blob)
    file = _save(blob, tmp_path / "model.pt")
    built = []
    monkeypatch.setattr(checkpoint_module.TrainedClipAdapter, "__init__",
                        lambda *a, **k: built.append(1) or pytest.fail("an adapter was built"))
    with pytest.raises(BadInput) as info:
        load_trained_adapter(file, device="cpu")
    assert str(info.value).startswith(f"{str(file)!r}: "), str(info.value)
    assert message in str(info.value)
    assert built == []


def test_a_pickle_payload_is_refused_unrun(good_blob, tmp_path):
    marker = tmp_path / "ran"
    file = _save({**good_blob, "train_config": Payload(marker)}, tmp_path / "model.pt")
    with pytest.raises(BadInput, match=r"holds objects other than tensors and plain values \(.+\), refused unread: "
                                       "loading them could run code"):
        load_weights(file)
    assert not marker.exists()
    (tmp_path / "junk.pt").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(BadInput, match=r"junk.pt': is not readable as a torch file \("):
        load_weights(tmp_path / "junk.pt")


def test_size_limits_are_checked_before_reading(good_blob, tmp_path, monkeypatch):
    file = _save(good_blob, tmp_path / "model.pt")
    monkeypatch.setattr(checkpoint_module, "MAX_FILE_BYTES", 1000)
    with pytest.raises(BadInput, match=rf"is {file.stat().st_size} bytes; a madman train model or checkpoint is at "
                                       r"most 1000 bytes"):
        load_weights(file)
    os.mkfifo(tmp_path / "fifo.pt")
    with pytest.raises(BadInput, match="is not a regular file"):
        checkpoint_module.read_weights_file(tmp_path / "fifo.pt")


def test_a_model_file_must_match_its_run_folder(good_blob, tmp_path):
    import json

    (tmp_path / "run.json").write_text(json.dumps({"config": {"model": {**TINY.to_dict(), "embed_dim": 32}}}))
    _save(good_blob, tmp_path / "model.pt")
    with pytest.raises(BadInput, match=r"model_config differs from the run's '.*run.json' in embed_dim"):
        load_weights(tmp_path)
    (tmp_path / "run.json").write_text(json.dumps({"config": {"model": TINY.to_dict()}}))
    assert load_weights(tmp_path)[1] == TINY


def test_madman_eval_refuses_a_crafted_model_with_one_line(good_blob, tmp_path):
    from tiny_madman import tiny_madman

    from bindscope.build.builder import build_dataset

    data = tmp_path / "data"
    build_dataset(tiny_madman({"train": 4, "test": 4}), data, jobs=1, progress=False)
    blob = {**good_blob, "model": {**good_blob["model"], "logit_scale": torch.tensor(float("inf"))}}
    file = _save(blob, tmp_path / "crafted.pt")
    result = CliRunner().invoke(madman, ["eval", str(data), "--model", str(file), "--device", "cpu", "--no-cache",
                                         "--quiet", "--out", str(tmp_path / "eval.json")])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [f"Error: {str(file)!r}: model entry 'logit_scale' holds NaN or infinite values"]
    assert not (tmp_path / "eval.json").exists()


# ------------------------------------------------------------------------------------------ resuming a run

@pytest.fixture(scope="module")
def interrupted_run(tmp_path_factory):
    """A run folder interrupted after step 2 of 4 (checkpoint at step 2), and its config."""
    from tiny_madman import tiny_madman

    from bindscope.build.builder import build_dataset

    root = tmp_path_factory.mktemp("resume")
    build_dataset(tiny_madman({"train": 8, "test": 4}), root / "data", jobs=1, progress=False)
    config = TrainConfig(data=str(root / "data"), out=str(root / "run"), model=TINY, batch_size=4, steps=4,
                         warmup_steps=1, checkpoint_every=1, log_every=1, device="cpu")

    def stop(trainer, loss):
        if trainer.step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Trainer(config, progress=False).run(callback=stop)
    return root / "run", config


def _tree(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.endswith(".lock")}


def _optimizer_state(blob, key, value):
    blob["optimizer"]["state"][0][key] = value


def _group(blob, key, value):
    blob["optimizer"]["param_groups"][0][key] = value


RESUME_CASES = {
    "moment of a wrong shape": (lambda b: _optimizer_state(b, "exp_avg", torch.zeros(2)),
                                "optimizer state 0 entry 'exp_avg' has shape (2,); the model needs"),
    "NaN moment": (lambda b: _optimizer_state(b, "exp_avg_sq", b["optimizer"]["state"][0]["exp_avg_sq"] * float("nan")),
                   "optimizer state 0 entry 'exp_avg_sq' holds NaN or infinite values"),
    "moment not a tensor": (lambda b: _optimizer_state(b, "exp_avg", [0.0]), "entry 'exp_avg' is a list, not a tensor"),
    "another weight decay": (lambda b: _group(b, "weight_decay", 5.0),
                             "optimizer param_groups[0].weight_decay is 5.0; this run has 0.1"),
    "NaN learning rate": (lambda b: _group(b, "lr", float("nan")), "optimizer param_groups[0].lr is nan"),
    "parameter out of range": (lambda b: b["optimizer"]["state"].__setitem__(10 ** 6, {}),
                               "optimizer state has the entry 1000000"),
    "step beyond the run": (lambda b: b.__setitem__("step", 10 ** 6), "step 1000000 is beyond this run's 4 steps"),
    "scheduler elsewhere": (lambda b: b["scheduler"].__setitem__("last_epoch", 3),
                            "scheduler is at step 3; the checkpoint is at step 2"),
    "scaler of another run": (lambda b: b.__setitem__("scaler", {"scale": 1.0}), "scaler does not have the keys"),
    "torch RNG state": (lambda b: b["rng"].__setitem__("torch", torch.zeros(3, dtype=torch.uint8)),
                        "rng torch is not a generator state"),
    "Python RNG state": (lambda b: b["rng"].__setitem__("python", (3, (1, 2), None)),
                         "rng python is not a Python random state"),
    "numpy RNG state": (lambda b: b["rng"].__setitem__("numpy", ("MT19937", torch.zeros(3), 0, 0, 0.0)),
                        "rng numpy is not a numpy MT19937 state"),
    "NaN weight": (lambda b: b["model"].__setitem__("logit_scale", torch.tensor(float("nan"))),
                   "model entry 'logit_scale' holds NaN or infinite values"),
    "model config of another run": (lambda b: b["model_config"].__setitem__("embed_dim", 32),
                                    "model_config differs from the run's"),
    "a model file instead": (lambda b: b.__setitem__("format", MODEL_FORMAT),
                             "is not a madman train checkpoint (format 'bindscope-small-clip'"),
}


@pytest.mark.parametrize("case", sorted(RESUME_CASES))
def test_a_crafted_checkpoint_is_refused_before_resuming(interrupted_run, tmp_path, case):
    run, config = interrupted_run
    out = tmp_path / "run"
    shutil.copytree(run, out)
    blob = torch.load(out / "checkpoint.pt", weights_only=True)
    assert blob["step"] == 2
    edit, message = RESUME_CASES[case]
    edit(blob)
    torch.save(blob, out / "checkpoint.pt")
    before = _tree(out)
    with pytest.raises(BadInput) as info:
        Trainer(TrainConfig(**{**config.__dict__, "out": str(out)}), progress=False)
    assert str(info.value).startswith(f"{str(out / 'checkpoint.pt')!r}: "), str(info.value)
    assert message in str(info.value)
    assert _tree(out) == before  # nothing restored, trimmed or written


def test_a_pickle_payload_checkpoint_is_refused_by_madman_train(interrupted_run, tmp_path):
    run, config = interrupted_run
    out = tmp_path / "run"
    shutil.copytree(run, out)
    blob = torch.load(out / "checkpoint.pt", weights_only=True)
    marker = tmp_path / "ran"
    torch.save({**blob, "rng": Payload(marker)}, out / "checkpoint.pt")
    before = _tree(out)
    args = ["train", config.data, "--out", str(out), "--embed-dim", "16", "--image-size", "32", "--vision", "cnn",
            "--vision-width", "16", "--vision-layers", "1", "--text-width", "32", "--text-layers", "1",
            "--head-width", "16", "--context-length", "16", "--batch-size", "4", "--steps", "4", "--warmup", "1",
            "--checkpoint-every", "1", "--log-every", "1", "--device", "cpu", "--quiet"]
    result = CliRunner().invoke(madman, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"Error: {str(out / 'checkpoint.pt')!r}: holds objects other "
                                                   "than tensors"), result.output
    assert not marker.exists() and _tree(out) == before
    # the untouched checkpoint resumes and finishes the run
    torch.save(blob, out / "checkpoint.pt")
    assert CliRunner().invoke(madman, args).exit_code == 0
    assert torch.load(out / "model.pt", weights_only=True)["step"] == 4
