"""Captions of ComCO / SimCO scenes: the objects' mention order and the caption text (pure Python + numpy,
never imports bpy).

A caption names the objects joined with ``caption.joiner`` (default ``" and "``, Abbasi et al., "CLIP Under
the Microscope", CVPR 2025; docs/papers.md section 1), each by its category name or, with ``--attributes``,
by its attribute phrase (:func:`attributes.object_words`), optionally placed into a template. The mention order
is sampled uniformly at random (seeded) rather than from ``itertools.combinations`` over a fixed list as in
the authors' code, so that position is not confounded with list order.
"""

from __future__ import annotations

import numpy as np

from bindscope.generators.comco import attributes as attrs


def make_caption(names: list[str], config: dict, rng: np.random.Generator) -> tuple[str, list[int], dict]:
    """Caption of a scene, the 1-based mention position of each object, and how it was made.

    The mention order is a uniformly random permutation (seeded); the caption is the names (object phrases,
    e.g. ``"small red metal cube"`` with ``--attributes``) in that order joined with ``caption.joiner``
    (default ``" and "``, Abbasi et al., CVPR 2025), placed into a template drawn uniformly from
    ``caption.templates`` (each holds ``{objects}``) when any are given.

    Returns:
        ``(caption, positions, parts)`` with ``positions[i]`` the mention position of ``names[i]`` and
        ``parts = {"order": [object positions in mention order], "joiner", "template" ("" for none)}``.
    """
    order = [int(v) for v in rng.permutation(len(names))]
    positions = [0] * len(names)
    for pos, i in enumerate(order, start=1):
        positions[i] = pos
    templates = config["caption"]["templates"]
    template = templates[int(rng.integers(len(templates)))] if templates else ""
    parts = attrs.CaptionParts(tuple(order), config["caption"]["joiner"], template)
    return parts.text(names), positions, {"order": order, "joiner": parts.joiner, "template": template}


def caption_objects(objects: list[dict], config: dict, rng: np.random.Generator) -> tuple[str, dict]:
    """Caption the spec ``objects`` of a scene (:func:`make_caption` on their phrases, words in
    ``caption.order``) and store each object's 1-based ``"mention_position"`` in its entry.

    Returns:
        ``(caption, parts)`` as :func:`make_caption`.
    """
    order = attrs.caption_order(config)
    names = [attrs.object_words(entry, order, config["attributes"]) for entry in objects]
    caption, mentions, parts = make_caption(names, config, rng)
    for entry, position in zip(objects, mentions):
        entry["mention_position"] = position
    return caption, parts
