"""The encoder registry: a kind registered at run time is used end to end by ``bindscope.evaluate`` and the
command line; the built-in kinds and the entry-point kind keep their order."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from eval_fakes import madman_fixture

import bindscope
from bindscope.cli.main import madman
from bindscope.encoders.registry import EncoderKind, encoder_kind, encoder_kinds, register_encoder


@pytest.fixture
def fake_kind(tmp_path):
    path, encoder = madman_fixture(tmp_path)
    loads = []

    def loader(model, pretrained, **options):
        loads.append((model, pretrained, options["device"], options["batch_size"]))
        return encoder

    kind = register_encoder(EncoderKind("fake:", lambda m: m.startswith("fake:"), loader,
                                        slug=lambda m: m.replace(":", "-")))
    yield path, loads
    from bindscope.encoders import registry

    registry._REGISTERED.remove(kind)


def test_a_registered_kind_comes_first_and_others_keep_their_order(fake_kind):
    names = [kind.name for kind in encoder_kinds()]
    assert names == ["fake:", "hf-vlm:", "hf:", "sentence-transformers folder", "open_clip config file", "run",
                     "sentence-transformers/", "hf-hub:",
                     "open_clip"]
    assert encoder_kind("fake:x").name == "fake:" and encoder_kind("ViT-B-32").name == "open_clip"


def test_bindscope_evaluate_uses_a_registered_kind(fake_kind, tmp_path):
    path, loads = fake_kind
    run = bindscope.evaluate(path, bindscope.EncoderSettings("fake:hand", device="cpu", use_cache=False),
                             progress=False)
    assert loads == [("fake:hand", None, "cpu", 64)]
    assert run.path.name == "madman-fake-hand.json"
    colour = run.result["metrics"]["splits"]["test"]["binding"]["per_attribute"]["colour"]
    assert (colour["correct"], colour["total"]) == (2, 3)


def test_the_command_line_uses_a_registered_kind(fake_kind, tmp_path):
    path, loads = fake_kind
    out = tmp_path / "r.json"
    result = CliRunner().invoke(madman, ["eval", str(path), "--model", "fake:cli", "--no-cache", "--quiet",
                                         "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert loads[0][0] == "fake:cli"
    colour = json.loads(out.read_text())["metrics"]["splits"]["test"]["binding"]["per_attribute"]["colour"]
    assert (colour["correct"], colour["total"]) == (2, 3)
