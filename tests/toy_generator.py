"""A tiny deterministic generator (squares on a canvas) for testing the dataset format alone."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bindscope.build.registry import register_generator
from bindscope.format.records import Negative, ObjectRecord, Sample, mask_bbox_area, size_ranks


@dataclass
class SquaresGenerator:
    splits: dict = field(default_factory=lambda: {"train": 7, "test": 3})
    shard_size: int = 3
    seed: int = 0
    name: str = "madman"
    version: str = "test"
    image_size: tuple = (16, 16)
    attribute_names: list = field(default_factory=lambda: ["colour"])
    extra_names: list = field(default_factory=lambda: ["occlusion"])
    fail_at: int | None = None  # raise when asked for this sample (simulates an interruption)

    @property
    def config(self) -> dict:
        return {"splits": self.splits, "shard_size": self.shard_size}

    @classmethod
    def from_config(cls, config: dict, seed: int):
        return cls(splits=dict(config["splits"]), shard_size=config["shard_size"], seed=seed)

    def make_samples(self, split, start, count):
        out = []
        for index in range(start, start + count):
            if split == "train" and index == self.fail_at:
                raise KeyboardInterrupt("simulated interruption")
            rng = np.random.default_rng([self.seed, index, len(split)])
            image = np.zeros((16, 16, 3), np.uint8)
            mask = np.zeros((16, 16), np.uint8)
            sides = [int(rng.integers(2, 7)), int(rng.integers(2, 7))]
            for k, (side, x) in enumerate(zip(sides, (1, 9)), start=1):
                mask[2:2 + side, x:x + side] = k
                image[mask == k] = (255, 0, 0) if k == 1 else (0, 0, 255)
            areas = [mask_bbox_area(mask, k)[1] for k in (1, 2)]
            ranks = size_ranks(areas)
            objects = [ObjectRecord(k, "square", 0, {"colour": c}, mask_bbox_area(mask, k)[0], areas[k - 1],
                                    ranks[k - 1], k == 1, k, {"occlusion": 0.0})
                       for k, c in ((1, "red"), (2, "blue"))]
            negatives = [Negative("binding", "blue square and red square", "colour", (1, 2), "red|blue", "blue|red")]
            out.append(Sample(index, image, mask, "red square and blue square", objects, negatives, {"sides": sides}))
        return out

    def shard_statistics(self, split, samples):
        return {"samples": len(samples), "objects": sum(len(s.objects) for s in samples)}

    def statistics(self, counts):
        return {split: dict(c) for split, c in counts.items()}

    def card(self, manifest):
        return "# toy\n"

    def provenance(self):
        return {"title": f"toy squares ({self.name})", "sources": ["squares drawn by tests/toy_generator.py"]}


@register_generator
@dataclass
class Squares(SquaresGenerator):
    """The toy generator under its own registered name (``bindscope merge`` rebuilds it by that name)."""

    name: str = "squares"
