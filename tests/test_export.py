"""``bindscope export webdataset`` and ``bindscope export open-clip-config``: WebDataset shards equal to the
source, byte-identical and resumable; open_clip model configs that build the architecture of ``madman train``;
and the round trip through ``open_clip_train`` and ``madman eval``."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image
from tiny_madman import tiny_madman

from bindscope.build.builder import build_dataset
from bindscope.cli.main import bindscope, madman
from bindscope.errors import BadInput
from bindscope.format.reader import Dataset
from bindscope.publish import webdataset as wds_export
from bindscope.publish.webdataset import export_webdataset

EXTENSIONS = ("json", "mask.png", "png", "txt")


def _cli(group, *args):
    result = CliRunner().invoke(group, [str(a) for a in args])
    return result.exit_code, result.output


def _files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.is_file()}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A real MADMAN dataset of 32 x 32 images: train 64 (two source shards), test 16, ood 8."""
    out = tmp_path_factory.mktemp("madman") / "data"
    build_dataset(tiny_madman({"train": 64, "test": 16, "ood": 8}, shard_size=32, image_size=32), out,
                  progress=False)
    return out


@pytest.fixture(scope="module")
def exported(data, tmp_path_factory):
    """``bindscope export webdataset DATA --samples-per-shard 24``: three shards (24, 24, 16)."""
    out = tmp_path_factory.mktemp("wds") / "train"
    code, output = _cli(bindscope, "export", "webdataset", data, "--out", out, "--samples-per-shard", 24,
                        "--quiet")
    assert code == 0, output
    assert "64 samples of split 'train' in 3 shard(s) (3 written, 0 kept)" in output
    assert f"--train-data '{out}/train-{{000000..000002}}.tar' --train-num-samples 64" in output
    return out


# ------------------------------------------------------------------------------------------- webdataset


def test_the_export_folder_holds_exactly_the_shards_sizes_and_manifest(exported):
    assert sorted(p.name for p in exported.iterdir()) == [
        ".bindscope.json", "sizes.json", "train-000000.tar", "train-000001.tar", "train-000002.tar",
        "webdataset.json"]
    assert json.loads((exported / "sizes.json").read_text()) == {
        "train-000000.tar": 24, "train-000001.tar": 24, "train-000002.tar": 16}
    manifest = json.loads((exported / "webdataset.json").read_text())
    assert manifest["format"] == "bindscope-webdataset" and manifest["num_samples"] == 64
    assert manifest["samples_per_shard"] == 24 and manifest["train_data"] == "train-{000000..000002}.tar"
    assert [(e["file"], e["first_index"], e["count"]) for e in manifest["shards"]] == [
        ("train-000000.tar", 0, 24), ("train-000001.tar", 24, 24), ("train-000002.tar", 48, 16)]
    for entry in manifest["shards"]:
        content = (exported / entry["file"]).read_bytes()
        assert entry["sha256"] == _sha(content) and entry["bytes"] == len(content)
    marker = json.loads((exported / ".bindscope.json").read_text())
    assert marker["kind"] == "webdataset" and marker["run_id"] == manifest["run_id"]


def test_member_names_and_tar_headers_are_fixed(exported):
    for number, (start, count) in enumerate([(0, 24), (24, 24), (48, 16)]):
        with tarfile.open(exported / f"train-{number:06d}.tar") as tar:
            members = tar.getmembers()
        assert [m.name for m in members] == [f"train_{i:08d}.{ext}" for i in range(start, start + count)
                                             for ext in EXTENSIONS]
        assert {(m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode, m.type) for m in members} == {
            (0, 0, 0, "", "", 0o644, tarfile.REGTYPE)}


def test_every_member_equals_the_source_sample(data, exported):
    samples = {}
    for number in range(3):
        with tarfile.open(exported / f"train-{number:06d}.tar") as tar:
            for member in tar.getmembers():
                key, ext = member.name.split(".", 1)
                samples.setdefault(key, {})[ext] = tar.extractfile(member).read()
    with Dataset(data) as ds:
        split = ds.split("train")
        assert sorted(samples) == [f"train_{i:08d}" for i in range(len(split))] and len(samples) == 64
        for sample in split:
            members = samples[f"train_{sample.index:08d}"]
            image = Image.open(io.BytesIO(members["png"]))
            assert image.format == "PNG" and image.mode == "RGB"
            np.testing.assert_array_equal(np.asarray(image), sample.image)
            mask = Image.open(io.BytesIO(members["mask.png"]))
            assert mask.format == "PNG" and mask.mode == "L"
            np.testing.assert_array_equal(np.asarray(mask), sample.mask)
            assert set(np.unique(sample.mask)) == {0} | {o.index for o in sample.objects if o.area}
            assert members["txt"].decode("utf-8") == sample.caption
            record = json.loads(members["json"])
            assert record["key"] == f"train_{sample.index:08d}" and record["index"] == sample.index
            assert record["split"] == "train" and record["caption"] == sample.caption
            assert record["spec"] == sample.spec
            assert [(o["index"], o["category"], o["category_id"], o["attributes"], tuple(o["bbox"]), o["area"],
                     o["size_rank"], o["salient"], o["mention_position"]) for o in record["objects"]] == [
                (o.index, o.category, o.category_id, o.attributes, tuple(o.bbox), o.area, o.size_rank, o.salient,
                 o.mention_position) for o in sample.objects]
            for got, want in zip(record["objects"], sample.objects):
                assert got["extras"] == {name: float(value) for name, value in want.extras.items()}
            assert [(n["kind"], n["caption"], n["attribute"], tuple(n["objects"]), n["original"], n["replacement"])
                    for n in record["negatives"]] == [
                (n.kind, n.caption, n.attribute, n.objects, n.original, n.replacement) for n in sample.negatives]


def test_the_webdataset_library_reads_every_sample(exported):
    import webdataset

    urls = str(exported / "train-{000000..000002}.tar")
    rows = list(webdataset.WebDataset(urls, shardshuffle=False).decode("pil").to_tuple("__key__", "png", "txt",
                                                                                       "json"))
    assert [key for key, *_ in rows] == [f"train_{i:08d}" for i in range(64)]
    assert all(image.size == (32, 32) and isinstance(text, str) and record["caption"] == text
               for _, image, text, record in rows)


def test_a_second_export_is_byte_identical_whatever_the_jobs(data, exported, tmp_path):
    result = export_webdataset(data, tmp_path / "again", samples_per_shard=24, jobs=2)
    assert result["written"] == ["train-000000.tar", "train-000001.tar", "train-000002.tar"]
    assert _files(tmp_path / "again") == _files(exported)
    again = export_webdataset(data, tmp_path / "again", samples_per_shard=24)  # finished: checked, kept
    assert again["written"] == [] and again["kept"] == result["written"]
    assert _files(tmp_path / "again") == _files(exported)


def test_an_interrupted_export_resumes_to_the_same_bytes(data, exported, tmp_path, monkeypatch):
    out = tmp_path / "resumed"
    real = wds_export._write_shard

    def interrupted(common, task):
        if task.number == 1:
            raise KeyboardInterrupt
        return real(common, task)

    monkeypatch.setattr(wds_export, "_write_shard", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export_webdataset(data, out, samples_per_shard=24)
    # shard 0 is finished (and recorded), nothing else: no manifest, no partial shard
    assert sorted(p.name for p in out.iterdir()) == [".bindscope.json", ".train-000000.tar.done",
                                                     "train-000000.tar"]
    (out / ".train-000001.tar.4242.tmp").write_bytes(b"left by a killed writer")
    monkeypatch.setattr(wds_export, "_write_shard", real)
    code, output = _cli(bindscope, "export", "webdataset", data, "--out", out, "--samples-per-shard", 24,
                        "--quiet")
    assert code == 0, output
    assert "(2 written, 1 kept)" in output
    assert _files(out) == _files(exported)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in exported.iterdir())
    # a changed shard of a finished export is found by its sha256 and made again
    broken = bytearray((out / "train-000001.tar").read_bytes())
    broken[700] ^= 0xFF
    (out / "train-000001.tar").write_bytes(bytes(broken))
    result = export_webdataset(data, out, samples_per_shard=24)
    assert result["written"] == ["train-000001.tar"] and result["kept"] == ["train-000000.tar", "train-000002.tar"]
    assert _files(out) == _files(exported)


def test_a_broken_source_is_refused_and_nothing_is_written(data, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    shard = copy / "shards" / "train-00001.h5"
    content = bytearray(shard.read_bytes())
    content[-100] ^= 0xFF
    shard.write_bytes(bytes(content))
    code, output = _cli(bindscope, "export", "webdataset", copy, "--out", tmp_path / "out", "--quiet")
    assert code == 2, output
    assert output.startswith("Error: ") and "train-00001.h5: sha256 differs from the manifest" in output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, message", [
    (["--split", "validation"], "has no split 'validation'; it has: ood, test, train"),
    (["--samples-per-shard", "0"], "--samples-per-shard 0 is not allowed; use an integer in 1..10000000"),
    (["--jobs", "0"], "--jobs 0 is not allowed; use an integer in 1..256"),
])
def test_bad_options_are_one_error_and_nothing_is_written(data, tmp_path, args, message):
    code, output = _cli(bindscope, "export", "webdataset", data, "--out", tmp_path / "out", "--quiet", *args)
    assert code == 2 and output.startswith("Error: ") and output.count("\n") == 1 and message in output, output
    assert not (tmp_path / "out").exists()


def test_foreign_folders_and_other_exports_are_refused(data, exported, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    for extra in ([], ["--overwrite"]):
        code, output = _cli(bindscope, "export", "webdataset", data, "--out", foreign, "--quiet", *extra)
        assert code == 2 and "holds no" in output, output
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    out = tmp_path / "other"
    export_webdataset(data, out, samples_per_shard=24)
    code, output = _cli(bindscope, "export", "webdataset", data, "--out", out, "--samples-per-shard", 40, "--quiet")
    assert code == 2 and "holds another webdataset export" in output and "--overwrite" in output, output
    assert _files(out) == _files(exported)
    code, output = _cli(bindscope, "export", "webdataset", data, "--out", out, "--samples-per-shard", 40,
                        "--overwrite", "--quiet")
    assert code == 0, output
    assert json.loads((out / "sizes.json").read_text()) == {"train-000000.tar": 40, "train-000001.tar": 24}
    with pytest.raises(BadInput, match="must not be the source dataset"):
        export_webdataset(data, data / "wds")
    with pytest.raises(BadInput, match="split 'a.b' cannot name WebDataset keys"):
        export_webdataset(data, tmp_path / "dots", split="a.b")


def test_a_second_writer_is_refused_while_an_export_runs(data, tmp_path):
    from bindscope.io.ownership import OutputLock

    out = tmp_path / "busy"
    with OutputLock(out):
        with pytest.raises(BadInput, match="is in use by another bindscope run"):
            export_webdataset(data, out)
    assert list(out.iterdir()) == []


def test_another_split_exports_under_its_own_names(data, tmp_path):
    result = export_webdataset(data, tmp_path / "test", split="test")
    assert result["manifest"]["num_samples"] == 16 and result["manifest"]["train_data"] == "test-000000.tar"
    with tarfile.open(tmp_path / "test" / "test-000000.tar") as tar:
        names = tar.getnames()
    assert names[:4] == [f"test_00000000.{ext}" for ext in EXTENSIONS] and len(names) == 64
    with Dataset(data) as ds:
        negatives = ds.split("test")[0].negatives
    with tarfile.open(tmp_path / "test" / "test-000000.tar") as tar:
        record = json.loads(tar.extractfile("test_00000000.json").read())
    assert len(record["negatives"]) == len(negatives) > 0


# ------------------------------------------------------------------------------------------- open_clip config

TINY_OPTIONS = ["--embed-dim", 32, "--image-size", 32, "--patch-size", 8, "--vision-width", 64, "--vision-layers",
                2, "--text-width", 64, "--text-layers", 2, "--head-width", 32, "--context-length", 32]
TINY_OPEN_CLIP = {"embed_dim": 32, "quick_gelu": False,
                  "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "head_width": 32, "mlp_ratio": 2.0,
                                 "patch_size": 8},
                  "text_cfg": {"context_length": 32, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2,
                               "mlp_ratio": 2.0}}


def _same_architecture(config_path: Path, model_config):
    """open_clip builds the bindscope model's parameters (names and shapes) from the config, and with the
    bindscope model's weights it computes the same embeddings."""
    import open_clip
    import torch

    from bindscope.training.model import build_model

    open_clip.add_model_config(config_path)
    ours = build_model(model_config).eval()
    theirs = open_clip.create_model(config_path.stem).eval()
    assert {k: tuple(v.shape) for k, v in theirs.state_dict().items()} == \
           {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    theirs.load_state_dict(ours.state_dict())
    images = torch.randn(2, 3, model_config.image_size, model_config.image_size, generator=torch.Generator().manual_seed(0))
    tokens = torch.randint(0, 1000, (2, model_config.context_length), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(theirs.encode_image(images), ours.encode_image(images), atol=1e-6)
        assert torch.allclose(theirs.encode_text(tokens), ours.encode_text(tokens), atol=1e-6)


def test_model_options_give_the_open_clip_config_of_the_same_architecture(tmp_path):
    from bindscope.training.model import ModelConfig

    out = tmp_path / "bs-vit-tiny.json"
    code, output = _cli(bindscope, "export", "open-clip-config", "--out", out, *TINY_OPTIONS)
    assert code == 0, output
    assert "open_clip model 'bs-vit-tiny'" in output
    assert json.loads(out.read_text()) == TINY_OPEN_CLIP
    _same_architecture(out, ModelConfig(embed_dim=32, image_size=32, patch_size=8, vision_width=64, vision_layers=2,
                                        text_width=64, text_layers=2, head_width=32, context_length=32))
    code, output = _cli(bindscope, "export", "open-clip-config", "--out", out, *TINY_OPTIONS)
    assert code == 2 and "exists; pass --overwrite" in output, output


def test_a_resnet_tower_maps_to_open_clips_modified_resnet(tmp_path):
    from bindscope.training.model import ModelConfig

    out = tmp_path / "bs-resnet-tiny.json"
    code, output = _cli(bindscope, "export", "open-clip-config", "--out", out, "--vision", "resnet", "--image-size",
                        64, "--vision-width", 32, "--vision-layers", 1, "--text-width", 64, "--text-layers", 1,
                        "--embed-dim", 32)
    assert code == 0, output
    config = json.loads(out.read_text())
    assert config["vision_cfg"] == {"image_size": 64, "layers": [1, 1, 1, 1], "width": 32, "head_width": 32}
    _same_architecture(out, ModelConfig(embed_dim=32, image_size=64, vision="resnet", vision_width=32,
                                        vision_layers=1, text_width=64, text_layers=1))


def test_a_word_tokenizer_is_exported_as_bpe_with_a_note_and_cnn_is_refused(tmp_path):
    out = tmp_path / "word.json"
    result = CliRunner().invoke(bindscope, ["export", "open-clip-config", "--out", str(out), "--tokenizer", "word",
                                            *map(str, TINY_OPTIONS)])
    assert result.exit_code == 0, result.output
    assert "note: the run's text tower uses bindscope's word tokenizer" in result.output
    assert json.loads(out.read_text()) == TINY_OPEN_CLIP
    code, output = _cli(bindscope, "export", "open-clip-config", "--out", tmp_path / "cnn.json", "--vision", "cnn",
                        "--image-size", 32)
    assert code == 2 and "--vision 'cnn'" in output and "no open_clip counterpart" in output, output
    code, output = _cli(bindscope, "export", "open-clip-config", "--out", tmp_path / "none.json")
    assert code == 2 and "give a run folder RUN, or --image-size" in output, output
    code, output = _cli(bindscope, "export", "open-clip-config", tmp_path, "--out", tmp_path / "run.json")
    assert code == 2 and "holds no run.json" in output, output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["word.json"]


def _open_clip_train(config: Path, shards: str, logs: Path, *extra) -> subprocess.CompletedProcess:
    """``python -m open_clip_train.main`` with the exported config added under its stem (open_clip_train takes
    model names only), one CPU thread, on a single process."""
    wrapper = ("import runpy, sys, open_clip; open_clip.add_model_config(sys.argv[1]); "
               "sys.argv = ['open_clip_train.main'] + sys.argv[2:]; "
               "runpy.run_module('open_clip_train.main', run_name='__main__')")
    args = [sys.executable, "-c", wrapper, str(config), "--dataset-type", "webdataset", "--train-data", shards,
            "--train-num-samples", "64", "--batch-size", "16", "--epochs", "1", "--model", config.stem,
            "--device", "cpu", "--precision", "fp32", "--workers", "0", "--logs", str(logs), "--name", "t",
            "--warmup", "1", "--seed", "0",
            *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.slow
def test_round_trip_madman_train_run_to_open_clip_train_to_madman_eval(data, exported, tmp_path):
    """The architecture of a madman train run, exported, trained by open_clip_train on the exported shards;
    the epoch_1.pt checkpoint evaluates with madman eval."""
    import torch

    from bindscope.encoders.registry import load_adapter
    from bindscope.training.api import train

    run = tmp_path / "run"
    train(data, run, embed_dim=32, image_size=32, patch_size=8, vision_width=64, vision_layers=2, text_width=64,
          text_layers=2, head_width=32, context_length=32, batch_size=16, steps=1, device="cpu", threads=1,
          progress=False)
    config = tmp_path / "bs-round-trip.json"
    code, output = _cli(bindscope, "export", "open-clip-config", run, "--out", config)
    assert code == 0, output
    assert json.loads(config.read_text()) == TINY_OPEN_CLIP

    done = _open_clip_train(config, str(exported / "train-{000000..000002}.tar"), tmp_path / "logs")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    checkpoint = tmp_path / "logs" / "t" / "checkpoints" / "epoch_1.pt"
    assert checkpoint.is_file()
    blob = torch.load(checkpoint, map_location="cpu", weights_only=True)
    assert blob["epoch"] == 1 and blob["name"] == "t"
    out = tmp_path / "eval.json"
    code, output = _cli(madman, "eval", data, "--model", config, "--pretrained", checkpoint, "--device", "cpu",
                        "--no-cache", "--quiet", "--out", out)
    assert code == 0, output
    result = json.loads(out.read_text())
    assert set(result["metrics"]["splits"]) == {"test", "ood"}
    assert result["metrics"]["splits"]["test"]["num_scored"] == 16
    adapter = load_adapter(str(config), pretrained=str(checkpoint), device="cpu")
    loaded = adapter.model.state_dict()
    assert {k: torch.equal(loaded[k], v) for k, v in blob["state_dict"].items()} == \
           {k: True for k in blob["state_dict"]}
    # a DDP checkpoint (keys prefixed 'module.') loads to the same weights
    ddp = tmp_path / "ddp.pt"
    torch.save({"epoch": 1, "state_dict": {f"module.{k}": v for k, v in blob["state_dict"].items()}}, ddp)
    again = load_adapter(str(config), pretrained=str(ddp), device="cpu")
    assert all(torch.equal(again.model.state_dict()[k], v) for k, v in blob["state_dict"].items())
    images = Dataset(data).split("test")[0].image[None]
    np.testing.assert_allclose(again.encode_images(images), adapter.encode_images(images), atol=1e-6)


def test_a_config_without_weights_or_with_foreign_weights_is_refused(data, tmp_path):
    import torch

    from bindscope.encoders.registry import load_adapter
    from bindscope.training.model import ModelConfig, build_model

    config = tmp_path / "bs-refused.json"
    config.write_text(json.dumps(TINY_OPEN_CLIP))
    code, output = _cli(madman, "eval", data, "--model", config, "--device", "cpu", "--no-cache", "--quiet")
    assert code == 2 and "give --pretrained CHECKPOINT" in output, output
    other = tmp_path / "other.pt"
    torch.save({"state_dict": build_model(ModelConfig(embed_dim=16, image_size=32)).state_dict()}, other)
    code, output = _cli(madman, "eval", data, "--model", config, "--pretrained", other, "--device", "cpu",
                        "--no-cache", "--quiet")
    assert code == 2 and output.count("Error:") == 1, output
    assert f"--pretrained {str(other)!r}: the state dict does not fit open_clip 'bs-refused' (unexpected " \
           "'transformer.resblocks.2.attn.in_proj_bias', " in output, output
    narrow = tmp_path / "narrow.pt"  # the same towers, another embedding size
    torch.save({"state_dict": build_model(ModelConfig(
        embed_dim=16, image_size=32, patch_size=8, vision_width=64, vision_layers=2, text_width=64, text_layers=2,
        head_width=32, context_length=32)).state_dict()}, narrow)
    code, output = _cli(madman, "eval", data, "--model", config, "--pretrained", narrow, "--device", "cpu",
                        "--no-cache", "--quiet")
    assert code == 2 and output.count("Error:") == 1, output
    assert "the state dict entry 'text_projection' has shape (64, 16); open_clip 'bs-refused' needs (64, 32)" \
        in output, output

    with pytest.raises(BadInput, match="give pretrained=CHECKPOINT"):
        load_adapter(str(config), device="cpu")
    with pytest.raises(BadInput, match="no such checkpoint file"):
        load_adapter(str(config), pretrained=str(tmp_path / "missing.pt"), device="cpu")
    shipped = tmp_path / "ViT-B-32.json"
    shipped.write_text(json.dumps(TINY_OPEN_CLIP))
    with pytest.raises(BadInput, match="is a model open_clip ships; rename the file"):
        load_adapter(str(shipped), pretrained="none", device="cpu")
    (tmp_path / "other.json").write_text(json.dumps({"embed_dim": 32}))
    with pytest.raises(BadInput, match="is not an open_clip model config"):
        load_adapter(str(tmp_path / "other.json"), pretrained="none", device="cpu")
    random = load_adapter(str(config), pretrained="none", device="cpu")
    assert random.embed_dim == 32 and random.image_size == 32 and random.context_length == 32


def test_a_name_open_clip_ships_is_refused_and_nothing_is_written(tmp_path):
    out = tmp_path / "ViT-B-32.json"
    code, output = _cli(bindscope, "export", "open-clip-config", "--out", out, *TINY_OPTIONS)
    assert code == 2
    assert output == (f"Error: --out {str(out)!r}: its stem 'ViT-B-32' is a model open_clip ships, which the "
                      "exported config would replace once added; choose another name, e.g. "
                      f"{str(tmp_path / 'bs-ViT-B-32.json')!r}\n")
    assert list(tmp_path.iterdir()) == []
    code, output = _cli(bindscope, "export", "open-clip-config", "--out", tmp_path / "bs-ViT-B-32.json", *TINY_OPTIONS)
    assert code == 0, output


@pytest.mark.parametrize("record", [{"config": ["model"]}, {"config": "model"}, {"config": None}, ["config"],
                                    {"config": {"model": [1]}}])
def test_a_run_json_without_a_config_object_is_one_error_line(tmp_path, record):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps(record))
    code, output = _cli(bindscope, "export", "open-clip-config", run, "--out", tmp_path / "cfg.json")
    assert code == 2
    assert output == (f"Error: run {str(run)!r}: run.json has no config.model entry (a JSON object with a 'config' "
                      "object holding the 'model' object of a madman train run)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
