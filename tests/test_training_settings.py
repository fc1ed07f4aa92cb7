"""The training options' one table (bindscope.training.options): the CLI options and the config dataclasses made
from it, every numeric option's range checked before any work (library and command line alike), and the table in
docs/training.md."""

from __future__ import annotations

import ast
import inspect
from dataclasses import fields
from pathlib import Path

import pytest
from click.testing import CliRunner

from bindscope.cli.main import madman
from bindscope.cli.train import madman_sweep, madman_train
from bindscope.errors import BadInput
from bindscope.training import config as config_module
from bindscope.training import model as model_module
from bindscope.training.config import TrainConfig, build_train_config
from bindscope.training.model import ModelConfig
from bindscope.training.options import (
    DEFAULTS,
    EVAL_BATCH_SIZE,
    FINETUNE_KEYS,
    FINETUNE_LR,
    HELP,
    MLP_RATIO,
    MODEL_IMAGE_SIZE,
    MODEL_KEYS,
    OPTION,
    OPTIONS,
    SETTINGS,
    TrainSettings,
    options_table_markdown,
)

ROOT = Path(__file__).resolve().parents[1]


def test_the_table_holds_every_option_once_with_its_help():
    names = [f.name for f in fields(TrainSettings)]
    assert list(DEFAULTS) == names and len(set(names)) == len(names) == 33
    assert DEFAULTS["steps"] == 2000 and DEFAULTS["lr"] == 1e-3 and DEFAULTS["image_size"] is None
    assert DEFAULTS["dist_timeout"] == 600 and FINETUNE_LR == 1e-6
    assert set(HELP) == set(DEFAULTS) and all(isinstance(h, str) and h.endswith((".", "]")) for h in HELP.values())
    assert len({row.flag for row in OPTIONS}) == len(OPTIONS)
    with pytest.raises(AttributeError):
        SETTINGS.steps = 1  # frozen


def test_every_numeric_option_has_a_finite_range_and_its_default_is_in_it():
    numeric = [row for row in OPTIONS if row.type in (int, float)]
    assert len(numeric) == 22
    for row in numeric:
        assert row.low is not None and row.high is not None and row.low <= row.high, row.name
        assert row.nullable or row.check(row.default) == row.default, row.name
    assert (OPTION["negatives_per_sample"].low, OPTION["negatives_per_sample"].high) == (1, 64)
    assert (OPTION["steps"].low, OPTION["steps"].high) == (1, 10_000_000)
    assert (OPTION["lr"].low, OPTION["lr"].high, OPTION["lr"].low_open) == (0.0, 10.0, True)


@pytest.mark.parametrize("command", [madman_train, madman_sweep])
def test_cli_defaults_and_help_come_from_the_table(command):
    options = {p.name: p for p in command.params}
    for row in OPTIONS:
        if command is madman_sweep and row.name in FINETUNE_KEYS:  # sweeps train small CLIPs from scratch
            assert row.name not in options
            continue
        assert options[row.name].default == row.default, row.name
        assert options[row.name].opts[0] == row.flag, row.name
        assert options[row.name].help.startswith(row.help), row.name
        if row.type in (int, float):
            assert options[row.name].help.endswith(f" [{row.range_text()}]") and options[row.name].type.row is row


def test_the_docs_show_the_table():
    assert options_table_markdown() in (ROOT / "docs" / "training.md").read_text()


def test_model_and_train_configs_default_to_the_table():
    model = ModelConfig()
    assert {key: getattr(model, key) for key in MODEL_KEYS} == {key: DEFAULTS[key] for key in MODEL_KEYS}
    assert model.image_size == MODEL_IMAGE_SIZE == 64 and model.mlp_ratio == MLP_RATIO == 2.0
    config = TrainConfig(data="d", out="o")
    for key in ("batch_size", "steps", "lr", "weight_decay", "warmup_steps", "seed", "precision", "device", "workers",
                "threads", "checkpoint_every", "log_every", "eval_every", "keep_checkpoints"):
        assert getattr(config, key) == DEFAULTS[key], key
    assert config.negatives == "none" and config.negatives_per_sample == 1 and config.dist_timeout == 600
    assert config.split is None and config.eval_tasks is None and config.eval_batch_size == EVAL_BATCH_SIZE == 256
    built = build_train_config("d", "o", None, None, canvas=96)
    assert built == TrainConfig(data="d", out="o", model=ModelConfig(image_size=96))
    negclip = build_train_config("d", "o", None, None, canvas=96, negatives="stored", negatives_per_sample=3)
    assert (negclip.negatives, negclip.negatives_per_sample) == ("stored", 3)


def _class_defaults(module, class_name: str) -> dict[str, ast.expr]:
    tree = ast.parse(inspect.getsource(module))
    body = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == class_name).body
    return {n.target.id: n.value for n in body if isinstance(n, ast.AnnAssign) and n.value is not None}


@pytest.mark.parametrize("module, class_name", [(model_module, "ModelConfig"), (config_module, "TrainConfig")])
def test_the_configs_declare_no_option_of_their_own(module, class_name):
    """The configs' option fields come from the table (an option costs one row); the classes declare only what
    is not an option, and no default of an option (``ModelConfig.image_size`` is resolved, never None)."""
    declared = _class_defaults(module, class_name)
    assert set(declared) & set(DEFAULTS) == ({"image_size"} if class_name == "ModelConfig" else set())
    names = [f.name for f in fields(ModelConfig if class_name == "ModelConfig" else TrainConfig)]
    groups = ("model",) if class_name == "ModelConfig" else ("finetune", "train", "process")
    assert {n for n in names if n in DEFAULTS} == {row.name for row in OPTIONS if row.group in groups}


def test_the_cli_training_options_write_no_default_of_their_own():
    from bindscope.cli import train as cli_train

    tree = ast.parse(inspect.getsource(cli_train))
    literal_defaults = [kw for node in ast.walk(tree) if isinstance(node, ast.Call)
                        for kw in node.keywords if kw.arg == "default" and isinstance(kw.value, ast.Constant)
                        and kw.value.value is not None]
    assert literal_defaults == []  # the training table's and SweepConfig's defaults, never one written here
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
    (["--lr", "1e308"], "--lr 1e+308 is not allowed; use a finite number in (0, 10]"),
    (["--weight-decay", "11"], "--weight-decay 11.0 is not allowed; use a finite number in [0, 10]"),
    (["--negatives-per-sample", "1000000000"],
     "--negatives-per-sample 1000000000 is not allowed; use an integer in 1..64 captions"),
    (["--steps", "10000001"], "--steps 10000001 is not allowed; use an integer in 1..10000000 steps"),
    (["--batch-size", "0"], "--batch-size 0 is not allowed; use an integer in 1..65536 images"),
    (["--seed", "-1"], "--seed -1 is not allowed; use an integer in 0..4294967295"),
    (["--dist-timeout", "1"], "--dist-timeout 1 is not allowed; use an integer in 10..86400 seconds"),
    (["--context-length", "2"], "--context-length 2 is not allowed; use an integer in 3..4096 tokens"),
])
def test_cli_refuses_out_of_range_values_before_any_work(tmp_path, args, message):
    """The range is checked while the options are read: no dataset is needed (DATA does not even exist)."""
    out = tmp_path / "run"
    result = CliRunner().invoke(madman, ["train", str(tmp_path / "nothing"), "--out", str(out), "--quiet", *args])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [f"Error: {message}"]
    assert not out.exists()


@pytest.mark.parametrize("name, value, message", [
    ("negatives_per_sample", 10 ** 9, "negatives_per_sample 1000000000 is not allowed; use an integer in 1..64"),
    ("eval_every", -1, "eval_every -1 is not allowed; use an integer in 0..10000000 steps"),
    ("workers", 1000, "workers 1000 is not allowed; use an integer in 0..256 processes"),
    ("embed_dim", 10 ** 6, "embed_dim 1000000 is not allowed; use an integer in 1..8192 features"),
    ("keep_checkpoints", 1, "keep_checkpoints 1 is not allowed; use true or false"),
    ("negatives", "all", "negatives 'all' is not known; allowed: none, stored, shuffled"),
    ("steps", 2.0, "steps 2.0 is not allowed; use an integer in 1..10000000 steps"),
])
def test_the_library_refuses_out_of_range_values_before_reading_the_data(tmp_path, name, value, message):
    import bindscope

    with pytest.raises(BadInput) as info:
        bindscope.train(tmp_path / "nothing", tmp_path / "run", **{name: value})
    assert str(info.value).startswith(message) and info.value.param == name
    assert not (tmp_path / "run").exists()
