"""``comco render``, ``comco preview`` and ``comco t2i`` (bpy, matplotlib and diffusers are imported inside the
commands)."""

from __future__ import annotations

import click

from bindscope.cli.options import build_options, report_build, settings_options
from bindscope.cli.types import DEVICE, JOBS, SEED, count
from bindscope.errors import DEVICE_GRAMMAR
from bindscope.generators.comco.api import MAX_THREADS
from bindscope.generators.comco.overrides import ComcoOverrides
from bindscope.generators.t2i.api import DiffusionSettings
from bindscope.generators.t2i.prompts import PromptSettings
from bindscope.limits import MAX_COLS, MAX_TILES


@click.command("render")
@click.option("--out", "out", required=True, type=click.Path(path_type=str), help="Output dataset folder.")
@settings_options(ComcoOverrides, "overrides")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Dataset seed.")
@click.option("--jobs", type=JOBS, default=1, show_default=True,
              help="Worker processes, each with one persistent Blender session.")
@click.option("--threads", type=count(1, MAX_THREADS), default=None,
              help="Cycles threads per worker [CPU count // jobs, at least 1]. Not part of the "
                   "config.")
@click.option("--device", type=DEVICE, default="auto", show_default=True,
              help=DEVICE_GRAMMAR + ". Cycles renders on the GPUs Blender finds (OptiX, else CUDA) with "
                   "cuda, on the N-th with cuda:N, on them when found with auto.")
@click.option("--config", "config", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="YAML config (schema bindscope/schemas/comco_config.json); flags override it.")
@click.option("--overwrite", is_flag=True, help="Replace an existing bindscope dataset or run in --out.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@build_options
def comco_render(out, overrides, seed, jobs, threads, device, config, overwrite, quiet, build):
    """Render ComCO / SimCO scenes with exact per-object instance masks into a dataset folder OUT.

    Headless Blender (bpy, Cycles). Splits: `scenes` (multi-object images, captions = names joined with
    " and " in a seeded random order, or one object first with --saliency) and `references` (one image per
    category, for IOR). Planning is validated before anything is written; an interrupted run resumes when
    repeated. Example:

        comco render --objects 2-5 -n 1000 --out data/comco
    """
    from bindscope.generators.comco.api import render

    result = render(out, config, seed=seed, jobs=jobs, threads=threads, device=device, overwrite=overwrite,
                    progress=not quiet, build=build, **overrides.config())
    if result.already_complete:
        click.echo(f"{out}: already complete (same config and seed); nothing to do")
        return
    if result.part_record is not None:  # --num-parts K: no manifest until `bindscope merge`
        report_build(result.part_record, out)
        return
    splits = ", ".join(f"{k}: {v['num_samples']}" for k, v in result.manifest["splits"].items())
    click.echo(f"{out}: {splits} (bindscope verify {out} checks it)")

@click.command("preview")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="Output image (PNG).")
@click.option("--split", default="scenes", show_default=True, help="Split to show.")
@click.option("-n", "count", type=count(1, MAX_TILES), default=16, show_default=True,
              help="Tiles to draw: the split's first N samples.")
@click.option("--cols", type=count(1, MAX_COLS), default=4, show_default=True, help="Grid columns.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out file.")
def comco_preview(directory, out, split, count, cols, overwrite):
    """Save a grid of DIRECTORY's images with mask outlines, object names and mention order."""
    from bindscope.generators.comco.preview import write_preview

    path = write_preview(directory, out, split=split, count=count, cols=cols, overwrite=overwrite)
    click.echo(f"wrote {path}")


@click.command("t2i")
@click.option("--pipeline", required=True,
              help="diffusers text-to-image pipeline: a Hugging Face repository id (stabilityai/sd-turbo; downloaded "
                   "on first use) or a pipeline folder (save_pretrained). Refused when it holds or names custom code.")
@click.option("--out", "out", required=True, type=click.Path(path_type=str), help="Output dataset folder.")
@settings_options(PromptSettings, "prompts")
@settings_options(DiffusionSettings, "diffusion")
@click.option("--device", type=DEVICE, default="auto", show_default=True,
              help=DEVICE_GRAMMAR + " (auto: CUDA when torch sees a GPU, else the CPU). Recorded per image, not part "
                   "of the config.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Dataset seed: object sets and initial noise.")
@click.option("--shard-size", type=count(), default=None,
              help="Images per shard, a multiple of --images-per-prompt (the unit an interrupted run resumes from) "
                   "[16 prompts' images].")
@click.option("--overwrite", is_flag=True, help="Replace an existing bindscope dataset or run in --out.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@build_options
def comco_t2i(pipeline, out, prompts, diffusion, device, seed, shard_size, overwrite, quiet, build):
    """Render ComCO-style prompts of 2-5 objects in controlled orders with a diffusers text-to-image pipeline
    into a dataset folder OUT; `comco t2i-score` then measures which prompt objects each image shows, by mention
    position (docs/t2i.md).

    Each object set is drawn from --names (seeded) and named in every --order variant; each image keeps its
    prompt's objects and their order in the object table. Same pipeline, config and seed: the same dataset; an
    interrupted run resumes shard by shard when repeated. Example (sd-turbo on a GPU):

        comco t2i --pipeline stabilityai/sd-turbo --steps 1 --guidance 0 --out data/t2i
    """
    from bindscope.generators.t2i.api import t2i

    result = t2i(out, pipeline, prompts=prompts, diffusion=diffusion, device=device, seed=seed, shard_size=shard_size,
                 overwrite=overwrite, progress=not quiet, build=build)
    if result.already_complete:
        click.echo(f"{out}: already complete (same pipeline, config and seed); nothing to do")
    elif result.part_record is not None:
        report_build(result.part_record, out)
    else:
        stats = result.manifest["statistics"]["images"]
        click.echo(f"{out}: {stats['num_images']} images of {stats['num_prompts']} prompts (bindscope verify {out} "
                   "checks it)")
