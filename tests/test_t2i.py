"""comco t2i and comco t2i-score end to end with tiny random-weight models built from configs (a Stable Diffusion
pipeline, OWLv2 / OWL-ViT detectors, a CLIP encoder): the dataset is valid, keeps each prompt's objects and order,
is the same bytes from the command and the library and after an interruption; bad input is one Error line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_support import refused
from click.testing import CliRunner
from t2i_support import tiny_clip, tiny_detector, tiny_pipeline

import bindscope
from bindscope.cli.main import bindscope as bindscope_group
from bindscope.cli.main import comco
from bindscope.errors import BadInput
from bindscope.format.reader import Dataset
from bindscope.generators.t2i.prompts import latent_seed, plan_prompts

NAMES = ["dog", "cat", "pizza", "car", "apple"]
SMALL = dict(objects="2-3", n=3, images_per_prompt=2, steps=2, resolution=32, device="cpu", shard_size=4)
FLAGS = ["--objects", "2-3", "-n", "3", "--images-per-prompt", "2", "--steps", "2", "--resolution", "32", "--device",
         "cpu", "--shard-size", "4", "--quiet"]


def _files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def names(tmp_path_factory):
    path = tmp_path_factory.mktemp("names") / "names.txt"
    path.write_text("\n".join(NAMES) + "\n")
    return path


@pytest.fixture(scope="module")
def generated(tmp_path_factory, names):
    """The dataset `comco t2i` writes with the tiny pipeline (3 object sets of 2, 3, 2 objects, rotations, 2 images
    per prompt: 7 prompts, 14 images)."""
    out = tmp_path_factory.mktemp("t2i") / "cli"
    result = CliRunner().invoke(comco, ["t2i", "--pipeline", str(tiny_pipeline()), "--out", str(out), "--names",
                                        str(names), *FLAGS], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"{out}: 14 images of 7 prompts (bindscope verify {out} checks it)"
    return out


def test_the_dataset_is_valid_and_keeps_each_prompts_objects_in_order(generated):
    verified = CliRunner().invoke(bindscope_group, ["verify", str(generated)])
    assert verified.exit_code == 0, verified.output
    ds = Dataset(generated)
    manifest = ds.manifest
    assert manifest["generator"]["name"] == "t2i" and manifest["image_size"] == [32, 32]
    assert manifest["config"]["categories"] == NAMES and manifest["config"]["names"] == "names.txt"
    assert manifest["config"]["pipeline"]["class"] == "StableDiffusionPipeline"
    assert [e["count"] for e in manifest["splits"]["images"]["shards"]] == [4, 4, 4, 2]
    assert manifest["statistics"]["images"] == {"num_images": 14, "num_prompts": 7, "nsfw_flagged": 0,
                                                "prompts_per_object_count": {"2": 4, "3": 3}, "devices": {"cpu": 14}}
    prompts = plan_prompts(NAMES, (2, 3), 3, "rotations", 0)
    samples = list(ds.split("images"))
    for sample in samples:
        prompt = prompts[sample.index // 2]
        assert sample.caption == prompt.text == "a photo of " + " and ".join(
            f"{'an' if n[0] in 'aeiou' else 'a'} {n}" for n in prompt.objects)
        assert [(o.index, o.category, o.mention_position) for o in sample.objects] == \
            [(k, n, k) for k, n in enumerate(prompt.objects, start=1)]
        assert [o.category_id for o in sample.objects] == [NAMES.index(n) for n in prompt.objects]
        assert sample.spec["latent_seed"] == latent_seed(0, prompt.set_index, sample.index % 2)
        assert sample.image.shape == (32, 32, 3) and sample.image.dtype == np.uint8 and not sample.mask.any()
    # set 1 names three objects: its three prompts are the rotations of one order, from the same noise
    rotations = [p.objects for p in prompts if p.set_index == 1]
    assert rotations[1] == rotations[0][1:] + rotations[0][:1] and rotations[2] == rotations[0][2:] + rotations[0][:2]
    assert samples[4].spec["latent_seed"] == samples[6].spec["latent_seed"] == samples[8].spec["latent_seed"]
    assert not np.array_equal(samples[0].image, samples[1].image)  # two seeds, two images


def test_the_library_call_writes_the_same_bytes_and_resumes_after_an_interruption(generated, names, tmp_path,
                                                                                    monkeypatch):
    from bindscope.generators.t2i import pipeline

    calls = []
    real = pipeline.generate_images

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # the first shard (two prompts) is finished, the second is not
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "generate_images", interrupted)
    with pytest.raises(KeyboardInterrupt):
        bindscope.comco.t2i(tmp_path / "api", tiny_pipeline(), names=names, progress=False, **SMALL)
    assert sorted(p.name for p in (tmp_path / "api" / "shards").glob("*.h5")) == ["images-00000.h5"]
    monkeypatch.setattr(pipeline, "generate_images", real)
    result = bindscope.comco.t2i(tmp_path / "api", tiny_pipeline(), names=names, progress=False, **SMALL)
    assert _files(tmp_path / "api") == _files(generated)
    again = bindscope.comco.t2i(tmp_path / "api", tiny_pipeline(), names=names, progress=False, **SMALL)
    assert again.already_complete and again.manifest == result.manifest


def test_scoring_runs_both_scorers_end_to_end(generated, tmp_path):
    out = tmp_path / "score.json"
    result = CliRunner().invoke(comco, ["t2i-score", str(generated), "--detector", str(tiny_detector("owlv2")),
                                        "--model", str(tiny_clip()), "--device", "cpu", "--no-cache", "--quiet",
                                        "--threshold", "0.5", "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "first vs last:" in result.output and "exact McNemar p" in result.output
    scored = json.loads(out.read_text())
    assert (scored["kind"], scored["num_images"], scored["num_prompts"], scored["num_mentions"]) == \
        ("t2i-score", 14, 7, 34)
    assert set(scored["scorers"]) == {"detector", "clip"}
    assert scored["scorers"]["detector"]["model"]["family"] == "owlv2"
    assert scored["scorers"]["clip"]["candidates"] == 5
    for scorer in scored["scorers"].values():
        assert scorer["presence"]["all"]["of"] == 34
        assert {k: b["of"] for k, b in scorer["presence"]["by_position"].items()} == {"1": 14, "2": 14, "3": 6}
        assert scorer["presence"]["first_vs_last"]["prompts"] == 7
    rows = (tmp_path / "score.samples.jsonl").read_text().splitlines()
    assert len(rows) == 14 and len(json.loads(rows[0])["detector_scores"]) == 2
    owlvit = bindscope.t2i_score(generated, None, str(tiny_detector("owlvit")), out=tmp_path / "owlvit.json",
                                 progress=False)
    assert owlvit.result["scorers"]["detector"]["model"]["family"] == "owlvit" and "clip" not in owlvit.result["scorers"]


_bad = refused


def test_bad_input_is_one_error_line_and_nothing_written(tmp_path, names, generated):
    work = tmp_path / "work"
    work.mkdir()
    out = ["--out", "o", "--device", "cpu"]
    _bad(comco, ["t2i", "--pipeline", "no-such-owner/no-such-pipeline", *out], work, "--pipeline",
         "'no-such-owner/no-such-pipeline'", "could not be fetched", "offline")
    (work / "notes.txt").write_text("x")
    _bad(comco, ["t2i", "--pipeline", "notes.txt", *out], work, "--pipeline 'notes.txt' is a file")
    (work / "empty").mkdir()
    _bad(comco, ["t2i", "--pipeline", "empty", *out], work, "holds no model_index.json")
    (work / "two.txt").write_text("dog\ncat\n")
    _bad(comco, ["t2i", "--pipeline", str(tiny_pipeline()), "--names", "two.txt", "--objects", "2-3", *out], work,
         "--names", "2 name(s) is too small a prompt set for objects 2-3", "at least 3 names")
    _bad(comco, ["t2i", "--pipeline", str(tiny_pipeline()), "--precision", "fp16", *out], work,
         "--precision 'fp16' needs a CUDA device")
    _bad(comco, ["t2i", "--pipeline", str(tiny_pipeline()), "--images-per-prompt", "2", "--shard-size", "3", *out],
         work, "--shard-size 3", "multiple of --images-per-prompt 2")
    _bad(comco, ["t2i", "--pipeline", str(tiny_pipeline()), "--objects", "1-2", *out], work, "--objects 1-2",
         "2..5 objects")
    _bad(comco, ["t2i", "--pipeline", str(tiny_pipeline()), "--resolution", "33", *out], work,
         "--resolution 33", "multiple of 2 pixels")
    _bad(comco, ["t2i-score", str(generated), "--detector", "google/owlv2-base-patch16-ensemble", "--model",
                 str(tiny_clip()), "--device", "cpu", "--out", "r.json"], work,
         "--detector 'google/owlv2-base-patch16-ensemble' could not be loaded", "offline")
    _bad(comco, ["t2i-score", str(generated), "--detector", str(tiny_clip()), "--model", str(tiny_clip()),
                 "--device", "cpu", "--out", "r.json"], work, "is a clip model; use one of the families owlv2, owlvit")


def _copy_pipeline(tmp_path):
    import shutil

    folder = tmp_path / "pipe"
    shutil.copytree(tiny_pipeline(), folder)
    return folder


def test_pipelines_naming_or_holding_code_are_refused_before_loading(tmp_path):
    from bindscope.generators.t2i.pipeline import resolve_pipeline

    folder = _copy_pipeline(tmp_path)
    (folder / "unet" / "my_unet.py").write_text("raise SystemExit('ran')\n")
    with pytest.raises(BadInput, match=r"my_unet.py is Python code; bindscope never runs code"):
        resolve_pipeline(str(folder))
    (folder / "unet" / "my_unet.py").unlink()
    index = json.loads((folder / "model_index.json").read_text())
    for change, needle in (({"_class_name": ["pipeline", "MyPipeline"]}, "not a class of diffusers"),
                           ({"unet": ["my_unet", "MyUNet"]}, "component 'unet'"),
                           ({"custom_pipeline": "x"}, "holds 'custom_pipeline'"),
                           ({"_class_name": "NoSuchPipeline"}, "not a pipeline of diffusers"),
                           ({"_class_name": "StableDiffusionImg2ImgPipeline"}, "not a text-to-image pipeline")):
        (folder / "model_index.json").write_text(json.dumps({**index, **change}))
        with pytest.raises(BadInput, match=needle):
            resolve_pipeline(str(folder))
