"""Placement of a scene's objects on the ground (pure Python + numpy, never imports bpy): their scales, slots
and ground positions.

Scales are metres of an object's largest dimension (a normalised model fits in a cube of that side, standing
on the ground at its base centre). Positions ``(x, y)`` are metres on the ground plane z = 0 of Blender's
world frame, the camera on the -y side. Three placement modes (``placement.mode``): ``row`` (the default, a
staggered left-to-right row, :func:`place_row`), ``random`` and ``grid`` (footprint discs over the
``ground.size`` rectangle, :func:`place`). :func:`lay_out` draws a scene's scales, slots and positions.
"""

from __future__ import annotations

import math

import numpy as np

from bindscope.errors import BadInput

FOOTPRINT_FACTOR = math.sqrt(0.5)
"""Footprint radius per metre of scale. A model normalised to a largest dimension of 1 fits in a unit cube,
whose ground square has a half-diagonal of sqrt(1/2), so a disc of radius ``scale * sqrt(1/2)`` holds the
object's footprint for any yaw."""

RANDOM_SCALE_DRAWS = 20
"""``size_mode: random``: how many scale draws a scene tries before giving up on a layout."""

SLOTS = ("left", "middle", "right", "any")


class LayoutError(BadInput):
    """No non-overlapping layout exists or was found for a scene's objects (a :class:`BadInput`)."""


def footprint_radius(scale: float) -> float:
    """Radius in metres of the ground disc that holds an object of largest dimension ``scale`` metres."""
    return scale * FOOTPRINT_FACTOR


def half_width(scale: float, yaw_deg: float) -> float:
    """Half the x (and y) extent in metres of the ground square of an object of largest dimension ``scale``
    turned by ``yaw_deg``: a model normalised to a 1 m bounding cube has a footprint inside the unit square."""
    yaw = math.radians(yaw_deg)
    return 0.5 * scale * (abs(math.cos(yaw)) + abs(math.sin(yaw)))


def scales_for(config: dict, count: int, rng: np.random.Generator) -> tuple[list[float], int]:
    """Per-object scales (metres of largest dimension) and the 0-based position of the large object.

    - ``one-large``: one object, chosen uniformly, gets ``scale.large``; the others ``scale.small``.
    - ``equal``: all get ``scale.equal``; large position is -1.
    - ``random``: each scale uniform in ``[scale.small, scale.large]``; large position is -1 (the salient
      object is then the one with the largest visible area, decided after rendering). When no layout fits the
      drawn scales, :func:`lay_out` draws again (up to :data:`RANDOM_SCALE_DRAWS` times), so crowded
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


def _layout_error(config: dict, scales: list[float], why: str) -> LayoutError:
    width, depth = config["ground"]["size"]
    return LayoutError(
        f"impossible layout: cannot place {len(scales)} objects of scale {', '.join(f'{v:g}' for v in scales)} m "
        f"(size mode {config['size_mode']!r}) on the {width:g} x {depth:g} m ground with min_gap "
        f"{config['placement']['min_gap']:g} m ({why}); enlarge ground.size, lower scale.large/scale.small, "
        f"lower objects, or lower placement.min_gap")


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
                           "objects of a scene; enlarge placement.grid or lower objects")
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


def object_slots(config: dict, count: int, large: int) -> list[str]:
    """The slot name (left | middle | right | any) of each of ``count`` objects, in object (index) order.

    ``placement.slots`` (a list, entry 0 for the large object in ``one-large`` mode, else for object 1, then
    the other objects in index order; missing entries are ``any``) wins; otherwise the large object gets
    ``placement.large_slot`` and the others ``any``.
    """
    p = config["placement"]
    order = ([large] if large >= 0 else []) + [k for k in range(count) if k != large]
    listed = list(p["slots"]) if p["slots"] else ([p["large_slot"]] if large >= 0 else [])
    slots = ["any"] * count
    for k, name in zip(order, listed):
        slots[k] = name
    return slots


def row_order(slots: list[str], rng: np.random.Generator) -> list[int]:
    """Left-to-right order of the objects of a row: ``left`` objects take the leftmost positions, ``right``
    the rightmost, ``middle`` the central ones (for an even count the centre pair is drawn), ``any`` the
    rest, each group in a seeded random order."""
    m = len(slots)
    free = list(range(m))
    position: dict[int, int] = {}
    groups = {name: [k for k in rng.permutation(m).tolist() if slots[k] == name] for name in SLOTS}
    for k in groups["left"]:
        position[k] = free.pop(0)
    for k in groups["right"]:
        position[k] = free.pop()
    for k in groups["middle"]:
        centre = (len(free) - 1) / 2
        candidates = sorted(range(len(free)), key=lambda j: abs(j - centre))
        pick = candidates[int(rng.integers(2))] if len(free) % 2 == 0 and len(free) > 1 else candidates[0]
        position[k] = free.pop(pick)
    for k, where in zip(groups["any"], rng.permutation(len(free)).tolist()):
        position[k] = free[where]
    return sorted(range(m), key=lambda k: position[k])


def place_row(config: dict, scales: list[float], yaws: list[float], slots: list[str], large: int,
              rng: np.random.Generator) -> list[tuple[float, float]]:
    """Ground positions ``(x, y)`` (metres) of a staggered row of objects, ``placement.mode = "row"``.

    Objects stand left to right in :func:`row_order`, alternately in a back lane (y > 0) and a front lane
    (y < 0); the large object (``large`` >= 0) is in the back lane. Each object's footprint is its yawed
    ground square (half-width :func:`half_width`). Along x, an object overlaps its left neighbour (other
    lane) by ``placement.stagger`` of their summed half-widths, and clears the previous object of its own
    lane by ``min_gap`` plus a uniform ``0..slot_jitter`` metres. The lanes are ``max(w_i + w_j) + min_gap``
    apart over the pairs in different lanes whose footprints overlap along x, so footprints never overlap;
    the row is centred on x = 0. With ``stagger`` 0 all objects stand in one lane at y = 0.
    """
    p = config["placement"]
    widths = [half_width(s, a) for s, a in zip(scales, yaws)]
    order = row_order(slots, rng)
    stagger = p["stagger"]
    parity = order.index(large) % 2 if large >= 0 else int(rng.integers(2))
    lanes = {k: (n % 2 == parity) if stagger > 0 else None for n, k in enumerate(order)}
    xs: dict[int, float] = {}
    for n, k in enumerate(order):
        extra = float(rng.uniform(0.0, p["slot_jitter"]))
        if n == 0:
            xs[k] = widths[k]
            continue
        prev = order[n - 1]
        if stagger > 0:
            x = xs[prev] + (1 - stagger) * (widths[prev] + widths[k])
            if n >= 2:
                same = order[n - 2]
                x = max(x, xs[same] + widths[same] + widths[k] + p["min_gap"] + extra)
        else:
            x = xs[prev] + widths[prev] + widths[k] + p["min_gap"] + extra
        xs[k] = x
    sep = p["min_gap"] + max((widths[a] + widths[b] for a in order for b in order
                              if lanes[a] is True and lanes[b] is False
                              and abs(xs[a] - xs[b]) < widths[a] + widths[b]), default=0.0)
    left = min(xs[k] - widths[k] for k in order)
    right = max(xs[k] + widths[k] for k in order)
    y = {True: sep / 2, False: -sep / 2, None: 0.0}
    return [(xs[k] - (left + right) / 2, y[lanes[k]]) for k in range(len(scales))]


def lay_out(config: dict, count: int, yaws: list[float], rng: np.random.Generator, factors: list[float] | None,
            first_large: bool) -> tuple[list[float], int, list[str], list[tuple[float, float]]]:
    """Scales, the large object's index (-1: none), slots and ground positions of ``count`` objects:
    :func:`scales_for` (the large one moved to object 1 with ``first_large``), the generator's size
    ``factors``, then :func:`place_row` or :func:`place` (``random`` size mode redraws the scales up to
    :data:`RANDOM_SCALE_DRAWS` times when no layout fits).

    Args:
        yaws: per-object yaw in degrees (the row's footprints depend on it).
        rng: the scene's planning generator; scales, slots order and positions are drawn from it in that order.
        factors: per-object scale factors (the generator's size corrections), or None.

    Returns:
        ``(scales, large, slots, positions)``: ``count`` scales in metres, the large object's 0-based index
        (-1: none), ``count`` slot names (:func:`object_slots`) and ``count`` ground positions ``(x, y)`` in
        metres, all in object order.

    Raises:
        LayoutError: no layout fits (see :func:`place`).
        BadInput: more objects than grid slots.
    """
    p = config["placement"]
    for draw in range(RANDOM_SCALE_DRAWS if config["size_mode"] == "random" else 1):
        scales, large = scales_for(config, count, rng)
        if first_large and large >= 0:
            scales[0], scales[large], large = scales[large], scales[0], 0
        if factors is not None:
            scales = [s * f for s, f in zip(scales, factors)]
        slots = object_slots(config, count, large)
        if p["mode"] == "row":
            return scales, large, slots, place_row(config, scales, yaws, slots, large, rng)
        try:
            return scales, large, slots, place(config, scales, rng)
        except LayoutError:
            if draw == RANDOM_SCALE_DRAWS - 1 or config["size_mode"] != "random":
                raise
