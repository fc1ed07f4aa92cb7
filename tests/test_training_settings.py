"""The training options' one defaults table (bindscope.training.options) and the value ranges of lr and weight
decay."""

from __future__ import annotations

import ast
import inspect
from dataclasses import fields

import pytest
from click.testing import CliRunner

from bindscope.cli.main import madman
from bindscope.cli.train import madman_sweep, madman_train
from bindscope.errors import BadInput
from bindscope.training import model as model_module
from bindscope.training import train as train_module
from bindscope.training.model import ModelConfig
from bindscope.training.options import (
    DEFAULTS,
    EVAL_BATCH_SIZE,
    FINETUNE_KEYS,
    HELP,
    MLP_RATIO,
    MODEL_IMAGE_SIZE,
    MODEL_KEYS,
    SETTINGS,
    TrainSettings,
)
from bindscope.training.train import TrainConfig, build_train_config


def test_the_table_holds_every_option_once_with_its_help():
    names = [f.name for f in fields(TrainSettings)]
    assert list(DEFAULTS) == names and len(set(names)) == len(names) == 30
    assert DEFAULTS["steps"] == 2000 and DEFAULTS["lr"] == 1e-3 and DEFAULTS["image_size"] is None
    assert set(HELP) == set(DEFAULTS) and all(isinstance(h, str) and h.endswith((".", "]")) for h in HELP.values())
    with pytest.raises(AttributeError):
        SETTINGS.steps = 1  # frozen


@pytest.mark.parametrize("command", [madman_train, madman_sweep])
def test_cli_defaults_and_help_come_from_the_table(command):
    options = {p.name: p for p in command.params}
    for name, default in DEFAULTS.items():
        if command is madman_sweep and name in FINETUNE_KEYS:  # sweeps train small CLIPs from scratch
            assert name not in options
            continue
        assert options[name].default == default, name
        assert options[name].help == HELP[name], name
    assert options["lr"].type.max == 10 and options["lr"].type.min == 0 and options["lr"].type.min_open
    assert options["weight_decay"].type.max == 10 and not options["weight_decay"].type.min_open


def test_model_and_train_configs_default_to_the_table():
    model = ModelConfig()
    assert {key: getattr(model, key) for key in MODEL_KEYS} == {key: DEFAULTS[key] for key in MODEL_KEYS}
    assert model.image_size == MODEL_IMAGE_SIZE == 64 and model.mlp_ratio == MLP_RATIO == 2.0
    config = TrainConfig(data="d", out="o")
    for key in ("batch_size", "steps", "lr", "weight_decay", "warmup_steps", "seed", "precision", "device", "workers",
                "threads", "checkpoint_every", "log_every", "eval_every", "keep_checkpoints"):
        assert getattr(config, key) == DEFAULTS[key], key
    assert config.negatives == "none" and config.negatives_per_sample == 1
    assert config.split is None and config.eval_tasks is None and config.eval_batch_size == EVAL_BATCH_SIZE == 256
    built = build_train_config("d", "o", None, None, canvas=96)
    assert built == TrainConfig(data="d", out="o", model=ModelConfig(image_size=96))
    negclip = build_train_config("d", "o", None, None, canvas=96, negatives="stored", negatives_per_sample=3)
    assert (negclip.negatives, negclip.negatives_per_sample) == ("stored", 3)


def _class_defaults(module, class_name: str) -> dict[str, ast.expr]:
    tree = ast.parse(inspect.getsource(module))
    body = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == class_name).body
    return {n.target.id: n.value for n in body if isinstance(n, ast.AnnAssign) and n.value is not None}


@pytest.mark.parametrize("module, class_name", [(model_module, "ModelConfig"), (train_module, "TrainConfig")])
def test_no_default_is_written_a_second_time(module, class_name):
    """The configs' defaults are names from the table, never literals of their own (besides the empty
    vocabulary, a small CLIP's empty fine-tuning fields and the unresolved data, evaluation and weights-file
    choices)."""
    literals = {name: ast.literal_eval(value) for name, value in _class_defaults(module, class_name).items()
                if isinstance(value, ast.Constant | ast.Tuple)}
    assert literals == ({"vocabulary": (), "open_clip": "", "image_mean": (), "image_std": (),
                         "interpolation": "bilinear"} if class_name == "ModelConfig" else
                        {"eval_data": None, "eval_splits": None, "eval_tasks": None, "split": None,
                         "pretrained_sha256": None})


def test_the_cli_training_options_write_no_default_of_their_own():
    from bindscope.cli import train as cli_train

    tree = ast.parse(inspect.getsource(cli_train.training_options))
    literal_defaults = [kw for node in ast.walk(tree) if isinstance(node, ast.Call)
                        for kw in node.keywords if kw.arg == "default"]
    assert literal_defaults == []
    assert {p.name for p in madman_train.params} >= set(DEFAULTS)


@pytest.mark.parametrize("value, message", [
    (1e308, "lr 1e+308 is not allowed; use a finite number in (0, 10]"),
    (0.0, "lr 0.0 is not allowed"),
    (float("nan"), "lr nan is not allowed"),
    (float("inf"), "lr inf is not allowed"),
    (True, "lr True is not allowed"),
])
def test_learning_rate_range(value, message):
    with pytest.raises(BadInput, match=message.replace("(", r"\(").replace("]", r"\]").replace("+", r"\+")) as info:
        build_train_config("d", "o", None, None, canvas=32, lr=value)
    assert info.value.param == "lr"
    assert build_train_config("d", "o", None, None, canvas=32, lr=10.0).lr == 10.0


@pytest.mark.parametrize("value", [-0.1, 10.5, float("nan"), float("-inf")])
def test_weight_decay_range(value):
    with pytest.raises(BadInput, match=r"weight_decay .* is not allowed; use a finite number in \[0, 10\]") as info:
        build_train_config("d", "o", None, None, canvas=32, weight_decay=value)
    assert info.value.param == "weight_decay"
    assert build_train_config("d", "o", None, None, canvas=32, weight_decay=0.0).weight_decay == 0.0


@pytest.mark.parametrize("args, message", [
    (["--lr", "1e308"], "'--lr': 1e+308 is not in the range 0.0<x<=10.0"),
    (["--weight-decay", "11"], "'--weight-decay': 11.0 is not in the range 0.0<=x<=10.0"),
])
def test_cli_refuses_out_of_range_rates_before_writing(tmp_path, args, message):
    out = tmp_path / "run"
    result = CliRunner().invoke(madman, ["train", str(tmp_path), "--out", str(out), "--quiet", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not out.exists()
