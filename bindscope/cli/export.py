"""``bindscope export webdataset|open-clip-config|clip-oscope`` (click): a split as WebDataset shards for
open_clip_train, the open_clip model config of a ``madman train`` run, and a ComCO dataset in the ComCO authors'
folder layout. See docs/export.md."""

from __future__ import annotations

import click

from bindscope.cli.types import JOBS, count
from bindscope.training.options import OPTION

# madman train's model options (bindscope.cli.train) that name the architecture, as (flag, key, type, help);
# type None: an integer in the range of the training options' row.
_MODEL_OPTIONS = [
    ("--embed-dim", "embed_dim", None, "Joint embedding size D."),
    ("--image-size", "image_size", None, "Model input side in pixels (needed without RUN)."),
    ("--vision", "vision", click.Choice(["vit", "resnet", "cnn"]),
     "Image tower: vit or resnet (cnn has no open_clip counterpart)."),
    ("--vision-width", "vision_width", None, "ViT width (resnet: base channels)."),
    ("--vision-layers", "vision_layers", None, "ViT blocks (resnet: blocks per stage)."),
    ("--patch-size", "patch_size", None, "ViT patch side in pixels."),
    ("--head-width", "head_width", None, "Features per attention head in both transformers."),
    ("--text-width", "text_width", None, "Text transformer width."),
    ("--text-layers", "text_layers", None, "Text transformer blocks."),
    ("--tokenizer", "tokenizer", click.Choice(["bpe", "word"]),
     "The run's tokenizer; word is exported as open_clip's BPE (docs/export.md)."),
    ("--context-length", "context_length", None, "Text tokens per caption (start/end included)."),
]


@click.group("export")
def bindscope_export():
    """Export for other tools: a split as WebDataset shards, a small CLIP's open_clip model config, a ComCO
    dataset in the ComCO authors' folder layout."""


@bindscope_export.command("webdataset")
@click.argument("data", type=click.Path(file_okay=False, path_type=str))
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=str),
              help="Export folder: <split>-000000.tar ..., sizes.json and (written last) webdataset.json.")
@click.option("--split", default="train", show_default=True, help="The split exported.")
@click.option("--samples-per-shard", type=count(), default=1000, show_default=True, help="Samples per tar file.")
@click.option("--jobs", type=JOBS, default=1, show_default=True,
              help="Worker processes writing shards (the output does not depend on it).")
@click.option("--overwrite", is_flag=True, help="Replace an earlier export of another source, split or shard size.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def bindscope_export_webdataset(data, out, split, samples_per_shard, jobs, overwrite, quiet):
    """Write split --split of dataset DATA as WebDataset tar shards (open_clip_train --dataset-type webdataset).

    Per sample (key <split>_<index:08d>): <key>.png the RGB image, <key>.txt the caption, <key>.json the
    objects, negatives and spec, <key>.mask.png the instance mask. The same dataset gives the same bytes; a
    repeated command resumes an interrupted export and checks a finished one (shards whose sha256 matches are
    kept). A split that fails the dataset's checks is refused (exit status 2) and nothing is written.
    """
    from bindscope.publish.webdataset import export_webdataset

    result = export_webdataset(data, out, split=split, samples_per_shard=samples_per_shard, jobs=jobs,
                               overwrite=overwrite, progress=not quiet)
    manifest = result["manifest"]
    shards = manifest["shards"]
    click.echo(f"{out}: {manifest['num_samples']} samples of split {split!r} in {len(shards)} shard(s) "
               f"({len(result['written'])} written, {len(result['kept'])} kept)")
    if shards:
        click.echo(f"open_clip_train: --dataset-type webdataset --train-data '{out}/{manifest['train_data']}' "
                   f"--train-num-samples {manifest['num_samples']}")


def _model_options(func):
    for flag, key, kind, text in reversed(_MODEL_OPTIONS):
        kind = kind or count(int(OPTION[key].low), int(OPTION[key].high))
        func = click.option(flag, key, type=kind, default=None, help=text + " [default: madman train's]")(func)
    return func


@bindscope_export.command("open-clip-config")
@click.argument("run", required=False, type=click.Path(file_okay=False, path_type=str))
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="The open_clip model config to write (.json); its stem is the model name open_clip finds.")
@_model_options
@click.option("--overwrite", is_flag=True, help="Replace an existing --out file.")
def bindscope_export_open_clip_config(run, out, overwrite, **options):
    """Write the open_clip model config (embed_dim, vision_cfg, text_cfg) of the madman train run RUN.

    Without RUN the architecture comes from the model options of madman train (--image-size is then needed).
    open_clip.add_model_config(OUT) registers it under OUT's stem, so open_clip_train --model STEM trains the
    same architecture. A word-tokenizer run is exported with open_clip's BPE tokenizer (a note says so); a
    cnn run cannot be exported (exit status 2). See docs/export.md.
    """
    from bindscope.errors import BadInput
    from bindscope.publish.open_clip_config import export_open_clip_config

    given = {key: value for key, value in options.items() if value is not None}
    model = None
    if run is not None and given:
        raise BadInput("give a run folder RUN or model options (--embed-dim, ...), not both")
    if run is None:
        from bindscope.training.model import ModelConfig
        from bindscope.training.options import DEFAULTS

        if "image_size" not in given:
            raise BadInput("give a run folder RUN, or --image-size with the other model options")
        model = ModelConfig(**{**{key: DEFAULTS[key] for _, key, _, _ in _MODEL_OPTIONS}, **given}).to_dict()
    result = export_open_clip_config(run, out, model=model, overwrite=overwrite)
    for note in result["notes"]:
        click.echo(f"note: {note}", err=True)
    click.echo(f"{out}: open_clip model {result['name']!r} (open_clip.add_model_config({str(out)!r}))")


@bindscope_export.command("clip-oscope")
@click.argument("data", type=click.Path(file_okay=False, path_type=str))
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=str),
              help="Export folder: references/<class>.png and <n>-objects/<obj1>_..._<objn>.png.")
@click.option("--split", default="scenes", show_default=True, help="The scenes' split.")
@click.option("--object-order", default="mention", show_default=True, type=click.Choice(["mention", "size"]),
              help="Object order in the file names: the caption's mention order, or size rank (largest first).")
@click.option("--overwrite", is_flag=True, help="Replace an earlier clip-oscope export.")
def bindscope_export_clip_oscope(data, out, split, object_order, overwrite):
    """Write ComCO / SimCO dataset DATA in the folder layout of the ComCO authors' scripts (IOR.py, IOC.py,
    Image_Text_Matching.py): one PNG per class in references/, and each scene as <n>-objects/<o1>_..._<on>.png.

    A dataset in which two scenes would get the same file name is refused (exit status 2) and nothing is
    written. The printed IOR.py commands name --out relative to the current folder (the scripts prefix './' to
    every path, so an absolute one fails): run them from here. See docs/clip-oscope.md.
    """
    from bindscope.publish.clip_oscope import export_clip_oscope

    import os

    result = export_clip_oscope(data, out, split=split, object_order=object_order, overwrite=overwrite)
    files = ", ".join(f"{folder}/ {count}" for folder, count in result["files"].items())
    click.echo(f"{out}: {files} PNG files ({object_order} order)")
    # the scripts open './<path>': an absolute path fails, so the commands name the folder relative to this one
    relative = os.path.relpath(out)
    click.echo("the authors' scripts read './<path>'; run these from this folder:")
    for folder in result["files"]:
        if folder != "references":
            n = folder.split("-")[0]
            click.echo(f"IOR.py --one_object_dataset_path {relative}/references --many_objects_dataset_path "
                       f"{relative}/{folder}:{n}")
