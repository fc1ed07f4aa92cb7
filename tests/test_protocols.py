"""`bindscope probe` and `bindscope labclip fit` with `--protocol authors` (the LABCLIP authors' settings) beside
bindscope's: each setting applied (one SGD step checked by hand; mini-batches counted; the whole-scene hold-out; the
embeddings before normalisation; all five captions, lower-cased, with an offline tagger) and recorded."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from eval_fakes import FakeEncoder, SpecGenerator, build, hash_encoder, image, obj

from bindscope.alignment.probes import ProbeSettings, fit_linear_probe, probe_splits
from bindscope.alignment.protocols import LabclipSettings
from bindscope.alignment.splits import swap_combination
from bindscope.cli.main import bindscope
from bindscope.encoders import registry
from bindscope.encoders.interface import EncoderAdapter
from bindscope.encoders.registry import EncoderKind, register_encoder
from bindscope.format.records import Sample

DIM = 16


def test_the_protocols_settings():
    ours, theirs = ProbeSettings.of("bindscope"), ProbeSettings.of("authors")
    assert (ours.optimiser, ours.lr, ours.steps, ours.batch_size, ours.weight_decay, ours.fractions) == \
        ("adam", 0.01, 300, None, 1e-4, (0.6, 0.2, 0.2))
    assert (ours.normalise, ours.standardise, ours.early_stopping, ours.hold_out) == (True, True, True, "distractor")
    assert (theirs.optimiser, theirs.lr, theirs.steps, theirs.batch_size, theirs.weight_decay, theirs.fractions) == \
        ("sgd", 0.1, 100, 32, 0.0, (0.8, 0.1, 0.1))
    assert (theirs.normalise, theirs.standardise, theirs.early_stopping, theirs.hold_out) == \
        (False, False, False, "scene")
    assert ProbeSettings.of("authors", steps=5, lr=0.1, seed=3).overrides == ("steps",)  # lr 0.1 is the authors'
    natural, synthetic = LabclipSettings.of("authors", "shuffled"), LabclipSettings.of("authors", "stored")
    assert (natural.epochs, natural.batch_size, natural.lr, natural.init_logit_scale) == (10, 1024, 1e-3, 1.0)
    assert (natural.captions, natural.caption_text, natural.tagger) == ("all", "lower-cased", "spacy")
    assert (synthetic.epochs, synthetic.batch_size, synthetic.lr, synthetic.init_logit_scale) == (50, 128, 0.01, 1.0)
    bindscope_fit = LabclipSettings.of("bindscope", "shuffled")
    assert (bindscope_fit.epochs, bindscope_fit.batch_size, bindscope_fit.lr, bindscope_fit.captions) == \
        (20, 128, 1e-3, "first")
    assert bindscope_fit.init_logit_scale == pytest.approx(1 / 0.07)


def test_one_authors_sgd_epoch_is_one_step_by_hand():
    """Five unnormalised rows in one mini-batch, one epoch: W1 = W0 - 0.1 * (softmax(X W0^T) - Y)^T X / 5 on the raw
    inputs (no standardisation), bias 0 - 0.1 * mean(softmax - Y); the last (only) epoch kept."""
    x = np.array([[3.0, 0.0, 1.0], [0.0, 2.0, 0.5], [1.0, 1.0, 1.0], [4.0, -1.0, 0.0], [0.0, 0.0, 2.0]], np.float32)
    y = np.array([0, 1, 2, 0, 2])
    settings = ProbeSettings.of("authors", steps=1, seed=7)
    probe = fit_linear_probe(x, y, 3, x[:2], y[:2], settings)
    generator = torch.Generator().manual_seed(7)  # the documented initialisation: uniform in +-1/sqrt(D), bias 0
    w0 = torch.empty(3, 3).uniform_(-1 / math.sqrt(3), 1 / math.sqrt(3), generator=generator).numpy()
    logits = x @ w0.T
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    residual = p - np.eye(3)[y]
    np.testing.assert_allclose(probe.weight, w0 - 0.1 * residual.T @ x / 5, atol=1e-6)
    np.testing.assert_allclose(probe.bias, -0.1 * residual.mean(axis=0), atol=1e-6)
    assert (probe.mean.tolist(), probe.std.tolist(), probe.best_step) == ([0.0] * 3, [1.0] * 3, 1)


def test_mini_batches_and_optimisers_are_counted(monkeypatch):
    calls = {"Adam": 0, "SGD": 0}
    for name in calls:
        kind = getattr(torch.optim, name)
        original = kind.step

        def step(self, *args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(kind, "step", step)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(70, 4)).astype(np.float32), rng.integers(0, 2, 70)
    fit_linear_probe(x, y, 2, settings=ProbeSettings.of("authors", steps=4))
    assert calls == {"Adam": 0, "SGD": 4 * 3}  # 4 epochs of ceil(70 / 32) = 3 mini-batches
    fit_linear_probe(x, y, 2, settings=ProbeSettings.of("bindscope", steps=6))
    assert calls == {"Adam": 6, "SGD": 12}  # 6 full-batch steps


COLOURS = ["red", "blue", "green", "yellow"]


def _scenes():
    """Two digits (categories 1..4) with colours; every (pair of digits, pair of colours) once with both
    arrangements of the colours: 6 x 6 x 2 = 72 scenes."""
    samples = []
    for a in range(1, 5):
        for b in range(a + 1, 5):
            for c in range(4):
                for d in range(c + 1, 4):
                    for first, second in ((COLOURS[c], COLOURS[d]), (COLOURS[d], COLOURS[c])):
                        objects = [obj(1, str(a), {"colour": first}, 1, 1), obj(2, str(b), {"colour": second}, 2, 2)]
                        samples.append(Sample(len(samples), image(len(samples) + 1), np.zeros((8, 8), np.uint8),
                                              f"{first} {a} and {second} {b}", objects, [], {}))
    return samples


class ScaledEncoder(EncoderAdapter):
    """Embeddings from sha256 of the input; before normalisation each row has norm 1 + (first digest byte % 4)."""

    can_unnormalise = True

    def __init__(self):
        self.name, self.pretrained, self.embed_dim, self.cache_key = "scaled", "hash", DIM, "scaled"

    def _rows(self, items):
        out = []
        for data in items:
            digest = hashlib.sha256(data).digest()
            v = np.random.default_rng(int.from_bytes(digest[:8], "little")).normal(size=DIM)
            out.append(v / np.linalg.norm(v) * (1.0 if self.normalised else 1 + digest[0] % 4))
        return np.asarray(out, np.float32)

    def encode_texts(self, texts):
        return self._rows([t.encode() for t in texts])

    def encode_images(self, images):
        return self._rows([np.ascontiguousarray(im).tobytes() for im in images])


@pytest.fixture()
def models():
    kinds = [register_encoder(EncoderKind("scaled:", lambda m: m.startswith("scaled:"),
                                          lambda m, p, **o: ScaledEncoder())),
             register_encoder(EncoderKind("unit:", lambda m: m.startswith("unit:"),
                                          lambda m, p, **o: FakeEncoder(DIM, text_rule=lambda t: np.eye(DIM)[0])))]
    yield
    for kind in kinds:
        registry._REGISTERED.remove(kind)


def test_probe_with_the_authors_protocol_end_to_end(tmp_path, models):
    from bindscope.alignment.data import load_table
    from bindscope.format.reader import Dataset

    data = build(tmp_path, "scenes", SpecGenerator({"test": _scenes()}, attribute_names=["colour"]))
    out = tmp_path / "probe.json"
    r = CliRunner().invoke(bindscope, ["probe", data, "--model", "scaled:x", "--protocol", "authors", "--no-cache",
                                       "--quiet", "--out", str(out)])
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    settings = result["settings"]
    assert {k: settings[k] for k in ("protocol", "optimiser", "lr", "steps", "batch_size", "weight_decay",
                                     "normalise", "standardise", "early_stopping", "hold_out_key", "fractions",
                                     "overrides")} == {
        "protocol": "authors", "optimiser": "sgd", "lr": 0.1, "steps": 100, "batch_size": 32, "weight_decay": 0.0,
        "normalise": False, "standardise": False, "early_stopping": False, "hold_out_key": "scene",
        "fractions": [0.8, 0.1, 0.1], "overrides": []}
    assert settings["schedule"] == "100 epochs of shuffled mini-batches of 32"
    assert settings["inputs"] == "before L2 normalisation" and settings["selection"] == "last step"
    assert result["model"]["cache_key"] == "scaled|unnormalised"
    assert "protocol authors: sgd lr 0.1, 100 epochs of shuffled mini-batches of 32" in r.output
    # the whole scene is held out with its attribute-swapped twin: no key in two splits, twins together
    table = load_table(Dataset(data), "test", build_swaps=False)
    splits = probe_splits(table, "colour", (0.8, 0.1, 0.1), 0, "scene")
    assert result["metrics"]["splits"]["colour"] == {c: {name: sum(v == s for v in per.values())
                                                         for s, name in enumerate(("train", "val", "test"))}
                                                     for c, per in splits.items()}
    for per in splits.values():
        parts: dict = {}
        for sample, part in per.items():
            parts.setdefault(swap_combination(table.objects[sample], "colour"), set()).add(part)
        assert all(len(v) == 1 for v in parts.values())
        assert sum(len(v) for v in parts.values()) == len(parts) == 3 * 6  # each key: a scene and its twin
    # overrides are recorded; bindscope's protocol is the default
    r = CliRunner().invoke(bindscope, ["probe", data, "--model", "scaled:x", "--protocol", "authors", "--steps", "5",
                                       "--lr", "0.05", "--no-cache", "--quiet", "--out", str(tmp_path / "o.json")])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "o.json").read_text())["settings"]["overrides"] == ["lr", "steps"]
    r = CliRunner().invoke(bindscope, ["probe", data, "--model", "scaled:x", "--steps", "5", "--no-cache", "--quiet",
                                       "--out", str(tmp_path / "b.json")])
    assert r.exit_code == 0, r.output
    ours = json.loads((tmp_path / "b.json").read_text())
    assert (ours["settings"]["protocol"], ours["settings"]["optimiser"], ours["model"]["cache_key"]) == \
        ("bindscope", "adam", "scaled")
    # an encoder that gives only normalised embeddings cannot serve the authors' protocol
    r = CliRunner().invoke(bindscope, ["probe", data, "--model", "unit:x", "--protocol", "authors", "--no-cache",
                                       "--out", str(tmp_path / "u.json")])
    assert r.exit_code == 2 and "gives only L2-normalised embeddings" in r.output
    assert not (tmp_path / "u.json").exists()


@pytest.fixture()
def coco(tmp_path):
    from coco_fixture import ANNOTATIONS, CAPTIONS, IMAGES, write_coco
    from test_labclip_natural import EXTRA_ANNOTATIONS, EXTRA_CAPTIONS, EXTRA_IMAGES

    from bindscope.importers.coco import import_coco

    files = write_coco(tmp_path / "src", images=IMAGES + EXTRA_IMAGES, annotations=ANNOTATIONS + EXTRA_ANNOTATIONS,
                       captions=CAPTIONS + EXTRA_CAPTIONS)
    import_coco(*files, tmp_path / "coco", image_size=32, progress=False)
    return tmp_path / "coco"


@pytest.fixture()
def no_spacy_model(monkeypatch):
    import spacy

    from bindscope.text import negatives

    def load(name, **options):
        raise OSError(f"[E050] Can't find model '{name}'.")

    negatives.spacy_pipeline.cache_clear()
    monkeypatch.setattr(spacy, "load", load)
    yield
    negatives.spacy_pipeline.cache_clear()


def test_labclip_fit_with_the_authors_protocol_on_coco(coco, tmp_path, no_spacy_model):
    from bindscope.alignment.data import labclip_table
    from bindscope.alignment.labclip import load_labclip
    from bindscope.format.reader import Dataset
    from bindscope.text.negatives import aro_caption

    kind = register_encoder(EncoderKind("handset:", lambda m: m.startswith("handset:"),
                                        lambda m, p, **o: hash_encoder(DIM)))
    try:
        path = tmp_path / "authors.pt"
        r = CliRunner().invoke(bindscope, ["labclip", "fit", str(coco), "--model", "handset:x", "--protocol",
                                           "authors", "--holdout-fraction", "0.3", "--no-cache", "--quiet", "--out",
                                           str(path)])
        assert r.exit_code == 0, r.output
        meta = load_labclip(path).meta
        settings = meta["settings"]
        assert (meta["protocol"], settings["epochs"], settings["batch_size"], settings["lr"],
                settings["init_logit_scale"], settings["captions"], settings["caption_text"]) == \
            ("authors", 10, 1024, 1e-3, 1.0, "all", "lower-cased")
        # the values the fit itself ran with: 10 epochs (11 losses, the identity's first), the temperature from 1
        assert (meta["epochs"], meta["batch_size"], meta["init_logit_scale"], len(meta["loss_history"])) == \
            (10, 1024, 1.0, 11)
        # spaCy's English model is missing here: the word-list tagger, recorded
        assert meta["tagger"] == "lexicon" and settings["tagger"] == "lexicon"
        assert "'en_core_web_sm' is not installed" in settings["tagger_fallback"]
        assert "note: spaCy model 'en_core_web_sm' is not installed" in r.output
        # every caption of an image, lower-cased: 10 captions of 6 images; 8 of them have two different nouns or
        # adjectives (not "two people standing outside", "a scenic view"); 2 of the 6 images held out whole
        table, _ = labclip_table(Dataset(coco), "val2017", "shuffled", "lexicon", 0, "all", "lower-cased")
        assert len(table) == 10 and table.captions[:4] == [aro_caption(c) for c in (
            "A man with his dog.", "A dog and a woman on a sofa.", "Two people standing outside.", "A scenic view.")]
        assert table.captions[:2] == ["a man with his dog", "a dog and a woman on a sofa"]
        rows = [i for i in range(len(table)) if table.negatives[i]]
        assert len(rows) == 8 and meta["n_fit_samples"] + meta["n_held_out_samples"] == 8
        assert meta["n_fit_images"] == 4
        held = {table.sample(i) for i in meta["held_out_samples"]}
        assert len(held) == 2 and {i for i in rows if table.sample(i) in held} == set(meta["held_out_samples"])
        report = tmp_path / "eval.json"
        r = CliRunner().invoke(bindscope, ["labclip", "eval", str(coco), "--model", "handset:x", "--labclip", str(path),
                                           "--no-cache", "--quiet", "--out", str(report)])
        assert r.exit_code == 0, r.output
        metrics = json.loads(report.read_text())["metrics"]
        assert metrics["n_eval_samples"] == meta["n_held_out_samples"]
        assert metrics["fit_samples"]["n_samples"] == meta["n_fit_samples"]
    finally:
        registry._REGISTERED.remove(kind)


def test_encoders_give_their_embeddings_before_normalisation(tmp_path):
    """open_clip (a tiny config, random weights) and a tiny transformers CLIPModel: the unnormalised copy's rows are
    the model's embeddings, whose L2 normalisation is what the adapter gives; the cache keys differ."""
    from test_hf_vision_language import save_tiny

    from bindscope.encoders.interface import l2_normalise
    from bindscope.encoders.registry import load_adapter

    config = tmp_path / "bs-peers-tiny.json"
    config.write_text(json.dumps({"embed_dim": 16, "vision_cfg": {"image_size": 32, "layers": 1, "width": 32,
                                                                   "head_width": 32, "patch_size": 8},
                                  "text_cfg": {"context_length": 32, "width": 32, "heads": 1, "layers": 1}}))
    images = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    texts = ["a red 7 and a blue 4", "a cat"]
    for adapter in (load_adapter(str(config), pretrained="none", device="cpu"),
                    load_adapter(f"hf-vlm:{save_tiny(tmp_path / 'clip', 'clip')}", device="cpu")):
        raw = adapter.unnormalised()
        assert raw.cache_key == adapter.cache_key + "|unnormalised" and adapter.normalised and not raw.normalised
        for encode in ("encode_texts", "encode_images"):
            inputs = texts if encode == "encode_texts" else images
            before, after = getattr(raw, encode)(inputs), getattr(adapter, encode)(inputs)
            assert not np.allclose(np.linalg.norm(before, axis=1), 1.0, atol=1e-3)
            np.testing.assert_allclose(l2_normalise(before), after, atol=1e-6)
