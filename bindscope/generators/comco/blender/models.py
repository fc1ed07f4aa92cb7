"""Procedural low-poly models for the ComCO-72 categories and the SimCO-18 shapes, and loading of imported ones.

Every model is described as data in ``bindscope/assets/models.yaml``: a list of *parts*, each a bmesh
primitive (box, cylinder, cone, sphere, torus, lathe, prism, rod, tube, text) with a position, rotation,
size and material from a small palette. :func:`build_model` turns the parts into ONE mesh object with its
materials, resting on z = 0 with its origin at the centre of its base, its front (the most recognisable
view: the side for animals and vehicles, the face for screens, signs and clocks) towards -Y, and its
largest bounding-box dimension exactly 1.0 Blender unit. The part vocabulary is documented in
``docs/comco-assets.md``.

Imported models (``comco assets import``) are stored normalised as ``.blend`` files; for such a set
:func:`build_model` appends the stored object instead.

This module imports bpy (the Blender Python module, ``bpy==5.0.1``, through :mod:`.runtime`) when it is
imported; planning code must not import it.
"""

from __future__ import annotations

import math
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np
import yaml

from bindscope.errors import BadInput
from bindscope.generators.comco.blender.runtime import blender_modules
from bindscope.generators.comco.registry import (
    BUILTIN_SETS,
    SIMCO_COLOURS,
    SIMCO_MATERIALS,
    Category,
    builtin_entries,
    read_folder_registry,
)

bpy, bmesh, mathutils = blender_modules()
Euler, Matrix, Vector = mathutils.Euler, mathutils.Matrix, mathutils.Vector

MATERIAL_PREFIX = "bindscope:"
"""Name prefix of every material made here; materials are reused by name within a Blender session."""


# ----------------------------------------------------------------------------------------------- data


@lru_cache(maxsize=None)
def model_library() -> dict:
    """The parsed ``bindscope/assets/models.yaml``: ``{"materials": {...}, "comco72": {...}, "simco18": {...}}``."""
    text = resources.files("bindscope.assets").joinpath("models.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def srgb_to_linear(value: float) -> float:
    """sRGB component (0..1) -> linear component (0..1) (IEC 61966-2-1), as Blender's Base Color expects."""
    return value / 12.92 if value <= 0.04045 else ((value + 0.055) / 1.055) ** 2.4


def hex_to_linear(colour: str) -> tuple[float, float, float, float]:
    """``"#rrggbb"`` (sRGB) -> linear RGBA tuple with alpha 1. Raises BadInput for a malformed string."""
    text = colour.lstrip("#")
    if len(text) != 6:
        raise BadInput(f"colour {colour!r}: expected '#rrggbb'")
    try:
        rgb = [int(text[i:i + 2], 16) / 255.0 for i in (0, 2, 4)]
    except ValueError:
        raise BadInput(f"colour {colour!r}: expected '#rrggbb'") from None
    return (*[srgb_to_linear(c) for c in rgb], 1.0)


# ----------------------------------------------------------------------------------------------- 2-D outlines


def _outline_polygon(n: int = 5, r: float = 0.5, phase: float = 90.0) -> list[tuple[float, float]]:
    return [(r * math.cos(math.radians(phase + 360.0 * i / n)), r * math.sin(math.radians(phase + 360.0 * i / n)))
            for i in range(n)]


def _outline_star(points: int = 5, r: float = 0.5, inner: float = 0.4) -> list[tuple[float, float]]:
    out = []
    for i in range(2 * points):
        radius = r if i % 2 == 0 else r * inner
        angle = math.radians(90.0 + 180.0 * i / points)
        out.append((radius * math.cos(angle), radius * math.sin(angle)))
    return out


def _outline_heart(size: float = 1.0, n: int = 48) -> list[tuple[float, float]]:
    # The classic heart curve x = 16 sin^3 t, y = 13 cos t - 5 cos 2t - 2 cos 3t - cos 4t, scaled to `size`.
    pts = []
    for i in range(n):
        t = 2 * math.pi * i / n
        x = 16 * math.sin(t) ** 3
        y = 13 * math.cos(t) - 5 * math.cos(2 * t) - 2 * math.cos(3 * t) - math.cos(4 * t)
        pts.append((x * size / 34.0, y * size / 34.0))
    # drop consecutive duplicates (the cusp)
    return [p for i, p in enumerate(pts) if i == 0 or math.dist(p, pts[i - 1]) > 1e-9]


def _outline_crescent(r: float = 0.5, inner: float = 0.82, offset: float = 0.35,
                      n: int = 40) -> list[tuple[float, float]]:
    # Outer circle radius r at the origin minus a circle radius inner*r centred at (offset*r, 0.1*r).
    ri, cx, cy = inner * r, offset * r, 0.1 * r
    inside = lambda x, y: (x - cx) ** 2 + (y - cy) ** 2 < ri ** 2  # noqa: E731
    outer = [(r * math.cos(a), r * math.sin(a)) for a in (2 * math.pi * i / (8 * n) for i in range(8 * n))]
    keep = [not inside(x, y) for x, y in outer]
    start = next(i for i in range(len(outer)) if keep[i] and not keep[i - 1])
    arc = []
    i = start
    while keep[i % len(outer)]:
        arc.append(outer[i % len(outer)])
        i += 1
    arc = arc[:: max(1, len(arc) // n)] + [arc[-1]]
    a0 = math.atan2(arc[-1][1] - cy, arc[-1][0] - cx)
    a1 = math.atan2(arc[0][1] - cy, arc[0][0] - cx)
    if a1 > a0:
        a1 -= 2 * math.pi
    back = [(cx + ri * math.cos(a0 + (a1 - a0) * k / n), cy + ri * math.sin(a0 + (a1 - a0) * k / n))
            for k in range(1, n)]
    return arc + back


def _outline_leaf(length: float = 1.0, width: float = 0.5, n: int = 24) -> list[tuple[float, float]]:
    # Pointed at both ends (vesica); the widest point lies a little below the middle.
    upper, lower = [], []
    for i in range(n + 1):
        s = i / n
        w = 0.5 * width * math.sin(math.pi * s ** 0.85) ** 0.9
        x = -0.5 * length + length * s
        upper.append((x, w))
        lower.append((x, -w))
    return upper + lower[-2:0:-1]


def _outline_rounded_rect(w: float = 1.0, h: float = 1.0, r: float = 0.1, n: int = 4) -> list[tuple[float, float]]:
    pts = []
    for cx, cy, a0 in ((w / 2 - r, h / 2 - r, 0), (-w / 2 + r, h / 2 - r, 90), (-w / 2 + r, -h / 2 + r, 180),
                       (w / 2 - r, -h / 2 + r, 270)):
        for k in range(n + 1):
            a = math.radians(a0 + 90.0 * k / n)
            pts.append((cx + r * math.cos(a), cy + r * math.sin(a)))
    return pts


OUTLINES = {
    "polygon": _outline_polygon,
    "star": _outline_star,
    "heart": _outline_heart,
    "crescent": _outline_crescent,
    "leaf": _outline_leaf,
    "rounded_rect": _outline_rounded_rect,
}
"""Named 2-D outlines for ``prism`` parts: name -> function(**params) -> list of (x, z) points (counter-clockwise)."""


# ----------------------------------------------------------------------------------------------- parts


def _vec(value, default=(0.0, 0.0, 0.0)) -> Vector:
    return Vector(value if value is not None else default)


def _part_matrix(part: dict, at) -> Matrix:
    rot = [math.radians(a) for a in part.get("rot", (0, 0, 0))]
    return Matrix.Translation(_vec(at)) @ Euler(rot, "XYZ").to_matrix().to_4x4()


def _dims_matrix(dims) -> Matrix:
    return Matrix.Diagonal((*dims, 1.0))


def _new_faces(verts) -> set:
    return {f for v in verts for f in v.link_faces}


def _lathe(bm, profile, segments: int, closed: bool, arc: float, matrix: Matrix) -> list:
    """Spin a (radius, z) profile about the local z axis with bmesh.ops.spin; returns the new verts."""
    before = set(bm.verts)
    verts = [bm.verts.new((r, 0.0, z)) for r, z in profile]
    edges = [bm.edges.new((verts[i], verts[i + 1])) for i in range(len(verts) - 1)]
    if closed:
        edges.append(bm.edges.new((verts[-1], verts[0])))
    full = abs(arc - 360.0) < 1e-9
    bmesh.ops.spin(bm, geom=verts + edges, cent=(0, 0, 0), axis=(0, 0, 1), angle=math.radians(arc),
                   steps=segments, use_merge=full)
    new_verts = [v for v in bm.verts if v not in before]
    bmesh.ops.remove_doubles(bm, verts=new_verts, dist=1e-6)
    new_verts = [v for v in new_verts if v.is_valid]
    bmesh.ops.transform(bm, matrix=matrix, verts=new_verts)
    return new_verts


def _prism(bm, outline, depth: float, matrix: Matrix) -> list:
    """Extrude a closed (x, z) outline along y by ``depth`` (centred on y = 0); returns the new verts."""
    front = [bm.verts.new((x, -depth / 2, z)) for x, z in outline]
    back = [bm.verts.new((x, depth / 2, z)) for x, z in outline]
    bm.faces.new(front)
    bm.faces.new(list(reversed(back)))
    n = len(outline)
    for i in range(n):
        j = (i + 1) % n
        bm.faces.new((front[i], back[i], back[j], front[j]))
    verts = front + back
    bmesh.ops.transform(bm, matrix=matrix, verts=verts)
    return verts


def _tube(bm, points, radii, sides: int, matrix: Matrix) -> list:
    """A tube of circular cross-section (``sides`` corners) along a polyline, radius per point, capped."""
    pts = [Vector(p) for p in points]
    if isinstance(radii, (int, float)):
        radii = [float(radii)] * len(pts)
    rings = []
    for i, p in enumerate(pts):
        before = pts[i] - pts[i - 1] if i > 0 else pts[1] - pts[0]
        after = pts[i + 1] - pts[i] if i + 1 < len(pts) else pts[i] - pts[i - 1]
        tangent = (before.normalized() + after.normalized()).normalized()
        rotation = tangent.to_track_quat("Z", "Y").to_matrix()
        ring = []
        for k in range(sides):
            a = 2 * math.pi * k / sides
            ring.append(bm.verts.new(p + rotation @ Vector((radii[i] * math.cos(a), radii[i] * math.sin(a), 0.0))))
        rings.append(ring)
    for r0, r1 in zip(rings, rings[1:]):
        for k in range(sides):
            bm.faces.new((r0[k], r0[(k + 1) % sides], r1[(k + 1) % sides], r1[k]))
    bm.faces.new(list(reversed(rings[0])))
    bm.faces.new(rings[-1])
    verts = [v for ring in rings for v in ring]
    bmesh.ops.transform(bm, matrix=matrix, verts=verts)
    return verts


def _text(bm, body: str, size: float, depth: float, matrix: Matrix) -> list:
    """Extruded text in Blender's built-in font, centred, lying in the x-y plane before ``matrix``."""
    curve = bpy.data.curves.new("bindscope-text", "FONT")
    curve.body = body
    curve.size = size
    curve.extrude = depth / 2
    curve.align_x = "CENTER"
    curve.align_y = "CENTER"
    obj = bpy.data.objects.new("bindscope-text", curve)
    mesh = bpy.data.meshes.new_from_object(obj)
    bpy.data.objects.remove(obj)
    bpy.data.curves.remove(curve)
    before = set(bm.verts)
    bm.from_mesh(mesh)
    bpy.data.meshes.remove(mesh)
    verts = [v for v in bm.verts if v not in before]
    bmesh.ops.transform(bm, matrix=matrix, verts=verts)
    return verts


def _add_part(bm, part: dict, at) -> list:
    """Create one part at position ``at``; returns its verts (already in model coordinates)."""
    kind = part["p"]
    place = _part_matrix(part, at)
    n = int(part.get("n", 24))
    if kind == "box":
        return bmesh.ops.create_cube(bm, size=1.0, matrix=place @ _dims_matrix(part["s"]))["verts"]
    if kind == "cyl":
        return bmesh.ops.create_cone(bm, cap_ends=True, segments=n, radius1=0.5, radius2=0.5, depth=1.0,
                                     matrix=place @ _dims_matrix(part["s"]))["verts"]
    if kind == "cone":
        return bmesh.ops.create_cone(bm, cap_ends=True, segments=n, radius1=0.5, radius2=0.5 * part.get("top", 0.0),
                                     depth=1.0, matrix=place @ _dims_matrix(part["s"]))["verts"]
    if kind == "sphere":
        return bmesh.ops.create_uvsphere(bm, u_segments=n, v_segments=int(part.get("rings", max(4, n // 2))),
                                         radius=0.5, matrix=place @ _dims_matrix(part["s"]))["verts"]
    scale = _dims_matrix(part["scale"]) if "scale" in part else Matrix.Identity(4)
    if kind == "torus":
        big, small, m = part["R"], part["r"], int(part.get("k", 12))
        circle = [(big + small * math.cos(2 * math.pi * k / m), small * math.sin(2 * math.pi * k / m))
                  for k in range(m)]
        return _lathe(bm, circle, n, True, float(part.get("arc", 360.0)), place @ scale)
    if kind == "lathe":
        return _lathe(bm, part["profile"], n, bool(part.get("closed", False)), float(part.get("arc", 360.0)),
                      place @ scale)
    if kind == "prism":
        if "outline" in part:
            outline = [tuple(p) for p in part["outline"]]
        else:
            (name, params), = part["shape"].items()
            outline = OUTLINES[name](**(params or {}))
        return _prism(bm, outline, float(part["depth"]), place @ scale)
    if kind == "rod":
        a, b = Vector(part["a"]) + _vec(at), Vector(part["b"]) + _vec(at)
        r1 = float(part["r"])
        r2 = float(part.get("r2", r1))
        direction = b - a
        rotation = direction.to_track_quat("Z", "Y").to_matrix().to_4x4()
        matrix = Matrix.Translation((a + b) / 2) @ rotation
        return bmesh.ops.create_cone(bm, cap_ends=True, segments=int(part.get("n", 10)), radius1=r1, radius2=r2,
                                     depth=direction.length, matrix=matrix)["verts"]
    if kind == "tube":
        return _tube(bm, part["pts"], part["r"], int(part.get("n", 10)), place @ scale)
    if kind == "text":
        return _text(bm, str(part["body"]), float(part["size"]), float(part["depth"]), place @ scale)
    raise BadInput(f"model part type {kind!r}: allowed: box, cyl, cone, sphere, torus, lathe, prism, rod, tube, text")


_MIRRORS = {"x": (-1, 1, 1), "y": (1, -1, 1), "z": (1, 1, -1)}


def build_mesh(parts: list[dict], name: str) -> tuple[bpy.types.Mesh, list[str]]:
    """Build a mesh from part descriptions (model coordinates as given, not yet normalised).

    Returns the mesh and the list of material keys, index i being the mesh's material slot i.
    Parts may give ``at`` as one position or a list of positions; ``mirror`` (``"x"``, ``"y"``, ``"z"`` or a
    combination) adds reflected copies; ``repeat: {n, axis, about}`` makes n copies turned evenly about an
    axis through the point ``about`` (default the origin); ``grid: {n: [nx, ny], step: [dx, dy, dz]}`` makes
    nx * ny copies (column i, row j moved by (i*dx, j*dy, j*dz)). Face normals point outwards
    (``bmesh.ops.recalc_face_normals``) and the element order is canonical (:func:`canonical_order`), so the
    mesh data are the same in every process.
    """
    bm = bmesh.new()
    keys: list[str] = []
    for part in parts:
        positions = part.get("at", (0, 0, 0))
        if not positions or not isinstance(positions[0], (list, tuple)):
            positions = [positions]
        if "grid" in part:  # nx * ny copies: column i, row j offset by (i*dx, j*dy, j*dz)
            (nx, ny), (dx, dy, dz) = part["grid"]["n"], part["grid"]["step"]
            positions = [(x + i * dx, y + j * dy, z + j * dz) for x, y, z in positions
                         for j in range(ny) for i in range(nx)]
        key = part.get("m", "body")
        if key not in keys:
            keys.append(key)
        index = keys.index(key)
        reflections = [Matrix.Identity(4)]
        for axis in part.get("mirror", ""):
            reflections += [Matrix.Diagonal((*_MIRRORS[axis], 1.0)) @ r for r in reflections]
        if "repeat" in part:  # n copies turned about an axis
            count, axis = int(part["repeat"]["n"]), part["repeat"].get("axis", "z").upper()
            centre = Vector(part["repeat"].get("about", (0, 0, 0)))
            reflections = [Matrix.Translation(centre) @ Matrix.Rotation(2 * math.pi * k / count, 4, axis)
                           @ Matrix.Translation(-centre) @ r for k in range(count) for r in reflections]
        for at in positions:
            for reflection in reflections:
                verts = _add_part(bm, part, at)
                if reflection != Matrix.Identity(4):  # a reflection or a turned copy
                    bmesh.ops.transform(bm, matrix=reflection, verts=verts)
                for face in _new_faces(verts):
                    face.material_index = index
                    face.smooth = bool(part.get("smooth", part["p"] in ("sphere", "lathe", "torus", "tube")))
    mesh = bpy.data.meshes.new(name)
    bm.to_mesh(mesh)
    bm.free()
    canonical_order(mesh)  # recalc_face_normals then sees the same element order in every process
    bm = bmesh.new()
    bm.from_mesh(mesh)
    bmesh.ops.recalc_face_normals(bm, faces=bm.faces[:])
    bm.to_mesh(mesh)
    bm.free()
    canonical_order(mesh)  # flipped faces start at their lowest corner again
    return mesh, keys


def canonical_order(mesh: bpy.types.Mesh) -> None:
    """Renumber ``mesh``'s vertices, faces and each face's corners in an order given by the geometry alone.

    Some bmesh operators (``bmesh.ops.create_uvsphere`` among them, Blender 5.0) emit faces in an order and
    corners that differ from one process to the next (measured: same vertex positions, different face and
    corner order). The shape is the same, but Cycles then receives different triangle data, and a few dozen
    pixels of a 224 x 224 RGB render differed between processes. After this call the mesh data are a
    function of the geometry only:

    - each face starts at its corner with the lexicographically smallest (x, y, z) (winding unchanged);
    - faces are sorted by (corner count, corner positions, material index, smooth flag);
    - vertices are numbered by first use in that face order; unused (loose) vertices follow, sorted by
      position. Loose edges are dropped (they do not render); materials are kept.

    Coordinates are not changed (float32, metres in model space).
    """
    n_verts, n_faces, n_loops = len(mesh.vertices), len(mesh.polygons), len(mesh.loops)
    co = np.empty(n_verts * 3, dtype=np.float32)
    mesh.vertices.foreach_get("co", co)
    co = co.reshape(-1, 3)
    start = np.empty(n_faces, dtype=np.int32)
    total = np.empty(n_faces, dtype=np.int32)
    corners = np.empty(n_loops, dtype=np.int32)
    material = np.empty(n_faces, dtype=np.int32)
    smooth = np.empty(n_faces, dtype=bool)
    mesh.polygons.foreach_get("loop_start", start)
    mesh.polygons.foreach_get("loop_total", total)
    mesh.loops.foreach_get("vertex_index", corners)
    mesh.polygons.foreach_get("material_index", material)
    mesh.polygons.foreach_get("use_smooth", smooth)
    # rank of each vertex's position (equal positions share a rank), lexicographic in (x, y, z)
    rank = np.unique(co, axis=0, return_inverse=True)[1].reshape(-1).tolist()
    corners = corners.tolist()
    faces, keys = [], []
    for f, (s, t) in enumerate(zip(start.tolist(), total.tolist())):
        face = corners[s:s + t]
        ranks = [rank[v] for v in face]
        k = ranks.index(min(ranks))
        faces.append(face[k:] + face[:k])
        keys.append((t, ranks[k:] + ranks[:k], int(material[f]), bool(smooth[f])))
    order = sorted(range(n_faces), key=keys.__getitem__)
    renumber: dict[int, int] = {}
    for f in order:
        for v in faces[f]:
            renumber.setdefault(v, len(renumber))
    for v in sorted(set(range(n_verts)) - set(renumber), key=lambda v: (rank[v], *co[v].tolist())):
        renumber[v] = len(renumber)
    old = np.empty(n_verts, dtype=np.int64)
    old[list(renumber.values())] = list(renumber.keys())
    mesh.clear_geometry()
    mesh.from_pydata(co[old].tolist(), [], [[renumber[v] for v in faces[f]] for f in order])
    mesh.polygons.foreach_set("material_index", material[order])
    mesh.polygons.foreach_set("use_smooth", smooth[order])
    mesh.update()


def normalise_mesh(mesh: bpy.types.Mesh) -> None:
    """Move and scale ``mesh`` in place: base centre (bounding-box centre in x and y, lowest z) at the
    origin, so it rests on z = 0, and largest bounding-box dimension 1.0 (to float32 precision).

    Raises:
        BadInput: the mesh has no vertices or zero size.
    """
    if not mesh.vertices:
        raise BadInput(f"model {mesh.name!r} has no vertices")
    co = np.empty(len(mesh.vertices) * 3, dtype=np.float64)
    mesh.vertices.foreach_get("co", co)
    co = co.reshape(-1, 3)
    low, high = co.min(axis=0), co.max(axis=0)
    size = float((high - low).max())
    if size <= 0:
        raise BadInput(f"model {mesh.name!r} has zero size")
    base = Vector(((low[0] + high[0]) / 2, (low[1] + high[1]) / 2, low[2]))
    mesh.transform(Matrix.Scale(1.0 / size, 4) @ Matrix.Translation(-base))
    mesh.update()


# ----------------------------------------------------------------------------------------------- materials


def _pattern_nodes(tree, spec: dict, colours: list):
    """Two-colour procedural pattern (object coordinates): stripes (wave bands), spots (noise), cells
    (Voronoi distance to edge), checker. Returns the output socket giving the colour."""
    nodes, links = tree.nodes, tree.links
    coord = nodes.new("ShaderNodeTexCoord")
    mapping = nodes.new("ShaderNodeMapping")
    mapping.inputs["Scale"].default_value = spec.get("stretch", (1.0, 1.0, 1.0))
    mapping.inputs["Rotation"].default_value = [math.radians(a) for a in spec.get("rot", (0, 0, 0))]
    links.new(coord.outputs["Object"], mapping.inputs["Vector"])
    kind = spec["type"]
    threshold = float(spec.get("threshold", 0.5))
    if kind == "stripes":
        tex = nodes.new("ShaderNodeTexWave")
        tex.bands_direction = spec.get("axis", "X").upper()
        tex.inputs["Distortion"].default_value = float(spec.get("distortion", 0.0))
        out = tex.outputs["Factor"]
    elif kind == "spots":
        tex = nodes.new("ShaderNodeTexNoise")
        tex.inputs["Detail"].default_value = 1.0
        out = tex.outputs["Factor"]
    elif kind == "cells":
        tex = nodes.new("ShaderNodeTexVoronoi")
        tex.feature = "DISTANCE_TO_EDGE"
        out = tex.outputs["Distance"]
    elif kind == "checker":
        tex = nodes.new("ShaderNodeTexChecker")
        tex.inputs["Color1"].default_value = (1, 1, 1, 1)
        tex.inputs["Color2"].default_value = (0, 0, 0, 1)
        out = tex.outputs["Factor"]
    else:
        raise BadInput(f"material pattern {kind!r}: allowed: stripes, spots, cells, checker")
    tex.inputs["Scale"].default_value = float(spec.get("scale", 5.0))
    links.new(mapping.outputs["Vector"], tex.inputs["Vector"])
    ramp = nodes.new("ShaderNodeValToRGB")
    ramp.color_ramp.interpolation = "CONSTANT"
    ramp.color_ramp.elements[0].position = 0.0
    ramp.color_ramp.elements[0].color = colours[0]
    ramp.color_ramp.elements[1].position = threshold
    ramp.color_ramp.elements[1].color = colours[1]
    links.new(out, ramp.inputs["Factor"])
    return ramp.outputs["Color"]


def make_material(name: str, spec: dict) -> bpy.types.Material:
    """A Principled BSDF material named ``bindscope:<name>``, reused if it already exists.

    ``spec`` keys: ``c`` base colour ``"#rrggbb"`` (sRGB); ``r`` roughness (0..1, default 0.5); ``mt``
    metallic (0..1); ``t`` transmission (0..1); ``a`` alpha (0..1, 1 = opaque); ``e`` emission strength
    (W/m^2-ish, Blender units; emits the base colour); ``coat`` clear-coat weight; ``pattern`` a two-colour
    pattern ``{type, scale, c2, ...}``.
    """
    full = MATERIAL_PREFIX + name
    existing = bpy.data.materials.get(full)
    if existing is not None:
        return existing
    material = bpy.data.materials.new(full)
    tree = material.node_tree
    bsdf = tree.nodes["Principled BSDF"]
    colour = hex_to_linear(spec.get("c", "#cccccc"))
    material.diffuse_color = colour
    if "pattern" in spec:
        pattern = spec["pattern"]
        socket = _pattern_nodes(tree, pattern, [colour, hex_to_linear(pattern["c2"])])
        tree.links.new(socket, bsdf.inputs["Base Color"])
    else:
        bsdf.inputs["Base Color"].default_value = colour
    bsdf.inputs["Roughness"].default_value = float(spec.get("r", 0.5))
    bsdf.inputs["Metallic"].default_value = float(spec.get("mt", 0.0))
    if spec.get("t"):
        bsdf.inputs["Transmission Weight"].default_value = float(spec["t"])
        bsdf.inputs["IOR"].default_value = 1.45
    if "a" in spec:
        bsdf.inputs["Alpha"].default_value = float(spec["a"])
    if spec.get("coat"):
        bsdf.inputs["Coat Weight"].default_value = float(spec["coat"])
    if spec.get("e"):
        bsdf.inputs["Emission Color"].default_value = colour
        bsdf.inputs["Emission Strength"].default_value = float(spec["e"])
    return material


def simco_material(colour: str, material: str) -> bpy.types.Material:
    """SimCO material: a CLEVR colour name (:data:`SIMCO_COLOURS`) in ``"rubber"`` or ``"metal"``.

    Raises BadInput naming the allowed colours / materials.
    """
    if colour not in SIMCO_COLOURS:
        raise BadInput(f"SimCO colour {colour!r}: allowed: {', '.join(SIMCO_COLOURS)}")
    if material not in SIMCO_MATERIALS:
        raise BadInput(f"SimCO material {material!r}: allowed: {', '.join(SIMCO_MATERIALS)}")
    rgb = SIMCO_COLOURS[colour]
    spec = {"c": "#%02x%02x%02x" % rgb, "r": SIMCO_MATERIALS[material]["roughness"],
            "mt": SIMCO_MATERIALS[material]["metallic"]}
    return make_material(f"simco-{material}-{colour}", spec)


# ----------------------------------------------------------------------------------------------- entry points


def _object_from_mesh(mesh: bpy.types.Mesh, name: str) -> bpy.types.Object:
    obj = bpy.data.objects.new(name, mesh)
    bpy.context.scene.collection.objects.link(obj)
    return obj


def build_procedural(set_name: str, name: str, colour: str | None = None,
                     material: str | None = None) -> bpy.types.Object:
    """Build the procedural model ``name`` of built-in set ``set_name`` (see :func:`build_model`)."""
    library = model_library()
    models = library[set_name]
    if name not in models:
        raise BadInput(f"no procedural model for {name!r} in set {set_name!r}; allowed: {', '.join(models)}")
    entry = models[name]
    parts = entry["parts"] if isinstance(entry, dict) else entry
    mesh, keys = build_mesh(parts, f"{set_name}:{name}")
    if isinstance(entry, dict) and entry.get("turn"):  # whole-model turn about z (degrees), e.g. a 3/4 view
        mesh.transform(Matrix.Rotation(math.radians(float(entry["turn"])), 4, "Z"))
    normalise_mesh(mesh)
    if set_name == "simco18":
        entry = next(e for e in builtin_entries("simco18") if e["name"] == name)
        body = simco_material(colour or entry["colour"], material or entry["material"])
        palette = library["materials"]
        for key in keys:
            mesh.materials.append(body if key == "body" else make_material(key, palette[key]))
    else:
        if colour is not None or material is not None:
            raise BadInput("colour/material overrides apply to simco18 shapes only")
        palette = library["materials"]
        for key in keys:
            if key not in palette:
                raise BadInput(f"model {name!r}: material {key!r} is not in the palette")
            mesh.materials.append(make_material(key, palette[key]))
    return _object_from_mesh(mesh, name)


def load_imported(category: Category, folder: str | Path) -> bpy.types.Object:
    """Append the normalised model of ``category`` from an asset folder (a ``.blend`` written by
    ``comco assets import``) into the current scene. Raises BadInput if the folder lacks it."""
    folder = Path(folder)
    registry = read_folder_registry(folder)
    entry = next((e for e in registry["categories"] if e["name"] == category.name), None)
    if entry is None:
        raise BadInput(f"category {category.name!r} is not in asset folder {str(folder)!r}")
    path = folder / entry["file"]
    if not path.is_file():
        raise BadInput(f"asset folder {str(folder)!r}: model file {entry['file']!r} of {category.name!r} is missing")
    with bpy.data.libraries.load(str(path), link=False) as (source, target):
        if entry.get("object") not in source.objects:
            raise BadInput(f"{path}: holds no object {entry.get('object')!r}")
        target.objects = [entry["object"]]
    obj = target.objects[0]
    obj.name = category.name
    bpy.context.scene.collection.objects.link(obj)
    return obj


def build_model(category: Category, set_spec: str, colour: str | None = None,
                material: str | None = None) -> bpy.types.Object:
    """Create ONE mesh object for ``category`` in the current scene and return it.

    The object has its materials, origin at the centre of its base, rests on z = 0, faces -Y (its most
    recognisable side towards a camera on the -Y side), has unit scale and rotation, and its largest
    bounding-box dimension is exactly 1.0 Blender unit (the canonical size that the renderer scales).

    Args:
        category: a category of ``load_set(set_spec)``.
        set_spec: ``"comco72"``, ``"simco18"`` or an asset folder written by ``comco assets import``.
        colour: simco18 only: a CLEVR colour name (``registry.SIMCO_COLOURS``); default: the shape's own.
        material: simco18 only: ``"rubber"`` or ``"metal"``; default: the shape's own.

    Raises:
        BadInput: unknown category, colour or material; a missing/broken model file in an asset folder.
    """
    if set_spec in BUILTIN_SETS:
        return build_procedural(set_spec, category.name, colour, material)
    if colour is not None or material is not None:
        raise BadInput("colour/material overrides apply to simco18 shapes only")
    return load_imported(category, set_spec)
