"""``bindscope train`` (and its MADMAN spelling ``madman train``) and ``madman sweep`` (click). torch and open_clip
are imported inside the commands."""

from __future__ import annotations

import functools

import click

from bindscope.cli.options import settings_options
from bindscope.cli.types import DEVICE
from bindscope.training.options import (
    FINETUNE_KEYS,
    MODEL_KEYS,
    OPTION,
    OPTIONS,
    Option,
)
from bindscope.training.sweep import SweepConfig


class TableValue(click.ParamType):
    """A number option of the training table: parsed by click, then checked against its row's range
    (:meth:`bindscope.training.options.Option.check`: a BadInput naming the flag and the range, exit status 2)."""

    def __init__(self, row: Option):
        self.row, self.name = row, row.type.__name__

    def convert(self, value, param, ctx):
        if not isinstance(value, self.row.type):
            value = (click.INT if self.row.type is int else click.FLOAT).convert(value, param, ctx)
        return self.row.check(value)


def _option(row: Option):
    """The click option of one row of the training options' table (flag, type, default, range, help)."""
    decls = (row.flag,) if row.flag[2:].replace("-", "_") == row.name else (row.flag, row.name)
    if row.type is bool:
        return click.option(*decls, is_flag=True, default=row.default, help=row.help)
    kind = (DEVICE if row.name == "device" else click.Choice(row.choices) if row.choices else
            str if row.type is str else TableValue(row))
    allowed = "" if row.type is str else f" [{row.range_text()}]"
    return click.option(*decls, type=kind, default=row.default, show_default=not row.nullable,
                        help=row.help + allowed)


def _options(func, rows):
    return functools.reduce(lambda f, row: _option(row)(f), reversed(rows), func)


def training_options(func):
    """The options ``madman train`` and ``madman sweep`` share (model, optimisation, device, bookkeeping): every
    row of :data:`bindscope.training.options.OPTIONS` but the fine-tuning ones, and ``--quiet``."""
    func = click.option("--quiet", is_flag=True, help="No progress bar.")(func)
    return _options(func, [row for row in OPTIONS if row.group != "finetune"])


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


def _train(data, out, split, eval_data, eval_splits, eval_tasks, quiet, overwrite, options) -> None:
    """Run :func:`bindscope.train` and print its summary (the body of both train commands)."""
    from bindscope.evaluation.report import format_result
    from bindscope.training.api import train

    if options["init"] is not None:  # the small CLIP's model options and lr apply only where given
        context = click.get_current_context()
        for name in (*MODEL_KEYS, "image_size", "lr"):
            if context.get_parameter_source(name) is click.core.ParameterSource.DEFAULT:
                del options[name]
    summary = train(data, out, split=split, eval_data=eval_data, eval_splits=list(eval_splits) or None,
                    eval_tasks=eval_tasks, overwrite=overwrite, progress=not quiet, **options)
    if summary["rank"]:  # under torchrun, process 0 prints
        return
    if summary["resumed_from"]:
        click.echo(f"resumed {out} at step {summary['resumed_from']} of {summary['steps']}", err=True)
    result = summary["result"]
    click.echo(format_result_table(result) if result["kind"] == "madman-eval" else format_result(result))
    if summary["steps_per_s"]:
        click.echo(f"trained steps {summary['resumed_from']}..{summary['steps']} in "
                   f"{summary['train_seconds']:.1f} s: {summary['steps_per_s']:.2f} steps/s, "
                   f"{summary['images_per_s']:.0f} images/s; final loss {summary['final_loss']:.4f}")
    if summary["truncated_captions"]:
        click.echo(f"warning: {summary['truncated_captions']} training texts exceeded the context length and "
                   "were truncated", err=True)
    click.echo(f"model: {summary['files']['model.pt']}  result: {summary['files']['result.json']}")


def _train_options(func):
    """The options of ``bindscope train`` and ``madman train`` (the same call, the same run folder)."""
    options = [
        click.argument("data", type=click.Path(path_type=str)),
        click.option("--out", required=True, type=click.Path(path_type=str),
                     help="Run folder (checkpoints, log.jsonl, model.pt, result.json)."),
        click.option("--split", default=None,
                     help="Split trained on [default: train, else scenes (ComCO), else the dataset's only split, "
                          "e.g. val2017 of a COCO import]."),
        click.option("--eval", "eval_data", type=click.Path(path_type=str), default=None,
                     help="Dataset evaluated on: MADMAN (recognition and binding), ComCO / SimCO or a COCO import "
                          "(TOR, IOR, I2TOR, matching, binding) [default: DATA]."),
        click.option("--eval-split", "eval_splits", multiple=True,
                     help="Evaluation split (repeatable) [default: MADMAN test and ood where present; ComCO / COCO "
                          "one split of scenes: scenes or the only split]."),
        click.option("--eval-tasks", "eval_tasks", default=None,
                     help="ComCO / COCO evaluation tasks, comma-separated, of tor,ior,i2tor,matching,binding "
                          "[default: those `comco eval` runs on the --eval dataset]."),
        lambda f: _options(f, [OPTION[name] for name in FINETUNE_KEYS]),
        training_options,
        click.option("--overwrite", is_flag=True, help="Replace a different run in --out."),
    ]
    return functools.reduce(lambda f, option: option(f), reversed(options), func)


@click.command("train")
@_train_options
def bindscope_train(data, out, split, eval_data, eval_splits, eval_tasks, quiet, overwrite, **options):
    """Train a small CLIP from scratch on DATA: any bindscope dataset with captions (MADMAN, ComCO / SimCO with
    or without attributes, a COCO import).

    The model is an open_clip CLIP (small ViT or ResNet image tower, small text transformer, image size from
    the dataset) trained with open_clip's contrastive loss; --negatives stored adds the dataset's binding
    negatives, --negatives shuffled NegCLIP negatives made from each caption. Repeating the same command
    resumes an interrupted run from its last checkpoint; a finished run only prints its result. The final
    model is evaluated on --eval into OUT/result.json (the result `madman eval` or `comco eval` gives);
    OUT/model.pt loads in `madman eval --model OUT/model.pt` and `comco eval --model OUT/model.pt`.
    """
    _train(data, out, split, eval_data, eval_splits, eval_tasks, quiet, overwrite, options)


@click.command("train")
@_train_options
def madman_train(data, out, split, eval_data, eval_splits, eval_tasks, quiet, overwrite, **options):
    """Train a small CLIP from scratch on the MADMAN dataset DATA (its "train" split): `bindscope train`,
    spelt for MADMAN (the same options and run folder; it also trains on ComCO / SimCO and COCO imports).

    The model is an open_clip CLIP (small ViT or ResNet image tower, small text transformer) trained with
    open_clip's contrastive loss; --negatives stored adds NegCLIP-style attribute-swapped captions. Repeating
    the same command resumes an interrupted run from its last checkpoint; a finished run only prints its
    result. The final model is evaluated (recognition and binding per attribute) into OUT/result.json;
    OUT/model.pt loads in `madman eval --model OUT/model.pt`.
    """
    _train(data, out, split, eval_data, eval_splits, eval_tasks, quiet, overwrite, options)


@click.command("sweep")
@settings_options(SweepConfig, "sweep", only=("property", "values", "base_preset", "out", "seeds", "num_train",
                                              "num_test", "data_seed", "generator_config", "mnist_root", "jobs"))
@training_options
def madman_sweep(sweep, quiet, **options):
    """Train one model per value of a data property (and per seed), evaluate all, tabulate and plot.

    For each value, a MADMAN training set is generated from --base-preset with the property set to the
    value; every model is evaluated on one shared evaluation set generated from --base-preset. Writes
    OUT/sweep.json, OUT/sweep.csv and OUT/sweep.png (binding and recognition accuracy per attribute
    against the value: the MADMAN paper's figures 3 and 4). Finished points are skipped on rerun.
    """
    from dataclasses import replace

    from bindscope.training.sweep import run_sweep

    summary = run_sweep(replace(sweep, train_options=options), progress=not quiet)
    click.echo(summary["table"])
    click.echo(f"wrote {summary['files']['json']}, {summary['files']['csv']}, {summary['files']['plot']}")
