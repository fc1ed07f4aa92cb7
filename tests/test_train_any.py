"""bindscope train on datasets other than MADMAN: a 64-pixel SimCO render with attributes (real Cycles, tiny) and a
COCO import of the fixture in the published layout; --negatives stored|shuffled|none; evaluation during training
through the evaluation module; resume equality."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from cli_support import snapshot
from click.testing import CliRunner
from coco_fixture import write_coco
from comco_support import render_cli

import bindscope
from bindscope.cli.main import bindscope as bindscope_cli
from bindscope.cli.main import comco, madman
from bindscope.errors import BadInput
from bindscope.importers.coco import import_coco
from bindscope.text.negatives import split_words
from bindscope.training.batches import BatchSource
from bindscope.training.config import TrainConfig
from bindscope.training.data import load_split
from bindscope.training.model import ModelConfig
from bindscope.training.train import Trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = ["--embed-dim", "16", "--vision-width", "32", "--vision-layers", "1", "--patch-size", "16",
         "--text-width", "32", "--text-layers", "1", "--head-width", "32", "--tokenizer", "word",
         "--device", "cpu", "--threads", "1", "--quiet"]
SMALL_OPTIONS = dict(embed_dim=16, vision_width=32, vision_layers=1, patch_size=8, text_width=32, text_layers=1,
                     head_width=32, tokenizer="word", device="cpu", threads=1)
RUN_FILES = {".bindscope.json", "run.json", "vocab.json", "checkpoint.pt", "model.pt", "log.jsonl", "result.json",
             "result.samples.jsonl"}


@pytest.fixture(scope="module")
def simco(tmp_path_factory):
    """A real SimCO render: 8 scenes of 2-3 shapes at 64 px with colour and material (stored binding negatives),
    and the 18 single-shape reference images."""
    pytest.importorskip("bpy")
    return render_cli(tmp_path_factory.mktemp("simco"), {"visibility": {"min_pixels": 6}, "shard_size": 4,
                                                         "denoise": False},
                      ["render", "--set", "simco18", "--objects", "2-3", "-n", "8", "--resolution", "64",
                       "--samples", "1", "--seed", "1", "--device", "cpu", "--quiet", "--attributes",
                       "colour,material"])


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    """The COCO fixture (3 images, 7 captions) imported at 40 px: one split, val2017, no stored negatives."""
    root = tmp_path_factory.mktemp("coco")
    import_coco(*write_coco(root / "src"), root / "coco", image_size=40, progress=False)
    return root / "coco"


def _log(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


@pytest.mark.blender
def test_bindscope_train_on_simco_64px_evaluates_like_comco_eval(simco, tmp_path):
    run = tmp_path / "run"
    args = ["train", str(simco), "--out", str(run), "--negatives", "stored", "--negatives-per-sample", "2",
            "--batch-size", "4", "--steps", "4", "--warmup", "1", "--eval-every", "2", "--log-every", "1", *SMALL]
    first = CliRunner().invoke(bindscope_cli, args)
    assert first.exit_code == 0, first.output
    assert "TOR" in first.output and "steps/s" in first.output
    assert {p.name for p in run.iterdir()} == RUN_FILES
    config = json.loads((run / "run.json").read_text())["config"]
    assert config["split"] == "scenes" and config["model"]["image_size"] == 64  # the render's size
    assert config["eval_splits"] == ["scenes"] and config["eval_tasks"] == ["tor", "ior", "i2tor", "matching",
                                                                            "binding"]
    log = _log(run)
    losses = [r["loss"] for r in log if "loss" in r]
    assert len(losses) == 4 and all(math.isfinite(v) for v in losses)
    evals = [r for r in log if "eval" in r]
    assert [r["step"] for r in evals] == [2, 4]
    assert set(evals[-1]["eval"]) == {"tor", "ior", "i2tor", "matching", "binding"}
    assert set(evals[-1]["eval"]["matching"]) == {"scenario_1", "scenario_2"}
    result = json.loads((run / "result.json").read_text())
    assert result["kind"] == "comco-eval" and result["dataset"]["splits"] == ["scenes", "references"]
    # The result is the one `comco eval` gives for the run's model.
    out = tmp_path / "eval.json"
    evaluated = CliRunner().invoke(comco, ["eval", str(simco), "--model", str(run / "model.pt"), "--device", "cpu",
                                           "--no-cache", "--out", str(out), "--quiet"])
    assert evaluated.exit_code == 0, evaluated.output
    assert json.loads(out.read_text())["metrics"] == result["metrics"]
    assert evals[-1]["eval"]["matching"]["scenario_1"] == result["metrics"]["matching"]["scenario_1"]["all"][
        "accuracy"]
    # `madman train` is the same call: the same command there finds the finished run and only prints its result.
    again = CliRunner().invoke(madman, args)
    assert again.exit_code == 0 and "steps/s" not in again.output and "TOR" in again.output, again.output


def test_train_on_a_coco_import_with_shuffled_negatives(coco, tmp_path):
    summary = bindscope.train(coco, tmp_path / "run", negatives="shuffled", steps=3, batch_size=2, warmup_steps=1,
                              log_every=1, progress=False, **SMALL_OPTIONS)
    run = tmp_path / "run"
    assert {p.name for p in run.iterdir()} == RUN_FILES
    assert summary["steps"] == 3 and math.isfinite(summary["final_loss"])
    config = json.loads((run / "run.json").read_text())["config"]
    assert config["split"] == "val2017" and config["model"]["image_size"] == 40
    # The word vocabulary: the words of the three first captions, the full stop split off ("dog." is "dog").
    assert config["model"]["vocabulary"] == [".", "a", "car", "couch", "dog", "his", "kitten", "man", "near", "next",
                                             "on", "parked", "person", "sits", "sitting", "to", "with"]
    result = summary["result"]
    assert result["kind"] == "comco-eval" and list(result["metrics"]) == ["tor", "i2tor", "matching"]
    assert _log(run)[-1]["eval"]["tor"] == {
        count: [p["unconditional"]["share"] for p in group["positions"]]
        for count, group in result["metrics"]["tor"]["by_num_objects"].items()}


WORDS_MODEL = ModelConfig(embed_dim=16, image_size=32, vision_width=32, vision_layers=1, text_width=32, text_layers=1,
                          head_width=32, tokenizer="word", vocabulary=("a",))


def test_shuffled_negatives_of_coco_captions_swap_their_nouns(coco):
    model = WORDS_MODEL
    data = load_split(coco, None)
    assert data.lexicon.nouns == ("car", "cat", "couch", "dog", "kitten", "man", "person")  # names, COCO phrases
    assert data.lexicon.adjectives == ()  # COCO's supercategory is not said in its captions
    batch = BatchSource(data, 3, seed=0, model=model, hard_negatives=1, mode="shuffled")[0]
    made = {data.captions[int(batch["indices"][o])]: text for o, text in zip(batch["negative_of"], batch["negatives"])}
    # Two nouns have one other order; three have five, each keeping the words.
    assert made["A man with his dog."] == "A dog with his man."
    assert made["A kitten sitting next to a parked car."] == "A car sitting next to a parked kitten."
    third = made["A person sits on a couch near a dog."]
    assert third != "A person sits on a couch near a dog." and third.startswith("A ") and third.endswith(".")
    assert sorted(third[:-1].split()) == sorted("A person sits on a couch near a dog".split())
    assert batch["texts"].shape == (6, model.context_length)


@pytest.mark.blender
def test_shuffled_negatives_of_simco_captions_differ_and_keep_their_words(simco):
    from bindscope.format.reader import Dataset

    model = WORDS_MODEL
    scenes = load_split(simco, None)
    with Dataset(simco) as ds:
        objects = [o for sample in ds.split("scenes") for o in sample.objects]
    assert set(scenes.lexicon.nouns) == {o.category for o in objects}
    assert set(scenes.lexicon.adjectives) == {o.attributes[a] for o in objects for a in ("colour", "material")}
    source = BatchSource(scenes, 4, seed=5, model=model, hard_negatives=3, mode="shuffled")
    for step in range(4):
        batch = source[step]
        assert len(batch["negatives"]) == len(batch["negative_of"]) > 0
        for owner, text in zip(batch["negative_of"].tolist(), batch["negatives"]):
            caption = scenes.captions[int(batch["indices"][owner])]
            assert text != caption
            assert sorted(text[a:b] for a, b in split_words(text)) == \
                   sorted(caption[a:b] for a, b in split_words(caption))
            assert text.count(" and ") == caption.count(" and ")  # nouns and attribute words move, nothing else
        per_sample = [batch["negatives"][k] for k, o in enumerate(batch["negative_of"].tolist()) if o == 0]
        assert len(set(per_sample)) == len(per_sample) <= 3
    # Seeded by (seed, step, sample): a fresh source gives the same texts; another seed other texts.
    again = BatchSource(scenes, 4, seed=5, model=model, hard_negatives=3, mode="shuffled")
    assert again[2]["negatives"] == source[2]["negatives"]
    assert torch.equal(again[2]["texts"], source[2]["texts"])
    other = BatchSource(scenes, 4, seed=6, model=model, hard_negatives=3, mode="shuffled")
    assert [other[s]["negatives"] for s in range(4)] != [source[s]["negatives"] for s in range(4)]


@pytest.mark.parametrize("options, message, param", [
    (dict(negatives="stored"), r"negatives 'stored': split 'val2017' of '.*coco' \(coco\) stores no binding "
                               r"negatives .*; use negatives='shuffled' \(made from the captions\) or 'none'",
     "negatives"),
    (dict(split="train"), r"split 'train': '.*coco' has no such split; it has: val2017", "split"),
    (dict(eval_tasks="tor,nonsense"), r"eval_tasks 'tor,nonsense': unknown task 'nonsense'", "eval_tasks"),
    (dict(eval_splits=["val2017", "val2017"]), r"eval_splits 'val2017, val2017': data '.*coco' is evaluated on "
                                               r"one split of scenes; give one", "eval_splits"),
    (dict(negatives="swapped"), r"negatives 'swapped' is not known; allowed: none, stored, shuffled", "negatives"),
])
def test_bad_choices_are_refused_before_anything_is_written(coco, tmp_path, options, message, param):
    before = snapshot(coco)
    with pytest.raises(BadInput, match=message) as caught:
        bindscope.train(coco, tmp_path / "run", steps=1, batch_size=2, progress=False,
                        **{**SMALL_OPTIONS, **options})
    assert caught.value.param == param
    assert not (tmp_path / "run").exists() and snapshot(coco) == before


@pytest.mark.blender
def test_resume_on_simco_with_shuffled_negatives_equals_an_uninterrupted_run(simco, tmp_path):
    model = ModelConfig(embed_dim=16, image_size=64, patch_size=16, vision_width=32, vision_layers=1,
                        text_width=32, text_layers=1, head_width=32, tokenizer="word")

    def config(out):
        return TrainConfig(data=str(simco), out=str(out), model=model, batch_size=4, steps=6, lr=2e-3,
                           warmup_steps=1, negatives="shuffled", negatives_per_sample=2, checkpoint_every=3,
                           log_every=1, eval_tasks=["tor"], device="cpu")

    full = {}
    Trainer(config(tmp_path / "full"), progress=False).run(callback=lambda t, loss: full.__setitem__(t.step, loss))

    def interrupt(trainer, loss):
        if trainer.step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Trainer(config(tmp_path / "cut"), progress=False).run(callback=interrupt)
    resumed = Trainer(config(tmp_path / "cut"), progress=False)
    assert resumed.resumed and resumed.step == 3
    rest = {}
    resumed.run(callback=lambda t, loss: rest.__setitem__(t.step, loss))
    assert rest == {step: full[step] for step in (4, 5, 6)}  # the same floats
    ours = torch.load(tmp_path / "cut" / "model.pt", weights_only=True)["model"]
    theirs = torch.load(tmp_path / "full" / "model.pt", weights_only=True)["model"]
    assert all(torch.equal(ours[name], theirs[name]) for name in theirs)
    assert json.loads((tmp_path / "cut" / "result.json").read_text())["metrics"] == \
           json.loads((tmp_path / "full" / "result.json").read_text())["metrics"]


@pytest.mark.blender
def test_train_on_coco_and_evaluate_on_simco(coco, simco, tmp_path):
    summary = bindscope.train(coco, tmp_path / "run", eval_data=simco, eval_tasks="tor,binding", steps=2,
                              batch_size=3, warmup_steps=1, progress=False, **SMALL_OPTIONS)
    result = summary["result"]
    assert result["dataset"]["generator"] == "comco" and list(result["metrics"]) == ["tor", "binding"]
    assert summary["result"]["model"]["pretrained"] == str(tmp_path / "run" / "model.pt")


def test_madman_lexicon_and_shuffled_negatives(tmp_path):
    from tiny_madman import tiny_madman

    from bindscope.build.builder import build_dataset
    from bindscope.format.reader import Dataset

    build_dataset(tiny_madman(splits={"train": 24, "test": 4, "ood": 2}), tmp_path / "madman", progress=False)
    data = load_split(tmp_path / "madman")
    with Dataset(tmp_path / "madman") as ds:
        objects = [o for sample in ds.split("train") for o in sample.objects]
        names = ds.attribute_names
    assert set(data.lexicon.nouns) == {o.category for o in objects} and set(data.lexicon.nouns) <= set("0123456789")
    assert set(data.lexicon.adjectives) == {o.attributes[a] for o in objects for a in names}
    source = BatchSource(data, 8, seed=1, model=WORDS_MODEL, hard_negatives=1, mode="shuffled")
    made = 0
    for step in range(3):
        batch = source[step]
        for owner, text in zip(batch["negative_of"].tolist(), batch["negatives"]):
            caption = data.captions[int(batch["indices"][owner])]
            assert text != caption and sorted(text.split()) == sorted(caption.split())  # "tilted-left" is one word
            made += 1
    assert made > 0
