"""A generator defined outside the package (here, in this one file) makes datasets that ``bindscope.evaluate`` and
``bindscope.train`` accept without a change to the package: what they run (the evaluation tasks, the training
negatives, the lexicon) is chosen from what the dataset holds, never from the generator's name."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pytest
from eval_fakes import hash_encoder

import bindscope
from bindscope.build.builder import build_dataset
from bindscope.build.registry import register_generator
from bindscope.encoders import registry as encoders
from bindscope.evaluation.tasks.schema import validate_result
from bindscope.format.reader import Dataset
from bindscope.format.records import Negative, ObjectRecord, Sample, mask_bbox_area, size_ranks
from bindscope.training.data import load_split

COLOURS = {"red": (220, 30, 30), "blue": (30, 30, 220), "green": (30, 200, 30)}
SHAPES = ("bar", "dot")


@register_generator
@dataclass
class StripesGenerator:
    """Two coloured shapes on a 16-pixel canvas, a caption naming both with their colour, and recognition and
    binding negatives of the colour."""

    splits: dict = field(default_factory=lambda: {"train": 8, "test": 4})
    seed: int = 0
    name: str = "stripes"
    version: str = "1"
    shard_size: int = 4
    image_size: tuple = (16, 16)
    attribute_names: list = field(default_factory=lambda: ["colour"])
    extra_names: list = field(default_factory=list)

    @property
    def config(self) -> dict:
        return {"splits": self.splits, "shard_size": self.shard_size, "attributes": {"colour": sorted(COLOURS)}}

    @classmethod
    def from_config(cls, config: dict, seed: int):
        return cls(splits=dict(config["splits"]), seed=seed)

    def make_samples(self, split, start, count):
        out = []
        for index in range(start, start + count):
            rng = np.random.default_rng([self.seed, index, len(split)])
            colours = [str(c) for c in rng.choice(sorted(COLOURS), size=2, replace=False)]
            image, mask = np.zeros((16, 16, 3), np.uint8), np.zeros((16, 16), np.uint8)
            mask[2:14, 2:5] = 1
            side = int(rng.integers(3, 7))
            mask[6:6 + side, 9:9 + side] = 2
            for k, colour in enumerate(colours, start=1):
                image[mask == k] = COLOURS[colour]
            areas = [mask_bbox_area(mask, k)[1] for k in (1, 2)]
            ranks = size_ranks(areas)
            objects = [ObjectRecord(k, SHAPES[k - 1], k, {"colour": colours[k - 1]}, mask_bbox_area(mask, k)[0],
                                    areas[k - 1], ranks[k - 1], ranks[k - 1] == 1, k) for k in (1, 2)]
            caption = f"{colours[0]} bar and {colours[1]} dot"
            other = [c for c in sorted(COLOURS) if c not in colours][0]
            negatives = [Negative("recognition", f"{other} bar and {colours[1]} dot", "colour", (1,),
                                  colours[0], other),
                         Negative("recognition", f"{colours[0]} bar and {other} dot", "colour", (2,), colours[1],
                                  other),
                         Negative("binding", f"{colours[1]} bar and {colours[0]} dot", "colour", (1, 2),
                                  "|".join(colours), "|".join(colours[::-1]))]
            out.append(Sample(index, image, mask, caption, objects, negatives, {"colours": colours, "side": side}))
        return out

    def shard_statistics(self, split, samples):
        return {"samples": len(samples)}

    def statistics(self, counts):
        return {split: dict(c) for split, c in counts.items()}

    def card(self, manifest):
        return "# stripes\n"

    def provenance(self):
        return {"title": "stripes", "sources": ["shapes drawn by tests/test_generator_plugin.py"]}


@pytest.fixture(scope="module")
def stripes(tmp_path_factory):
    out = tmp_path_factory.mktemp("stripes") / "data"
    build_dataset(StripesGenerator(), out, progress=False)
    return out


@pytest.fixture
def hash_model():
    kind = encoders.register_encoder(encoders.EncoderKind("hash:", lambda m: m.startswith("hash:"),
                                                          lambda m, p, **o: hash_encoder()))
    yield bindscope.EncoderSettings("hash:16", use_cache=False)
    encoders._REGISTERED.remove(kind)


def test_the_dataset_says_what_it_holds(stripes):
    ds = Dataset(stripes)
    assert ds.generator == "stripes" and ds.caption_attributes == ["colour"]
    assert ds.holds == {"attributes", "captions", "masks", "mentions", "negatives", "objects", "plans"}
    assert load_split(stripes).lexicon.adjectives == ("blue", "green", "red")  # the colours its captions say


def test_evaluate_runs_the_tasks_the_dataset_holds_what_they_need_for(stripes, hash_model):
    split_tasks = bindscope.evaluate(stripes, hash_model, out=False, progress=False).result
    validate_result(split_tasks, "result")
    assert split_tasks["kind"] == "madman-eval" and split_tasks["dataset"]["generator"] == "stripes"
    test = split_tasks["metrics"]["splits"]["test"]
    assert (test["num_samples"], test["num_scored"]) == (4, 4)
    assert test["recognition"]["per_attribute"]["colour"]["total"] == 8  # two recognition negatives per image
    assert test["binding_unconditional"]["per_attribute"]["colour"]["total"] == 4
    scene_tasks = bindscope.evaluate(stripes, hash_model, tasks="tor,i2tor,matching,binding", splits="test", out=False,
                                     progress=False).result
    assert scene_tasks["kind"] == "comco-eval" and scene_tasks["settings"]["scenes"] == "test"
    assert scene_tasks["metrics"]["tor"]["by_num_objects"]["2"]["num_queries"] == 4
    assert scene_tasks["metrics"]["binding"]["num_scored"] == 4
    assert scene_tasks["settings"]["vocabulary"] == {"source": "categories present in the scenes", "size": 2}


def test_train_trains_and_evaluates_on_it(stripes, tmp_path):
    summary = bindscope.train(stripes, tmp_path / "run", eval_data=stripes, negatives="stored", steps=2, batch_size=4,
                              warmup_steps=1, progress=False, embed_dim=16, vision_width=32, vision_layers=1,
                              patch_size=8, text_width=32, text_layers=1, head_width=32, tokenizer="word",
                              device="cpu", threads=1)
    assert summary["steps"] == 2 and math.isfinite(summary["final_loss"])
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["kind"] == "madman-eval" and list(result["metrics"]["splits"]) == ["test"]
    config = json.loads((tmp_path / "run" / "run.json").read_text())["config"]
    assert config["split"] == "train" and config["eval_splits"] == ["test"]
