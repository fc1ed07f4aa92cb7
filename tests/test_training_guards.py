"""A run whose loss or weights stop being finite ends with exit status 1 and one message naming the step and
the value, and saves no model and no checkpoint of those weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from bindscope.cli.main import madman
from bindscope.training import train as train_module
from bindscope.training.objective import TrainingDiverged, non_finite_tensor

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A tiny MADMAN dataset (train 8, test 4)."""
    from tiny_madman import tiny_madman

    from bindscope.build.builder import build_dataset

    path = tmp_path_factory.mktemp("guards") / "madman"
    build_dataset(tiny_madman({"train": 8, "test": 4}), path, jobs=1, progress=False)
    return path


def _train(data: Path, out: Path, *extra: str):
    args = ["train", str(data), "--out", str(out), "--embed-dim", "16", "--image-size", "32", "--vision", "cnn",
            "--vision-width", "16", "--vision-layers", "1", "--text-width", "32", "--text-layers", "1",
            "--head-width", "16", "--tokenizer", "word", "--context-length", "16", "--batch-size", "4",
            "--steps", "5", "--warmup", "1", "--checkpoint-every", "1", "--log-every", "1", "--device", "cpu",
            "--quiet", *extra]
    return CliRunner().invoke(madman, args)


def _error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1, result.output
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    return lines[0]


def _finite_checkpoint(out: Path) -> dict:
    blob = torch.load(out / "checkpoint.pt", weights_only=True)
    assert non_finite_tensor(blob["model"]) is None
    for state in blob["optimizer"]["state"].values():
        assert non_finite_tensor(state) is None
    return blob


def test_non_finite_tensor_names_the_first_bad_entry():
    good = {"a": torch.ones(3), "steps": torch.tensor(4)}
    assert non_finite_tensor(good) is None
    assert non_finite_tensor({**good, "b": torch.tensor([1.0, float("inf"), float("nan")])}) == ("b", float("inf"))
    name, value = non_finite_tensor({"c": torch.zeros(2, 2), "d": torch.tensor([[0.0], [float("nan")]])})
    assert name == "d" and value != value  # NaN


def test_a_nan_loss_stops_the_run_before_its_step(data, tmp_path, monkeypatch):
    real, calls = train_module.clip_loss, []

    def nan_at_step_3(*args, **kwargs):
        calls.append(1)
        loss = real(*args, **kwargs)
        return loss * float("nan") if len(calls) == 3 else loss

    monkeypatch.setattr(train_module, "clip_loss", nan_at_step_3)
    out = tmp_path / "run"
    line = _error_line(_train(data, out))
    assert line == ("Error: training stopped at step 3: the loss is nan, not a finite number; no model was saved "
                    "(the checkpoint of step 2 is kept); a lower lr than 0.001 may help")
    assert not (out / "model.pt").exists() and not (out / "result.json").exists()
    assert _finite_checkpoint(out)["step"] == 2
    logged = [json.loads(line)["step"] for line in (out / "log.jsonl").read_text().splitlines()]
    assert logged == [1, 2]


def test_a_non_finite_weight_after_the_optimiser_step_stops_the_run(data, tmp_path, monkeypatch):
    real, calls = torch.optim.AdamW.step, []

    def poisoned_step(self, *args, **kwargs):
        result = real(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == 2:
            with torch.no_grad():
                self.param_groups[0]["params"][0].view(-1)[5] = float("-inf")
        return result

    monkeypatch.setattr(torch.optim.AdamW, "step", poisoned_step)
    out = tmp_path / "run"
    line = _error_line(_train(data, out))
    assert line == ("Error: training stopped at step 2: weight 'positional_embedding' is -inf, not a finite number; "
                    "no model was saved (the checkpoint of step 1 is kept); a lower lr than 0.001 may help")
    assert not (out / "model.pt").exists()
    assert _finite_checkpoint(out)["step"] == 1


def test_the_library_raises_training_diverged(data, tmp_path, monkeypatch):
    import bindscope

    monkeypatch.setattr(train_module, "clip_loss", lambda *args: torch.tensor(float("inf"), requires_grad=True))
    with pytest.raises(TrainingDiverged) as info:
        bindscope.train(data, tmp_path / "run", embed_dim=16, image_size=32, vision="cnn", vision_width=16,
                        vision_layers=1, text_width=32, text_layers=1, head_width=16, tokenizer="word",
                        context_length=16, batch_size=4, steps=3, device="cpu", progress=False)
    assert info.value.step == 1 and info.value.what == "the loss" and info.value.value == float("inf")
    assert "no checkpoint was written" in str(info.value)
    assert not (tmp_path / "run" / "checkpoint.pt").exists() and not (tmp_path / "run" / "model.pt").exists()


def test_the_absurd_learning_rate_is_refused_before_anything_is_written(data, tmp_path):
    out = tmp_path / "run"
    result = _train(data, out, "--lr", "1e308")
    assert result.exit_code == 2 and "--lr 1e+308 is not allowed; use a finite number in (0, 10]" in result.output
    assert not out.exists()
