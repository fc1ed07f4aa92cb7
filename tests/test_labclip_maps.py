"""Crafted LABCLIP map files: each is refused with BadInput naming the file and the problem, before a map is made
from it, never a traceback and never code run from the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from bindscope.alignment import labclip as labclip_module
from bindscope.alignment.labclip import LabclipMap, load_labclip
from bindscope.errors import BadInput


def _fitted() -> LabclipMap:
    rng = np.random.default_rng(0)
    weight = (np.eye(8) + 0.01 * rng.standard_normal((8, 8))).astype(np.float32)
    return LabclipMap(weight, 42.5, {"model": "synthetic", "embed_dim": 8, "split": "test", "holdout": 0.1,
                                     "held_out": [["7", "colour", "red"]], "loss_history": [1.5, 0.75],
                                     "caption_attributes": []})


@pytest.fixture()
def payload(tmp_path) -> dict:
    path = tmp_path / "good.pt"
    _fitted().save(path)
    return torch.load(path, weights_only=True)


def test_a_sound_map_round_trips(tmp_path):
    path = tmp_path / "map.pt"
    fitted = _fitted()
    fitted.save(path)
    loaded = load_labclip(path)
    assert np.array_equal(loaded.weight, fitted.weight) and loaded.weight.dtype == np.float32
    assert loaded.logit_scale == 42.5 and loaded.meta["held_out"] == [["7", "colour", "red"]]
    assert loaded.meta["path"] == str(path) and loaded.dim == 8


class Payload:
    """Unpickling this would create the file ``marker``: a stand-in for code a crafted pickle runs."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def _set(key, value):
    def edit(payload):
        payload[key] = value
    return edit


def _meta(key, value):
    def edit(payload):
        payload["meta"][key] = value
    return edit


def _nan(payload):
    weight = payload["weight"].clone()
    weight[3, 4] = float("nan")
    payload["weight"] = weight


CASES = {
    "not square": (_set("weight", torch.zeros(8, 4)), "weight has shape (8, 4), expected (D, D) with 1 <= D <= 16384"),
    "three dimensions": (_set("weight", torch.zeros(2, 2, 2)), "weight has shape (2, 2, 2)"),
    "empty": (_set("weight", torch.zeros(0, 0)), "weight has shape (0, 0)"),
    "float64": (_set("weight", torch.zeros(8, 8, dtype=torch.float64)), "expected a dense float32 one"),
    "integers": (_set("weight", torch.zeros(8, 8, dtype=torch.int64)), "expected a dense float32 one"),
    "NaN": (_nan, "weight holds NaN or infinite values"),
    "weight a list": (_set("weight", [[1.0, 0.0], [0.0, 1.0]]), "weight is a list, not a tensor"),
    "NaN temperature": (_set("logit_scale", float("nan")), "logit_scale nan is not a number in (0, 100]"),
    "huge temperature": (_set("logit_scale", 1e9), "logit_scale 1000000000.0 is not a number in (0, 100]"),
    "tensor temperature": (_set("logit_scale", torch.tensor(5.0)), "logit_scale tensor(5.) is not a number"),
    "future version": (_set("format_version", 2), "has format version 2; this bindscope reads version 1"),
    "extra entry": (_set("bias", torch.zeros(8)), "has unexpected entries 'bias'"),
    "meta not a mapping": (_set("meta", [1, 2]), "meta is a list, not a mapping"),
    "tensor in meta": (_meta("loss_history", torch.zeros(3)), "meta.loss_history is a Tensor, not a plain value"),
    "NaN in meta": (_meta("loss_history", [1.0, float("inf")]), "meta.loss_history[1] holds the non-finite number inf"),
    "split not a text": (_meta("split", ["test"]), "meta.split is ['test'], not a text"),
    "held-out not triples": (_meta("held_out", [[1, 2]]), "meta.held_out is not a list of [category, attribute, "),
    "held-out unhashable": (_meta("held_out", [["7", "colour", ["red"]]]), "meta.held_out is not a list of"),
    "embed_dim elsewhere": (_meta("embed_dim", 512), "meta.embed_dim 512 differs from the weight's dimension 8"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_crafted_map_is_refused(payload, tmp_path, case):
    edit, message = CASES[case]
    payload = {**payload, "meta": dict(payload["meta"])}
    edit(payload)
    path = tmp_path / "map.pt"
    torch.save(payload, path)
    with pytest.raises(BadInput) as info:
        load_labclip(path)
    assert str(info.value).startswith(f"LABCLIP map {str(path)!r}: "), str(info.value)
    assert message in str(info.value)


def test_a_pickle_payload_map_is_refused_unrun(payload, tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "map.pt"
    torch.save({**payload, "meta": {"model": Payload(marker)}}, path)
    refused = r"holds objects other than tensors and plain values \(.+\), refused unread"
    with pytest.raises(BadInput, match=refused) as info:
        load_labclip(path)
    assert "weights_only" not in str(info.value)
    assert not marker.exists()


def test_another_format_and_oversized_files_are_refused(payload, tmp_path, monkeypatch):
    path = tmp_path / "map.pt"
    torch.save({**payload, "format": "bindscope-small-clip"}, path)
    with pytest.raises(BadInput, match="is not a LABCLIP map written by `bindscope labclip fit`"):
        load_labclip(path)
    torch.save(payload, path)
    monkeypatch.setattr(labclip_module, "MAX_MAP_BYTES", 100)
    with pytest.raises(BadInput, match=rf"is {path.stat().st_size} bytes; a map is at most 100 bytes"):
        load_labclip(path)


def test_the_cli_reports_a_crafted_map_in_one_line(payload, tmp_path):
    from click.testing import CliRunner

    from bindscope.cli.main import bindscope

    path = tmp_path / "map.pt"
    torch.save({**payload, "weight": torch.zeros(8, 3)}, path)
    result = CliRunner().invoke(bindscope, ["labclip", "eval", str(tmp_path), "--model", "ViT-B-32", "--pretrained",
                                            "none", "--labclip", str(path), "--out", str(tmp_path / "r.json")])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"Error: LABCLIP map {str(path)!r}: weight has shape (8, 3)"), \
        result.output
    assert not (tmp_path / "r.json").exists()
