"""``comco render`` and ``comco preview`` (bpy and matplotlib are imported inside the commands)."""

from __future__ import annotations

import click

from bindscope.cli.options import build_options, report_build
from bindscope.cli.types import DEVICE, JOBS, SEED, count, schema_range
from bindscope.errors import DEVICE_GRAMMAR
from bindscope.generators.comco.api import MAX_THREADS
from bindscope.generators.comco.saliency import SALIENCY
from bindscope.limits import MAX_COLS, MAX_TILES


@click.command("render")
@click.option("--out", "out", required=True, type=click.Path(path_type=str), help="Output dataset folder.")
@click.option("-n", "n", type=schema_range("comco_config", "n"), default=None, help="Multi-object scenes to render [config n: 1000].")
@click.option("--objects", default=None,
              help="Objects per scene: a count (3) or a range (2-5), counts 1..5, spread evenly [2-5].")
@click.option("--set", "set", default=None,
              help="Object set: comco72, simco18, or an asset folder from `comco assets import` [comco72].")
@click.option("--size-mode", type=click.Choice(["one-large", "equal", "random"]), default=None,
              help="one-large: one object at scale.large, the rest at scale.small; equal; random [one-large].")
@click.option("--resolution", type=schema_range("comco_config", "resolution"), default=None, help="Image side in pixels (square) [224].")
@click.option("--samples", type=schema_range("comco_config", "samples"), default=None,
              help="Cycles samples per pixel of the RGB render [those of render.quality].")
@click.option("--references/--no-references", default=None,
              help="Also render the single-object reference split (one image per category) [on].")
@click.option("--attributes", default=None,
              help="Per-object attributes sampled and written into captions: any of colour, material, size "
                   "(comma-separated), e.g. colour,material [none].")
@click.option("--task", type=click.Choice(["scenes", "conjunctive-search"]), default=None,
              help="scenes, or conjunctive-search: the target conjunction (config conjunctive_search.target) "
                   "present or absent among distractors sharing one attribute with it [scenes].")
@click.option("--depth/--no-depth", default=None, help="Also store a float16 depth map per sample [off].")
@click.option("--saliency", default=None, metavar="none|size|position",
              help="Which object the caption names first with probability --saliency-bias: "
                   + "; ".join(f"{k}: {v}" for k, v in SALIENCY.items()) + " [none: uniform mention order].")
@click.option("--saliency-bias", type=schema_range("comco_config", "saliency_bias"), default=None,
              help="Probability that the salient object (see --saliency) is mentioned first [1].")
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
def comco_render(out, n, objects, set, size_mode, resolution, samples, references, attributes, task, depth,
                 saliency, saliency_bias, seed, jobs, threads, device, config, overwrite, quiet, **build):
    """Render ComCO / SimCO scenes with exact per-object instance masks into a dataset folder OUT.

    Headless Blender (bpy, Cycles). Splits: `scenes` (multi-object images, captions = names joined with
    " and " in a seeded random order, or one object first with --saliency) and `references` (one image per
    category, for IOR). Planning is validated before anything is written; an interrupted run resumes when
    repeated. Example:

        comco render --objects 2-5 -n 1000 --out data/comco
    """
    from bindscope.generators.comco.api import render

    result = render(out, config, seed=seed, jobs=jobs, threads=threads, device=device,
                    overwrite=overwrite, progress=not quiet, **build, set=set, objects=objects,
                    size_mode=size_mode, resolution=resolution, samples=samples, n=n, references=references,
                    attributes=attributes, task=task, depth=depth, saliency=saliency,
                    saliency_bias=saliency_bias)
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
