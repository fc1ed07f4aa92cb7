"""``madman eval``, ``comco eval``, ``comco t2i-score`` and the analyses (click). torch, open_clip and transformers are
imported inside the commands only."""

from __future__ import annotations

from pathlib import Path

import click

from bindscope.cli.options import _apply, encoder_settings, settings_options, task_options, tasks_option
from bindscope.cli.types import SEED, FiniteFloat, count
from bindscope.encoders.settings import EncoderSettings
from bindscope.errors import BadInput
from bindscope.evaluation import DETECTION_THRESHOLD, AuditSettings, PairSettings
from bindscope.evaluation.sampled import SampledCaptions
from bindscope.evaluation.api import check_locations


def _result_options():
    return [
        click.option("--out", "out", default=None, type=click.Path(dir_okay=False),
                     help="Result JSON path (default: DATA/eval/<task>-<model>-<pretrained>.json)."),
        click.option("--overwrite", is_flag=True, help="Replace an existing result file."),
        click.option("--plot", default=None, type=click.Path(dir_okay=False),
                     help="Also write a bar plot (.png, .pdf or .svg)."),
        click.option("--quiet", is_flag=True, help="No progress bars."),
    ]


def _model_options(func):
    """:func:`~bindscope.cli.options.encoder_settings` plus the result options of the eval commands (--out,
    --overwrite, --plot, --quiet)."""
    return encoder_settings(_apply(func, _result_options()))


def _plan_outputs(encoder: EncoderSettings, out: str | None, plot: str | None, overwrite: bool,
                  plan) -> list[tuple[EncoderSettings, Path, Path | None]]:
    """``(encoder settings of one model, result path, plot path)`` per model named by ``--model`` /
    ``--pretrained``, checked before any model is loaded (:func:`bindscope.evaluation.model_list.expand_models`).

    One model: ``--out`` is the result file. Several: ``--out`` is a folder holding one ``<default name>`` per
    model, and ``--plot P.png`` becomes ``P-<model>.png`` per model; ``plan.default_out`` gives the default
    result path of a model. Raises BadInput for any bad name, tag or output path.
    """
    from bindscope.evaluation.api import model_slug
    from bindscope.evaluation.model_list import expand_models
    from bindscope.evaluation.report import check_plot_path
    from bindscope.evaluation.results import check_result_path

    pairs = expand_models(encoder.model, encoder.pretrained)
    planned = []
    for name, tag in pairs:
        one = encoder.replace(model=name, pretrained=tag)
        path = plan.default_out(one)
        if out is not None:
            path = Path(out) / path.name if len(pairs) > 1 else Path(out)
        plot_path = check_plot_path(plot)
        if plot_path is not None and len(pairs) > 1:
            plot_path = plot_path.with_name(f"{plot_path.stem}-{model_slug(one)}{plot_path.suffix}")
        out_path = check_result_path(path, overwrite)
        check_locations(out_path, plot_path)
        planned.append((one, out_path, plot_path))
    if len({p[1] for p in planned}) < len(planned):
        raise BadInput(f"--model {encoder.model!r}: two models would write the same result file; name them apart")
    return planned


def _run(plan, encoder: EncoderSettings, out, plot, overwrite, quiet) -> None:
    """Check every model's output paths, then evaluate the models one by one and print each result
    (:func:`bindscope.evaluation.report.format_result`, what the library's result formats to)."""
    from bindscope.evaluation.api import run_evaluation
    from bindscope.evaluation.report import format_result
    from bindscope.evaluation.results import samples_path

    for one, out_path, plot_path in _plan_outputs(encoder, out, plot, overwrite, plan):
        run = run_evaluation(plan, one, out=out_path, plot=plot_path, overwrite=overwrite, progress=not quiet)
        click.echo(format_result(run.result))
        click.echo(f"\nwrote {out_path}" + (f" and its per-sample rows {samples_path(out_path)}" if plan.samples
                                            else ""))
        if plot_path is not None:
            click.echo(f"wrote {plot_path}")


_labclip_option = click.option(
    "--labclip", default=None, type=click.Path(dir_okay=False),
    help="LABCLIP map from `bindscope labclip fit` (or the LABCLIP authors' state dict: linear.weight, t): applied "
         "to the L2-normalised text embeddings (docs/alignment.md).")


def _labclip(path: str | None):
    """The LABCLIP map of ``--labclip`` (a text transform), or None. BadInput if unreadable."""
    if path is None:
        return None
    from bindscope.alignment.labclip import load_labclip

    return load_labclip(path)


@click.command("eval")
@click.argument("data", type=click.Path(file_okay=False))
@click.option("--split", "splits", multiple=True,
              help="Split(s) to evaluate (repeatable). Default: test and ood, those present.")
@tasks_option("madman-eval")
@_model_options
@_labclip_option
def madman_eval(data, splits, tasks, encoder, out, overwrite, plot, quiet, labclip):
    """Recognition and binding accuracy per attribute on a MADMAN dataset DATA; with --tasks also the
    first-mention and large-object shares.

    Binding is counted only where recognition of the attribute succeeded for both digits (Gurung et al.,
    GCPR 2025); in-distribution (test) and OOD splits are reported separately, with counts and Wilson 95%
    intervals. first-mention: each two-digit caption against its two single-digit descriptions; large-object:
    each image against single-digit renders of its two digits (the ComCO text- and image-side biases, Abbasi et
    al., CVPR 2025), with intervals clustered by image. See docs/evaluation.md.
    """
    from bindscope.evaluation.api import plan_evaluation

    # Everything a user can get wrong is checked before a model is loaded or a file is written.
    plan = plan_evaluation(data, kind="madman-eval", splits=list(splits) or None, tasks=tasks,
                           text_transform=_labclip(labclip))
    _run(plan, encoder, out, plot, overwrite, quiet)

@click.command("audit")
@click.argument("data", type=click.Path(file_okay=False))
@click.option("--out", default=None, type=click.Path(dir_okay=False),
              help="Write the result JSON here (bindscope/schemas/audit_result.json); default: print only.")
@click.option("--plot", default=None, type=click.Path(dir_okay=False),
              help="Also write the confusion matrices (.png, .pdf or .svg).")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out or --plot file.")
@settings_options(AuditSettings, "settings")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def madman_audit(data, out, plot, overwrite, settings, quiet):
    """Can a supervised model see each attribute and the digit? Audit a MADMAN dataset DATA.

    Trains a small CNN (the oracle; CPU, seeded) on the objects of --train-split, each isolated by its own
    instance mask, and reports on the objects of --test-split per attribute and for the digit identity:
    accuracy, per-class accuracy, the confusion matrix, and the same per size level. See docs/madman.md.
    """
    import time

    from bindscope.evaluation.api import audit
    from bindscope.evaluation.audit import format_audit

    start = time.perf_counter()
    run = audit(data, settings, out=out, plot=plot, overwrite=overwrite, progress=not quiet)
    click.echo(format_audit(run.result))
    click.echo(f"\nfinished in {time.perf_counter() - start:.0f} s")
    for path in (run.plot, run.path):
        if path is not None:
            click.echo(f"wrote {path}")


@click.command("attention")
@click.argument("data", type=click.Path(file_okay=False))
@click.option("--layer", "layers", default="last", show_default=True, type=click.Choice(["last", "all"]),
              help="The final block only, or every block.")
@click.option("--rollout", "use_rollout", is_flag=True, help="Also report attention rollout over the blocks.")
@click.option("--top-k", default=10, show_default=True, type=count(1, 10_000),
              help="Most-attended patches counted per object.")
@click.option("--split", default="scenes", show_default=True, help="Split to read.")
@click.option("--limit", default=None, type=count(), help="Use only the first N samples.")
@click.option("--seed", default=0, show_default=True, type=SEED, help="Bootstrap seed.")
@_model_options
def comco_attention(data, layers, use_rollout, top_k, split, limit, seed, encoder, out, overwrite, plot, quiet):
    """CLS-to-patch attention by object size rank on DATA's scenes (Abbasi et al., CVPR 2025, Figure 3).

    Attention is recomputed from each ViT block's q/k projections with a forward hook (open_clip exposes no
    attention weights); each object's instance mask is mapped onto the patch grid. Reports, per size rank,
    the share of CLS attention on the object, per patch of the object, its area in patches and how many of
    the top-k attended patches it holds, with bootstrap intervals over scenes. Attention maps are not
    embeddings: nothing is cached (--cache-dir and --no-cache change nothing). See docs/evaluation.md.
    """
    from bindscope.evaluation.api import plan_attention

    plan = plan_attention(data, split=split, seed=seed, batch_size=encoder.batch_size, device=encoder.device,
                          options={"layers": layers, "use_rollout": use_rollout, "top_k": top_k, "limit": limit})
    _run(plan, encoder.replace(use_cache=False), out, plot, overwrite, quiet)

@click.command("eval")
@click.argument("data", required=False, type=click.Path(file_okay=False))
@tasks_option("comco-eval", " With DATA: the defaults run when the dataset holds what they need (ior: a references "
              "split or --reference-images; binding: stored negatives). Without DATA: tor, claim1 and/or toc on "
              "sampled captions (default: tor).")
@task_options("comco-eval")
@settings_options(SampledCaptions, "sampling", only=("captions", "names", "objects", "vocab", "n"))
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of caption / negative sampling.")
@click.option("--split", default=None, help="With DATA: the split of scenes (default: 'scenes', or the "
                                            "dataset's only split, e.g. val2017 of a COCO import).")
@_model_options
@_labclip_option
def comco_eval(data, tasks, options, sampling, seed, split, encoder, out, overwrite, plot, quiet, labclip):
    """TOR, IOR, I2TOR and image-text matching on a dataset DATA (ComCO/SimCO, a COCO import, any dataset that
    holds what the tasks need), or TOR (and the Claim-1 test) on captions sampled from a vocabulary when DATA is
    omitted (Abbasi et al., CVPR 2025).

    Shares are reported unconditionally and conditional on the top-1 being one of the query's objects.
    IOR on COCO compares with external reference images (--reference-images, e.g. DomainNet). See
    docs/evaluation.md and docs/real-data.md.
    """
    from dataclasses import asdict

    from bindscope.evaluation.api import plan_evaluation

    changed = {k for fields in options.values() for k in fields}  # the task options given, not their defaults
    scene_only = ["split"] * (split is not None) + [k for k in ("references", "category_map", "bias_position",
                                                              "object_order") if k in changed]
    given = [k for k, v in asdict(sampling).items() if v is not None] if data is not None else scene_only
    if given and data is not None:
        raise BadInput(f"{', '.join(given)} only apply without DATA (sampled-caption TOR); with DATA the "
                       "dataset's scenes are used", param=given[0])
    if given:
        raise BadInput(f"{', '.join(given)} need DATA (a dataset of scenes)", param=given[0])
    plan = plan_evaluation(sampling if data is None else data, kind="comco-eval", tasks=tasks, splits=split,
                           options=options, seed=seed, text_transform=_labclip(labclip))
    _run(plan, encoder, out, plot, overwrite, quiet)


@click.command("t2i-score")
@click.argument("data", type=click.Path(file_okay=False))
@click.option("--detector", required=True,
              help="Open-vocabulary detector (OWLv2 / OWL-ViT): a Hugging Face repository id "
                   "(google/owlv2-base-patch16-ensemble; downloaded on first use) or a model folder.")
@click.option("--threshold", type=FiniteFloat(0, 1), default=DETECTION_THRESHOLD, show_default=True,
              help="Detector score (0..1) from which an object counts as present.")
@click.option("--split", default=None, help="Split to score (default: images, or the dataset's only split).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Bootstrap seed.")
@click.option("--out", "out", default=None, type=click.Path(dir_okay=False),
              help="Result JSON path (default: DATA/eval/t2i-score-<detector>-<model>.json).")
@click.option("--overwrite", is_flag=True, help="Replace an existing result file.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@encoder_settings
def comco_t2i_score(data, detector, threshold, split, seed, out, overwrite, quiet, encoder):
    """Which prompt objects the images of a `comco t2i` dataset DATA show, by mention position: an open-vocabulary
    detector (--detector, --threshold) and a CLIP encoder (--model: the object's name ranks within the prompt's
    object count among all names) decide; presence rate per position, first against last with an exact McNemar
    test over prompts, intervals by bootstrap over prompts. The detector runs with --device, --precision and
    --batch-size too. See docs/t2i.md.
    """
    from bindscope.evaluation.results import samples_path
    from bindscope.evaluation.t2i import format_t2i, t2i_score

    run = t2i_score(data, encoder, detector, threshold=threshold, split=split, seed=seed, out=out,
                    overwrite=overwrite, progress=not quiet)
    click.echo(format_t2i(run.result))
    click.echo(f"\nwrote {run.path} and its per-image rows {samples_path(run.path)}")


@click.command("caption-bias")
@click.argument("data", type=click.Path())
@click.option("--split", "splits", multiple=True, help="Split(s) to read (repeatable). Default: all but "
                                                       "'references'.")
@click.option("--out", "out", default=None, type=click.Path(dir_okay=False),
              help="Result JSON path (default for a dataset: DATA/eval/caption-bias.json; needed for pairs).")
@click.option("--overwrite", is_flag=True, help="Replace an existing result file.")
@click.option("--plot", default=None, type=click.Path(dir_okay=False),
              help="Also write a bar plot (.png, .pdf or .svg).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Bootstrap seed.")
@settings_options(PairSettings, "pairs")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def bindscope_caption_bias(data, splits, out, overwrite, plot, seed, pairs, quiet):
    """Where captions mention the image's largest object (ComCO Claim 2): share of captions naming it first,
    second, ..., or not at all, overall and by number of objects mentioned, with image-clustered intervals.

    DATA is a bindscope dataset with captions and an object table (COCO import, ComCO, MADMAN), or image-caption
    pairs without annotations as img2dataset writes them (WebDataset tar shards, Parquet files with image bytes, or
    a folder of images with .txt captions): then each caption's objects are found in its text (--caption-objects),
    located by --detector, measured by their box or --segmenter mask, and the method is recorded in the result.
    See docs/real-data.md and docs/t2i.md.
    """
    from bindscope.evaluation.api import caption_bias
    from bindscope.evaluation.caption_bias import format_caption_bias

    run = caption_bias(data, splits=list(splits) or None, seed=seed, out=out, overwrite=overwrite, plot=plot,
                       pairs=pairs, progress=not quiet)
    click.echo(format_caption_bias(run.result))
    click.echo(f"\nwrote {run.path}")
    if run.plot is not None:
        click.echo(f"wrote {run.plot}")


@click.command("bench")
@click.argument("benchmark", type=click.Choice(["aro", "sugarcrepe"]))
@click.option("--data", required=True, type=click.Path(file_okay=False),
              help="Folder of the benchmark's JSON files (ARO: also images/ for VG-Relation/Attribution).")
@click.option("--images", default=None, type=click.Path(file_okay=False),
              help="SugarCrepe: the COCO val2017 image folder. ARO coco_order: the COCO root of the karpathy "
                   "image paths (default --data).")
@click.option("--flickr-images", default=None, type=click.Path(file_okay=False),
              help="ARO flickr_order: the Flickr30k root of the image paths (default --data).")
@click.option("--subsets", default=None, help="Comma-separated subsets (default: every subset whose file is in "
                                              "--data).")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seed of ARO's order perturbations.")
@task_options("bench")
@click.option("--out", "out", default=None, type=click.Path(dir_okay=False),
              help="Result JSON path (default: results/bench/<benchmark>-<model>-<pretrained>.json).")
@click.option("--overwrite", is_flag=True, help="Replace an existing result file.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
@encoder_settings
@_labclip_option
def bindscope_bench(benchmark, data, images, flickr_images, subsets, seed, options, out, overwrite, quiet, encoder,
                    labclip):
    """ARO or SugarCrepe from their published files in local folders: accuracy per subset (Wilson 95%
    intervals), macro and micro averages (ARO's VG subsets: also ARO's own macro, labelled); --labclip applies a
    fitted LABCLIP map. See docs/real-data.md."""
    from bindscope.evaluation.api import plan_bench

    chosen = [s.strip() for s in subsets.split(",") if s.strip()] if subsets else None
    plan = plan_bench(benchmark, data, images=images, flickr_images=flickr_images, subsets=chosen, seed=seed,
                      options=options.get(benchmark), text_transform=_labclip(labclip))
    _run(plan, encoder, out, None, overwrite, quiet)

@click.command("collect")
@click.argument("results", nargs=-1, type=click.Path())
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False),
              help="Table file: .csv (value/low/high columns), .md (Markdown, with column definitions) or .json.")
@click.option("--plot", default=None, type=click.Path(dir_okay=False),
              help="Also draw the table (.png, .pdf or .svg): curves over training steps for checkpoints, "
                   "else grouped bars.")
@click.option("--columns", default=None,
              help="Comma-separated columns to plot (default: binding and recognition micro averages, else the "
                   "first 8).")
@click.option("--compare", "compare", is_flag=True,
              help="Also compare the results with paired tests, each against the first (as bindscope compare; "
                   "they must be of one task on the same samples); not with a .csv table.")
@click.option("--overwrite", is_flag=True, help="Replace an existing table or plot.")
def bindscope_collect(results, out, plot, columns, compare, overwrite):
    """One table from result JSONs of every kind (RESULTS: files or folders of results of `madman eval`,
    `comco eval`, `comco attention`, `bindscope bench`, training runs' result.json, `bindscope probe`,
    `bindscope labclip eval`, `madman audit`, `bindscope caption-bias`, or `madman sweep` folders): a row per file,
    a column per figure, each in percent with its 95% interval; results that differ only in seed also as their
    mean with a t interval over the seeds; a sweep's points with the swept property, value and seed; a file of
    unknown kind or failing its schema is an error. See docs/evaluation.md."""
    from bindscope.evaluation.api import collect
    from bindscope.evaluation.collect import format_table

    chosen = [c.strip() for c in columns.split(",") if c.strip()] if columns is not None else None
    table = collect(list(results), out, plot=plot, columns=chosen, compare=compare, overwrite=overwrite)
    click.echo(format_table(table, "md"))
    click.echo(f"wrote {out} ({len(table['rows'])} results, {len(table['columns'])} columns)")
    if plot is not None:
        click.echo(f"wrote {plot}")


@click.command("compare")
@click.argument("results", nargs=-1, type=click.Path())
@click.option("--out", "out", default=None, type=click.Path(dir_okay=False),
              help="Also write the comparison to this file (.md, .csv or .json).")
@click.option("--format", "fmt", type=click.Choice(["md", "csv", "json"]), default=None,
              help="Output format (default: --out's suffix, else md).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Bootstrap seed.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out file.")
def bindscope_compare(results, out, fmt, seed, overwrite):
    """Paired tests between results of one task on the same samples (RESULTS: two or more result files of
    `madman eval`, `comco eval` or training runs, with their per-sample rows; each compared with the first): per
    figure the difference, its 95% interval (paired bootstrap over images) and a p-value (exact McNemar for one
    binary outcome per image, else the paired bootstrap), Holm-corrected. Results on different samples are an
    error. See docs/evaluation.md."""
    from bindscope.evaluation.compare import compare, output_format

    comparison = compare(list(results), out=out, fmt=fmt, seed=seed, overwrite=overwrite)
    click.echo(comparison.format(output_format(None if out is None else Path(out), fmt)), nl=False)
    if out is not None:
        click.echo(f"wrote {out}")
