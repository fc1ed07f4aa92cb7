"""Speed and picture quality of ComCO RGB render settings against a converged reference, in one run.

For each resolution (``--resolutions``, default 224 and 512 px) the first ``-n`` scene specs of the default
ComCO-72 config (seed 0) are rendered, interleaved so that load changes hit every setting alike, with each
setting of ``--settings``: ``legacy`` (the settings of ComCO generator version ``0.1.0``), the presets
``draft`` / ``default`` / ``final`` (``bindscope.generators.comco.quality``) and the exploration candidates of
:data:`CANDIDATES` (each a change of ``legacy``). Per setting it reports seconds per image (the whole pipeline:
build, flat id render, solo id renders, RGB render), PSNR (dB) and SSIM of the RGB image against the reference
(``skimage.metrics.peak_signal_noise_ratio`` / ``structural_similarity`` on 8-bit RGB, ``data_range=255``,
``channel_axis=2``; mean over the specs), and whether the mask, depth map and per-object results are
bit-identical to those of the first setting.

The reference is the same spec rendered with :data:`REFERENCE` (``--reference-samples`` samples, default 512,
no denoiser, 32 bounces of every kind, no clamping) once, cached as PNG in ``--reference-dir`` under a name
hashed from the scene (the spec without its sample count and quality), the settings and the bpy version, so
later runs reuse it. Example::

    nice python benchmarks/comco_render_quality.py -n 3 --reference-dir /tmp/comco-ref --json quality.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import time

import numpy as np

REFERENCE = {"max_bounces": 32, "diffuse_bounces": 32, "glossy_bounces": 32, "transmission_bounces": 32,
             "volume_bounces": 0, "transparent_max_bounces": 32, "use_light_tree": True,
             "sample_clamp_direct": 0.0, "sample_clamp_indirect": 0.0, "use_denoising": False}
"""Cycles settings of the converged reference (``samples`` from ``--reference-samples``)."""

CANDIDATES = {
    "s8": {"samples": 8},
    "s8-acc": {"samples": 8, "denoising_prefilter": "ACCURATE"},
    "s6-acc": {"samples": 6, "denoising_prefilter": "ACCURATE"},
    "s8-b4": {"samples": 8, "max_bounces": 4, "diffuse_bounces": 2, "glossy_bounces": 2, "transmission_bounces": 4,
              "transparent_max_bounces": 4},
    "s16-lt0": {"use_light_tree": False},
    "s16-b2": {"max_bounces": 2, "diffuse_bounces": 1, "glossy_bounces": 1, "transmission_bounces": 2,
               "transparent_max_bounces": 2},
    "s16-clamp1": {"sample_clamp_indirect": 1.0},
    "s16-tile64": {"tile_size": 64},
    "s16-ad01": {"use_adaptive_sampling": True, "adaptive_threshold": 0.01},
    "s16-ad02": {"use_adaptive_sampling": True, "adaptive_threshold": 0.02},
    "s16-ad02-min4": {"use_adaptive_sampling": True, "adaptive_threshold": 0.02, "adaptive_min_samples": 4},
    "s16-ad05-min4": {"use_adaptive_sampling": True, "adaptive_threshold": 0.05, "adaptive_min_samples": 4},
    "s24-ad05-min4": {"samples": 24, "use_adaptive_sampling": True, "adaptive_threshold": 0.05,
                      "adaptive_min_samples": 4},
    "s8-blue": {"samples": 8, "sampling_pattern": "BLUE_NOISE"},
    "s16-blue": {"sampling_pattern": "BLUE_NOISE"},
    "s12-blue": {"samples": 12, "sampling_pattern": "BLUE_NOISE"},
    "s16-b0": {"max_bounces": 0},
    "s16-fastgi": {"use_fast_gi": True, "ao_bounces_render": 1},
    "s8-blue-lt0": {"samples": 8, "sampling_pattern": "BLUE_NOISE", "use_light_tree": False},
    "s16-wnone": {"world.sampling_method": "NONE"},
    "s12-lt0-wnone": {"samples": 12, "use_light_tree": False, "world.sampling_method": "NONE"},
    "s16-lt0-wnone-ad02": {"use_light_tree": False, "world.sampling_method": "NONE", "use_adaptive_sampling": True,
                           "adaptive_threshold": 0.02},
    # path guiding (CPU only; OpenPGL), fewer samples
    "s8-guide": {"samples": 8, "use_guiding": True},
    "s12-guide": {"samples": 12, "use_guiding": True},
    "s16-guide": {"use_guiding": True},
    "s8-guide-t4": {"samples": 8, "use_guiding": True, "guiding_training_samples": 4},
    "s8-guide-surf": {"samples": 8, "use_guiding": True, "use_volume_guiding": False,
                      "use_guiding_direct_light": False},
    # OpenImageDenoise quality x prefilter x samples x input passes
    "s16-bal": {"denoising_quality": "BALANCED"},
    "s16-fastq": {"denoising_quality": "FAST"},
    "s6-bal": {"samples": 6, "denoising_quality": "BALANCED"},
    "s8-bal": {"samples": 8, "denoising_quality": "BALANCED"},
    "s8-fastq": {"samples": 8, "denoising_quality": "FAST"},
    "s10-bal": {"samples": 10, "denoising_quality": "BALANCED"},
    "s10-fastq": {"samples": 10, "denoising_quality": "FAST"},
    "s12-bal": {"samples": 12, "denoising_quality": "BALANCED"},
    "s12-fastq": {"samples": 12, "denoising_quality": "FAST"},
    "s10": {"samples": 10},
    "s12": {"samples": 12},
    "s10-acc": {"samples": 10, "denoising_prefilter": "ACCURATE"},
    "s12-acc": {"samples": 12, "denoising_prefilter": "ACCURATE"},
    "s8-acc-bal": {"samples": 8, "denoising_prefilter": "ACCURATE", "denoising_quality": "BALANCED"},
    "s10-acc-bal": {"samples": 10, "denoising_prefilter": "ACCURATE", "denoising_quality": "BALANCED"},
    "s12-acc-bal": {"samples": 12, "denoising_prefilter": "ACCURATE", "denoising_quality": "BALANCED"},
    "s8-pnone": {"samples": 8, "denoising_prefilter": "NONE"},
    "s8-alb": {"samples": 8, "denoising_input_passes": "RGB_ALBEDO"},
    "s8-rgb": {"samples": 8, "denoising_input_passes": "RGB"},
    # caustics, glossy filter, light threshold, light bounces, scrambling distance, auto tile
    "s16-nocaus": {"caustics_reflective": False, "caustics_refractive": False},
    "s16-blur0": {"blur_glossy": 0.0},
    "s16-blur3": {"blur_glossy": 3.0},
    "s16-lst05": {"light_sampling_threshold": 0.05},
    "s16-lst0": {"light_sampling_threshold": 0.0},
    "s16-minlb2": {"min_light_bounces": 2},
    "s16-scr05": {"scrambling_distance": 0.5},
    "s16-autoscr": {"auto_scrambling_distance": True},
    "s16-noautotile": {"use_auto_tile": False},
    # combinations of the best
    "s8-minlb2": {"samples": 8, "min_light_bounces": 2},
    "s10-minlb2": {"samples": 10, "min_light_bounces": 2},
    "s12-minlb2": {"samples": 12, "min_light_bounces": 2},
    "s10-minlb2-blur0": {"samples": 10, "min_light_bounces": 2, "blur_glossy": 0.0},
    "s8-minlb2-rgb": {"samples": 8, "min_light_bounces": 2, "denoising_input_passes": "RGB"},
    "s8-minlb4-rgb": {"samples": 8, "min_light_bounces": 4, "denoising_input_passes": "RGB"},
}
"""Exploration candidates: changes of the ``legacy`` settings."""

UNSET = {"use_guiding": False, "guiding_training_samples": 128, "use_surface_guiding": True,
         "use_volume_guiding": True, "use_guiding_direct_light": True, "denoising_input_passes": "RGB_ALBEDO_NORMAL",
         "caustics_reflective": True, "caustics_refractive": True, "blur_glossy": 1.0,
         "light_sampling_threshold": 0.01, "min_light_bounces": 0, "scrambling_distance": 1.0,
         "auto_scrambling_distance": False, "use_auto_tile": True, "ao_bounces_render": 1}
"""Blender's factory values of the ``scene.cycles`` attributes that candidates change and the presets do not
set; every setting of a run starts from them, so a candidate's change does not leak into the settings measured
after it (one Blender session renders every setting)."""


def settings_of(name: str) -> dict:
    """Full ``scene.cycles`` settings of a setting name (a preset, ``legacy`` or a candidate)."""
    from bindscope.generators.comco import quality

    if name in CANDIDATES:
        return {**UNSET, **quality.cycles_settings({"samples": 16, "denoise": True}), **CANDIDATES[name]}
    return {**UNSET, **quality.cycles_settings({"samples": quality.SAMPLES.get(name, 16), "denoise": True,
                                                "quality": name})}


def reference_image(session, spec: dict, samples: int, folder: str) -> np.ndarray:
    """The cached reference of ``spec`` (rendered now when missing): (H, W, 3) uint8."""
    import bpy
    from PIL import Image

    settings = {**REFERENCE, "samples": samples}
    scene_only = {**spec, "render": {k: spec["render"][k] for k in ("resolution", "seed")}}
    key = hashlib.sha256(json.dumps([scene_only, settings, bpy.app.version_string], sort_keys=True).encode())
    key = key.hexdigest()
    path = os.path.join(folder, f"reference-{spec['render']['resolution']}-{key[:16]}.png")
    if not os.path.exists(path):
        session.build(spec)
        image = session.render_rgb(settings)
        os.makedirs(folder, exist_ok=True)
        Image.fromarray(image).save(path + ".tmp.png")
        os.replace(path + ".tmp.png", path)
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB")).copy()


def measure(resolution: int, n: int, names: list[str], args) -> dict:
    """Figures of each setting at ``resolution``: ``{name: {"seconds", "psnr", "ssim", "identical", ...}}``."""
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    from bindscope.config import resolve_config
    from bindscope.generators.comco import scene
    from bindscope.generators.comco.config import DEFAULT_CONFIG
    from bindscope.generators.comco.generator import ComcoGenerator

    config = resolve_config("comco_config", DEFAULT_CONFIG, {"set": args.set, "resolution": resolution, "n": n})
    gen = ComcoGenerator(config, seed=0, threads=args.threads, device="cpu")
    session = gen._session()
    specs = [scene.plan_scene(config, gen.categories, 0, i) for i in range(n)]
    references = [reference_image(session, spec, args.reference_samples, args.reference_dir) for spec in specs]
    for spec in specs:  # warm-up: every model built before timing
        session.build(spec)
    figures = {name: {"seconds": [], "cpu_seconds": [], "psnr": [], "ssim": [], "identical": True} for name in names}
    for spec, ref in zip(specs, references):
        first = None
        for name in names:
            settings = settings_of(name)
            t, cpu = time.perf_counter(), time.process_time()
            out = session.complete(session.measure(spec), depth=True, settings=settings)
            figures[name]["seconds"].append(time.perf_counter() - t)
            figures[name]["cpu_seconds"].append(time.process_time() - cpu)
            figures[name]["psnr"].append(peak_signal_noise_ratio(ref, out.image, data_range=255))
            figures[name]["ssim"].append(structural_similarity(ref, out.image, channel_axis=2, data_range=255))
            ids = (out.mask.tobytes(), out.depth.tobytes(), [vars(o) for o in out.objects])
            first = ids if first is None else first
            figures[name]["identical"] &= ids == first
            if args.images:
                from PIL import Image

                os.makedirs(args.images, exist_ok=True)
                Image.fromarray(out.image).save(os.path.join(args.images, f"{resolution}-{spec['index']}-{name}.png"))
    for name in names:
        f = figures[name]
        f.update(seconds_per_image=float(np.mean(f["seconds"])), cpu_seconds_per_image=float(np.mean(f["cpu_seconds"])),
                 psnr_mean=float(np.mean(f["psnr"])),
                 ssim_mean=float(np.mean(f["ssim"])), settings=settings_of(name))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="comco72")
    parser.add_argument("-n", type=int, default=3, help="scene specs per resolution")
    parser.add_argument("--resolutions", default="224,512")
    parser.add_argument("--settings", default="legacy,default,draft,final",
                        help=f"comma-separated: legacy, draft, default, final, or candidates {', '.join(CANDIDATES)}")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--reference-samples", type=int, default=512)
    parser.add_argument("--reference-dir", required=True, help="folder of cached reference renders")
    parser.add_argument("--images", default=None, help="also write every rendered image into this folder")
    parser.add_argument("--json", default=None, help="write the figures as JSON to this file")
    args = parser.parse_args()
    names = args.settings.split(",")
    load = os.getloadavg()
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, {args.threads} Cycles threads, "
          f"load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    results = {"n": args.n, "threads": args.threads, "reference_samples": args.reference_samples,
               "load_start": list(load), "resolutions": {}}
    for res in [int(r) for r in args.resolutions.split(",")]:
        figures = measure(res, args.n, names, args)
        results["resolutions"][str(res)] = figures
        base = figures[names[0]]
        print(f"\n{res} x {res} px, {args.n} specs, reference {args.reference_samples} samples "
              f"(load average now {os.getloadavg()[0]:.2f})")
        print(f"| setting | s / image (wall) | CPU s / image | images/s vs {names[0]} (wall, CPU) | PSNR dB | SSIM "
              "| masks, ids, depth identical |")
        print("|---|---|---|---|---|---|---|")
        for name in names:
            f = figures[name]
            print(f"| {name} | {f['seconds_per_image']:.3f} | {f['cpu_seconds_per_image']:.3f} "
                  f"| {base['seconds_per_image'] / f['seconds_per_image']:.2f}x, "
                  f"{base['cpu_seconds_per_image'] / f['cpu_seconds_per_image']:.2f}x "
                  f"| {f['psnr_mean']:.2f} | {f['ssim_mean']:.4f} | {'yes' if f['identical'] else 'NO'} |")
    results["load_end"] = list(os.getloadavg())
    print(f"\nload average at the end: {results['load_end'][0]:.2f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
