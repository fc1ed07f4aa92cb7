"""What the CLEVR and PUG importers share: scenes of objects with attribute values and no masks, captioned the way
the LABCLIP paper captions them, with attribute-swap negatives.

Captions (Koishigarina, Uselis, Oh; docs/papers.md section 3; the rule of their CLEVR and PUG loaders): each object
is written as its values of the caption attributes followed by its category, ``"red cube"``, ``"Blue Elephant"``,
and the objects are joined with ``" and "`` in the source's object order: ``"red cube and blue sphere and gray
cylinder"``. Object ``k`` (1-based, source order) has mention position ``k``.

Negatives (stored with each sample, as ComCO's attribute scenes store theirs), for each caption attribute ``a``:

- ``recognition``: per object, its value of ``a`` replaced by another value of the attribute's vocabulary, drawn
  uniformly with ``numpy.random.default_rng([seed, sample index])``; objects ``(k,)``;
- ``binding``: per pair of objects ``i < j`` with different values of ``a``, the two values swapped (the LABCLIP
  authors' negative: ``"red cube and blue sphere"`` -> ``"blue cube and red sphere"``); objects ``(i, j)``,
  original ``"vi|vj"``, replacement ``"vj|vi"``. A swap between two objects that the caption describes alike in
  everything else only reorders the caption's object phrases (the same objects, said in another order): it is no
  negative and is left out.

Objects carry no instance mask (neither source has masks; boxes cannot be derived from what they publish): the
stored mask is all background, every object's ``area`` is 0 and its ``bbox`` ``(0, 0, 0, 0)``, so size ranks follow
the object order (ties in :func:`bindscope.format.records.size_ranks`) and mean nothing; ``salient`` is False. A
dataset made so does not hold ``masks`` (:data:`bindscope.format.reader.HOLDINGS`): the tasks that need visible
areas refuse it, the ones that need objects, captions, mentions or negatives run.
"""

from __future__ import annotations

import os
import re

import numpy as np

from bindscope.errors import BadInput
from bindscope.format.records import Negative, ObjectRecord, Sample

JOINER = " and "


def object_phrase(obj: dict, caption_attributes: list[str]) -> str:
    """``obj``'s values of ``caption_attributes`` (in that order), then its category: ``"red cube"``."""
    return " ".join([obj["attributes"][a] for a in caption_attributes] + [obj["category"]])


def scene_caption(objects: list[dict], caption_attributes: list[str]) -> str:
    """The caption of a scene: its objects' phrases (:func:`object_phrase`) joined with ``" and "``."""
    return JOINER.join(object_phrase(o, caption_attributes) for o in objects)


def scene_negatives(objects: list[dict], caption_attributes: list[str], vocabulary: dict[str, list[str]],
                    rng: np.random.Generator) -> list[Negative]:
    """Recognition and binding negatives of a scene (see the module docstring).

    Args:
        objects: ``[{"category", "attributes": {name: value}}, ...]`` in caption order.
        caption_attributes: the attributes the caption gives. vocabulary: attribute -> its values (the
            replacements of recognition negatives are drawn from these, in this order).
        rng: draws the recognition replacements.
    """
    caption = scene_caption(objects, caption_attributes)
    phrases = [object_phrase(o, caption_attributes) for o in objects]

    def with_values(changes: dict[int, tuple[str, str]]) -> list[str]:
        out = []
        for k, obj in enumerate(objects):
            if k in changes:
                obj = {**obj, "attributes": {**obj["attributes"], changes[k][0]: changes[k][1]}}
            out.append(object_phrase(obj, caption_attributes))
        return out

    negatives = []
    for a in caption_attributes:
        for k, obj in enumerate(objects):
            others = [v for v in vocabulary[a] if v != obj["attributes"][a]]
            if others:
                new = others[int(rng.integers(len(others)))]
                negatives.append(Negative("recognition", JOINER.join(with_values({k: (a, new)})), a, (k + 1,),
                                          obj["attributes"][a], new))
        for i in range(len(objects)):
            for j in range(i + 1, len(objects)):
                vi, vj = objects[i]["attributes"][a], objects[j]["attributes"][a]
                if vi == vj:
                    continue
                swapped = with_values({i: (a, vj), j: (a, vi)})
                if sorted(swapped) != sorted(phrases):
                    negatives.append(Negative("binding", JOINER.join(swapped), a, (i + 1, j + 1), f"{vi}|{vj}",
                                              f"{vj}|{vi}"))
    return [n for n in negatives if n.caption != caption]


def check_split_name(split: str) -> None:
    """Raise BadInput unless ``split`` is letters, digits and ``_`` (a dataset split name)."""
    if not isinstance(split, str) or not re.fullmatch(r"[A-Za-z0-9_]+", split):
        raise BadInput(f"split {split!r} is not allowed; use letters, digits and '_' (e.g. val)", param="split")


class SceneImporter:
    """The part of a :class:`bindscope.build.builder.Generator` that the CLEVR and PUG importers share.

    A subclass sets ``name``, ``version``, ``attribute_names``, ``extra_names`` and ``caption_attributes``
    and implements ``_images(scenes)`` (the scenes' images as ``(image_size, image_size, 3)`` uint8 arrays),
    ``_extras(scene, obj)``, ``_spec(scene)``, ``provenance()`` and ``card(manifest)``.

    Args:
        plan: ``{"scenes": [{"objects": [{"category", "category_id", "attributes", ...}], ...}], "vocabulary":
            {attribute: [values]}, "counts": {...}}`` (plain JSON-serialisable data: it travels to the workers).
        split: the dataset's split name. image_size: stored side in pixels. config: the resolved config recorded
        in the manifest. seed: of the recognition replacements. shard_size: samples per shard.
    """

    name = ""
    version = ""
    attribute_names: list[str] = []
    extra_names: list[str] = []
    caption_attributes: list[str] = []

    def __init__(self, plan: dict, split: str, image_size: int, config: dict, seed: int = 0,
                 shard_size: int = 256):
        self.plan = plan
        self.split = split
        self.image_size = (image_size, image_size)
        self.config = config
        self.seed = seed
        self.shard_size = shard_size
        self.splits = {split: len(plan["scenes"])}

    def _images(self, scenes: list[dict]) -> list[np.ndarray]:
        raise NotImplementedError

    def _extras(self, scene: dict, obj: dict) -> dict[str, float]:
        return {}

    def _spec(self, scene: dict) -> dict:
        raise NotImplementedError

    def _sample(self, index: int, scene: dict, image: np.ndarray) -> Sample:
        objects = [ObjectRecord(index=k + 1, category=o["category"], category_id=o["category_id"],
                                attributes=dict(o["attributes"]), bbox=(0, 0, 0, 0), area=0, size_rank=k + 1,
                                salient=False, mention_position=k + 1, extras=self._extras(scene, o))
                   for k, o in enumerate(scene["objects"])]
        rng = np.random.default_rng([self.seed, index])
        return Sample(index=index, image=image, mask=np.zeros(self.image_size, np.uint8),
                      caption=scene_caption(scene["objects"], self.caption_attributes), objects=objects,
                      negatives=scene_negatives(scene["objects"], self.caption_attributes, self.plan["vocabulary"],
                                                rng),
                      spec=self._spec(scene))

    def make_samples(self, split: str, start: int, count: int) -> list[Sample]:
        scenes = self.plan["scenes"][start:start + count]
        images = self._images(scenes)
        return [self._sample(start + k, scene, image) for k, (scene, image) in enumerate(zip(scenes, images))]

    def shard_statistics(self, split: str, samples: list[Sample]) -> dict[str, float]:
        counts = {"images": len(samples), "objects": 0, "captions": 0, "recognition_negatives": 0,
                  "binding_negatives": 0}
        for s in samples:
            counts["objects"] += len(s.objects)
            counts["captions"] += bool(s.caption)
            for n in s.negatives:
                counts[f"{n.kind}_negatives"] += 1
        return counts

    def statistics(self, counts: dict[str, dict[str, float]]) -> dict:
        return {"source": dict(self.plan["counts"]), "splits": {s: dict(c) for s, c in counts.items()}}

    def card_counts(self, manifest: dict) -> str:
        """One sentence with the split's counts, for the card."""
        stats = manifest["statistics"]["splits"].get(self.split, {})
        return (f"{stats.get('images', 0)} images with {stats.get('objects', 0)} objects and "
                f"{stats.get('captions', 0)} captions giving {', '.join(self.caption_attributes)}; "
                f"{stats.get('binding_negatives', 0)} binding (attribute-swap) and "
                f"{stats.get('recognition_negatives', 0)} recognition negatives")


def finish_import(importer, out: str | os.PathLike, jobs: int, overwrite: bool, progress: bool) -> dict:
    """Build ``importer``'s dataset into ``out`` (:func:`bindscope.build.builder.build_dataset`: resumable,
    atomic) and verify it; return the manifest.

    Raises:
        DiskFull: as :func:`bindscope.importers.coco.import_coco`. RuntimeError: the dataset fails verification
            (a bug).
    """
    from bindscope.build.builder import build_dataset
    from bindscope.io.atomic import reporting_disk_full
    from bindscope.publish.verify import verify_dataset

    with reporting_disk_full(out):
        manifest = build_dataset(importer, out, jobs=jobs, overwrite=overwrite, progress=progress)
    problems = verify_dataset(out)
    if problems:
        raise RuntimeError(f"internal error: the imported dataset fails verification: {problems[0]}")
    return manifest
