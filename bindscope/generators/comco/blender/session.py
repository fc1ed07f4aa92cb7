"""A persistent Blender (``bpy``) session that renders ComCO / SimCO scene specs.

One :class:`BlenderSession` per process (see :func:`get_session`) renders any number of specs, each in two
explicit steps with the caller's decision between them: :meth:`BlenderSession.measure` (steps 1 and 3 below:
build, flat id render, visible areas) returns a :class:`Layout`; the caller accepts it and calls
:meth:`BlenderSession.complete` (steps 4 and 2: occlusion, RGB), or rejects it and measures another spec, so a
rejected layout costs one flat 1-sample render. :meth:`BlenderSession.render` does both without a decision.

1. **Scene.** Models are built once per category with ``models.build_model`` (normalised: largest dimension
   1 m, origin at the base centre, facing -y) and kept in a hidden cache collection; each scene links cheap
   copies (shared mesh data) scaled, yawed and moved as the spec says. Between scenes the copies are deleted
   and ``bpy.data.orphans_purge(do_recursive=True)`` runs, so memory stays flat. The ground is a flat plane
   or a seamless backdrop (ground curving up into a back wall, placed behind the objects), the camera has the
   spec's lens shift (framing from ``camera.frame_camera``).
2. **RGB** (rendered last, only for accepted layouts). Cycles path tracing, ``render.samples`` samples,
   optional OpenImageDenoise (fast prefilter), the spec's Cycles seed, a fixed thread count, "Standard" view
   transform, 8-bit PNG read back with Pillow (Render Result pixels are empty in background mode).
3. **Instance ids (exact).** The same scene rendered once more with a view-layer material override: an
   emission shader whose strength is the object's pass index (Object Info "Object Index"; ground = 0), world
   strength 0, 1 sample, no bounces, pixel filter width 0.01 px (rays through pixel centres), no denoising,
   "Raw" view transform, 32-bit float OpenEXR. Every pixel then holds exactly the id of the first surface
   hit by the ray through its centre: no colour guessing, no anti-aliasing mix.
4. **Unoccluded silhouettes.** For each object whose projected bbox overlaps another object's, the id render
   is repeated with the other objects hidden (render border cropped to its projected bbox); its pixel count
   is the unoccluded area. Objects whose projected bbox overlaps no other cannot be occluded: their unoccluded
   area equals their visible area without a render. Occlusion = 1 - visible / unoccluded.
5. **Projected bbox.** The evaluated mesh vertices projected with the camera matrix (pixels, unclipped).
6. **Scene ground truth.** The camera's intrinsics ``K`` (3 x 3, pixels) and world-to-camera matrix (4 x 4,
   OpenCV axes: x right, y down, z forward) read from the Blender camera object after the scene is built (so
   they describe whatever camera the spec sets); per object its origin, yaw-oriented 3D bbox and the
   projection of the bbox centre; optionally a depth map (the camera-axis distance in metres of the surface
   seen through each pixel centre, from the same flat id render: its material emits ``(id, view z, 0)``).
7. **Colour and material.** A spec object's ``look`` (``{"rgb", "bsdf"}``, see ``attributes.resolved_look``)
   replaces, on that object only (an object-linked material slot), the model's *main* material (the one
   covering the largest surface not facing the ground) by a copy with the base colour (plain material), the
   pattern's two colours (``rgb`` and a darker shade of it, for the procedural patterns) or a multiply tint
   (any other colour input, e.g. an image texture), and the BSDF's metallic and roughness.
"""

from __future__ import annotations

import atexit
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field

import numpy as np

from bindscope.errors import BadInput, check_device
from bindscope.generators.comco.blender.runtime import blender_modules, quiet_stdout
from bindscope.generators.comco.camera import SENSOR_WIDTH_MM, view_direction
from bindscope.generators.comco.quality import cycles_settings

CACHE_COLLECTION = "bindscope-model-cache"
SCENE_COLLECTION = "bindscope-scene-objects"
GROUND_SIZE_M = 400.0
BACKDROP_SEGMENTS = 24
ID_FILTER_WIDTH = 0.01  # pixels; Cycles' minimum, so each id ray passes through the pixel centre
PATTERN_SHADE = 0.55  # a recoloured two-colour pattern: the second colour is this share of the object's colour


@dataclass
class ObjectResult:
    """Per-object results of one render (all in pixels of the rendered image).

    Attributes:
        index: mask id (1-based, the spec object's ``index``).
        area: visible pixel count (pixels of the mask equal to ``index``).
        unoccluded_area: pixel count of the object rendered without the other objects (int >= area up to
            edge rounding, see module docs); pixels outside the frame are not counted.
        occlusion: ``1 - area / unoccluded_area`` clipped to 0..1 (0 when ``unoccluded_area`` is 0).
        projected_bbox: ``(x0, y0, x1, y1)`` float pixel bounds of the projected mesh vertices (unclipped;
            x right, y down, (0, 0) the top-left image corner).
        in_frame: True when ``projected_bbox`` lies inside the image.
        position: ``(x, y, z)`` world position of the object's origin (the centre of its base), metres.
        bbox3d_centre, bbox3d_size: the object's 3D bounding box in its own axes (yawed about world z):
            centre (world, metres) and extent along its x, y, z axes (metres).
        projected_centre: ``(u, v)`` pixel projection of ``bbox3d_centre`` (x right, y down; pixel (i, j)
            covers [i, i+1) x [j, j+1)).
    """

    index: int
    area: int
    unoccluded_area: int
    occlusion: float
    projected_bbox: tuple[float, float, float, float]
    in_frame: bool
    position: tuple[float, float, float] = (0.0, 0.0, 0.0)
    bbox3d_centre: tuple[float, float, float] = (0.0, 0.0, 0.0)
    bbox3d_size: tuple[float, float, float] = (0.0, 0.0, 0.0)
    projected_centre: tuple[float, float] = (0.0, 0.0)


@dataclass
class RenderOutput:
    """One rendered spec: ``image`` (H, W, 3) uint8 RGB (None when rejected), ``mask`` (H, W) uint8 instance
    ids (0 = background or ground, k = object k), ``objects`` one :class:`ObjectResult` per spec object in
    spec order, ``timings`` seconds spent per stage (``build``, ``ids`` (id render + projection), ``solo``,
    ``rgb``), ``camera_K`` (3, 3) and
    ``world_to_camera`` (4, 4) float64 (see :meth:`BlenderSession.camera_matrices`), and ``depth`` (H, W)
    float32 metres along the camera axis (inf where no surface is hit) when asked for, else None."""

    image: np.ndarray | None
    mask: np.ndarray
    objects: list[ObjectResult]
    timings: dict = field(default_factory=dict)
    camera_K: np.ndarray | None = None
    world_to_camera: np.ndarray | None = None
    depth: np.ndarray | None = None


@dataclass
class Layout:
    """A built scene measured by the flat id render (:meth:`BlenderSession.measure`), before the caller accepts
    it (:meth:`BlenderSession.complete`) or rejects it (measures another spec). ``mask`` (H, W) uint8 instance
    ids, ``objects`` one :class:`ObjectResult` per spec object (visible areas and projected bboxes; occlusion
    not yet measured), ``camera_K`` / ``world_to_camera`` as in :class:`RenderOutput`, ``depth`` (H, W)
    float32 metres, ``timings`` (``build``, ``ids``), ``build`` the session's build number (a layout can only be
    completed while it is still the scene in Blender)."""

    spec: dict
    mask: np.ndarray
    objects: list[ObjectResult]
    camera_K: np.ndarray
    world_to_camera: np.ndarray
    depth: np.ndarray
    timings: dict
    build: int


class BlenderSession:
    """A Blender session in this process, configured for ComCO rendering.

    Args:
        set_spec: the object set (``"comco72"``, ``"simco18"`` or an asset folder) whose models are built.
        threads: Cycles CPU threads (fixed; >= 1).
        device: ``"cpu"``, ``"cuda"`` / ``"cuda:N"`` (BadInput if Blender finds no such GPU) or ``"auto"`` (GPU
            when found).
        builder: ``build_model(category, set_spec)`` override (default:
            :func:`bindscope.generators.comco.blender.models.build_model`).

    Raises:
        BadInput: ``device="cuda"`` or ``"cuda:N"`` and Blender finds no such GPU, a bad device, or bad
            ``threads``.
    """

    def __init__(self, set_spec: str, threads: int = 1, device: str = "cpu", builder=None):
        bpy, _, mathutils = blender_modules()

        if threads < 1:
            raise BadInput(f"threads must be at least 1, got {threads}", param="threads")
        self.bpy = bpy
        self.mathutils = mathutils
        self.set_spec = set_spec
        self.threads = threads
        if builder is None:
            from bindscope.generators.comco.blender.models import build_model as builder
        self.builder = builder
        self._categories: dict | None = None
        self._models: dict[str, object] = {}
        self._main_slots: dict[str, int] = {}
        self._scene_objects: list = []
        self.tmp = tempfile.mkdtemp(prefix="bindscope-comco-")
        atexit.register(shutil.rmtree, self.tmp, True)
        self.renders = 0
        self.builds = 0  # layouts measured (see measure / complete)

        with quiet_stdout((1, 2)):
            bpy.ops.wm.read_factory_settings(use_empty=True)
            scene = bpy.context.scene
            self.scene = scene
            self.view_layer = scene.view_layers[0]
            scene.render.engine = "CYCLES"
            self.device = self._configure_device(device)
        self._configure_render(threads)
        self._make_stage()
        self.id_material = self._make_id_material()

    # ----------------------------------------------------------------------------------------------- setup
    def _configure_render(self, threads: int) -> None:
        """Render settings shared by every render: fixed threads, full resolution, no border, no dither,
        OpenImageDenoise (fast prefilter) when denoising, "None" look, unit exposure and gamma."""
        scene = self.scene
        scene.render.threads_mode = "FIXED"
        scene.render.threads = threads
        scene.render.resolution_percentage = 100
        scene.render.use_border = False
        scene.render.use_crop_to_border = False
        scene.render.use_persistent_data = False
        scene.render.dither_intensity = 0.0
        scene.render.film_transparent = False
        scene.cycles.use_adaptive_sampling = False
        scene.cycles.denoiser = "OPENIMAGEDENOISE"
        scene.cycles.denoising_prefilter = "FAST"
        scene.view_settings.look = "None"
        scene.view_settings.exposure = 0.0
        scene.view_settings.gamma = 1.0

    def _make_stage(self) -> None:
        """What every scene shares: the model cache and scene collections, camera, sun, ground material and
        world (the ground object itself is built per backdrop, :meth:`_set_backdrop`)."""
        bpy, scene = self.bpy, self.scene
        self._cache = bpy.data.collections.new(CACHE_COLLECTION)
        self._cache.use_fake_user = True
        self._objects_collection = bpy.data.collections.new(SCENE_COLLECTION)
        scene.collection.children.link(self._objects_collection)

        self.camera = bpy.data.objects.new("camera", bpy.data.cameras.new("camera"))
        self.camera.data.sensor_fit = "HORIZONTAL"
        self.camera.data.sensor_width = SENSOR_WIDTH_MM
        self.camera.data.clip_start = 0.1
        self.camera.data.clip_end = 2000.0
        scene.collection.objects.link(self.camera)
        scene.camera = self.camera

        self.sun = bpy.data.objects.new("sun", bpy.data.lights.new("sun", "SUN"))
        self.sun.data.angle = math.radians(3.0)
        scene.collection.objects.link(self.sun)

        self.ground_material = bpy.data.materials.new("ground")
        self.ground_material.use_fake_user = True  # kept through orphans_purge while no ground uses it
        self.ground = None
        self._backdrop_key = None

        world = bpy.data.worlds.new("world")
        scene.world = world
        self.background = world.node_tree.nodes["Background"]

    # ----------------------------------------------------------------------------------------------- setup
    def _set_backdrop(self, kind: str, radius: float) -> None:
        """(Re)build the ground object: ``"plane"`` = a flat square of :data:`GROUND_SIZE_M`; ``"seamless"`` =
        a sweep: flat ground for y <= 0, a quarter circle of ``radius`` rising to a vertical back wall at
        y = radius (profile in :data:`BACKDROP_SEGMENTS` straight pieces, smooth shading), as wide as the plane.
        The object's y location (set per scene) moves the start of the curve."""
        bpy = self.bpy
        if self._backdrop_key == (kind, radius):
            return
        if self.ground is not None:
            old = self.ground.data
            bpy.data.objects.remove(self.ground, do_unlink=True)
            bpy.data.meshes.remove(old)
        half = GROUND_SIZE_M / 2
        if kind == "plane":
            profile = [(-half, 0.0), (half, 0.0)]
        else:
            arc = [(radius * math.sin(t), radius - radius * math.cos(t))
                   for t in np.linspace(0.0, math.pi / 2, BACKDROP_SEGMENTS + 1)]
            profile = [(-half, 0.0), *arc, (radius, half)]
        verts = [(x, y, z) for y, z in profile for x in (-half, half)]
        faces = [(2 * i, 2 * i + 1, 2 * i + 3, 2 * i + 2) for i in range(len(profile) - 1)]
        mesh = bpy.data.meshes.new("ground")
        mesh.from_pydata(verts, [], faces)
        mesh.polygons.foreach_set("use_smooth", [kind == "seamless"] * len(faces))
        mesh.materials.append(self.ground_material)
        self.ground = bpy.data.objects.new("ground", mesh)
        self.ground.pass_index = 0
        self.scene.collection.objects.link(self.ground)
        self._backdrop_key = (kind, radius)

    def _configure_device(self, device: str) -> str:
        """Set Cycles' device for ``device`` (the one grammar, :func:`bindscope.errors.check_device`): ``cpu``;
        ``cuda`` = the GPUs Blender finds (OptiX first, then CUDA, HIP, oneAPI, Metal); ``cuda:N`` = only the
        N-th of them; ``auto`` = GPUs when found, else the CPU. Returns what was chosen (``"gpu (OPTIX)"``)."""
        check_device(device)
        index = int(device[5:]) if device.startswith("cuda:") else None
        scene = self.scene
        scene.cycles.device = "CPU"
        if device == "cpu":
            return "cpu"
        found = None
        try:
            prefs = self.bpy.context.preferences.addons["cycles"].preferences
            for kind in ("OPTIX", "CUDA", "HIP", "ONEAPI", "METAL"):
                try:
                    prefs.compute_device_type = kind
                except TypeError:
                    continue
                prefs.get_devices()
                gpus = [d for d in prefs.devices if d.type == kind]
                if gpus and (index is None or index < len(gpus)):
                    for d in prefs.devices:
                        d.use = d.type == kind and (index is None or d == gpus[index])
                    found = kind if index is None else f"{kind} {index}"
                    break
        except (KeyError, AttributeError, RuntimeError):
            found = None
        if found:
            scene.cycles.device = "GPU"
            return f"gpu ({found})"
        if device != "auto":
            raise BadInput(f"device {device!r}: Blender finds no such GPU (OptiX, CUDA, HIP, oneAPI or Metal); "
                           "use device='cpu' or 'auto'", param="device")
        return "cpu"

    def _make_id_material(self):
        bpy = self.bpy
        material = bpy.data.materials.new("bindscope-instance-id")
        tree = material.node_tree
        tree.nodes.clear()
        info = tree.nodes.new("ShaderNodeObjectInfo")
        camera = tree.nodes.new("ShaderNodeCameraData")
        combine = tree.nodes.new("ShaderNodeCombineColor")
        emission = tree.nodes.new("ShaderNodeEmission")
        output = tree.nodes.new("ShaderNodeOutputMaterial")
        emission.inputs["Strength"].default_value = 1.0
        tree.links.new(info.outputs["Object Index"], combine.inputs["Red"])
        tree.links.new(camera.outputs["View Z Depth"], combine.inputs["Green"])
        tree.links.new(combine.outputs["Color"], emission.inputs["Color"])
        tree.links.new(emission.outputs["Emission"], output.inputs["Surface"])
        material.use_fake_user = True
        return material

    def categories(self) -> dict:
        """Category name -> :class:`~bindscope.generators.comco.registry.Category` of the session's set."""
        if self._categories is None:
            from bindscope.generators.comco.registry import load_set

            self._categories = {c.name: c for c in load_set(self.set_spec)}
        return self._categories

    def model(self, name: str):
        """The cached normalised model object of category ``name`` (built on first use)."""
        if name not in self._models:
            categories = self.categories()
            if name not in categories:
                raise BadInput(f"category {name!r} is not in set {self.set_spec!r}")
            obj = self.builder(categories[name], self.set_spec)
            for collection in list(obj.users_collection):
                collection.objects.unlink(obj)
            self._cache.objects.link(obj)
            obj.name = f"model:{name}"
            self._models[name] = obj
        return self._models[name]

    # ------------------------------------------------------------------------------------------ per scene
    def clear(self) -> None:
        """Delete the current scene's object copies and purge orphan data-blocks."""
        bpy = self.bpy
        for obj in self._scene_objects:
            bpy.data.objects.remove(obj, do_unlink=True)
        self._scene_objects = []
        bpy.data.orphans_purge(do_local_ids=True, do_linked_ids=True, do_recursive=True)

    def build(self, spec: dict) -> None:
        """Set up the scene of ``spec`` (objects, camera, sun, world, render size and seed)."""
        Matrix, Vector = self.mathutils.Matrix, self.mathutils.Vector
        self.clear()
        scene = self.scene
        for entry in spec["objects"]:
            base = self.model(entry["category"])
            obj = base.copy()
            obj.name = f"object:{entry['index']}"
            obj.pass_index = int(entry["index"])
            obj.hide_render = False
            obj.matrix_world = (Matrix.Translation((entry["x"], entry["y"], 0.0))
                                @ Matrix.Rotation(math.radians(entry["yaw_deg"]), 4, "Z")
                                @ Matrix.Scale(entry["scale"], 4) @ base.matrix_world)
            look = entry.get("look")
            if look and (look["rgb"] or look["bsdf"]):
                self._apply_look(obj, entry["category"], look)
            self._objects_collection.objects.link(obj)
            self._scene_objects.append(obj)

        world = spec["world"]
        backdrop = world.get("backdrop", {"kind": "plane", "y": 0.0, "radius": 1.0})
        self._set_backdrop(backdrop["kind"], float(backdrop["radius"]))
        self.ground.location = (0.0, float(backdrop["y"]), 0.0)

        cam = spec["camera"]
        look_at = Vector(cam["look_at"])
        self.camera.location = look_at + cam["distance"] * Vector(view_direction(cam["elevation_deg"],
                                                                             cam["azimuth_deg"]))
        self.camera.rotation_euler = (look_at - self.camera.location).to_track_quat("-Z", "Y").to_euler()
        self.camera.data.lens = cam["focal_mm"]
        self.camera.data.shift_x = cam.get("shift_x", 0.0)
        self.camera.data.shift_y = cam.get("shift_y", 0.0)

        light = spec["light"]
        towards_sun = Vector(view_direction(light["elevation_deg"], light["azimuth_deg"]))
        self.sun.rotation_euler = (-towards_sun).to_track_quat("-Z", "Y").to_euler()
        self.sun.data.energy = light["strength"]
        self._ambient = light["ambient"]

        self.background.inputs["Color"].default_value = (*world["background"], 1.0)
        principled = self.ground_material.node_tree.nodes.get("Principled BSDF")
        principled.inputs["Base Color"].default_value = (*world["ground_colour"], 1.0)
        principled.inputs["Roughness"].default_value = 0.9

        render = spec["render"]
        scene.render.resolution_x = scene.render.resolution_y = int(render["resolution"])
        scene.cycles.seed = int(render["seed"])
        self._render_spec = render
        self.bpy.context.view_layer.update()

    def _main_slot(self, name: str) -> int:
        """Material slot of model ``name`` covering the largest surface that can face the camera (faces whose
        normal points down, z < -0.5, are left out; ties: lowest slot); cached."""
        if name not in self._main_slots:
            mesh = self.model(name).data
            areas = np.empty(len(mesh.polygons), np.float64)
            slots = np.empty(len(mesh.polygons), np.int32)
            normals = np.empty(len(mesh.polygons) * 3, np.float64)
            mesh.polygons.foreach_get("area", areas)
            mesh.polygons.foreach_get("material_index", slots)
            mesh.polygons.foreach_get("normal", normals)
            areas[normals.reshape(-1, 3)[:, 2] < -0.5] = 0.0  # faces towards the ground are never seen
            if not len(mesh.materials):  # a model without materials: give it an empty slot to fill per object
                mesh.materials.append(None)
            totals = np.bincount(slots, weights=areas, minlength=len(mesh.materials))
            self._main_slots[name] = int(np.argmax(totals))
        return self._main_slots[name]

    def _apply_look(self, obj, name: str, look: dict) -> None:
        """Give ``obj`` (a scene copy of model ``name``) its own main material with ``look``'s colour/BSDF."""
        slot = obj.material_slots[self._main_slot(name)]
        material = slot.material.copy() if slot.material is not None else self.bpy.data.materials.new("look")
        material.name = f"look:{obj.name}"
        tree = material.node_tree
        bsdf = next(n for n in tree.nodes if n.type == "BSDF_PRINCIPLED")
        if look["rgb"]:
            rgba = (*look["rgb"], 1.0)
            material.diffuse_color = rgba
            base = bsdf.inputs["Base Color"]
            source = base.links[0].from_node if base.is_linked else None
            if source is not None and source.type == "VALTORGB":  # procedural two-colour pattern
                source.color_ramp.elements[0].color = rgba
                source.color_ramp.elements[1].color = (*[PATTERN_SHADE * v for v in look["rgb"]], 1.0)
            elif source is not None:  # any other colour source (image texture): multiply tint
                mix = tree.nodes.new("ShaderNodeMix")
                mix.data_type = "RGBA"
                mix.blend_type = "MULTIPLY"
                colour_in = [socket for socket in mix.inputs if socket.type == "RGBA"]  # A, B of the colour mode
                mix.inputs["Factor"].default_value = 1.0
                colour_in[1].default_value = rgba
                tree.links.new(base.links[0].from_socket, colour_in[0])
                tree.links.new(next(o for o in mix.outputs if o.type == "RGBA"), base)
            else:
                base.default_value = rgba
        if look["bsdf"]:
            bsdf.inputs["Metallic"].default_value = look["bsdf"]["metallic"]
            bsdf.inputs["Roughness"].default_value = look["bsdf"]["roughness"]
        slot.link = "OBJECT"
        slot.material = material

    def camera_matrices(self) -> tuple[np.ndarray, np.ndarray]:
        """``(K, world_to_camera)`` of the scene camera as rendered (float64).

        ``K`` (3, 3) maps camera coordinates to pixels: ``u = fx X/Z + cx``, ``v = fy Y/Z + cy`` (x right, y down,
        pixel (i, j) covering [i, i+1) x [j, j+1), so the image centre is (W/2, H/2) without lens shift).
        ``world_to_camera`` (4, 4) maps homogeneous world points (metres) to the camera frame with OpenCV axes
        (x right, y down, z forward, metres). Both are read from Blender's own projection
        (``Object.calc_matrix_camera``: lens, sensor fit, shift, resolution) and camera object, so they hold
        for any camera a spec or a later change of the framing sets.
        """
        scene = self.scene
        width, height = scene.render.resolution_x, scene.render.resolution_y
        depsgraph = self.bpy.context.evaluated_depsgraph_get()
        p = np.array(self.camera.calc_matrix_camera(depsgraph, x=width, y=height), dtype=np.float64)
        k = np.array([[width * p[0, 0] / 2, 0.0, width * (1 - p[0, 2]) / 2],
                      [0.0, height * p[1, 1] / 2, height * (1 + p[1, 2]) / 2],
                      [0.0, 0.0, 1.0]])
        flip = np.diag([1.0, -1.0, -1.0, 1.0])  # Blender camera axes (y up, looking down -z) -> OpenCV
        return k, flip @ np.linalg.inv(np.array(self.camera.matrix_world, dtype=np.float64))

    def _render_to(self, path: str) -> None:
        self.scene.render.filepath = path
        with quiet_stdout((1, 2)):
            self.bpy.ops.render.render(write_still=True)
        self.renders += 1

    def _rgb_mode(self, settings: dict | None = None) -> None:
        scene = self.scene
        self.view_layer.material_override = None
        self.background.inputs["Strength"].default_value = self._ambient
        for key, value in (settings or cycles_settings(self._render_spec)).items():
            if key.startswith("world."):  # the world's Cycles settings (e.g. world.sampling_method)
                setattr(scene.world.cycles, key[6:], value)
            else:
                setattr(scene.cycles, key, value)
        scene.cycles.pixel_filter_type = "BLACKMAN_HARRIS"
        scene.cycles.filter_width = 1.5
        scene.view_settings.view_transform = "Standard"
        settings = scene.render.image_settings
        settings.file_format = "PNG"
        settings.color_mode = "RGB"
        settings.color_depth = "8"
        settings.compression = 0

    def _id_mode(self) -> None:
        scene = self.scene
        self.view_layer.material_override = self.id_material
        self.background.inputs["Strength"].default_value = 0.0
        scene.cycles.samples = 1
        scene.cycles.use_denoising = False
        scene.cycles.pixel_filter_type = "BOX"
        scene.cycles.filter_width = ID_FILTER_WIDTH
        scene.cycles.max_bounces = 0
        scene.view_settings.view_transform = "Raw"
        settings = scene.render.image_settings
        settings.file_format = "OPEN_EXR"
        settings.color_mode = "RGB"
        settings.color_depth = "32"
        settings.exr_codec = "NONE"

    def render_rgb(self, settings: dict | None = None) -> np.ndarray:
        """Render the built scene's RGB image: (H, W, 3) uint8. ``settings``: ``scene.cycles`` attribute ->
        value replacing those of the spec's render block (:func:`quality.cycles_settings`; for benchmarks)."""
        from PIL import Image

        self._rgb_mode(settings)
        path = os.path.join(self.tmp, "rgb.png")
        self._render_to(path)
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB")).copy()

    def render_ids(self, border: tuple[int, int, int, int] | None = None, depth: bool = False):
        """Render the built scene's instance ids: (H, W) uint8, exact pass indices (0 background/ground).

        ``border`` = ``(x0, y0, x1, y1)`` pixels (half-open, y down) restricts rendering to that rectangle;
        pixels outside it are 0. ``depth=True`` returns ``(ids, depth)`` with ``depth`` (H, W) float32: metres
        along the camera axis to the surface hit by each pixel's centre ray (inf where none is hit).

        Raises:
            RuntimeError: a pixel holds a non-integer value (the id render is not flat; a Blender change).
        """
        bpy, scene = self.bpy, self.scene
        self._id_mode()
        width, height = scene.render.resolution_x, scene.render.resolution_y
        if border is not None:
            x0, y0, x1, y1 = border
            scene.render.use_border = True
            scene.render.border_min_x, scene.render.border_max_x = x0 / width, x1 / width
            scene.render.border_min_y, scene.render.border_max_y = 1 - y1 / height, 1 - y0 / height
        path = os.path.join(self.tmp, "ids.exr")
        try:
            self._render_to(path)
        finally:
            scene.render.use_border = False
        image = bpy.data.images.load(path, check_existing=False)
        try:
            pixels = np.empty(image.size[0] * image.size[1] * 4, dtype=np.float32)
            image.pixels.foreach_get(pixels)
            size = tuple(image.size)
        finally:
            bpy.data.images.remove(image)
        channels = pixels.reshape(size[1], size[0], 4)[::-1, :, :2]
        if border is not None and size != (width, height):  # cropped output: place it in the full frame
            full = np.zeros((height, width, 2), np.float32)
            full[y0:y0 + size[1], x0:x0 + size[0]] = channels
            channels = full
        values = channels[..., 0]
        ids = np.rint(values)
        if np.abs(values - ids).max(initial=0.0) > 1e-3 or ids.min(initial=0) < 0 or ids.max(initial=0) > 255:
            raise RuntimeError("instance-id render is not flat: non-integer pixel values")
        if not depth:
            return ids.astype(np.uint8)
        return ids.astype(np.uint8), np.where(channels[..., 1] > 0, channels[..., 1], np.inf).astype(np.float32)

    def object_geometry(self, k: np.ndarray, world_to_camera: np.ndarray) -> list[dict]:
        """Per scene object: ``projected_bbox`` (float pixel bounds of its projected evaluated mesh vertices),
        ``position``, ``bbox3d_centre``, ``bbox3d_size`` and ``projected_centre`` (see :class:`ObjectResult`)."""
        depsgraph = self.bpy.context.evaluated_depsgraph_get()

        def project(points: np.ndarray) -> np.ndarray:  # (n, 3) world -> (n, 2) pixels
            cam = (np.c_[points, np.ones(len(points))] @ world_to_camera.T)[:, :3] @ k.T
            return cam[:, :2] / cam[:, 2:3]

        out = []
        for obj in self._scene_objects:
            evaluated = obj.evaluated_get(depsgraph)
            matrix = np.array(evaluated.matrix_world, dtype=np.float64)
            mesh = evaluated.to_mesh()
            try:
                co = np.empty(len(mesh.vertices) * 3, dtype=np.float64)
                mesh.vertices.foreach_get("co", co)
            finally:
                evaluated.to_mesh_clear()
            co = co.reshape(-1, 3)
            px = project(co @ matrix[:3, :3].T + matrix[:3, 3])
            low, high = co.min(axis=0), co.max(axis=0)
            centre = matrix[:3, :3] @ ((low + high) / 2) + matrix[:3, 3]
            out.append({"projected_bbox": (float(px[:, 0].min()), float(px[:, 1].min()), float(px[:, 0].max()),
                                           float(px[:, 1].max())),
                        "position": tuple(float(v) for v in matrix[:3, 3]),
                        "bbox3d_centre": tuple(float(v) for v in centre),
                        "bbox3d_size": tuple(float(v) for v in (high - low) * np.linalg.norm(matrix[:3, :3], axis=0)),
                        "projected_centre": tuple(float(v) for v in project(centre[None])[0])})
        return out

    def measure(self, spec: dict) -> Layout:
        """Build ``spec`` and measure its layout with the flat id render (step 1 of a render; one 1-sample
        render): the exact instance mask, the depth map, the camera matrices and per-object visible areas and
        projected bboxes (``unoccluded_area`` / ``occlusion`` not yet measured).

        The caller then decides whether the layout is acceptable (the ComCO generator applies its visibility
        and size rules, ``generator.rejection``) and either calls :meth:`complete` or measures another spec.
        """
        import time

        t0 = time.perf_counter()
        self.build(spec)
        t1 = time.perf_counter()
        mask, depth_map = self.render_ids(depth=True)
        height, width = mask.shape
        k_matrix, world_to_camera = self.camera_matrices()
        geometry = self.object_geometry(k_matrix, world_to_camera)
        boxes = [g["projected_bbox"] for g in geometry]
        areas = [int(np.count_nonzero(mask == o.pass_index)) for o in self._scene_objects]
        results = [ObjectResult(index=obj.pass_index, area=areas[k], unoccluded_area=areas[k], occlusion=0.0,
                                in_frame=boxes[k][0] >= 0 and boxes[k][1] >= 0 and boxes[k][2] <= width
                                and boxes[k][3] <= height, **geometry[k])
                   for k, obj in enumerate(self._scene_objects)]
        self.builds += 1
        return Layout(spec, mask, results, k_matrix, world_to_camera, depth_map,
                      {"build": t1 - t0, "ids": time.perf_counter() - t1}, self.builds)

    def complete(self, layout: Layout, depth: bool = False, settings: dict | None = None) -> RenderOutput:
        """Finish an accepted layout from :meth:`measure` (step 2): the solo id renders of possibly occluded
        objects (their unoccluded areas and occlusion), then the (expensive) RGB render. ``depth``: keep the
        depth map in the output. ``settings``: Cycles settings of the RGB render (see :meth:`render_rgb`).

        Raises:
            RuntimeError: ``layout`` is not the scene this session built last (another spec was measured since).
        """
        import time

        if layout.build != self.builds:
            raise RuntimeError("internal error: complete() got a layout that is no longer built")
        t2 = time.perf_counter()
        mask, results, areas = layout.mask, layout.objects, [o.area for o in layout.objects]
        height, width = mask.shape
        boxes = [r.projected_bbox for r in results]
        for k, obj in enumerate(self._scene_objects):
            if not any(_boxes_overlap(boxes[k], boxes[j]) for j in range(len(boxes)) if j != k):
                continue  # nothing can hide it: unoccluded area = visible area
            x0, y0, x1, y1 = boxes[k]
            border = (max(0, math.floor(x0) - 1), max(0, math.floor(y0) - 1),
                      min(width, math.ceil(x1) + 1), min(height, math.ceil(y1) + 1))
            if border[0] >= border[2] or border[1] >= border[3]:
                results[k].unoccluded_area = 0
                continue
            for other in self._scene_objects:
                other.hide_render = other is not obj
            try:
                solo = self.render_ids(border)
            finally:
                for other in self._scene_objects:
                    other.hide_render = False
            unoccluded = max(int(np.count_nonzero(solo == obj.pass_index)), areas[k])
            results[k].unoccluded_area = unoccluded
            results[k].occlusion = float(min(1.0, max(0.0, 1.0 - areas[k] / unoccluded))) if unoccluded else 0.0
        t3 = time.perf_counter()
        image = self.render_rgb(settings)
        timings = {**layout.timings, "solo": t3 - t2, "rgb": time.perf_counter() - t3}
        return RenderOutput(image, mask, results, timings, camera_K=layout.camera_K,
                            world_to_camera=layout.world_to_camera, depth=layout.depth if depth else None)

    def render(self, spec: dict, masks: bool = True, depth: bool = False) -> RenderOutput:
        """Build and render ``spec`` without an accept/reject step: :meth:`measure` then :meth:`complete`.

        Args:
            spec: a scene or reference spec (``scene.plan_scene`` / ``plan_reference``).
            masks: False renders the RGB image only (mask all zeros, no per-object results; for benchmarks).
            depth: also return the depth map (from the same id render; no extra render).
        """
        if masks:
            return self.complete(self.measure(spec), depth=depth)
        import time

        t0 = time.perf_counter()
        self.build(spec)
        t1 = time.perf_counter()
        image = self.render_rgb()
        return RenderOutput(image, np.zeros(image.shape[:2], np.uint8), [],
                            {"build": t1 - t0, "rgb": time.perf_counter() - t1})

    def memory_counts(self) -> dict[str, int]:
        """Numbers of Blender data-blocks (objects, meshes, materials, images) - flat across scenes."""
        return {name: len(getattr(self.bpy.data, name)) for name in ("objects", "meshes", "materials", "images")}


def _boxes_overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


_SESSIONS: dict[tuple, BlenderSession] = {}


def get_session(set_spec: str, threads: int = 1, device: str = "cpu") -> BlenderSession:
    """This process's Blender session for ``(set_spec, threads, device)``, created on first call; one process holds
    one session: asking for another key rebuilds it (factory settings)."""
    key = (set_spec, threads, device)
    if key not in _SESSIONS:
        _SESSIONS.clear()
        with quiet_stdout((1, 2)):  # Cycles' device probe logs missing GPU libraries during set-up
            _SESSIONS[key] = BlenderSession(set_spec, threads=threads, device=device)
    return _SESSIONS[key]
