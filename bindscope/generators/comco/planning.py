"""Scene planning for ComCO / SimCO: pure Python + numpy, never imports bpy.

A *scene spec* is a JSON-serialisable dict that fixes everything a renderer needs: which categories, their
scale (metres of the largest dimension), position on the ground plane and yaw, the camera, the light, the
Cycles seed, the caption and its mention order. :func:`plan_scene` makes the spec of scene ``index`` from
``(config, seed, index, attempt)`` alone, so plans are identical for any number of jobs, and a scene that the
renderer rejects (an object below the minimum visible pixel count, or out of frame, or in ``one-large`` mode a
small object that shows more pixels than the large one) is re-planned with ``attempt + 1``.

World frame (Blender's): metres, z up, the ground plane is z = 0, the placement region is the rectangle
``|x| <= ground.size[0] / 2``, ``|y| <= ground.size[1] / 2``. The camera sits on the -y side (azimuth 0)
at ``camera.distance`` metres from the look-at point ``(0, 0, camera.look_at_z)``, ``camera.elevation_deg``
above the ground; objects face -y (towards the camera) before their yaw jitter.

Protocol sources: Abbasi et al., "CLIP Under the Microscope" (CVPR 2025), docs/papers.md section 1 (ComCO/SimCO: 2-5 objects,
controlled number, position and size; captions = names joined with " and "; one large object and the rest
small for the image-side experiments). Unpublished values (scales, ground, camera, light) are this project's
choices, documented in docs/comco.md and exposed as config values. Mention order is sampled uniformly at
random (seeded) rather than from ``itertools.combinations`` over a fixed list as in the authors' code, so that
position is not confounded with list order.
"""

from __future__ import annotations

import math
import re
import zlib

import numpy as np

from bindscope.errors import BadInput

SIZE_MODES = ("one-large", "equal", "random")
SPLIT_SCENES = "scenes"
SPLIT_REFERENCES = "references"
SPEC_VERSION = 1

FOOTPRINT_FACTOR = math.sqrt(0.5)
"""Footprint radius per metre of scale. A model normalised to a largest dimension of 1 fits in a unit cube,
whose ground square has a half-diagonal of sqrt(1/2), so a disc of radius ``scale * sqrt(1/2)`` holds the
object's footprint for any yaw."""

DEFAULT_CONFIG: dict = {
    "set": "comco72",
    "n": 1000,
    "objects": {"min": 2, "max": 5, "weights": None},
    "size_mode": "one-large",
    "scale": {"large": 1.5, "small": 0.75, "equal": 1.0, "reference": 1.5},
    "resolution": 224,
    "samples": 16,
    "denoise": True,
    "shard_size": 64,
    "references": True,
    "ground": {"size": [5.0, 5.0], "colour": [0.55, 0.55, 0.55]},
    "background": [0.65, 0.67, 0.72],
    "placement": {"mode": "random", "min_gap": 0.15, "grid": [3, 3], "slot_jitter": 0.0,
                  "yaw_jitter_deg": 25.0, "max_tries": 100},
    "camera": {"distance": 10.0, "elevation_deg": 40.0, "focal_mm": 50.0, "look_at_z": 0.3,
               "jitter": {"distance": 0.5, "elevation_deg": 3.0, "azimuth_deg": 5.0}},
    "light": {"elevation_deg": 50.0, "azimuth_deg": -35.0, "strength": 3.0, "ambient": 0.6,
              "jitter": {"elevation_deg": 8.0, "azimuth_deg": 25.0, "strength": 0.5}},
    "visibility": {"min_pixels": 25, "in_frame": True, "max_tries": 12},
    "caption": {"joiner": " and ", "templates": []},
}
"""Defaults of every ``comco render`` config key (see bindscope/schemas/comco_config.json and docs/comco.md).

Units: scales, sizes, gaps and distances in metres (Blender units); angles in degrees; ``resolution`` in
pixels (square images); ``light.strength`` in W/m^2 of a Blender sun; ``light.ambient`` is the world
background strength; colours are linear RGB in 0..1."""


def parse_objects(text: str) -> tuple[int, int]:
    """Parse ``--objects``: ``"3"`` -> ``(3, 3)``, ``"2-5"`` -> ``(2, 5)``. Counts must lie in 1..5.

    Raises:
        BadInput: not a count or range, out of 1..5, or min > max.
    """
    match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", str(text))
    if not match:
        raise BadInput(f"--objects {text!r}: expected a count like 3 or a range like 2-5 (counts 1..5)")
    low = int(match.group(1))
    high = int(match.group(2)) if match.group(2) else low
    if not 1 <= low <= high <= 5:
        raise BadInput(f"--objects {text!r}: counts must satisfy 1 <= min <= max <= 5")
    return low, high


def object_counts(config: dict) -> list[int]:
    """The object counts ``objects.min .. objects.max`` of a config."""
    return list(range(config["objects"]["min"], config["objects"]["max"] + 1))


def _split_code(split: str) -> int:
    return zlib.crc32(split.encode("utf-8"))


def sample_rng(seed: int, split: str, index: int, attempt: int = 0, stream: int = 0) -> np.random.Generator:
    """The numpy generator of one planning attempt: a pure function of (seed, split, index, attempt, stream)."""
    return np.random.default_rng([seed, _split_code(split), index, attempt, stream])


def footprint_radius(scale: float) -> float:
    """Radius in metres of the ground disc that holds an object of largest dimension ``scale`` metres."""
    return scale * FOOTPRINT_FACTOR


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


def scales_for(config: dict, count: int, rng: np.random.Generator) -> tuple[list[float], int]:
    """Per-object scales (metres of largest dimension) and the 0-based position of the large object.

    - ``one-large``: one object, chosen uniformly, gets ``scale.large``; the others ``scale.small``.
    - ``equal``: all get ``scale.equal``; large position is -1.
    - ``random``: each scale uniform in ``[scale.small, scale.large]``; large position is -1 (the salient
      object is then the one with the largest visible area, decided after rendering). When no layout fits the
      drawn scales, :func:`plan_scene` draws again (up to :data:`RANDOM_SCALE_DRAWS` times), so crowded
      scenes realise somewhat smaller scales than the uniform draw.
    """
    s = config["scale"]
    mode = config["size_mode"]
    if mode == "one-large":
        large = int(rng.integers(count))
        return [s["large"] if i == large else s["small"] for i in range(count)], large
    if mode == "equal":
        return [float(s["equal"])] * count, -1
    return [float(v) for v in rng.uniform(s["small"], s["large"], size=count)], -1


class LayoutError(BadInput):
    """No non-overlapping layout exists or was found for a scene's objects (a :class:`BadInput`)."""


RANDOM_SCALE_DRAWS = 20
"""``size_mode: random``: how many scale draws a scene tries before giving up on a layout."""


def _layout_error(config: dict, scales: list[float], why: str) -> LayoutError:
    width, depth = config["ground"]["size"]
    return LayoutError(
        f"impossible layout: cannot place {len(scales)} objects of scale {', '.join(f'{v:g}' for v in scales)} m "
        f"(size mode {config['size_mode']!r}) on the {width:g} x {depth:g} m ground with min_gap "
        f"{config['placement']['min_gap']:g} m ({why}); enlarge ground.size, lower scale.large/scale.small, "
        f"lower --objects, or lower placement.min_gap")


def check_capacity(config: dict, scales: list[float]) -> None:
    """Quick necessary conditions for placing discs of ``scales`` on the ground; BadInput when they fail.

    Each footprint disc (radius ``r = scale * sqrt(1/2)``, grown by ``min_gap / 2``) must fit in the ground
    rectangle, and the discs' total area must not exceed the densest disc packing density (pi / sqrt(12))
    times the rectangle grown by ``min_gap / 2`` on every side.
    """
    width, depth = config["ground"]["size"]
    gap = config["placement"]["min_gap"]
    radii = [footprint_radius(v) for v in scales]
    if 2 * max(radii) > min(width, depth):
        raise _layout_error(config, scales, f"an object's footprint disc (diameter {2 * max(radii):.2f} m) is "
                                            "wider than the ground")
    area = sum(math.pi * (r + gap / 2) ** 2 for r in radii)
    if area > math.pi / math.sqrt(12) * (width + gap) * (depth + gap):
        raise _layout_error(config, scales, "the footprints' total area exceeds what the ground can hold")


def _grid_slots(config: dict) -> list[tuple[float, float]]:
    cols, rows = config["placement"]["grid"]
    width, depth = config["ground"]["size"]
    return [(-width / 2 + (c + 0.5) * width / cols, -depth / 2 + (r + 0.5) * depth / rows)
            for r in range(rows) for c in range(cols)]


def place(config: dict, scales: list[float], rng: np.random.Generator) -> list[tuple[float, float]]:
    """Ground positions ``(x, y)`` in metres for objects of ``scales``, footprints disjoint by ``min_gap``.

    ``placement.mode = "random"``: largest objects first, each position uniform in the ground rectangle shrunk
    by its footprint radius, rejected when closer than ``r_i + r_j + min_gap`` to a placed object; a failed
    layout restarts, at most ``placement.max_tries`` times. ``"grid"``: distinct slots of a ``cols x rows``
    grid drawn uniformly, each jittered uniformly by up to ``slot_jitter`` metres per axis.

    Raises:
        BadInput: no layout found within ``max_tries`` restarts, or more objects than grid slots.
    """
    check_capacity(config, scales)
    p = config["placement"]
    width, depth = config["ground"]["size"]
    gap = p["min_gap"]
    radii = [footprint_radius(v) for v in scales]
    order = sorted(range(len(scales)), key=lambda i: (-radii[i], i))
    if p["mode"] == "grid":
        slots = _grid_slots(config)
        if len(scales) > len(slots):
            raise BadInput(f"placement.grid {p['grid']} has {len(slots)} slots, fewer than the {len(scales)} "
                           "objects of a scene; enlarge placement.grid or lower --objects")
    for _ in range(p["max_tries"]):
        positions: dict[int, tuple[float, float]] = {}
        if p["mode"] == "grid":
            chosen = rng.permutation(len(slots))[:len(scales)]
            jitter = rng.uniform(-p["slot_jitter"], p["slot_jitter"], size=(len(scales), 2))
            for i in range(len(scales)):
                positions[i] = (slots[chosen[i]][0] + jitter[i, 0], slots[chosen[i]][1] + jitter[i, 1])
            ok = all(abs(x) + radii[i] <= width / 2 + 1e-9 and abs(y) + radii[i] <= depth / 2 + 1e-9
                     for i, (x, y) in positions.items())
            ok = ok and all(math.dist(positions[i], positions[j]) >= radii[i] + radii[j] + gap
                            for i in positions for j in positions if i < j)
            if ok:
                return [positions[i] for i in range(len(scales))]
            continue
        for i in order:
            hx, hy = width / 2 - radii[i], depth / 2 - radii[i]
            for _ in range(50):
                x, y = float(rng.uniform(-hx, hx)), float(rng.uniform(-hy, hy))
                if all(math.dist((x, y), q) >= radii[i] + radii[j] + gap for j, q in positions.items()):
                    positions[i] = (x, y)
                    break
            else:
                break
        if len(positions) == len(scales):
            return [positions[i] for i in range(len(scales))]
    raise _layout_error(config, scales, f"no layout found in {p['max_tries']} tries")


def _jittered(base: float, jitter: float, rng: np.random.Generator) -> float:
    return float(base + rng.uniform(-jitter, jitter)) if jitter > 0 else float(base)


def plan_camera_light(config: dict, rng: np.random.Generator | None) -> tuple[dict, dict]:
    """Camera and sun of a scene: the config's values plus uniform jitter (none when ``rng`` is None).

    Camera: ``distance`` (m), ``elevation_deg``, ``azimuth_deg`` (0 = on the -y side, positive towards +x),
    ``focal_mm`` (36 mm sensor width), ``look_at`` (x, y, z in m). Light: a sun at ``elevation_deg`` /
    ``azimuth_deg`` (direction *from which* it shines), ``strength`` (W/m^2), ``ambient`` (world strength).
    """
    c, l = config["camera"], config["light"]
    cj, lj = c["jitter"], l["jitter"]
    if rng is None:
        cam = {"distance": c["distance"], "elevation_deg": c["elevation_deg"], "azimuth_deg": 0.0}
        light = {"elevation_deg": l["elevation_deg"], "azimuth_deg": l["azimuth_deg"], "strength": l["strength"]}
    else:
        cam = {"distance": _jittered(c["distance"], cj["distance"], rng),
               "elevation_deg": _jittered(c["elevation_deg"], cj["elevation_deg"], rng),
               "azimuth_deg": _jittered(0.0, cj["azimuth_deg"], rng)}
        light = {"elevation_deg": _jittered(l["elevation_deg"], lj["elevation_deg"], rng),
                 "azimuth_deg": _jittered(l["azimuth_deg"], lj["azimuth_deg"], rng),
                 "strength": max(0.0, _jittered(l["strength"], lj["strength"], rng))}
    cam.update(focal_mm=float(c["focal_mm"]), look_at=[0.0, 0.0, float(c["look_at_z"])])
    light["ambient"] = float(l["ambient"])
    return cam, light


def make_caption(names: list[str], config: dict, rng: np.random.Generator) -> tuple[str, list[int]]:
    """Caption of a scene and the 1-based mention position of each object.

    The mention order is a uniformly random permutation (seeded); the caption is the names in that order
    joined with ``caption.joiner`` (default ``" and "``, Abbasi et al., CVPR 2025), placed into a template drawn
    uniformly from ``caption.templates`` (each holds ``{objects}``) when any are given.

    Returns:
        ``(caption, positions)`` with ``positions[i]`` the mention position of ``names[i]``.
    """
    order = [int(v) for v in rng.permutation(len(names))]
    positions = [0] * len(names)
    for pos, i in enumerate(order, start=1):
        positions[i] = pos
    text = config["caption"]["joiner"].join(names[i] for i in order)
    templates = config["caption"]["templates"]
    if templates:
        text = templates[int(rng.integers(len(templates)))].replace("{objects}", text)
    return text, positions


def render_settings(config: dict, seed: int, split: str, index: int, attempt: int) -> dict:
    """Render block of a spec: resolution (pixels), Cycles samples, denoise flag, Cycles seed (0..2^31-1)."""
    cycles_seed = int(sample_rng(seed, split, index, attempt, stream=2).integers(0, 2 ** 31 - 1))
    return {"resolution": int(config["resolution"]), "samples": int(config["samples"]),
            "denoise": bool(config["denoise"]), "seed": cycles_seed}


def _world(config: dict) -> dict:
    return {"ground_colour": list(config["ground"]["colour"]), "background": list(config["background"])}


def _check_category_count(config: dict, categories: list, count: int) -> None:
    if count > len(categories):
        raise BadInput(f"--set {config['set']!r} has {len(categories)} categories, fewer than the {count} "
                       "distinct objects a scene needs; lower --objects")


def plan_scene(config: dict, categories: list, seed: int, index: int, attempt: int = 0) -> dict:
    """The spec of scene ``index`` of split ``"scenes"`` (a pure function of its arguments).

    Args:
        config: resolved ``comco render`` config (see :data:`DEFAULT_CONFIG`).
        categories: the set's :class:`bindscope.generators.comco.registry.Category` list.
        seed: dataset seed.
        index: 0-based scene index.
        attempt: re-planning attempt (0 first; the generator increments it when a render is rejected).

    Returns:
        ``{"version", "kind": "scene", "split", "index", "attempt", "set", "size_mode", "objects": [...],
        "caption", "camera", "light", "world", "render"}``; each object is ``{"index" (1-based mask id),
        "category", "category_id", "size_class", "scale" (m), "x", "y" (m), "yaw_deg", "large" (bool),
        "mention_position"}``.

    Raises:
        BadInput: the set has fewer categories than the scene needs, or no layout fits (see :func:`place`).
    """
    count = object_count(config, seed, index)
    _check_category_count(config, categories, count)
    rng = sample_rng(seed, SPLIT_SCENES, index, attempt)
    chosen = [categories[int(i)] for i in rng.choice(len(categories), size=count, replace=False)]
    for draw in range(RANDOM_SCALE_DRAWS if config["size_mode"] == "random" else 1):
        scales, large = scales_for(config, count, rng)
        try:
            positions = place(config, scales, rng)
            break
        except LayoutError:
            if draw == RANDOM_SCALE_DRAWS - 1 or config["size_mode"] != "random":
                raise
    yaw_jitter = config["placement"]["yaw_jitter_deg"]
    yaws = rng.uniform(-yaw_jitter, yaw_jitter, size=count) if yaw_jitter > 0 else np.zeros(count)
    camera, light = plan_camera_light(config, rng)
    caption, mentions = make_caption([c.name for c in chosen], config, rng)
    objects = [{"index": k + 1, "category": c.name, "category_id": c.id, "size_class": c.size_class,
                "scale": float(scales[k]), "x": float(positions[k][0]), "y": float(positions[k][1]),
                "yaw_deg": float(yaws[k]), "large": k == large, "mention_position": mentions[k]}
               for k, c in enumerate(chosen)]
    return {"version": SPEC_VERSION, "kind": "scene", "split": SPLIT_SCENES, "index": index, "attempt": attempt,
            "set": config["set"], "size_mode": config["size_mode"], "objects": objects, "caption": caption,
            "camera": camera, "light": light, "world": _world(config),
            "render": render_settings(config, seed, SPLIT_SCENES, index, attempt)}


def plan_reference(config: dict, categories: list, seed: int, index: int) -> dict:
    """The spec of reference image ``index``: category ``categories[index]`` alone, centred at the origin,
    at ``scale.reference`` metres, facing the camera (yaw 0), with the un-jittered camera and light.
    Caption = the category name. Same keys as :func:`plan_scene` (``"kind": "reference"``)."""
    c = categories[index]
    camera, light = plan_camera_light(config, None)
    obj = {"index": 1, "category": c.name, "category_id": c.id, "size_class": c.size_class,
           "scale": float(config["scale"]["reference"]), "x": 0.0, "y": 0.0, "yaw_deg": 0.0, "large": True,
           "mention_position": 1}
    return {"version": SPEC_VERSION, "kind": "reference", "split": SPLIT_REFERENCES, "index": index,
            "attempt": 0, "set": config["set"], "size_mode": "reference", "objects": [obj], "caption": c.name,
            "camera": camera, "light": light, "world": _world(config),
            "render": render_settings(config, seed, SPLIT_REFERENCES, index, 0)}


def check_plannable(config: dict, categories: list, seed: int, probe: int = 64) -> None:
    """Validate a config by planning before anything is rendered or written.

    Checks the capacity of the worst-case scale list of every object count (one-large: one large + small ones;
    equal: all equal; random: all at ``scale.small``, the least any scene needs), the grid size, and plans
    the first ``probe`` scenes.

    Raises:
        BadInput: as :func:`plan_scene` (e.g. "impossible layout: ...").
    """
    s = config["scale"]
    for count in object_counts(config):
        _check_category_count(config, categories, count)
        worst = {"one-large": [s["large"]] + [s["small"]] * (count - 1), "equal": [s["equal"]] * count,
                 "random": [s["small"]] * count}[config["size_mode"]]
        check_capacity(config, worst)
        if config["placement"]["mode"] == "grid":
            cols, rows = config["placement"]["grid"]
            if count > cols * rows:
                raise BadInput(f"placement.grid {[cols, rows]} has {cols * rows} slots, fewer than {count} "
                               "objects; enlarge placement.grid or lower --objects")
    for index in range(min(probe, config["n"])):
        plan_scene(config, categories, seed, index)
