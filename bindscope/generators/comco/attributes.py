"""Per-object colour and material for ComCO / SimCO scenes, attribute captions, negatives and the
conjunctive-search scene plan (pure Python + numpy, never imports bpy).

``comco render --attributes colour,material[,size]`` gives every object of a scene a colour (a name of the
``colours`` table: name -> linear RGB in 0..1; default CLEVR's 8) and a material (a name of the ``materials``
table: name -> Principled BSDF ``metallic``/``roughness``; default CLEVR's rubber and metal), drawn per
object, uniformly over the (colour, material) pairs its category allows. ``combinations.held_out`` lists
``{category, colour?, material?}`` entries; ``combinations.mode`` ``exclude`` never draws a matching object
(training data), ``only`` draws the listed categories *only* in matching combinations (the out-of-distribution
test data), other categories are unaffected. Colours follow CLEVR (Johnson et al., "CLEVR: A Diagnostic
Dataset for Compositional Language and Elementary Visual Reasoning", CVPR 2017; its 8 colours and two
materials); LABCLIP's tests on such scenes: Koishigarina, Uselis, Oh, docs/papers.md section 3.

Captions name each object by its attribute words in ``caption.order`` (default size, colour, material) then
its category: ``"small red metal cube and large blue rubber sphere"``. :func:`scene_negatives` gives the
MADMAN-style negatives (Gurung et al., GCPR 2025): a ``recognition`` negative per object and attribute (its
value replaced by another value of the table, seeded) and a ``binding`` negative per attribute and pair of
objects with different values (the two values swapped). No negative equals the caption.

**Conjunctive search** (``task: conjunctive-search``; LABCLIP's unimodal test, docs/papers.md section 3): every
scene holds a fixed target conjunction (``conjunctive_search.target``, e.g. ``{category: sphere, colour: red}``)
or not; see :func:`plan_conjunctive`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from bindscope.errors import BadInput
from bindscope.format.records import Negative

ATTRIBUTES = ("colour", "material", "size")
"""Attributes ``--attributes`` may name (``size``: the planned ``large``/``small`` of ``one-large`` mode)."""

CLEVR_COLOURS_SRGB8 = {"gray": (87, 87, 87), "red": (173, 35, 35), "blue": (42, 75, 215), "green": (29, 105, 20),
                       "brown": (129, 74, 25), "purple": (129, 38, 192), "cyan": (41, 208, 208),
                       "yellow": (255, 238, 51)}
"""CLEVR's 8 colours as 8-bit sRGB (Johnson et al. 2017, the generator's ``properties.json``)."""

CLEVR_MATERIALS = {"rubber": {"metallic": 0.0, "roughness": 0.7}, "metal": {"metallic": 1.0, "roughness": 0.25}}
"""CLEVR's two materials as Principled BSDF settings (metallic 0..1, roughness 0..1): this project's choice
(CLEVR's own node groups are not Principled BSDFs)."""


def srgb_to_linear(value: float) -> float:
    """sRGB component (0..1) -> linear component (0..1) (IEC 61966-2-1), as Blender's Base Color expects."""
    return value / 12.92 if value <= 0.04045 else ((value + 0.055) / 1.055) ** 2.4


DEFAULT_COLOURS = {name: [round(srgb_to_linear(c / 255.0), 4) for c in rgb]
                   for name, rgb in CLEVR_COLOURS_SRGB8.items()}
"""Default ``colours`` table: CLEVR's 8 colours as linear RGB (0..1, 4 decimals)."""

DEFAULT_ATTRIBUTE_CONFIG = {
    "attributes": [],
    "colours": DEFAULT_COLOURS,
    "materials": CLEVR_MATERIALS,
    "combinations": {"held_out": [], "mode": "exclude"},
    "task": "scenes",
    "conjunctive_search": {"target": {"category": "sphere", "colour": "red"}},
}
"""The config keys of this module (merged into ``config.DEFAULT_CONFIG``)."""


def parse_attributes(text: str) -> list[str]:
    """``"colour,material"`` -> ``["colour", "material"]`` (order kept, duplicates dropped).

    Raises:
        BadInput: an unknown name (allowed: colour, material, size) or an empty list.
    """
    names = [t.strip() for t in str(text).split(",") if t.strip()]
    for name in names:
        if name not in ATTRIBUTES:
            raise BadInput(f"attributes {text!r}: unknown attribute {name!r}; allowed: {', '.join(ATTRIBUTES)}",
                           param="attributes")
    if not names:
        raise BadInput(f"attributes {text!r}: name at least one of {', '.join(ATTRIBUTES)}", param="attributes")
    return list(dict.fromkeys(names))


def _matches(entry: dict, category: str, colour: str, material: str) -> bool:
    return entry["category"] == category and entry.get("colour", colour) == colour \
        and entry.get("material", material) == material


def allowed_pairs(config: dict, category: str) -> list[tuple[str, str]]:
    """The ``(colour, material)`` pairs an object of ``category`` may get, in table order.

    Colours come from ``colours`` when ``colour`` is sampled, else ``[""]`` (the model keeps its own colour);
    materials likewise. ``combinations`` then removes (``exclude``) or keeps only (``only``, for categories it
    names) the pairs matching a ``held_out`` entry.
    """
    sampled = config["attributes"]
    colours = list(config["colours"]) if "colour" in sampled else [""]
    materials = list(config["materials"]) if "material" in sampled else [""]
    pairs = [(c, m) for c in colours for m in materials]
    held = [e for e in config["combinations"]["held_out"] if e["category"] == category]
    if not held:
        return pairs
    if config["combinations"]["mode"] == "exclude":
        return [p for p in pairs if not any(_matches(e, category, *p) for e in held)]
    return [p for p in pairs if any(_matches(e, category, *p) for e in held)]


def check_attribute_config(config: dict, category_names: list[str]) -> None:
    """Cross-key checks of the attribute config before anything is planned.

    Raises:
        BadInput: ``size`` requested outside ``one-large`` mode; a held-out entry naming an unknown category,
            colour or material, or no colour/material at all; a category left with no allowed pair; a
            conjunctive-search target that is not in the set or colour table, a set of fewer than 2
            categories or tables of fewer than 2 colours, scenes of fewer than 2 objects or of more than the
            distinct distractors allow, or ``colour`` not among the sampled attributes.
    """
    sampled = config["attributes"]
    if "size" in sampled and config["size_mode"] != "one-large":
        raise BadInput(f"attributes size needs size_mode='one-large' (sizes large/small); got "
                       f"{config['size_mode']!r}", param="attributes")
    names = set(category_names)
    for entry in config["combinations"]["held_out"]:
        if entry["category"] not in names:
            raise BadInput(f"combinations.held_out: category {entry['category']!r} is not in set "
                           f"{config['set']!r}")
        if "colour" not in entry and "material" not in entry:
            raise BadInput(f"combinations.held_out entry {entry}: give a colour and/or a material")
        for key, table in (("colour", "colours"), ("material", "materials")):
            if key in entry and (key not in sampled or entry[key] not in config[table]):
                raise BadInput(f"combinations.held_out: {key} {entry[key]!r} is not a sampled {key}; "
                               f"attributes must include {key} and {table} has {', '.join(config[table])}")
    for name in sorted({e["category"] for e in config["combinations"]["held_out"]}):
        if not allowed_pairs(config, name):
            raise BadInput(f"combinations.held_out leaves category {name!r} no colour/material to draw "
                           f"(mode {config['combinations']['mode']!r})")
    if config["task"] == "conjunctive-search":
        target = config["conjunctive_search"]["target"]
        if "colour" not in sampled:
            raise BadInput("task conjunctive-search needs attributes='colour' (the target is a shape-colour "
                           "conjunction)", param="task")
        if target["category"] not in names or target["colour"] not in config["colours"]:
            raise BadInput(f"conjunctive_search.target {target}: the category must be in set {config['set']!r} "
                           f"and the colour in colours ({', '.join(config['colours'])})")
        if len(names) < 2 or len(config["colours"]) < 2 or config["objects"]["min"] < 2:
            raise BadInput("task conjunctive-search needs at least 2 categories, 2 colours and objects of at "
                           "least 2 (target plus a distractor)", param="task")
        pool = len(names) + len(config["colours"]) - 4
        if config["objects"]["max"] - 2 > pool:
            raise BadInput(f"task conjunctive-search: {config['objects']['max']} objects need "
                           f"{config['objects']['max'] - 2} distinct distractors, but set and colours allow {pool}; "
                           "lower objects or add colours", param="task")


def sample_attributes(config: dict, categories: list[str], rng: np.random.Generator) -> list[tuple[str, str]]:
    """Per object of ``categories``, its ``(colour, material)`` drawn uniformly among :func:`allowed_pairs`
    (``""`` for an attribute that is not sampled). One ``rng`` draw per object, in object order."""
    out = []
    for name in categories:
        pairs = allowed_pairs(config, name)
        out.append(pairs[int(rng.integers(len(pairs)))])
    return out


def resolved_look(config: dict, colour: str, material: str) -> dict:
    """The renderer's view of an object's look: ``{"rgb": linear [r, g, b] or None, "bsdf": {metallic,
    roughness} or None}`` (None: keep the model's own)."""
    return {"rgb": [float(v) for v in config["colours"][colour]] if colour else None,
            "bsdf": {k: float(v) for k, v in config["materials"][material].items()} if material else None}


def object_words(entry: dict, order: list[str], attributes: list[str]) -> str:
    """The caption phrase of one spec object: its values of ``attributes`` in ``order``, then its category."""
    words = [entry[a] for a in order if a in attributes and entry.get(a)]
    return " ".join(words + [entry["category"]])


def caption_order(config: dict) -> list[str]:
    """The word order of attribute phrases: ``caption.order`` (default size, colour, material)."""
    return list(config["caption"].get("order") or ATTRIBUTES[2:] + ATTRIBUTES[:2])


@dataclass(frozen=True)
class CaptionParts:
    """How a scene caption was put together, so that negatives can rebuild it with other values.

    Attributes:
        order: object positions (0-based, spec order) in mention order.
        joiner: text between object phrases. template: the template (``{objects}`` kept) or ``""``.
    """

    order: tuple[int, ...]
    joiner: str
    template: str

    def text(self, phrases: list[str]) -> str:
        body = self.joiner.join(phrases[i] for i in self.order)
        return self.template.replace("{objects}", body) if self.template else body


def scene_negatives(spec: dict, config: dict, rng: np.random.Generator) -> list[Negative]:
    """Recognition and binding negatives of a scene spec whose caption gives ``config["attributes"]``.

    For each sampled attribute (in ``--attributes`` order):

    - ``recognition``: for each object (index order), its value replaced by another value of the table
      (``colours``, ``materials``, or the other size) drawn uniformly with ``rng``; objects ``(k,)``.
    - ``binding``: for each pair of objects (index order) with different values, the values swapped; objects
      ``(i, j)``, original ``"vi|vj"``, replacement ``"vj|vi"``.

    A negative whose text equals the caption (possible only with unusual templates) is dropped.
    """
    attributes = config["attributes"]
    objects = spec["objects"]
    parts = CaptionParts(tuple(spec["caption_parts"]["order"]), spec["caption_parts"]["joiner"],
                         spec["caption_parts"]["template"])
    order = caption_order(config)
    tables = {"colour": list(config["colours"]), "material": list(config["materials"]),
              "size": ["large", "small"]}

    def caption_with(changes: dict[int, tuple[str, str]]) -> str:
        phrases = []
        for k, entry in enumerate(objects):
            entry = dict(entry)
            if k in changes:
                entry[changes[k][0]] = changes[k][1]
            phrases.append(object_words(entry, order, attributes))
        return parts.text(phrases)

    out = []
    for a in attributes:
        for k, entry in enumerate(objects):
            others = [v for v in tables[a] if v != entry[a]]
            if others:
                new = others[int(rng.integers(len(others)))]
                out.append(Negative("recognition", caption_with({k: (a, new)}), a, (entry["index"],), entry[a], new))
        for i in range(len(objects)):
            for j in range(i + 1, len(objects)):
                vi, vj = objects[i][a], objects[j][a]
                if vi != vj:
                    out.append(Negative("binding", caption_with({i: (a, vj), j: (a, vi)}), a,
                                        (objects[i]["index"], objects[j]["index"]), f"{vi}|{vj}", f"{vj}|{vi}"))
    return [n for n in out if n.caption != spec["caption"]]


def parse_caption(caption: str, config: dict, category_names: list[str]) -> list[dict]:
    """Read a caption made with ``config`` back into ``[{"category", <attribute>: value, ...}]`` in mention
    order (the inverse of the caption builder; used by tests and by tools that only hold text).

    Raises:
        BadInput: the caption does not follow the config's templates, joiner and vocabulary.
    """
    attributes, order = config["attributes"], caption_order(config)
    vocab = {"colour": list(config["colours"]), "material": list(config["materials"]), "size": ["large", "small"]}
    alt = lambda values: "|".join(re.escape(v) for v in sorted(values, key=len, reverse=True))  # noqa: E731
    phrase = "".join(rf"(?P<{a}>{alt(vocab[a])}) " for a in order if a in attributes) + \
        rf"(?P<category>{alt(category_names)})"
    for template in config["caption"]["templates"] or ["{objects}"]:
        head, _, tail = template.partition("{objects}")
        if not (caption.startswith(head) and caption.endswith(tail) and len(caption) >= len(head) + len(tail)):
            continue
        matches = [re.fullmatch(phrase, part)
                   for part in caption[len(head):len(caption) - len(tail)].split(config["caption"]["joiner"])]
        if all(matches):
            return [m.groupdict() for m in matches]
    raise BadInput(f"caption {caption!r} does not follow the config's caption format")


# ------------------------------------------------------------------------------------- conjunctive search


def conjunctive_present(config: dict, index: int) -> bool:
    """Whether scene ``index`` holds the target: alternates per cycle of object counts (``index // k`` even),
    so every object count gets target-present and target-absent scenes in equal shares (up to one)."""
    k = config["objects"]["max"] - config["objects"]["min"] + 1
    return (index // k) % 2 == 0


def plan_conjunctive(config: dict, category_names: list[str], count: int, present: bool,
                     rng: np.random.Generator) -> list[tuple[str, str]]:
    """``(category, colour)`` of the ``count`` objects of a conjunctive-search scene, in object order.

    Target T = (S, C). With a random shape s != S and colour c != C (the *pair values*) and ``count - 2``
    distinct distractors, each (S, c_i != C) or (s_i != S, C) with equal chance (one shared attribute):

    - present: T, the filler (s, c) and the distractors;
    - absent: (S, c), (s, C) and the same distractors.

    Both scenes hold the same multiset of shapes and of colours, so a bag of words (attribute values without
    their pairing) cannot tell present from absent: only binding can. (Requiring every non-target object to
    share one attribute with T makes the two bags differ in the counts of S and C, which a bag of counts
    reads off: the present scene has one more of S + C.) Objects are shuffled, so the target has no fixed
    mask id.
    """
    target = config["conjunctive_search"]["target"]
    shape, colour = target["category"], target["colour"]
    shapes = [c for c in category_names if c != shape]
    colours = [c for c in config["colours"] if c != colour]
    s, c = shapes[int(rng.integers(len(shapes)))], colours[int(rng.integers(len(colours)))]
    objects = [(shape, colour), (s, c)] if present else [(shape, c), (s, colour)]
    while len(objects) < count:  # distinct distractors; the pool (shapes + colours - 2 - 2) is never short
        if rng.random() < 0.5:
            candidate = (shape, colours[int(rng.integers(len(colours)))])
        else:
            candidate = (shapes[int(rng.integers(len(shapes)))], colour)
        if candidate not in objects and candidate not in ((shape, c), (s, colour)):
            objects.append(candidate)
    return [objects[int(i)] for i in rng.permutation(count)]
