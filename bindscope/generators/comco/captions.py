"""Captions of ComCO / SimCO scenes: the objects' mention order and the caption text (pure Python + numpy,
never imports bpy).

A caption names the objects joined with ``caption.joiner`` (default ``" and "``, Abbasi et al., "CLIP Under
the Microscope", CVPR 2025; docs/papers.md section 1), each by its category name or, with ``--attributes``,
by its attribute phrase (:func:`attributes.object_words`), optionally placed into a template.

Mention order. By default it is sampled uniformly at random (seeded) rather than from
``itertools.combinations`` over a fixed list as in the authors' code, so that position is not confounded with
list order. ``saliency`` (key absent: uniform) ties it to what the image shows, as MADMAN's ``saliency`` does
(Gurung et al., GCPR 2025; the ComCO paper's origin-of-bias argument: captions name large objects first):

- ``size``: the salient object is the one planned largest (``one-large``: the large object; ``random``: the
  largest planned scale). With probability ``saliency_bias`` it is mentioned first and the others follow in
  random order; otherwise one of the others, drawn uniformly, is first and the rest follow in random order.
- ``position``: the salient object is the leftmost in the image. With probability ``saliency_bias`` the caption
  names the objects left to right (by the image x of their bounding-cube centres, :func:`camera.project`);
  otherwise one of the others is first, as above.

So ``saliency_bias`` is the probability that the salient object is mentioned first, whatever the object count
(uniform order would give 1 / m for m objects).
"""

from __future__ import annotations

import numpy as np

from bindscope.generators.comco import attributes as attrs
from bindscope.generators.comco.saliency import DEFAULT_SALIENCY_BIAS

def saliency_mode(config: dict) -> str | None:
    """``"size"``, ``"position"`` or None (uniform mention order): the config's ``saliency``."""
    return config.get("saliency")


def saliency_order(objects: list[dict], config: dict, image_x: list[float] | None = None) -> list[int] | None:
    """The mention order (0-based object positions) that ``saliency`` asks for, salient object first; None
    without ``saliency`` or with fewer than two objects.

    Args:
        objects: the spec objects of a scene (``scale``, ``large``).
        config: resolved config.
        image_x: ``position``: the image x (pixels) of each object's bounding-cube centre.

    Returns:
        ``size``: ``[salient]`` only (the rest is drawn at random); ``position``: every object, left to right
        (ties: lower index first).
    """
    mode = saliency_mode(config)
    if mode is None or len(objects) < 2:
        return None
    if mode == "position":
        return [int(k) for k in np.argsort(np.asarray(image_x, float), kind="stable")]
    large = [k for k, e in enumerate(objects) if e["large"]]
    return large or [int(np.argmax([e["scale"] for e in objects]))]


def mention_order(count: int, config: dict, rng: np.random.Generator, ordered: list[int] | None = None) -> list[int]:
    """Object positions (0-based) in mention order.

    Without ``ordered`` (:func:`saliency_order`): a uniformly random permutation (``rng.permutation(count)``, the
    draw of every dataset made without ``saliency``). With it: one uniform draw ``u``; if ``u <
    saliency_bias`` the order starts with ``ordered`` and the objects it leaves out follow in random order,
    otherwise an object other than ``ordered[0]`` is drawn uniformly to be first and the rest follow in random
    order.
    """
    if ordered is None:
        return [int(v) for v in rng.permutation(count)]
    bias = config.get("saliency_bias", DEFAULT_SALIENCY_BIAS)
    if rng.random() < bias:
        head = list(ordered)
    else:
        others = [k for k in range(count) if k != ordered[0]]
        head = [others[int(rng.integers(len(others)))]]
    rest = [k for k in range(count) if k not in head]
    return head + [rest[int(i)] for i in rng.permutation(len(rest))]


def make_caption(names: list[str], config: dict, rng: np.random.Generator,
                 ordered: list[int] | None = None) -> tuple[str, list[int], dict]:
    """Caption of a scene, the 1-based mention position of each object, and how it was made.

    The mention order is :func:`mention_order` (uniform without ``ordered``); the caption is the names (object
    phrases, e.g. ``"small red metal cube"`` with ``--attributes``) in that order joined with ``caption.joiner``
    (default ``" and "``, Abbasi et al., CVPR 2025), placed into a template drawn uniformly from
    ``caption.templates`` (each holds ``{objects}``) when any are given.

    Returns:
        ``(caption, positions, parts)`` with ``positions[i]`` the mention position of ``names[i]`` and
        ``parts = {"order": [object positions in mention order], "joiner", "template" ("" for none)}``.
    """
    order = mention_order(len(names), config, rng, ordered)
    positions = [0] * len(names)
    for pos, i in enumerate(order, start=1):
        positions[i] = pos
    templates = config["caption"]["templates"]
    template = templates[int(rng.integers(len(templates)))] if templates else ""
    parts = attrs.CaptionParts(tuple(order), config["caption"]["joiner"], template)
    return parts.text(names), positions, {"order": order, "joiner": parts.joiner, "template": template}


def caption_objects(objects: list[dict], config: dict, rng: np.random.Generator,
                    image_x: list[float] | None = None) -> tuple[str, dict, int | None]:
    """Caption the spec ``objects`` of a scene (:func:`make_caption` on their phrases, words in
    ``caption.order``, mention order from ``saliency`` and ``image_x`` as :func:`saliency_order` says) and
    store each object's 1-based ``"mention_position"`` in its entry.

    Returns:
        ``(caption, parts, salient)``: caption and parts as :func:`make_caption`; ``salient`` the 1-based index
        of the salient object (None without ``saliency`` or with one object).
    """
    order = attrs.caption_order(config)
    names = [attrs.object_words(entry, order, config["attributes"]) for entry in objects]
    ordered = saliency_order(objects, config, image_x)
    caption, mentions, parts = make_caption(names, config, rng, ordered)
    for entry, position in zip(objects, mentions):
        entry["mention_position"] = position
    return caption, parts, None if ordered is None else objects[ordered[0]]["index"]
