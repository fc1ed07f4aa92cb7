"""Cycles settings of the ComCO RGB render per ``render.quality`` (pure Python, never imports bpy).

A spec's render block names its quality (``"quality"``); :func:`cycles_settings` turns the block into the
``scene.cycles`` attributes the Blender session sets before the RGB render. A spec without ``"quality"``
(written by ComCO generator version ``"0.1.0"``) gets :data:`LEGACY`, the settings that version rendered with,
so its images are reproduced. The id renders (masks, depth, occlusion) do not use these settings.

The figures behind each preset (seconds per image, PSNR / SSIM against a converged reference) come from
``benchmarks/comco_render_quality.py`` and are listed in docs/comco.md.
"""

from __future__ import annotations

QUALITIES = ("draft", "default", "final")
"""The values of the config key ``render.quality``."""

LEGACY = "legacy"
"""Quality name of a spec without ``render.quality`` (ComCO generator version ``"0.1.0"``)."""

_LEGACY_SETTINGS = {"max_bounces": 8, "diffuse_bounces": 4, "glossy_bounces": 4, "transmission_bounces": 12,
                    "volume_bounces": 0, "transparent_max_bounces": 8, "use_light_tree": True,
                    "sample_clamp_direct": 0.0, "sample_clamp_indirect": 10.0, "denoising_prefilter": "FAST",
                    "denoising_quality": "HIGH", "use_adaptive_sampling": False, "adaptive_threshold": 0.01,
                    "adaptive_min_samples": 0, "sampling_pattern": "TABULATED_SOBOL", "tile_size": 2048,
                    "use_fast_gi": False, "world.sampling_method": "AUTOMATIC"}

PRESETS: dict[str, dict] = {
    LEGACY: _LEGACY_SETTINGS,
    "draft": {**_LEGACY_SETTINGS, "sampling_pattern": "BLUE_NOISE"},
    "default": _LEGACY_SETTINGS,
    "final": {**_LEGACY_SETTINGS, "max_bounces": 12, "diffuse_bounces": 6, "glossy_bounces": 6,
              "transmission_bounces": 12, "transparent_max_bounces": 12, "denoising_prefilter": "ACCURATE"},
}
"""``scene.cycles`` attributes per quality (besides ``samples`` and ``use_denoising``): bounce limits per ray
type, Cycles' light tree, sample clamping (0 = off) and OpenImageDenoise's prefilter and quality."""

SAMPLES = {"draft": 8, "default": 16, "final": 64}
"""Cycles samples per pixel of each quality when the config's ``samples`` is null (not given)."""


def samples_for(config: dict) -> int:
    """The Cycles sample count of a resolved config: ``samples`` when given, else that of ``render.quality``."""
    if config.get("samples") is not None:
        return int(config["samples"])
    return SAMPLES[config["render"]["quality"]]


def cycles_settings(render: dict) -> dict:
    """``scene.cycles`` attribute -> value for the RGB render of a spec's render block ``render``
    (``{"resolution", "samples", "denoise", "seed"[, "quality"]}``): the preset of ``render["quality"]``
    (:data:`LEGACY` when absent) plus ``samples`` (int >= 1) and ``use_denoising`` (bool).

    Raises:
        KeyError: ``render["quality"]`` is not a preset (a spec the schema did not check).
    """
    preset = PRESETS[render.get("quality", LEGACY)]
    return {**preset, "samples": int(render["samples"]), "use_denoising": bool(render["denoise"])}
