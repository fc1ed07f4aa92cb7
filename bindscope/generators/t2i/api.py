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
from pathlib import Path
from typing import TYPE_CHECKING

from bindscope.build.backends import BuildSettings
from bindscope.errors import (PRECISIONS, BadInput, check_device, check_int, check_number, check_utf8_path,
                              resolve_device)
from bindscope.limits import MAX_COUNT, MAX_SEED

if TYPE_CHECKING:
    from bindscope.build.builder import BuildResult

MAX_STEPS = 1000
MAX_IMAGES_PER_PROMPT = 64
RESOLUTIONS = (32, 2048)  # allowed image side, pixels
PROMPTS_PER_SHARD = 16  # the default shard: this many prompts' images (a shard is the unit of resumption)


def t2i(out: str | os.PathLike, pipeline: str | os.PathLike, *, names: str | os.PathLike = "comco72",
        objects: str | tuple[int, int] = "2-5", n: int = 100, order: str = "rotations",
        template: str | None = None, articles: bool = True, images_per_prompt: int = 1, steps: int = 50,
        guidance: float = 7.5, resolution: int = 512, precision: str = "fp32", device: str = "auto", seed: int = 0,
        shard_size: int | None = None, overwrite: bool = False, progress: bool = True,
        build: BuildSettings | None = None) -> BuildResult:
    """Generate images of ComCO-style prompts with a diffusers text-to-image pipeline into the dataset ``out``
    (docs/t2i.md; the prompts: :mod:`bindscope.generators.t2i.prompts`, the dataset:
    :mod:`bindscope.generators.t2i.generator`).

    Args:
        out: dataset folder (created; an unfinished run of the same call resumes shard by shard; another dataset is
            replaced only with ``overwrite``).
        pipeline: a Hugging Face repository id (``stabilityai/sd-turbo``) or a local pipeline folder
            (:mod:`bindscope.generators.t2i.pipeline`: checked for custom code before it is loaded).
        names: the category names: ``comco72``, ``simco18``, ``coco`` (80 COCO categories), an asset folder or a
            text file with one name per line (:func:`bindscope.generators.comco.registry.read_names`).
        objects: objects per prompt, a count (``"3"``) or a range (``"2-5"``), counts 2..5.
        n: object sets, 1..100,000; each gives one prompt per order variant. order: ``rotations``, ``reverse`` or
            ``random`` (:data:`~bindscope.generators.t2i.prompts.ORDERS`).
        template: the prompt around ``{objects}`` (None: ``"a photo of {objects}"``). articles: "a" / "an" before each name.
        images_per_prompt: 1..64; image ``j`` of every prompt of one object set starts from the same noise.
        steps: inference steps, 1..1000 (``num_inference_steps``). guidance: classifier-free guidance scale,
            >= 0 (``guidance_scale``; sd-turbo: 0). resolution: image side in pixels, 32..2048, a multiple of the
            pipeline VAE's scale (8 for Stable Diffusion).
        precision: ``fp32``, or ``bf16`` / ``fp16`` on a CUDA device. device: ``auto``, ``cpu``, ``cuda``,
            ``cuda:N`` (runtime: not part of the config; each sample records it).
        seed: >= 0. shard_size: images per shard, a multiple of ``images_per_prompt`` (default 16 prompts' images).
        overwrite, progress: as :func:`bindscope.build.builder.build_dataset`. build: the scale-out, a
            :class:`~bindscope.build.backends.BuildSettings` (backend, scheduler, num_parts, part; default: this
            machine, one part).

    Returns:
        A :class:`~bindscope.build.builder.BuildResult`.

    Raises:
        BadInput: a bad value (named, with what is allowed), a name list smaller than the largest object count,
            an unusable ``out``, a pipeline that is not a folder or a repository that can be fetched (offline: one
            in the Hugging Face cache), holds custom code or is not text-to-image; all before writing.
    """
    from bindscope.build.builder import BuildResult, build_dataset, finish_if_done, output_state, refuse_foreign
    from bindscope.generators.comco.config import parse_objects
    from bindscope.generators.comco.registry import NAME_SETS, read_names
    from bindscope.generators.t2i.generator import NAME, T2IGenerator
    from bindscope.generators.t2i.pipeline import load_pipeline, resolve_pipeline, vae_scale
    from bindscope.generators.t2i.prompts import DEFAULT_TEMPLATE, check_prompt_settings, check_template
    from bindscope.io.canonical import config_sha256
    from bindscope.io.ownership import check_output_location

    build = build or BuildSettings()
    check_int("seed", seed, 0, MAX_SEED)
    check_int("images_per_prompt", images_per_prompt, 1, MAX_IMAGES_PER_PROMPT, what="images")
    check_int("steps", steps, 1, MAX_STEPS, what="inference steps")
    guidance = check_number("guidance", guidance, 0.0, inclusive=True)
    check_int("resolution", resolution, *RESOLUTIONS, what="pixels")
    check_device(device)
    if precision not in PRECISIONS:
        raise BadInput(f"precision {precision!r} is not allowed; use one of {', '.join(PRECISIONS)}",
                       param="precision")
    if not isinstance(articles, bool):
        raise BadInput(f"articles {articles!r} is not allowed; use True or False", param="articles")
    low, high = parse_objects(objects) if isinstance(objects, str) else tuple(objects)
    check_utf8_path("names", names)
    categories = read_names(names)
    check_prompt_settings(categories, (low, high), n, order)
    template = check_template(DEFAULT_TEMPLATE if template is None else template)
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
              "order": order, "template": template, "articles": articles, "images_per_prompt": images_per_prompt,
              "steps": steps, "guidance": guidance, "resolution": resolution, "precision": precision,
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
