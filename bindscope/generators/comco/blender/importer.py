"""Import real 3D models into a ComCO asset folder (bpy; used by ``comco assets import`` and ``fetch``).

Each model file is imported with Blender's own importer (glTF/GLB: ``bpy.ops.import_scene.gltf``; OBJ:
``bpy.ops.wm.obj_import``; FBX: ``bpy.ops.import_scene.fbx``; .blend: appended), its mesh objects are
evaluated (modifiers applied), baked to world space and joined into one object, turned so that its up axis
is +Z and its front faces -Y, and normalised like the procedural models (base centre at the origin, resting
on z = 0, largest dimension 1.0; :func:`bindscope.generators.comco.blender.models.normalise_mesh`). Textures are
packed. The result is written as ``models/<name>.blend`` and recorded in the folder's ``registry.json``
with its source, licence and sha256.

Every file is imported into a staging folder first; only when all succeed are the models moved into place
and the registry written (atomically), so a broken file leaves the asset folder as it was.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import shutil
from pathlib import Path

import numpy as np

from bindscope.errors import BadInput
from bindscope.generators.comco.assets import ImportItem, slug
from bindscope.generators.comco.blender.models import normalise_mesh
from bindscope.generators.comco.blender.runtime import blender_modules
from bindscope.generators.comco.registry import ASSET_FORMAT, ASSET_FORMAT_VERSION, REGISTRY_FILE
from bindscope.io.atomic import write_text_atomic
from bindscope.io.canonical import canonical_json

bpy, _, mathutils = blender_modules()
Matrix, Vector = mathutils.Matrix, mathutils.Vector

_AXIS_VECTORS = {"X": (1, 0, 0), "Y": (0, 1, 0), "Z": (0, 0, 1), "-X": (-1, 0, 0), "-Y": (0, -1, 0), "-Z": (0, 0, -1)}


def _run_importer(item: ImportItem) -> None:
    path = str(item.path)
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet):
            if item.kind == "gltf":
                result = bpy.ops.import_scene.gltf(filepath=path)
            elif item.kind == "obj":
                result = bpy.ops.wm.obj_import(filepath=path)
            elif item.kind == "fbx":
                result = bpy.ops.import_scene.fbx(filepath=path)
            else:
                with bpy.data.libraries.load(path, link=False) as (source, target):
                    target.objects = list(source.objects)
                for obj in target.objects:
                    if obj is not None:
                        bpy.context.scene.collection.objects.link(obj)
                result = {"FINISHED"}
    except (RuntimeError, OSError, ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInput(f"{path}: broken or unreadable {item.kind} model file ({message})") from None
    if "FINISHED" not in result:
        raise BadInput(f"{path}: the {item.kind} importer did not finish ({', '.join(sorted(result))})")


def orientation_matrix(up: str, front: str) -> Matrix:
    """Rotation (4x4) that turns axis ``up`` to +Z and then ``front`` to -Y (about Z).

    Raises BadInput if ``front`` is parallel to ``up``.
    """
    up_vec, front_vec = Vector(_AXIS_VECTORS[up]), Vector(_AXIS_VECTORS[front])
    if abs(up_vec.dot(front_vec)) > 0.5:
        raise BadInput(f"front axis {front!r} cannot be parallel to the up axis {up!r}")
    to_up = up_vec.rotation_difference(Vector((0, 0, 1))).to_matrix().to_4x4()
    turned = (to_up @ front_vec.to_4d()).to_3d()
    angle = math.atan2(-1.0, 0.0) - math.atan2(turned.y, turned.x)  # about z only: the up axis stays +Z
    return Matrix.Rotation(angle, 4, "Z") @ to_up


def import_model(item: ImportItem) -> tuple[bpy.types.Object, list[float]]:
    """Import ``item`` into a fresh empty scene and return (the one normalised object, its dimensions before
    normalisation in the file's units after orientation). Raises BadInput naming the file on failure."""
    bpy.ops.wm.read_factory_settings(use_empty=True)
    _run_importer(item)
    scene = bpy.context.scene
    depsgraph = bpy.context.evaluated_depsgraph_get()
    parts = []
    for obj in list(scene.objects):
        if obj.type != "MESH":
            continue
        mesh = bpy.data.meshes.new_from_object(obj.evaluated_get(depsgraph), preserve_all_data_layers=True,
                                               depsgraph=depsgraph)
        mesh.transform(obj.matrix_world)
        if len(mesh.polygons):
            parts.append(mesh)
    for obj in list(scene.objects):
        bpy.data.objects.remove(obj)
    if not parts:
        raise BadInput(f"{item.path}: holds no mesh with faces (nothing to render)")
    objects = []
    for mesh in parts:
        obj = bpy.data.objects.new(item.category, mesh)
        scene.collection.objects.link(obj)
        objects.append(obj)
    if len(objects) > 1:
        with bpy.context.temp_override(active_object=objects[0], object=objects[0],
                                       selected_objects=objects, selected_editable_objects=objects):
            bpy.ops.object.join()
    obj = objects[0]
    obj.name = item.category
    obj.data.name = item.category
    obj.data.transform(orientation_matrix(item.up, item.front))
    co = np.empty(len(obj.data.vertices) * 3, dtype=np.float64)
    obj.data.vertices.foreach_get("co", co)
    co = co.reshape(-1, 3)
    dims = (co.max(axis=0) - co.min(axis=0)).tolist()
    try:
        normalise_mesh(obj.data)
    except BadInput:
        raise BadInput(f"{item.path}: the model has zero size") from None
    obj.matrix_world = Matrix.Identity(4)
    for image in bpy.data.images:
        if image.source == "FILE" and image.packed_file is None:
            with contextlib.suppress(RuntimeError):
                image.pack()
    return obj, [round(d, 6) for d in dims]


def import_folder(items: list[ImportItem], out: str | os.PathLike, progress=None) -> dict:
    """Import every item and write ``out/models/*.blend`` and ``out/registry.json``.

    Args:
        items: from :func:`bindscope.generators.comco.assets.plan_import` (already checked).
        out: the asset folder (created if missing).
        progress: optional callable wrapping the item iterable (e.g. ``tqdm``).

    Returns:
        the registry dict that was written.

    Raises:
        BadInput: a file cannot be imported; ``out`` is then neither created nor changed (the staging
            folder ``.<out>.import-staging-<pid>`` beside it is removed).
    """
    out = Path(out).resolve()
    staging = out.parent / f".{out.name}.import-staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "models").mkdir(parents=True)
    entries = []
    try:
        for index, item in enumerate(progress(items) if progress else items):
            obj, dims = import_model(item)
            rel = f"models/{slug(item.category)}.blend"
            bpy.data.libraries.write(str(staging / rel), {obj}, fake_user=True)
            entries.append({
                "name": item.category, "id": index, "size_class": item.size_class,
                "nominal_size_m": item.nominal_size_m, "source": item.source, "licence": item.licence,
                "file": rel, "object": obj.name, "sha256": item.sha256, "format": item.kind,
                "original_file": item.path.name, "up": item.up, "front": item.front,
                "imported_dimensions": dims,
            })
        (out / "models").mkdir(parents=True, exist_ok=True)
        for entry in entries:
            os.replace(staging / entry["file"], out / entry["file"])
        registry = {"format": ASSET_FORMAT, "version": ASSET_FORMAT_VERSION, "categories": entries}
        write_text_atomic(out / REGISTRY_FILE, canonical_json(registry))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        bpy.ops.wm.read_factory_settings(use_empty=True)
    return registry
