"""``bindscope import coco`` (click): parse, call :func:`bindscope.importers.coco.import_coco`, print."""

from __future__ import annotations

import click

from bindscope.cli.types import JOBS, FiniteFloat, count
from bindscope.limits import IMPORT_IMAGE_SIZE, MAX_OBJECTS


@click.group("import")
def bindscope_import():
    """Import real data as a bindscope dataset (docs/real-data.md)."""

@bindscope_import.command("coco")
@click.option("--images", required=True, type=click.Path(), help="Folder of the COCO images (e.g. val2017/).")
@click.option("--instances", required=True, type=click.Path(), help="COCO instances JSON (instances_val2017.json).")
@click.option("--captions", required=True, type=click.Path(), help="COCO captions JSON (captions_val2017.json).")
@click.option("--out", required=True, type=click.Path(), help="Dataset folder to write.")
@click.option("--split", default="val2017", show_default=True, help="Split name in the dataset.")
@click.option("--subset", default="all", show_default=True,
              help="Preset: 'all', or 'image-side' (2-5 objects, largest area >= 2x the second; ComCO's COCO "
                   "image experiments). --min-objects/--max-objects/--largest-ratio override it.")
@click.option("--min-objects", type=count(0, MAX_OBJECTS), default=None, help="Keep images with at least this many objects.")
@click.option("--max-objects", type=count(1, MAX_OBJECTS), default=None, help="Keep images with at most this many objects.")
@click.option("--largest-ratio", type=FiniteFloat(min=1), default=None,
              help="Keep images whose largest object's area is at least this many times the second's.")
@click.option("--limit", type=count(), default=None, help="Import only the first N selected images (by id).")
@click.option("--image-size", type=count(*IMPORT_IMAGE_SIZE), default=224, show_default=True,
              help="Side of the stored square (letterboxed) images, pixels.")
@click.option("--shard-size", type=count(), default=256, show_default=True, help="Images per shard.")
@click.option("--jobs", type=JOBS, default=1, show_default=True, help="Worker processes.")
@click.option("--overwrite", is_flag=True, help="Replace a bindscope dataset in --out.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def bindscope_import_coco(images, instances, captions, out, split, subset, min_objects, max_objects, largest_ratio,
                          limit, image_size, shard_size, jobs, overwrite, quiet):
    """Import COCO images, instance masks (pycocotools) and captions with the mention position of every
    annotated category, as a verified bindscope dataset (generator 'coco')."""
    from dataclasses import replace

    from bindscope.cli.options import report_build
    from bindscope.errors import BadInput
    from bindscope.importers.coco import SUBSETS, import_coco

    if subset not in SUBSETS:
        raise BadInput(f"--subset {subset!r} is not allowed; use one of {', '.join(SUBSETS)}")
    chosen = SUBSETS[subset]
    overrides = {k: v for k, v in (("min_objects", min_objects), ("max_objects", max_objects),
                                   ("largest_ratio", largest_ratio)) if v is not None}
    manifest = import_coco(images, instances, captions, out, split=split, image_size=image_size,
                           subset=replace(chosen, **overrides), limit=limit, shard_size=shard_size, jobs=jobs,
                           overwrite=overwrite, progress=not quiet)
    report_build(manifest, out)
    stats = manifest["statistics"]["splits"][split]
    click.echo(f"{stats['objects']} objects, {stats['crowd_regions']} crowd regions, {stats['captions']} captions "
               f"({stats['mentions']} category mentions, {stats['unmatched_mentions']} unmatched)")
