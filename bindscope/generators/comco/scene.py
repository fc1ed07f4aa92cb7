"""Scene specs of ComCO / SimCO, assembled from their pieces and checked before rendering (pure Python +
numpy, never imports bpy).

A *scene spec* is a JSON-serialisable dict that fixes everything a renderer needs: which categories, their
scale (metres of the largest dimension), position on the ground and yaw (:mod:`.layout`), the camera (fitted
to the layout, :func:`camera.frame_camera`), the light, the backdrop, the Cycles seed, the caption and its
mention order (:mod:`.captions`). :func:`plan_scene` makes the spec of scene ``index`` from ``(config, seed,
index, attempt, factors)`` alone, so plans are identical for any number of jobs; the generator re-plans a
scene whose render breaks a rule (with scale ``factors`` first, then with ``attempt + 1``).
:func:`plan_reference` makes the spec of a reference image, :func:`plan_rejection` tells whether a plan can
pass the visibility rule, and :func:`check_plannable` validates a config by planning before anything is
rendered. All randomness of scene ``index`` comes from :func:`sample_rng`.

Protocol sources: Abbasi et al., "CLIP Under the Microscope" (CVPR 2025), docs/papers.md section 1 (ComCO/SimCO:
2-5 objects, controlled number, position and size; captions = names joined with " and "; one large object and
the rest small for the image-side experiments). Unpublished values (scales, ground, camera, light) are this
project's choices, documented in docs/comco.md and exposed as config values (:data:`config.DEFAULT_CONFIG`).
"""

from __future__ import annotations

import math
import zlib

import numpy as np

from bindscope.generators.comco import attributes as attrs
from bindscope.generators.comco import quality
from bindscope.generators.comco.camera import frame_camera, object_corners, project, projected_boxes
from bindscope.generators.comco.captions import caption_objects
from bindscope.generators.comco.config import check_category_count, check_cross_keys, check_grid_slots, object_counts
from bindscope.generators.comco.layout import check_capacity, lay_out

SPLIT_SCENES = "scenes"
"""Split of the multi-object scenes."""
SPLIT_REFERENCES = "references"
"""Split of the single-object reference images (one per category)."""
SPEC_VERSION = 2
"""Version of the spec layout (the spec's ``"version"``)."""


def _split_code(split: str) -> int:
    return zlib.crc32(split.encode("utf-8"))


def sample_rng(seed: int, split: str, index: int, attempt: int = 0, stream: int = 0) -> np.random.Generator:
    """The numpy generator of one planning attempt: a pure function of (seed, split, index, attempt, stream)."""
    return np.random.default_rng([seed, _split_code(split), index, attempt, stream])


def object_count(config: dict, seed: int, index: int) -> int:
    """Number of objects in scene ``index``.

    Without ``objects.weights`` the counts cycle (``min + index % k``), so each count gets the same share of
    scenes up to one; with weights (one per count, normalised) the count is drawn with them (seeded).
    """
    counts = object_counts(config)
    weights = config["objects"].get("weights")
    if not weights:
        return counts[index % len(counts)]
    p = np.asarray(weights, dtype=float)
    rng = sample_rng(seed, SPLIT_SCENES, index, 0, stream=1)
    return int(counts[int(rng.choice(len(counts), p=p / p.sum()))])


def _jittered(base: float, jitter: float, rng: np.random.Generator) -> float:
    return float(base + rng.uniform(-jitter, jitter)) if jitter > 0 else float(base)


def plan_light(config: dict, rng: np.random.Generator | None) -> dict:
    """The sun of a scene: ``elevation_deg`` / ``azimuth_deg`` (direction *from which* it shines, azimuth 0 =
    the -y side, positive towards +x), ``strength`` (W/m^2), ``ambient`` (world strength): the config's values
    plus uniform jitter (none when ``rng`` is None)."""
    l = config["light"]
    lj = l["jitter"]
    if rng is None:
        light = {"elevation_deg": l["elevation_deg"], "azimuth_deg": l["azimuth_deg"], "strength": l["strength"]}
    else:
        light = {"elevation_deg": _jittered(l["elevation_deg"], lj["elevation_deg"], rng),
                 "azimuth_deg": _jittered(l["azimuth_deg"], lj["azimuth_deg"], rng),
                 "strength": max(0.0, _jittered(l["strength"], lj["strength"], rng))}
    light["ambient"] = float(l["ambient"])
    return light


def min_visible_pixels(config: dict) -> int:
    """The least visible pixel count an object may show: ``visibility.min_fraction`` of the image, at least
    ``visibility.min_pixels`` (the floor)."""
    vis = config["visibility"]
    res = int(config["resolution"])
    return max(int(vis["min_pixels"]), math.ceil(vis["min_fraction"] * res * res))


def render_settings(config: dict, seed: int, split: str, index: int, attempt: int) -> dict:
    """Render block of a spec: resolution (pixels), Cycles samples (``samples``, else those of
    ``render.quality``), denoise flag, Cycles seed (0..2^31-1) and ``quality`` (``render.quality``; the Cycles
    settings of the RGB render, ``quality.cycles_settings``). A config without ``render`` (the manifest of a
    ComCO generator ``"0.1.0"`` dataset) gives a block without ``quality``: that version's settings."""
    cycles_seed = int(sample_rng(seed, split, index, attempt, stream=2).integers(0, 2 ** 31 - 1))
    block = {"resolution": int(config["resolution"]), "samples": quality.samples_for(config),
             "denoise": bool(config["denoise"]), "seed": cycles_seed}
    if "render" in config:
        block["quality"] = config["render"]["quality"]
    return block


def _world(config: dict, objects: list[dict]) -> dict:
    """World block of a spec: colours and the backdrop, whose curve starts ``backdrop.gap`` metres behind the
    rearmost bounding-cube corner (``y``, metres) and rises with radius ``radius`` into the back wall."""
    b = config["backdrop"]
    rear = max(float(object_corners(e)[:, 1].max()) for e in objects)
    return {"ground_colour": list(config["ground"]["colour"]), "background": list(config["background"]),
            "backdrop": {"kind": b["kind"], "y": rear + float(b["gap"]), "radius": float(b["radius"])}}


def _choose_categories(config: dict, categories: list, count: int, rng, look_rng, present: bool | None,
                       first=None) -> tuple[list, list | None]:
    """The scene's categories in object order, drawn from ``rng`` (``first`` fixed as object 1), or, for a
    conjunctive-search scene (``present`` not None), those of :func:`attributes.plan_conjunctive` (drawn from
    ``look_rng``; its ``(category, colour)`` plan is returned too, else None)."""
    if present is not None:
        by_name = {c.name: c for c in categories}
        planned = attrs.plan_conjunctive(config, list(by_name), count, present, look_rng)
        return [by_name[name] for name, _ in planned], planned
    check_category_count(config, categories, count)
    if first is None:
        return [categories[int(i)] for i in rng.choice(len(categories), size=count, replace=False)], None
    others = [c for c in categories if c.name != first.name]
    return [first] + [others[int(i)] for i in rng.choice(len(others), size=count - 1, replace=False)], None


def image_x(camera: dict, objects: list[dict], config: dict) -> list[float]:
    """The image x (pixels, x right) of each spec object's bounding-cube centre seen by the spec ``camera``
    (:func:`camera.project`): the left-to-right order of ``saliency: position``."""
    centres = np.array([[e["x"], e["y"], e["scale"] / 2] for e in objects])
    return [float(v) for v in project(camera, centres, int(config["resolution"]))[:, 0]]


def plan_scene(config: dict, categories: list, seed: int, index: int, attempt: int = 0,
               factors: list[float] | None = None, split: str = SPLIT_SCENES, first=None) -> dict:
    """The spec of scene ``index`` of split ``"scenes"`` (a pure function of its arguments).

    Args:
        config: resolved ``comco render`` config (see :data:`config.DEFAULT_CONFIG`).
        categories: the set's :class:`bindscope.generators.comco.registry.Category` list.
        seed: dataset seed.
        index: 0-based scene index.
        attempt: re-planning attempt (0 first; the generator increments it when a render is rejected).
        factors: per-object scale factors (the generator's size corrections, see
            ``generator.size_factors``); every random draw stays the same, only scales, the row packing and
            the camera follow.
        split, first: for ``references: crop``: the split whose seeds are used, and a category that must be
            object 1 (the large object in ``one-large`` mode).

    Returns:
        ``{"version", "kind": "scene", "split", "index", "attempt", "set", "size_mode", "objects": [...],
        "caption", "camera", "light", "world", "render"}``; each object is ``{"index" (1-based mask id),
        "category", "category_id", "size_class", "scale" (m), "x", "y" (m), "yaw_deg", "large" (bool),
        "slot", "mention_position"}``; camera as :func:`camera.frame_camera` (framed on the objects' bounding cubes
        with ``camera.margin`` of the image side free on the tighter axis). With ``attributes`` each object also
        has ``"colour"``, ``"material"`` (names, ``""`` when not sampled), ``"look"``
        (:func:`attributes.resolved_look`) and, with ``size``, ``"size"``; the spec has ``"caption_parts"``
        (mention order, joiner, template). With ``saliency`` (two or more objects) the spec has ``"salient"``,
        the 1-based index of the object the caption names first with probability ``saliency_bias``
        (:mod:`.captions`). With ``task: conjunctive-search`` the spec has
        ``"conjunctive_search": {"target", "present", "distractors"}`` and the objects are those of
        :func:`attributes.plan_conjunctive` (categories may repeat).

    Raises:
        BadInput: the set has fewer categories than the scene needs, or no layout fits (see :func:`layout.place`).
    """
    count = object_count(config, seed, index)
    rng = sample_rng(seed, split, index, attempt)
    look_rng = sample_rng(seed, split, index, attempt, stream=3)
    conjunctive = config["task"] == "conjunctive-search"
    present = attrs.conjunctive_present(config, index) if conjunctive else None
    chosen, planned = _choose_categories(config, categories, count, rng, look_rng, present, first)
    p = config["placement"]
    yaws = [float(v) for v in rng.uniform(-p["yaw_jitter_deg"], p["yaw_jitter_deg"], size=count)]
    scales, large, slots, positions = lay_out(config, count, yaws, rng, factors, first is not None)
    c = config["camera"]
    elevation = min(89.0, max(0.0, _jittered(c["elevation_deg"], c["jitter"]["elevation_deg"], rng)))
    azimuth = _jittered(0.0, c["jitter"]["azimuth_deg"], rng)
    light = plan_light(config, rng)
    objects = [{"index": k + 1, "category": cat.name, "category_id": cat.id, "size_class": cat.size_class,
                "scale": float(scales[k]), "x": float(positions[k][0]), "y": float(positions[k][1]),
                "yaw_deg": yaws[k], "large": k == large, "slot": slots[k]}
               for k, cat in enumerate(chosen)]
    sampled = config["attributes"]
    if sampled:
        looks = attrs.sample_attributes(config, [cat.name for cat in chosen], look_rng)
        for k, (entry, (colour, material)) in enumerate(zip(objects, looks)):
            colour = planned[k][1] if conjunctive else colour
            if "size" in sampled:
                entry["size"] = "large" if entry["large"] else "small"
            entry.update(colour=colour, material=material, look=attrs.resolved_look(config, colour, material))
    middle = [e["x"] for e in objects if e["slot"] == "middle"]
    camera = frame_camera(np.concatenate([object_corners(e) for e in objects]), elevation, azimuth,
                          c["focal_mm"], 1 - 2 * c["margin"],
                          centre_x=float(np.mean(middle)) if middle and p["mode"] == "row" else None)
    caption, parts, salient = caption_objects(objects, config, rng, image_x(camera, objects, config))
    spec = {"version": SPEC_VERSION, "kind": "scene", "split": split, "index": index, "attempt": attempt,
            "set": config["set"], "size_mode": config["size_mode"], "objects": objects, "caption": caption,
            "camera": camera, "light": light, "world": _world(config, objects),
            "render": render_settings(config, seed, split, index, attempt)}
    if sampled:
        spec["caption_parts"] = parts
    if salient is not None:
        spec["salient"] = salient
    if conjunctive:
        target = config["conjunctive_search"]["target"]
        spec["conjunctive_search"] = {"target": dict(target), "present": present, "distractors": count - 1}
    return spec


def plan_reference(config: dict, categories: list, seed: int, index: int, attempt: int = 0,
                   factors: list[float] | None = None) -> dict:
    """The spec of reference image ``index``: category ``categories[index]`` alone, centred at the origin,
    at ``scale.reference`` metres, facing the camera (yaw 0), with the un-jittered camera angles and light and
    the same backdrop as the scenes; the camera frames the object's bounding cube to ``camera.reference_fill``
    of the image side (the generator then zooms on the object's mask, :func:`camera.zoom_to_box`).
    Caption = the category name. Same keys as :func:`plan_scene` (``"kind": "reference"``).

    With ``references: crop`` the spec is instead a scene (:func:`plan_scene` under split ``"references"``)
    whose object 1 is the category (the large object in ``one-large`` mode); the generator renders that object
    alone from the scene's camera, zoomed onto it (``"kind": "crop"``, ``ComcoGenerator.render_crop``).
    """
    c = categories[index]
    if config["references"] == "crop":
        spec = plan_scene(config, categories, seed, index, attempt, factors, split=SPLIT_REFERENCES, first=c)
        return {**spec, "kind": "crop", "caption": c.name}
    obj = {"index": 1, "category": c.name, "category_id": c.id, "size_class": c.size_class,
           "scale": float(config["scale"]["reference"]), "x": 0.0, "y": 0.0, "yaw_deg": 0.0, "large": True,
           "slot": "middle", "mention_position": 1}
    cam = config["camera"]
    camera = frame_camera(object_corners(obj), cam["elevation_deg"], 0.0, cam["focal_mm"], cam["reference_fill"])
    return {"version": SPEC_VERSION, "kind": "reference", "split": SPLIT_REFERENCES, "index": index,
            "attempt": 0, "set": config["set"], "size_mode": "reference", "objects": [obj], "caption": c.name,
            "camera": camera, "light": plan_light(config, None), "world": _world(config, [obj]),
            "render": render_settings(config, seed, SPLIT_REFERENCES, index, 0)}


def plan_rejection(spec: dict, config: dict) -> str | None:
    """Why a planned scene cannot pass the visibility rule, decided before rendering (None when it may): an
    object whose bounding cube projects to fewer pixels than :func:`min_visible_pixels` cannot show that
    many."""
    threshold = min_visible_pixels(config)
    for entry, (x0, y0, x1, y1) in zip(spec["objects"], projected_boxes(spec)):
        if (x1 - x0) * (y1 - y0) < threshold:
            return (f"object {entry['index']} ({entry['category']}) projects to at most {(x1 - x0) * (y1 - y0):.0f}"
                    f" pixels, fewer than the visibility minimum of {threshold}")
    return None


def check_plannable(config: dict, categories: list, seed: int, probe: int = 64) -> None:
    """Validate a config by planning before anything is rendered or written.

    Runs the config's cross-key checks (:func:`config.check_cross_keys`), then for every object count the
    set's size (:func:`config.check_category_count`, not for conjunctive search, whose scenes repeat
    categories) and, outside ``placement.mode: row``, the capacity of the worst-case scale list
    (:func:`layout.check_capacity`; one-large: one large + small ones; equal: all equal; random: all at
    ``scale.small``, the least any scene needs) and the grid size (:func:`config.check_grid_slots`), and plans
    the first ``probe`` scenes.

    Raises:
        BadInput: as :func:`plan_scene` (e.g. "impossible layout: ...").
    """
    s, p = config["scale"], config["placement"]
    check_cross_keys(config, [c.name for c in categories])
    for count in object_counts(config):
        if config["task"] != "conjunctive-search":  # conjunctive-search scenes repeat categories
            check_category_count(config, categories, count)
        if p["mode"] == "row":
            continue
        worst = {"one-large": [s["large"]] + [s["small"]] * (count - 1), "equal": [s["equal"]] * count,
                 "random": [s["small"]] * count}[config["size_mode"]]
        check_capacity(config, worst)
        check_grid_slots(config, count)
    for index in range(min(probe, config["n"])):
        plan_scene(config, categories, seed, index)
