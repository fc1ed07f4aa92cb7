"""``bindscope import coco|clevr|pug`` (click): parse, call the importer (:func:`bindscope.importers.coco.import_coco`,
:func:`bindscope.importers.clevr.import_clevr`, :func:`bindscope.importers.pug.import_pug`), print."""

from __future__ import annotations

import click

from bindscope.cli.options import settings_options
from bindscope.cli.types import FiniteFloat, count
from bindscope.importers.settings import ImportSettings
from bindscope.limits import MAX_OBJECTS


@click.group("import")
def bindscope_import():
    """Import real or published data as a bindscope dataset (docs/real-data.md)."""

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
@settings_options(ImportSettings, "settings", only=("limit", "image_size", "shard_size", "jobs"),
                  helps={"limit": "Import only the first N selected images (by id)."})
@click.option("--overwrite", is_flag=True, help="Replace a bindscope dataset in --out.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def bindscope_import_coco(images, instances, captions, out, split, subset, min_objects, max_objects, largest_ratio,
                          settings, overwrite, quiet):
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
    manifest = import_coco(images, instances, captions, out, split=split, subset=replace(chosen, **overrides),
                           settings=settings, overwrite=overwrite, progress=not quiet)
    report_build(manifest, out)
    stats = manifest["statistics"]["splits"][split]
    click.echo(f"{stats['objects']} objects, {stats['crowd_regions']} crowd regions, {stats['captions']} captions "
               f"({stats['mentions']} category mentions, {stats['unmatched_mentions']} unmatched)")


def _common(command):
    """The options every scene import shares (after its own): the output, the import settings (image size, limit,
    seed, shards, jobs: :class:`~bindscope.importers.settings.ImportSettings`), --overwrite and --quiet."""
    for option in reversed([
        click.option("--out", required=True, type=click.Path(), help="Dataset folder to write."),
        settings_options(ImportSettings, "settings"),
        click.option("--overwrite", is_flag=True, help="Replace a bindscope dataset in --out."),
        click.option("--quiet", is_flag=True, help="No progress bar.")]):
        command = option(command)
    return command


def _report(manifest: dict, out: str) -> None:
    from bindscope.cli.options import report_build

    report_build(manifest, out)
    source = manifest["statistics"]["source"]
    for split, stats in manifest["statistics"]["splits"].items():
        click.echo(f"split {split}: {stats['images']} images, {stats['objects']} objects (no masks), "
                   f"{stats['captions']} captions, {stats['binding_negatives']} binding and "
                   f"{stats['recognition_negatives']} recognition negatives")
    if "rows" in source:
        click.echo(f"rows: {source['rows']} read, {source['rows_kept']} kept, {source['rows_selected']} imported")


@bindscope_import.command("clevr")
@click.option("--images", required=True, type=click.Path(),
              help="Folder of the split's CLEVR images (CLEVR_v1.0/images/val).")
@click.option("--scenes", required=True, type=click.Path(),
              help="The split's CLEVR scene file (CLEVR_v1.0/scenes/CLEVR_val_scenes.json).")
@click.option("--split", default=None, help="Split name in the dataset (default: the scenes' own split).")
@click.option("--attributes", default="colour", show_default=True,
              help="What captions give for each object, comma-separated among size, colour, material (the LABCLIP "
                   "paper: colour).")
@_common
def bindscope_import_clevr(images, scenes, split, attributes, out, settings, overwrite, quiet):
    """Import CLEVR v1.0 renders and scenes as a verified bindscope dataset (generator 'clevr'): objects with
    colour, material, size and centre (no masks), LABCLIP captions, attribute-swap negatives."""
    from bindscope.importers.clevr import import_clevr

    manifest = import_clevr(images, scenes, out, split=split, attributes=attributes, settings=settings,
                            overwrite=overwrite, progress=not quiet)
    _report(manifest, out)


@bindscope_import.command("pug")
@click.option("--parquet", type=click.Path(), default=None,
              help="A Parquet file, or a folder of them: the Hub release (facebook/PUG_SPAR's data/).")
@click.option("--labels", type=click.Path(), default=None,
              help="Or a labels CSV (PUG:SPAR labels.csv, PUG_SPARE.csv) with --images.")
@click.option("--images", type=click.Path(), default=None,
              help="Folder the CSV's filenames are relative to (default: the CSV's folder).")
@click.option("--variant", type=click.Choice(["spar", "spare"]), default="spar", show_default=True,
              help="PUG:SPAR, or PUG:SPARE (CSV images under world_name/).")
@click.option("--split", default="train", show_default=True, help="Split name in the dataset.")
@_common
def bindscope_import_pug(parquet, labels, images, variant, split, out, settings, overwrite, quiet):
    """Import PUG:SPAR / PUG:SPARE animal pairs as a verified bindscope dataset (generator 'pug'): rows with two
    different textured animals, objects with texture and position (no masks), LABCLIP captions, texture-swap
    negatives."""
    from bindscope.importers.pug import import_pug

    manifest = import_pug(out, parquet=parquet, labels=labels, images=images, variant=variant, split=split,
                          settings=settings, overwrite=overwrite, progress=not quiet)
    _report(manifest, out)
