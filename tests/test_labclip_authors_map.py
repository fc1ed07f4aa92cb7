"""LABCLIP maps in the format the LABCLIP authors' code writes (``torch.save`` of their alignment module's state dict:
``linear.weight`` and the log-temperature ``t``): converted on load, checked like bindscope's own maps, and giving
the same transformed embeddings as the equivalent bindscope map."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from bindscope.alignment.labclip import LabclipMap, check_dimension, load_labclip
from bindscope.cli.main import bindscope
from bindscope.errors import BadInput

DIM = 8


class AuthorsAlignment(torch.nn.Module):
    """A module with the authors' state dict layout: a bias-free D x D linear map and a scalar log-temperature."""

    def __init__(self, weight: torch.Tensor, t: float):
        super().__init__()
        self.linear = torch.nn.Linear(DIM, DIM, bias=False)
        self.linear.weight.data = weight.clone()
        self.t = torch.nn.Parameter(torch.tensor(t))


def _weight() -> torch.Tensor:
    return torch.eye(DIM) + 0.1 * torch.from_numpy(np.random.default_rng(0).standard_normal((DIM, DIM))).float()


def _authors_file(tmp_path, state=None):
    path = tmp_path / "labclip_coco_neg_B32.pt"
    torch.save(state if state is not None else AuthorsAlignment(_weight(), 0.5).state_dict(), path)
    return path


def test_the_authors_map_gives_the_bindscope_maps_embeddings(tmp_path):
    path = _authors_file(tmp_path)
    loaded = torch.load(path, weights_only=True)
    assert sorted(loaded) == ["linear.weight", "t"]  # what the authors' torch.save of state_dict() holds
    authors = load_labclip(path)
    assert np.array_equal(authors.weight, _weight().numpy()) and authors.weight.dtype == np.float32
    assert authors.logit_scale == pytest.approx(math.exp(0.5))
    assert authors.meta["embed_dim"] == DIM and authors.name == "LABCLIP(labclip_coco_neg_B32.pt)"
    LabclipMap(_weight().numpy(), math.exp(0.5)).save(tmp_path / "bindscope.pt")
    ours = load_labclip(tmp_path / "bindscope.pt")
    texts = np.random.default_rng(1).standard_normal((5, DIM)).astype(np.float32)
    texts /= np.linalg.norm(texts, axis=1, keepdims=True)
    assert np.array_equal(authors(texts), ours(texts))
    # and what the authors' module computes: normalise(linear(t))
    with torch.no_grad():
        mapped = torch.nn.functional.normalize(torch.from_numpy(texts) @ _weight().T, dim=-1).numpy()
    np.testing.assert_allclose(authors(texts), mapped, atol=1e-6)
    # the command line applies it as it applies bindscope's maps
    np.save(tmp_path / "texts.npy", texts)
    r = CliRunner().invoke(bindscope, ["labclip", "apply", str(tmp_path / "texts.npy"), "--labclip", str(path),
                                       "--out", str(tmp_path / "mapped.npy")])
    assert r.exit_code == 0, r.output
    assert np.array_equal(np.load(tmp_path / "mapped.npy"), ours(texts))


class _Adapter:
    name, embed_dim = "ViT-B-16", 16


def _nan_weight():
    weight = _weight()
    weight[2, 3] = float("nan")
    return weight


AUTHORS_CASES = {
    "float16 weight": ({"linear.weight": _weight().half(), "t": torch.tensor(0.0)},
                       "linear.weight is a torch.strided torch.float16 tensor; expected a dense float32 one"),
    "not square": ({"linear.weight": torch.zeros(DIM, 4), "t": torch.tensor(0.0)}, "linear.weight has shape (8, 4)"),
    "NaN weight": ({"linear.weight": _nan_weight(), "t": torch.tensor(0.0)}, "linear.weight holds NaN or infinite"),
    "NaN temperature": ({"linear.weight": _weight(), "t": torch.tensor(float("nan"))}, "t = nan: exp(t)"),
    "temperature a vector": ({"linear.weight": _weight(), "t": torch.zeros(2)}, "not a one-number float tensor"),
    "no temperature": ({"linear.weight": _weight()}, "it has no t"),
    "extra entry": ({"linear.weight": _weight(), "t": torch.tensor(0.0), "linear.bias": torch.zeros(DIM)},
                    "unexpected entries 'linear.bias'"),
    "fine-tuned model": ({"linear.weight": _weight(), "t": torch.tensor(0.0), "model.logit_scale": torch.tensor(1.0)},
                         "the LABCLIP authors' fine-tuning variant"),
}


@pytest.mark.parametrize("case", sorted(AUTHORS_CASES))
def test_a_crafted_authors_map_is_refused(tmp_path, case):
    state, message = AUTHORS_CASES[case]
    path = _authors_file(tmp_path, state)
    with pytest.raises(BadInput) as info:
        load_labclip(path)
    assert str(info.value).startswith(f"LABCLIP map {str(path)!r}: "), str(info.value)
    assert message in str(info.value)


def test_an_authors_map_of_another_dimension_is_refused_for_the_encoder(tmp_path):
    authors = load_labclip(_authors_file(tmp_path))
    with pytest.raises(BadInput, match="LABCLIP map is 8-dimensional .*model 'ViT-B-16' gives 16-dimensional"):
        check_dimension(authors, _Adapter())
