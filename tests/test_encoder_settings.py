"""The encoder settings object: every field's range checked in one place, one BadInput naming the field; the
click decorator generated from its fields builds it (and its options give the same Error: lines)."""

from __future__ import annotations

import dataclasses

import click
import numpy as np
import pytest
from click.testing import CliRunner

from bindscope.cli.main import Group
from bindscope.cli.options import encoder_settings
from bindscope.encoders.settings import SETTING_NAMES, EncoderSettings
from bindscope.errors import BadInput

BAD = [
    ("model", "", "^model '' is not allowed"),
    ("model", 3, "^model 3 is not allowed"),
    ("model", "bad\udcff", "^model b'bad\\\\xff' holds bytes that are not UTF-8"),
    ("pretrained", " ", "^pretrained ' ' is not allowed"),
    ("device", "gpu", "^device 'gpu' is not allowed; use auto | cpu | cuda | cuda:N"),
    ("device", "cuda:-1", "^device 'cuda:-1' is not allowed"),
    ("precision", "fp8", "^precision 'fp8' is not allowed; use one of fp32, bf16, fp16"),
    ("batch_size", 0, r"^batch_size 0 is not allowed; use an integer in 1\.\.65536"),
    ("batch_size", 65_537, r"^batch_size 65537 is not allowed"),
    ("batch_size", True, r"^batch_size True is not allowed"),
    ("batch_size", 2.0, r"^batch_size 2.0 is not allowed"),
    ("pooling", "max", "^pooling 'max' is not allowed; use one of cls, mean"),
    ("context_length", 1, r"^context_length 1 is not allowed; use an integer in 2\.\.4096 tokens"),
    ("context_length", 4097, r"^context_length 4097 is not allowed"),
    ("cache_dir", "", "^cache_dir '' is not allowed"),
    ("use_cache", "no", "^use_cache 'no' is not allowed; use True or False"),
]


@pytest.mark.parametrize("name,value,message", BAD, ids=[f"{b[0]}={b[1]!r}" for b in BAD])
def test_each_field_out_of_range_is_one_bad_input_naming_it(name, value, message):
    values = {"model": "ViT-B-32", name: value}
    with pytest.raises(BadInput, match=message) as caught:
        EncoderSettings(**values)
    assert caught.value.param == name


def test_defaults_and_the_model_string_convenience(tmp_path):
    default = EncoderSettings("ViT-B-32")
    assert dataclasses.astuple(default) == ("ViT-B-32", None, "auto", "fp32", None, "cls", None, None, True)
    assert EncoderSettings.of("ViT-B-32") == default
    assert EncoderSettings.of(default) is default
    assert EncoderSettings.of(tmp_path / "run", device="cpu") == EncoderSettings(str(tmp_path / "run"), device="cpu")
    assert EncoderSettings(tmp_path / "run").model == str(tmp_path / "run")
    changed = default.replace(pooling="mean", batch_size=8)
    assert (changed.pooling, changed.batch_size, default.pooling) == ("mean", 8, "cls")
    assert EncoderSettings("m", pretrained=tmp_path / "w.pt", cache_dir=tmp_path).pretrained == str(tmp_path / "w.pt")
    with pytest.raises(BadInput, match="^pooling 'max'"):
        default.replace(pooling="max")
    with pytest.raises(BadInput, match="^encoder 3 is not allowed") as caught:
        EncoderSettings.of(3)
    assert caught.value.param == "encoder"
    with pytest.raises(dataclasses.FrozenInstanceError):
        default.pooling = "mean"


def _command():
    @click.group(cls=Group)
    def group():
        pass

    @group.command("run")
    @click.argument("data")
    @encoder_settings
    def run(data, encoder):
        click.echo(f"{data} {dataclasses.astuple(encoder)}")

    return group


def test_the_decorator_offers_one_option_per_field_and_builds_the_object():
    group = _command()
    flags = [max(p.opts, key=len) for p in group.commands["run"].params if isinstance(p, click.Option)]
    assert flags == [f.metadata["flag"] for f in dataclasses.fields(EncoderSettings)]
    assert len(flags) == len(SETTING_NAMES) == 9
    result = CliRunner().invoke(group, ["run", "D", "--model", "hf:x", "--pretrained", "none", "--device", "cpu",
                                        "--precision", "bf16", "--batch-size", "3", "--pooling", "mean",
                                        "--context-length", "20", "--cache-dir", "C", "--no-cache"])
    assert result.exit_code == 0, result.output
    assert result.output == "D ('hf:x', 'none', 'cpu', 'bf16', 3, 'mean', 20, 'C', False)\n"
    result = CliRunner().invoke(group, ["run", "D", "--model", "m"])
    assert result.output == "D ('m', None, 'auto', 'fp32', None, 'cls', None, None, True)\n"


@pytest.mark.parametrize("args,line", [
    (["--pooling", "max"], "Error: --pooling 'max' is not allowed; use one of cls, mean"),
    (["--batch-size", "0"], "Error: --batch-size 0 is not allowed; use an integer in 1..65536 inputs per "
                            "forward pass"),
    (["--context-length", "5000"], "Error: --context-length 5000 is not allowed; use an integer in 2..4096 tokens"),
    (["--device", "tpu"], "Error: --device 'tpu' is not allowed; use auto | cpu | cuda | cuda:N"),
    (["--precision", "fp64"], "Error: --precision 'fp64' is not allowed; use one of fp32, bf16, fp16"),
])
def test_a_bad_option_is_the_settings_objects_error_line(args, line):
    result = CliRunner().invoke(_command(), ["run", "D", "--model", "m", *args])
    assert (result.exit_code, result.output) == (2, line + "\n")


def test_context_length_cuts_open_clip_and_sentence_transformers_texts():
    import open_clip
    import torch

    from bindscope.encoders.registry import load_encoder

    short, long = "a red cube", "a photo of a red cube beside a blue sphere on a wooden table"
    own = load_encoder(EncoderSettings("ViT-B-32", "none", device="cpu"))
    cut = load_encoder(EncoderSettings("ViT-B-32", "none", device="cpu", context_length=8))
    assert (own.context_length, cut.context_length) == (77, 8)
    assert cut.cache_key == own.cache_key + "|context=8"
    assert cut.truncated([short, long]) == [False, True] and own.truncated([short, long]) == [False, False]
    # by hand: the first 6 BPE tokens between the start and end tokens, zero-padded to the model's 77
    ids = open_clip.get_tokenizer("ViT-B-32")([long], context_length=8)
    assert int(ids[0, -1]) == open_clip.get_tokenizer("ViT-B-32").eot_token_id
    with torch.inference_mode():
        expected = own.model.encode_text(torch.nn.functional.pad(ids, (0, 69)), normalize=True).numpy()
    np.testing.assert_allclose(cut.encode_texts([long]), expected, atol=1e-6)
    np.testing.assert_allclose(cut.encode_texts([short]), own.encode_texts([short]), atol=1e-6)
    with pytest.raises(BadInput, match=r"^context_length 78 is not allowed for model 'ViT-B-32': its own context "
                                       r"length is 77 tokens; use 2\.\.77$"):
        load_encoder(EncoderSettings("ViT-B-32", "none", device="cpu", context_length=78))

    sbert = EncoderSettings("sentence-transformers/all-MiniLM-L6-v2", device="cpu")
    own, cut = load_encoder(sbert), load_encoder(sbert.replace(context_length=4))
    assert (own.context_length, cut.context_length, cut.model.max_seq_length) == (256, 4, 4)
    assert cut.truncated(["a cat", "a black cat"]) == [False, True]  # [CLS] a cat [SEP]: 4 word pieces
    np.testing.assert_allclose(cut.encode_texts(["a cat"]), own.encode_texts(["a cat"]), atol=1e-6)
    np.testing.assert_allclose(cut.encode_texts(["a black cat"]), own.encode_texts(["a black"]), atol=1e-6)
