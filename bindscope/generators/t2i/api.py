"""``bindscope.comco.t2i``: the library call behind ``comco t2i``.

Example (a notebook, a GPU machine)::

    import bindscope
    result = bindscope.comco.t2i("data/t2i-sd-turbo", "stabilityai/sd-turbo", objects="2-3", n=200, steps=1,
                                 guidance=0.0, images_per_prompt=4, precision="fp16")
    result.manifest["statistics"]["images"]
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bindscope.build.backends import BuildSettings
from bindscope.generators.t2i.prompts import PromptSettings, check_prompt_settings
from bindscope.errors import (PRECISIONS, BadInput, check_device, check_int, check_number, check_utf8_path,
                              check_precision, resolve_device)
from bindscope.limits import MAX_COUNT, MAX_SEED

if TYPE_CHECKING:
    from bindscope.build.builder import BuildResult

MAX_STEPS = 1000
MAX_IMAGES_PER_PROMPT = 64
RESOLUTIONS = (32, 2048)  # allowed image side, pixels
PROMPTS_PER_SHARD = 16  # the default shard: this many prompts' images (a shard is the unit of resumption)


@dataclass(frozen=True)
class DiffusionSettings:
    """How the pipeline makes each prompt's images (``comco t2i``'s options of them are generated from the fields:
    :func:`bindscope.cli.options.settings_options`).

    Attributes:
        images_per_prompt: 1..64; image ``j`` of every prompt of one object set starts from the same noise.
        steps: inference steps, 1..1000 (``num_inference_steps``). guidance: classifier-free guidance scale, >= 0
            (``guidance_scale``; sd-turbo: 0). resolution: image side in pixels, 32..2048, a multiple of the
            pipeline VAE's scale (8 for Stable Diffusion; checked by the call, which reads the pipeline).
        precision: ``fp32``, or ``bf16`` / ``fp16`` on a CUDA device (checked by the call with the device).

    Raises:
        BadInput: a value outside its range (``param`` names the field), at construction.
    """

    images_per_prompt: int = field(default=1, metadata={
        "flag": "--images-per-prompt", "range": (1, MAX_IMAGES_PER_PROMPT),
        "help": "Images per prompt; image j of every prompt of one object set starts from the same noise."})
    steps: int = field(default=50, metadata={
        "flag": "--steps", "range": (1, MAX_STEPS), "help": "Inference steps (sd-turbo: 1-4)."})
    guidance: float = field(default=7.5, metadata={
        "flag": "--guidance", "range": (0, None), "float": True, "help": "Classifier-free guidance scale (sd-turbo: "
                                                                         "0)."})
    resolution: int = field(default=512, metadata={
        "flag": "--resolution", "range": RESOLUTIONS,
        "help": "Image side in pixels (square), a multiple of the pipeline VAE's scale (8 for Stable Diffusion)."})
    precision: str = field(default="fp32", metadata={
        "flag": "--precision", "choice": PRECISIONS,
        "help": "Pipeline weights in float32, or bfloat16 / float16 on a CUDA device."})

    def __post_init__(self):
        check_int("images_per_prompt", self.images_per_prompt, 1, MAX_IMAGES_PER_PROMPT, what="images")
        check_int("steps", self.steps, 1, MAX_STEPS, what="inference steps")
        object.__setattr__(self, "guidance", check_number("guidance", self.guidance, 0.0, inclusive=True))
        check_int("resolution", self.resolution, *RESOLUTIONS, what="pixels")
        check_precision(self.precision)


def t2i(out: str | os.PathLike, pipeline: str | os.PathLike, *, prompts: PromptSettings | None = None,
        diffusion: DiffusionSettings | None = None, device: str = "auto", seed: int = 0,
        shard_size: int | None = None, overwrite: bool = False, progress: bool = True,
        build: BuildSettings | None = None, **changes) -> BuildResult:
    """Generate images of ComCO-style prompts with a diffusers text-to-image pipeline into the dataset ``out``
    (docs/t2i.md; the prompts: :mod:`bindscope.generators.t2i.prompts`, the dataset:
    :mod:`bindscope.generators.t2i.generator`).

    Args:
        out: dataset folder (created; an unfinished run of the same call resumes shard by shard; another dataset is
            replaced only with ``overwrite``).
        pipeline: a Hugging Face repository id (``stabilityai/sd-turbo``) or a local pipeline folder
            (:mod:`bindscope.generators.t2i.pipeline`: checked for custom code before it is loaded).
        prompts: what the prompts name and how, a :class:`~bindscope.generators.t2i.prompts.PromptSettings`
            (``names``, ``objects``, ``n``, ``order``, ``template``, ``articles``; default: its defaults).
        diffusion: how the pipeline makes the images, a :class:`DiffusionSettings` (``images_per_prompt``,
            ``steps``, ``guidance``, ``resolution``, ``precision``; default: its defaults).
        device: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` (runtime: not part of the config; each sample records it).
        seed: >= 0. shard_size: images per shard, a multiple of ``images_per_prompt`` (default 16 prompts' images).
        overwrite, progress: as :func:`bindscope.build.builder.build_dataset`. build: the scale-out, a
            :class:`~bindscope.build.backends.BuildSettings` (backend, scheduler, num_parts, part; default: this
            machine, one part).
        **changes: fields of ``prompts`` or ``diffusion`` in place of their values (``n=10``, ``steps=1``).

    Returns:
        A :class:`~bindscope.build.builder.BuildResult`.

    Raises:
        BadInput: a bad value (named, with what is allowed), a name list smaller than the largest object count,
            an unusable ``out``, a pipeline that is not a folder or a repository that can be fetched (offline: one
            in the Hugging Face cache), holds custom code or is not text-to-image; all before writing.
    """
    from bindscope.build.builder import BuildResult, build_dataset, finish_if_done, output_state, refuse_foreign
    from bindscope.generators.comco.registry import NAME_SETS, read_names
    from bindscope.generators.t2i.generator import NAME, T2IGenerator
    from bindscope.generators.t2i.pipeline import load_pipeline, resolve_pipeline, vae_scale
    from bindscope.io.canonical import config_sha256
    from bindscope.io.ownership import check_output_location

    build = build or BuildSettings()
    prompts, diffusion = _settings(prompts, diffusion, changes)
    names, n, order, images_per_prompt = prompts.names, prompts.n, prompts.order, diffusion.images_per_prompt
    resolution, precision = diffusion.resolution, diffusion.precision
    check_int("seed", seed, 0, MAX_SEED)
    check_device(device)
    low, high = prompts.counts()
    check_utf8_path("names", names)
    categories = read_names(names)
    check_prompt_settings(categories, (low, high), n, order)
    shard_size = PROMPTS_PER_SHARD * images_per_prompt if shard_size is None else shard_size
    check_int("shard_size", shard_size, 1, MAX_COUNT, what="images")
    if shard_size % images_per_prompt:
        raise BadInput(f"shard_size {shard_size} is not allowed; a shard holds whole prompts: use a multiple of "
                       f"images_per_prompt={images_per_prompt}", param="shard_size")
    for param, path in (("pipeline", pipeline), ("out", out)):
        check_utf8_path(param, path)
    check_output_location("out", out)
    refuse_foreign(out, overwrite)  # before a pipeline is downloaded
    device = resolve_device(device)
    if precision != "fp32" and not device.startswith("cuda"):
        raise BadInput(f"precision {precision!r} needs a CUDA device (device={device!r}); on the CPU use fp32",
                       param="precision")
    source = resolve_pipeline(str(pipeline))
    scale = vae_scale(source.folder)
    if resolution % scale:
        raise BadInput(f"resolution {resolution} is not allowed for pipeline {str(pipeline)!r}: use a multiple of "
                       f"{scale} pixels (its VAE's scale)", param="resolution")
    names_label = str(names) if str(names) in NAME_SETS else Path(names).name
    config = {"names": names_label, "categories": categories, "objects": {"min": low, "max": high}, "n": n,
              "order": order, "template": prompts.template, "articles": prompts.articles,
              "images_per_prompt": images_per_prompt, "steps": diffusion.steps, "guidance": diffusion.guidance,
              "resolution": resolution, "precision": precision,
              "pipeline": source.identity, "shard_size": shard_size}
    generator = T2IGenerator(config, seed, folder=source.folder, device=device)
    run_id = config_sha256(NAME, config, seed)
    if build.num_parts == 1 and output_state(out, run_id, overwrite) == "done":
        manifest = finish_if_done(out, run_id)
        if manifest is not None:
            return BuildResult(Path(out), manifest, already_complete=True)
    load_pipeline(source.folder, precision, device)  # a pipeline diffusers cannot load fails before any write
    made = build_dataset(generator, out, overwrite=overwrite, progress=progress, **dataclasses.asdict(build))
    if build.num_parts > 1:
        return BuildResult(Path(out), None, part_record=made)
    return BuildResult(Path(out), made)


def _settings(prompts: PromptSettings | None, diffusion: DiffusionSettings | None, changes: dict):
    """``prompts`` and ``diffusion`` (default: their defaults) with ``changes`` (fields of either) in place.
    BadInput for a keyword that is a field of neither."""
    left, made = dict(changes), []
    for settings in (prompts or PromptSettings(), diffusion or DiffusionSettings()):
        own = [f.name for f in dataclasses.fields(settings)]
        made.append(dataclasses.replace(settings, **{k: left.pop(k) for k in own if k in left}))
    if left:
        allowed = [f.name for settings in made for f in dataclasses.fields(settings)]
        raise BadInput(f"{next(iter(left))} is not a setting of comco t2i; allowed: {', '.join(allowed)}",
                       param=next(iter(left)))
    return made
