"""The ComCO / SimCO generator: plans scenes (pure Python) and realises them in a Blender worker session.

:class:`ComcoGenerator` implements the :class:`bindscope.build.builder.Generator` protocol, so
:func:`bindscope.build.builder.build_dataset` writes its output (atomic shards, resumable, progress bar,
identical for any ``--jobs``). Two splits:

- ``"scenes"``: ``config["n"]`` multi-object scenes (:func:`scene.plan_scene`). A render that breaks a
  rule of :func:`rejection` (visibility minimum as a fraction of the image, in frame, ``one-large``: the large
  object's visible area >= ``sizes.min_area_ratio`` times every other's, ``equal``: areas within
  ``sizes.equal_ratio``) is planned again with corrected scales (:func:`size_factors`), then re-planned with
  the next attempt number; after ``visibility.max_tries`` attempts the run stops with
  :class:`~bindscope.errors.GenerationError` (the config was valid; this scene found no acceptable render).
- ``"references"``: one single-object reference image per category of the set, in registry order
  (:func:`scene.plan_reference`), caption = the category name (Abbasi et al., CVPR 2025; docs/papers.md
  section 1: IOR retrieves among single-object images): framed on the object (``references: true``) or cut
  from a scene: the object rendered alone from the scene's camera, zoomed onto it (``references: crop``,
  :meth:`ComcoGenerator.render_crop`). Omitted when ``references`` is false.

Per-object columns (ObjectRecord): ``category`` = registry name, ``category_id`` = registry id,
attributes ``size_class`` (the category's real-world class: large/medium/small, "shape" for SimCO) and
``size`` (the planned on-screen size: "large"/"small" in one-large mode, "equal", "random", "reference");
extras (float32): ``scale`` (m, largest dimension), ``occlusion`` (0..1, share of the unoccluded silhouette
hidden by other objects), ``unoccluded_area`` (pixels), ``x``/``y`` (m, ground position), ``yaw_deg``,
``proj_x0``/``proj_y0``/``proj_x1``/``proj_y1`` (pixels, projected mesh bbox, unclipped), ``area_ratio``
(visible area / the largest visible area of the image, 0..1), and the 3D ground truth ``z`` (m, origin
height), ``bbox3d_cx``/``cy``/``cz`` (m, world centre of the yaw-oriented 3D bbox), ``bbox3d_dx``/``dy``/``dz``
(m, its extent along the object's axes), ``proj_cx``/``proj_cy`` (pixels, the projected bbox centre). With
``--attributes`` the attributes ``colour`` and ``material`` join the table and each scene carries recognition
and binding negatives (:func:`attributes.scene_negatives`).
``salient`` = the large object in one-large mode, else the object of size rank 1; with ``saliency`` (scenes)
the object the caption names first with probability ``saliency_bias`` (the spec's ``"salient"``).

Per-sample arrays (format version 2): ``camera_K`` (3, 3) float32 and ``world_to_camera`` (4, 4) float32
(OpenCV axes; ``BlenderSession.camera_matrices``), and ``depth`` (H, W) float16 (metres along the camera axis,
inf where no surface) with ``depth: true``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from bindscope import __version__
from bindscope.errors import GenerationError
from bindscope.format.records import ObjectRecord, Sample, mask_bbox_area, size_ranks
from bindscope.generators.comco import attributes, camera, quality, scene
from bindscope.generators.comco.saliency import DEFAULT_SALIENCY_BIAS
from bindscope.generators.comco.scene import SPLIT_REFERENCES, SPLIT_SCENES

ATTRIBUTE_NAMES = ["size_class", "size"]
LOOK_ATTRIBUTES = ["colour", "material"]
EXTRA_NAMES = ["scale", "occlusion", "unoccluded_area", "x", "y", "yaw_deg",
               "proj_x0", "proj_y0", "proj_x1", "proj_y1", "area_ratio",
               "z", "bbox3d_cx", "bbox3d_cy", "bbox3d_cz", "bbox3d_dx", "bbox3d_dy", "bbox3d_dz", "proj_cx", "proj_cy"]
GENERATOR_VERSION = "3"
"""Version of the ComCO generator recorded in every manifest (``generator.version``). It changes whenever the
same config and seed would give other bytes (pixels, records or the shard files); ``"0.1.0"`` (bindscope 0.1.0's
version) rendered with ``quality.LEGACY``, ``"2"`` and ``"3"`` with ``render.quality``; ``"3"`` renders each
``references: crop`` object alone and writes shard files with :func:`bindscope.io.atomic.atomic_hdf5` (docs/comco.md,
CHANGELOG.md)."""
NEGATIVE_STREAM = 4  # scene.sample_rng stream of the recognition negatives' replacement draws


def rejection(spec: dict, objects: list, config: dict, image_size: int) -> str | None:
    """Why a rendered scene must be re-planned (None when it is accepted), from its id render.

    Rules: every object shows at least :func:`scene.min_visible_pixels` pixels; with ``visibility.in_frame``
    every projected mesh bbox lies in the image; ``one-large``: the large object's visible area is at least
    ``sizes.min_area_ratio`` times every other's; ``equal``: the largest visible area is at most
    ``sizes.equal_ratio`` times the smallest.

    Args:
        spec: the scene spec rendered.
        objects: its per-object render results (``blender.session.ObjectResult``, same order as the spec).
        config: resolved config (``visibility``, ``sizes`` are used).
        image_size: image side in pixels (for messages).
    """
    threshold = scene.min_visible_pixels(config)
    for entry, res in zip(spec["objects"], objects):
        if res.area < threshold:
            return (f"object {entry['index']} ({entry['category']}) shows {res.area} pixels, fewer than the "
                    f"visibility minimum of {threshold} (visibility.min_fraction, visibility.min_pixels)")
        if config["visibility"]["in_frame"] and not res.in_frame:
            return f"object {entry['index']} ({entry['category']}) is partly outside the {image_size}px frame"
    areas = [res.area for res in objects]
    sizes = config["sizes"]
    large = [k for k, e in enumerate(spec["objects"]) if e["large"]]
    if spec["size_mode"] == "one-large" and large and len(areas) > 1:
        big = areas[large[0]]
        for k, area in enumerate(areas):
            if k != large[0] and area * sizes["min_area_ratio"] > big:
                return (f"the large object shows {big} pixels, less than sizes.min_area_ratio = "
                        f"{sizes['min_area_ratio']:g} times object {k + 1}'s {area}")
    if spec["size_mode"] == "equal" and max(areas) > sizes["equal_ratio"] * min(areas):
        return (f"visible areas {min(areas)}..{max(areas)} pixels differ by more than sizes.equal_ratio = "
                f"{sizes['equal_ratio']:g}")
    return None


MAX_FACTOR = 2.0
"""Bound of one size correction: an object's scale is multiplied by a factor in 1/MAX_FACTOR..MAX_FACTOR."""
HEADROOM = 1.15
"""Area targets of a size correction aim this much beyond the rule (the camera is re-fitted afterwards)."""


def size_factors(spec: dict, objects: list, config: dict) -> list[float] | None:
    """Scale factors that move a rejected scene's visible areas towards the rules (None: nothing to correct).

    Visible area grows about as the square of an object's scale, so each object's factor is
    ``sqrt(target / area)``, bounded by :data:`MAX_FACTOR`: too small objects grow to the visibility minimum;
    ``one-large``: the large object grows until it is ``sizes.min_area_ratio`` times the largest other, and
    others above ``large / min_area_ratio`` shrink to it; ``equal``: every object aims at the geometric mean of
    the areas. Targets carry a :data:`HEADROOM` margin.
    """
    areas = np.array([max(res.area, 1) for res in objects], dtype=float)
    floor = scene.min_visible_pixels(config) * HEADROOM
    target = np.maximum(areas, floor)
    large = [k for k, e in enumerate(spec["objects"]) if e["large"]]
    if spec["size_mode"] == "one-large" and large and len(areas) > 1:
        ratio = config["sizes"]["min_area_ratio"] * HEADROOM
        k = large[0]
        others = np.delete(target, k)
        target[k] = max(target[k], ratio * others.max())
        grown = min(target[k], areas[k] * MAX_FACTOR ** 2)
        rest = np.arange(len(areas)) != k
        target[rest] = np.maximum(floor, np.minimum(target[rest], grown / ratio))
    elif spec["size_mode"] == "equal":
        target = np.maximum(floor, np.exp(np.log(areas).mean()))
    factors = np.clip(np.sqrt(target / areas), 1 / MAX_FACTOR, MAX_FACTOR)
    if np.allclose(factors, 1.0, atol=1e-3):
        return None
    return [float(f) for f in factors]


CROP_ZOOMS = 2
"""``references: crop``: zoom steps onto the object's solo mask (the second corrects the first's pixel rounding)."""


def flat_background(out):
    """``out`` (a ``RenderOutput`` of one object) with every pixel outside its mask set to the median colour of
    those pixels (the backdrop behind the object) and its depth to inf there: the cut-out look of a crop
    reference. Mask, per-object results and camera matrices are kept."""
    background = out.mask == 0
    image = out.image.copy()
    image[background] = np.median(out.image[background], axis=0).astype(np.uint8)
    depth = None if out.depth is None else np.where(background, np.float32(np.inf), out.depth)
    return replace(out, image=image, depth=depth)


@dataclass
class ComcoGenerator:
    """Generator of a ComCO / SimCO dataset (see module docs).

    Args:
        config: resolved ``comco render`` config (schema ``comco_config``; defaults in
            :data:`config.DEFAULT_CONFIG`).
        seed: dataset seed (>= 0).
        threads: Cycles threads per worker process (a runtime setting, not part of the config).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"`` (runtime setting).

    Raises:
        BadInput: unknown set (via :func:`registry.load_set`).
    """

    config: dict
    seed: int = 0
    threads: int = 1
    device: str = "cpu"
    name: str = "comco"
    version: str = GENERATOR_VERSION
    release_per_split = True  # a Hub release has one config per split (scenes, references)
    attribute_names: list = field(init=False)
    extra_names: list = field(default_factory=lambda: list(EXTRA_NAMES))

    def __post_init__(self):
        from bindscope.generators.comco.registry import load_set

        self.categories = load_set(self.config["set"])
        self.splits = {SPLIT_SCENES: int(self.config["n"])}
        if self.config["references"]:
            self.splits[SPLIT_REFERENCES] = len(self.categories)
        self.shard_size = int(self.config["shard_size"])
        res = int(self.config["resolution"])
        self.image_size = (res, res)
        self.attribute_names = list(ATTRIBUTE_NAMES) + [a for a in LOOK_ATTRIBUTES if a in self.config["attributes"]]
        self.sample_arrays = {"camera_K": {"shape": [3, 3], "dtype": "float32"},
                              "world_to_camera": {"shape": [4, 4], "dtype": "float32"}}
        if self.config["depth"]:
            self.sample_arrays["depth"] = {"shape": [res, res], "dtype": "float16"}

    @classmethod
    def from_config(cls, config: dict, seed: int) -> "ComcoGenerator":
        """The generator of a recorded resolved config (``manifest["config"]``) and seed (CPU, one thread).

        Raises:
            BadInput: the config's object set cannot be loaded.
        """
        return cls(config, seed)

    progress_per_sample = True  # build_dataset may call make_samples one scene at a time (progress bar)

    def extends(self, manifest: dict) -> bool:
        """True when ``manifest`` is a finished dataset of this generator with the same seed and config but a
        smaller or equal ``n`` (``build_dataset`` then renders only the new scenes)."""
        old = manifest.get("config")
        return (manifest.get("generator", {}).get("name") == self.name and manifest.get("seed") == self.seed
                and isinstance(old, dict) and isinstance(old.get("n"), int) and old["n"] <= self.config["n"]
                and {**old, "n": self.config["n"]} == self.config)

    def check(self, probe: int = 64) -> None:
        """Validate by planning (no rendering, nothing written): BadInput for an impossible layout."""
        scene.check_plannable(self.config, self.categories, self.seed, probe)

    def _session(self):
        from bindscope.generators.comco.blender.session import get_session

        return get_session(self.config["set"], self.threads, self.device)

    def accept_scene(self, index: int, split: str = SPLIT_SCENES):
        """Plan scene ``index`` and measure it (id render) with size corrections and re-planning until a layout
        passes :func:`rejection`; return ``(spec, Layout, attempts)`` (the layout is the session's current
        scene, not yet completed).

        Each attempt plans the scene (:func:`scene.plan_scene`); a plan that cannot pass the visibility rule
        (:func:`scene.plan_rejection`) is re-planned without rendering. A layout that breaks a rule of
        :func:`rejection` is planned again with corrected scales (:func:`size_factors`, at most
        ``sizes.corrections`` times per attempt), then with the next attempt number. With ``split =
        "references"`` (``references: crop``) the scene is the one of :func:`scene.plan_reference`.

        Raises:
            GenerationError: no acceptable render within ``visibility.max_tries`` attempts (the message names
                the split, the scene index and the last rejection).
        """
        session = self._session()
        tries = self.config["visibility"]["max_tries"]
        reason = ""
        for attempt in range(tries):
            factors = None
            for correction in range(self.config["sizes"]["corrections"] + 1):
                if split == SPLIT_SCENES:
                    spec = scene.plan_scene(self.config, self.categories, self.seed, index, attempt, factors)
                else:
                    spec = scene.plan_reference(self.config, self.categories, self.seed, index, attempt, factors)
                reason = scene.plan_rejection(spec, self.config)
                if reason is not None:
                    break
                layout = session.measure(spec)  # build + flat id render: visible areas, no RGB yet
                reason = rejection(spec, layout.objects, self.config, self.image_size[0])
                if reason is None:
                    return {**spec, "corrections": correction}, layout, attempt + 1
                step = size_factors(spec, layout.objects, self.config)
                if step is None:
                    break
                factors = [a * b for a, b in zip(factors or [1.0] * len(step), step)]
        raise GenerationError(f"{split} {index}: no acceptable render in visibility.max_tries = {tries} attempts "
                              f"(last: {reason}); lower visibility.min_fraction / visibility.min_pixels or "
                              "sizes.min_area_ratio, raise resolution or lower objects")

    def render_scene(self, index: int, split: str = SPLIT_SCENES):
        """Plan and render scene ``index`` (:meth:`accept_scene`, then occlusion and the RGB image); return
        ``(spec, RenderOutput, attempts)``.

        Raises:
            GenerationError: as :meth:`accept_scene`.
        """
        spec, layout, attempts = self.accept_scene(index, split)
        return spec, self._session().complete(layout, depth=self.config["depth"]), attempts

    def render_reference(self, index: int):
        """Render reference image ``index`` (category ``categories[index]``); return ``(spec, RenderOutput)``.

        ``references: true``: the object alone is rendered once for its id mask, the camera is zoomed onto the
        mask's bbox (:func:`camera.zoom_to_box`, side ``camera.reference_fill`` of the image) and the scene
        rendered again. ``references: crop``: :meth:`render_crop`.

        Raises:
            GenerationError: the object shows fewer pixels than the visibility minimum.
        """
        if self.config["references"] == "crop":
            return self.render_crop(index)
        res = self.image_size[0]
        session = self._session()
        spec = scene.plan_reference(self.config, self.categories, self.seed, index)
        probe = session.measure(spec)  # the object's mask at the planned camera; never completed
        if probe.objects[0].area:
            box, _ = mask_bbox_area(probe.mask, 1)
            spec["camera"] = camera.zoom_to_box(spec["camera"], box, res, self.config["camera"]["reference_fill"])
        out = session.render(spec, depth=self.config["depth"])
        threshold = scene.min_visible_pixels(self.config)
        if out.objects[0].area < threshold:
            raise GenerationError(f"references {index}: the reference image of {spec['caption']!r} shows "
                                  f"{out.objects[0].area} pixels, fewer than the visibility minimum of {threshold}; "
                                  "raise camera.reference_fill or resolution")
        return spec, out

    def render_crop(self, index: int):
        """The ``references: crop`` image of category ``categories[index]``; return ``(spec, RenderOutput)``.

        A scene holding the category as object 1 (the large object in ``one-large`` mode) is planned and
        accepted by the scene rules (:meth:`accept_scene`, id renders only). Object 1 is then rendered alone
        (the other objects left out, so nothing stands in front of it or shades it) from the scene's camera,
        zoomed (:func:`camera.zoom_to_box`, :data:`CROP_ZOOMS` steps on its solo id mask) so that its mask's
        bbox is centred with side ``camera.reference_fill`` of the image, and every pixel outside its mask takes
        the median backdrop colour (:func:`flat_background`). The mask is the exact id render of that image:
        the object's whole, unoccluded silhouette. The spec holds the one object (mention 1 of the caption, the
        category name) and the zoomed camera, so rendering it again gives the same mask; the scene's objects
        and camera are kept as ``scene_objects`` and ``scene_camera``.
        """
        spec, _, _ = self.accept_scene(index, split=SPLIT_REFERENCES)
        spec.pop("salient", None)  # the caption is the category name alone
        first = {**spec["objects"][0], "mention_position": 1}
        solo = {**spec, "objects": [first], "scene_objects": spec["objects"], "scene_camera": spec["camera"]}
        session, res = self._session(), self.image_size[0]
        for _ in range(CROP_ZOOMS):
            box, _ = mask_bbox_area(session.measure(solo).mask, 1)
            solo["camera"] = camera.zoom_to_box(solo["camera"], box, res, self.config["camera"]["reference_fill"])
        return solo, flat_background(session.render(solo, depth=self.config["depth"]))

    def make_samples(self, split: str, start: int, count: int) -> list[Sample]:
        """Render samples ``start .. start+count-1`` of ``split`` (a pure function of config, seed, index)."""
        samples = []
        for index in range(start, start + count):
            if split == SPLIT_SCENES:
                spec, out, attempts = self.render_scene(index)
            elif split == SPLIT_REFERENCES:
                spec, out = self.render_reference(index)
                attempts = 1
            else:
                raise ValueError(f"unknown split {split!r}")
            samples.append(self._sample(index, spec, out, attempts))
        return samples

    def _sample(self, index: int, spec: dict, out, attempts: int) -> Sample:
        boxes_areas = [mask_bbox_area(out.mask, e["index"]) for e in spec["objects"]]
        ranks = size_ranks([area for _, area in boxes_areas])
        largest = max(1, max(area for _, area in boxes_areas))
        mode = spec["size_mode"]
        objects = []
        for k, (entry, res) in enumerate(zip(spec["objects"], out.objects)):
            bbox, area = boxes_areas[k]
            if mode == "one-large":
                size, salient = ("large" if entry["large"] else "small"), entry["large"]
            else:
                size, salient = mode, ranks[k] == 1
            if "salient" in spec and spec["kind"] == "scene":  # saliency: the object the caption favours
                salient = entry["index"] == spec["salient"]
            px0, py0, px1, py1 = res.projected_bbox
            values = {"size_class": entry["size_class"], "size": size}
            values.update({a: entry.get(a, "") for a in self.attribute_names[len(ATTRIBUTE_NAMES):]})
            objects.append(ObjectRecord(
                index=entry["index"], category=entry["category"], category_id=entry["category_id"],
                attributes=values, bbox=bbox, area=area,
                size_rank=ranks[k], salient=bool(salient), mention_position=entry["mention_position"],
                extras={"scale": entry["scale"], "occlusion": res.occlusion,
                        "unoccluded_area": float(res.unoccluded_area), "x": entry["x"], "y": entry["y"],
                        "yaw_deg": entry["yaw_deg"], "proj_x0": px0, "proj_y0": py0, "proj_x1": px1,
                        "proj_y1": py1, "area_ratio": area / largest, "z": res.position[2],
                        **{f"bbox3d_c{a}": v for a, v in zip("xyz", res.bbox3d_centre)},
                        **{f"bbox3d_d{a}": v for a, v in zip("xyz", res.bbox3d_size)},
                        "proj_cx": res.projected_centre[0], "proj_cy": res.projected_centre[1]}))
        negatives = []
        if spec["split"] == SPLIT_SCENES and "caption_parts" in spec:
            rng = scene.sample_rng(self.seed, spec["split"], index, spec["attempt"], stream=NEGATIVE_STREAM)
            negatives = attributes.scene_negatives(spec, self.config, rng)
        arrays = {"camera_K": out.camera_K.astype(np.float32),
                  "world_to_camera": out.world_to_camera.astype(np.float32)}
        if self.config["depth"]:
            arrays["depth"] = out.depth.astype(np.float16)
        return Sample(index=index, image=out.image, mask=out.mask, caption=spec["caption"], objects=objects,
                      negatives=negatives, arrays=arrays,
                      spec={**spec, "attempts": attempts, "render_device": self._session().device})

    def provenance(self) -> dict:
        """Title and sources for the manifest: the set's 3D models grouped by licence, and Blender."""
        spec = str(self.config["set"])
        title = {"comco72": "ComCO", "simco18": "SimCO"}.get(spec, f"ComCO ({Path(spec).name or 'custom set'})")
        by_licence: dict[str, list[str]] = {}
        for category in self.categories:
            by_licence.setdefault(category.licence, []).append(category.name)
        sources = [f"3D models, {licence}: {len(names)} categories ({', '.join(names)})"
                   for licence, names in sorted(by_licence.items())]
        sources.append("Rendered with Blender (GPL-3.0-or-later; rendered images are not covered by the GPL)")
        return {"title": f"{title} (bindscope)", "sources": sources}

    # ------------------------------------------------------------------------------------------ statistics
    def shard_statistics(self, split: str, samples: list[Sample]) -> dict[str, float]:
        """Additive counts: samples, objects, scenes per object count, re-plans, summed occlusion and areas,
        large object mentioned first / last, the large object's size rank 1 (one-large mode), samples per
        render device (the spec's ``render_device``) and, with ``saliency``, scenes with a salient object and
        those that mention it first."""
        c: dict[str, float] = {"samples": len(samples), "objects": 0, "replans": 0, "occlusion_sum": 0.0,
                               "occluded_objects": 0, "area_sum": 0, "large_first": 0, "large_last": 0,
                               "large_rank1": 0, "large_scenes": 0}
        for s in samples:
            m = len(s.objects)
            c["objects"] += m
            c[f"count_{m}"] = c.get(f"count_{m}", 0) + 1
            c["replans"] += s.spec.get("attempts", 1) - 1
            c["corrections"] = c.get("corrections", 0) + s.spec.get("corrections", 0)
            device = f"device:{s.spec.get('render_device', 'unrecorded')}"
            c[device] = c.get(device, 0) + 1
            for o in s.objects:
                occlusion = float(np.float32(o.extras["occlusion"]))  # the stored value: read-back shards agree
                c["occlusion_sum"] += occlusion
                c["occluded_objects"] += occlusion > 0
                c["area_sum"] += o.area
            large = [o for o in s.objects if o.attributes["size"] == "large"]
            if len(large) == 1 and m > 1:
                c["large_scenes"] += 1
                c["large_first"] += large[0].mention_position == 1
                c["large_first_chance"] = c.get("large_first_chance", 0.0) + 1 / m
                c["large_last"] += large[0].mention_position == m
                c["large_rank1"] += large[0].size_rank == 1
            if "salient" in s.spec:
                c["saliency_scenes"] = c.get("saliency_scenes", 0) + 1
                c["salient_first"] = c.get("salient_first", 0) + (
                    s.objects[s.spec["salient"] - 1].mention_position == 1)
        return c

    def statistics(self, counts: dict[str, dict[str, float]]) -> dict:
        """Realised statistics per split: object-count shares, mean objects, re-plans per scene, mean
        occlusion, share of occluded objects, mean visible area (pixels), samples per render device
        (``render_devices``: ``{"cpu": n}``, ``{"gpu (OPTIX)": n}``; GPU pixels differ from CPU ones); one-large: share of scenes with
        the large object mentioned first / last, the share expected under uniform mention order (mean of 1/m),
        and the share with the large object at size rank 1 (1.0 by construction); with ``saliency``,
        ``saliency = {"mode", "scenes" (scenes with a salient object), "requested" (saliency_bias), "realised"
        (the share of those scenes whose caption names the salient object first)}``."""
        stats = {}
        for split, c in counts.items():
            n = max(1, c.get("samples", 0))
            objs = max(1, c.get("objects", 0))
            s = {"num_samples": int(c.get("samples", 0)), "num_objects": int(c.get("objects", 0)),
                 "objects_per_scene": {k.split("_")[1]: int(v) for k, v in sorted(c.items())
                                       if k.startswith("count_")},
                 "mean_objects": c.get("objects", 0) / n, "replans_per_scene": c.get("replans", 0) / n,
                 "size_corrections_per_scene": c.get("corrections", 0) / n,
                 "mean_occlusion": c.get("occlusion_sum", 0.0) / objs,
                 "occluded_share": c.get("occluded_objects", 0) / objs,
                 "mean_visible_area_px": c.get("area_sum", 0) / objs,
                 "render_devices": {k.split(":", 1)[1]: int(v) for k, v in sorted(c.items())
                                    if k.startswith("device:")}}
            if c.get("large_scenes"):
                ls = c["large_scenes"]
                s.update(large_mentioned_first=c["large_first"] / ls, large_mentioned_last=c["large_last"] / ls,
                         large_mentioned_first_chance=c.get("large_first_chance", 0.0) / ls,
                         large_size_rank1=c["large_rank1"] / ls)
            if c.get("saliency_scenes"):
                s["saliency"] = {"mode": self.config["saliency"], "scenes": int(c["saliency_scenes"]),
                                 "requested": self.config.get("saliency_bias", DEFAULT_SALIENCY_BIAS),
                                 "realised": c.get("salient_first", 0) / c["saliency_scenes"]}
            stats[split] = s
        return stats

    def card(self, manifest: dict) -> str:
        """The dataset card (Markdown): what, how generated, config, statistics, licences of the models."""
        import json

        cfg = manifest["config"]
        scenes = manifest["statistics"].get(SPLIT_SCENES, {})
        licences = sorted({c.licence for c in self.categories})
        lines = [
            f"# ComCO-style dataset ({cfg['set']})", "",
            "Blender-rendered multi-object scenes with exact instance masks, made by `comco render` "
            f"(ComCO generator version {manifest['generator']['version']}, bindscope {__version__}), following the ComCO / SimCO design of Abbasi et "
            "al., \"CLIP Under the Microscope\" (CVPR 2025), docs/papers.md section 1. Scene layout, camera and "
            "light are this project's choices (docs/comco.md).", "",
            "- splits: " + ", ".join(f"`{k}` ({v['num_samples']})" for k, v in manifest["splits"].items()),
            f"- image size: {manifest['image_size'][0]} x {manifest['image_size'][1]} px; Cycles, "
            f"{quality.samples_for(cfg)} samples, denoise {cfg['denoise']}, quality "
            f"`{cfg.get('render', {}).get('quality', 'legacy')}`; render devices "
            f"{json.dumps(scenes.get('render_devices', {}), sort_keys=True)}",
            f"- objects per scene: {cfg['objects']['min']}-{cfg['objects']['max']}; size mode `{cfg['size_mode']}`"
            f" (scales in m: {json.dumps(cfg['scale'], sort_keys=True)})",
            "- captions: category names joined with " + json.dumps(cfg["caption"]["joiner"]) + ", " +
            (f"mention order: saliency `{cfg['saliency']}`, the salient object first with probability "
             f"{cfg.get('saliency_bias', DEFAULT_SALIENCY_BIAS):g} (docs/comco.md)" if "saliency" in cfg
             else "mention order uniformly random (seeded)"),
            f"- seed: {manifest['seed']}", "",
            "## Statistics (scenes)", "", "```json", json.dumps(scenes, indent=2, sort_keys=True), "```", "",
            "## Per-object columns", "",
            "attributes: " + ", ".join(f"`{a}`" for a in manifest["object_attributes"]) +
            "; extras: " + ", ".join(f"`{e}`" for e in manifest["object_extras"]) + " (see docs/comco.md)", "",
            "## Licences of the 3D models", "", *[f"- {lic}" for lic in licences], "",
            "## Config", "", "```json", json.dumps(cfg, indent=2, sort_keys=True), "```", "",
        ]
        return "\n".join(lines)
