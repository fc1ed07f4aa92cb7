"""Test helpers for the evaluation tests: an encoder with hand-chosen embeddings and tiny datasets built with the
dataset API (bindscope.build.builder.build_dataset)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bindscope.build.builder import build_dataset
from bindscope.encoders.interface import EncoderAdapter
from bindscope.format.records import Negative, ObjectRecord, Sample


def unit(d: int, i: int) -> np.ndarray:
    v = np.zeros(d, np.float32)
    v[i] = 1.0
    return v


class FakeEncoder(EncoderAdapter):
    """Texts map to given vectors (or to ``text_rule(text)``); an image maps to ``image_vectors[image[0, 0, 0]]``.

    Vectors are returned as given (they are built unit-norm). ``calls`` records every text and image id encoded.
    """

    def __init__(self, dim, text_vectors=None, image_vectors=None, text_rule=None, key="fake"):
        self.name = "fake"
        self.pretrained = "hand-chosen"
        self.embed_dim = dim
        self.cache_key = key
        self.text_vectors = text_vectors or {}
        self.image_vectors = image_vectors or {}
        self.text_rule = text_rule
        self.text_calls: list[str] = []
        self.image_calls: list[int] = []

    def encode_texts(self, texts):
        self.text_calls += list(texts)
        out = []
        for t in texts:
            if t in self.text_vectors:
                out.append(self.text_vectors[t])
            else:
                assert self.text_rule is not None, f"no vector for text {t!r}"
                out.append(self.text_rule(t))
        return np.stack(out).astype(np.float32).reshape(len(texts), self.embed_dim)

    def encode_images(self, images):
        ids = [int(im[0, 0, 0]) for im in images]
        self.image_calls += ids
        return np.stack([self.image_vectors[i] for i in ids]).astype(np.float32)


def hash_encoder(dim: int = 16) -> FakeEncoder:
    """An encoder for any text and image: a text's vector is drawn from a generator seeded by its sha256, an
    image's from one seeded by its bytes' sha256 (unit-norm, deterministic)."""
    import hashlib

    def vector(data: bytes) -> np.ndarray:
        v = np.random.default_rng(int.from_bytes(hashlib.sha256(data).digest()[:8], "little")).normal(size=dim)
        return (v / np.linalg.norm(v)).astype(np.float32)

    encoder = FakeEncoder(dim, text_rule=lambda text: vector(text.encode()), key=f"hash-{dim}")
    encoder.encode_images = lambda images: np.stack([vector(np.ascontiguousarray(im).tobytes()) for im in images])
    return encoder


def position_weighted_rule(names: list[str], dim: int, weights=(3.0, 2.0, 1.0, 0.5, 0.25)):
    """Text rule: "a and b and c" -> normalise(3 e_a + 2 e_b + 1 e_c): a text encoder biased to the first name."""
    index = {n: i for i, n in enumerate(names)}

    def rule(text):
        v = np.zeros(dim, np.float32)
        for w, part in zip(weights, text.split(" and ")):
            v[index[part]] += w
        return v / np.linalg.norm(v)

    return rule


def image(value: int, size: int = 8) -> np.ndarray:
    im = np.zeros((size, size, 3), np.uint8)
    im[0, 0, 0] = value
    return im


@dataclass
class SpecGenerator:
    """A Generator (bindscope.build.builder protocol) that writes given samples: splits -> list of Sample."""

    samples: dict
    name: str = "madman"
    attribute_names: list = field(default_factory=lambda: ["colour", "size"])
    extra_names: list = field(default_factory=list)
    version: str = "test"
    seed: int = 0
    shard_size: int = 3
    image_size: tuple = (8, 8)

    @property
    def splits(self):
        return {k: len(v) for k, v in self.samples.items()}

    @property
    def config(self):
        return {"spec": repr(sorted(self.splits.items()))}

    def make_samples(self, split, start, count):
        return self.samples[split][start:start + count]

    def shard_statistics(self, split, samples):
        return {"samples": len(samples)}

    def statistics(self, counts):
        return {s: dict(c) for s, c in counts.items()}

    def card(self, manifest):
        return "# test dataset\n"


def obj(index, category, attributes=None, size_rank=1, mention=0, area=1):
    return ObjectRecord(index=index, category=category, category_id=0, attributes=attributes or {},
                        bbox=(0, 0, 1, 1), area=area, size_rank=size_rank, salient=size_rank == 1,
                        mention_position=mention)


def build(tmp_path, name, generator) -> str:
    out = tmp_path / name
    build_dataset(generator, out, progress=False)
    return str(out)


# ---------------------------------------------------------------- MADMAN: scores per image chosen by hand
# Each sample i has image direction e_i; a text with score s for image i is s e_i + sqrt(1 - s^2) e_(u), with a
# fresh direction u per text, so cos(image_i, text) = s exactly.
MADMAN_SAMPLES = {
    # split: [(image id, caption, caption score, [(kind, attribute, objects, neg caption, score), ...]), ...]
    "test": [
        (1, "small red 1 and large blue 2", 0.5, [
            ("recognition", "colour", (1,), "small green 1 and large blue 2", 0.4),
            ("recognition", "colour", (2,), "small red 1 and large yellow 2", 0.3),
            ("binding", "colour", (1, 2), "small blue 1 and large red 2", 0.45),
            ("recognition", "size", (1,), "large red 1 and large blue 2", 0.6),
            ("recognition", "size", (2,), "small red 1 and small blue 2", 0.2),
            ("binding", "size", (1, 2), "large red 1 and small blue 2", 0.1)]),
        (2, "small green 5 and large red 6", 0.5, [
            ("recognition", "colour", (1,), "small blue 5 and large red 6", 0.2),
            ("recognition", "colour", (2,), "small green 5 and large blue 6", 0.1),
            ("binding", "colour", (1, 2), "small red 5 and large green 6", 0.7),
            ("recognition", "size", (1,), "large green 5 and large red 6", 0.5),  # a tie: counts as wrong
            ("recognition", "size", (2,), "small green 5 and small red 6", 0.4),
            ("binding", "size", (1, 2), "large green 5 and small red 6", 0.6)]),
        (3, "red 3 and blue 4", 0.5, [
            ("recognition", "colour", (1,), "green 3 and blue 4", 0.1),
            ("recognition", "colour", (2,), "red 3 and green 4", 0.2),
            ("binding", "colour", (1, 2), "blue 3 and red 4", 0.3)]),
        (4, "large 9", 0.5, []),  # one digit described: no negatives, not scored
    ],
    "ood": [
        (5, "blue 7 and red 8", 0.3, [
            ("recognition", "colour", (1,), "green 7 and red 8", 0.0),
            ("recognition", "colour", (2,), "blue 7 and green 8", 0.1),
            ("binding", "colour", (1, 2), "red 7 and blue 8", 0.2)]),
    ],
}


def madman_fixture(tmp_path, name="madman"):
    """Build the MADMAN-format dataset above and its FakeEncoder. Returns (path, encoder)."""
    dim = 64
    texts, images = {}, {}
    fresh = iter(range(16, dim))
    samples = {}
    for split, rows in MADMAN_SAMPLES.items():
        samples[split] = []
        for index, (img, caption, score, negs) in enumerate(rows):
            images[img] = unit(dim, img)

            def vec(s):
                return (s * unit(dim, img) + np.sqrt(1 - s * s) * unit(dim, next(fresh))).astype(np.float32)

            texts[caption] = vec(score)
            negatives = []
            for kind, attribute, objects, text, s in negs:
                texts[text] = vec(s)
                negatives.append(Negative(kind, text, attribute, objects, "x", "y"))
            objects = [obj(1, "1", {"colour": "red", "size": "small"}, 1, 1),
                       obj(2, "2", {"colour": "blue", "size": "large"}, 2, 2)]
            samples[split].append(Sample(index, image(img), np.zeros((8, 8), np.uint8), caption, objects,
                                         negatives, {}))
    path = build(tmp_path, name, SpecGenerator(samples))
    return path, FakeEncoder(dim, texts, images)


# ---------------------------------------------------------------- ComCO: vectors chosen by hand
VOCAB = ["pizza", "apple", "desk", "car"]


def comco_fixture(tmp_path, name="comco"):
    """A ComCO-format dataset (scenes + references) and a FakeEncoder with hand-chosen vectors.

    Scenes (category: size rank, mention position), caption vector, image vector:
      A  pizza:2,m1 apple:1,m2 desk:3,m3  "pizza and apple and desk"
         0.6 pizza + 0.8 apple -> TOR pos 2 | img apple -> rank 1
      B  apple:1,m1 car:2,m2              "apple and car"
         0.8 apple + 0.6 car   -> TOR pos 1 | img car   -> rank 2
      C  desk:2,m1 car:1,m2 pizza:3,m3    "desk and car and pizza"
         desk                  -> TOR pos 1 | img pizza -> rank 3
      D  car:1,m1 pizza:2,m2 apple:3,m3   "car and pizza and apple"
         desk                  -> not in    | img desk  -> not in
      E  apple:3,m1 pizza:1,m2 car:2,m3   "apple and pizza and car"
         (pizza+apple)/sqrt2   -> tie       | img 0.8 pizza + 0.6 car -> rank 1
    """
    dim = 8
    e = {n: unit(dim, i) for i, n in enumerate(VOCAB)}
    scenes = [
        (10, [("pizza", 2, 1), ("apple", 1, 2), ("desk", 3, 3)], 0.6 * e["pizza"] + 0.8 * e["apple"], e["apple"]),
        (11, [("apple", 1, 1), ("car", 2, 2)], 0.8 * e["apple"] + 0.6 * e["car"], e["car"]),
        (12, [("desk", 2, 1), ("car", 1, 2), ("pizza", 3, 3)], e["desk"], e["pizza"]),
        (13, [("car", 1, 1), ("pizza", 2, 2), ("apple", 3, 3)], e["desk"], e["desk"]),
        (14, [("apple", 3, 1), ("pizza", 1, 2), ("car", 2, 3)], (e["pizza"] + e["apple"]) / np.sqrt(2),
         0.8 * e["pizza"] + 0.6 * e["car"]),
    ]
    texts = dict(e)
    images = {}
    scene_samples = []
    for index, (img, objs, text_vec, img_vec) in enumerate(scenes):
        mentioned = sorted(objs, key=lambda o: o[2])
        caption = " and ".join(o[0] for o in mentioned)
        texts[caption] = text_vec.astype(np.float32)
        images[img] = img_vec.astype(np.float32)
        records = [obj(k, c, {"size_class": "medium"}, rank, m, area=10 - rank) for k, (c, rank, m) in
                   enumerate(objs, start=1)]
        scene_samples.append(Sample(index, image(img), np.zeros((8, 8), np.uint8), caption, records, [], {}))
    refs = []
    for index, category in enumerate(VOCAB):
        images[100 + index] = e[category]
        refs.append(Sample(index, image(100 + index), np.zeros((8, 8), np.uint8), category,
                           [obj(1, category, {"size_class": "medium"}, 1, 1)], [], {}))
    gen = SpecGenerator({"scenes": scene_samples, "references": refs}, name="comco",
                        attribute_names=["size_class"])
    path = build(tmp_path, name, gen)
    return path, FakeEncoder(dim, texts, images)
