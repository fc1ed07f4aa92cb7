"""``bindscope probe`` and ``bindscope labclip fit|eval|apply`` (torch and models are imported inside the commands)."""

from __future__ import annotations

import click

from bindscope.alignment.protocols import LabclipOptions, ProbeSettings
from bindscope.cli.options import settings_options


def _model_options(command):
    """The encoder options (``--model`` ... ``--no-cache``), the same as the eval commands'
    (:func:`bindscope.cli.options.encoder_settings`)."""
    from bindscope.cli.options import encoder_settings

    return encoder_settings(command)


def _fmt(value) -> str:
    return "   -  " if value is None else f"{value:6.3f}"


@click.command("probe")
@click.argument("data", type=click.Path(file_okay=False))
@_model_options
@click.option("--task", type=click.Choice(["attributes", "conjunctive-search"]), default="attributes",
              show_default=True,
              help="attributes: one probe per target object and attribute; conjunctive-search: is the --target "
                   "conjunction present (image embeddings)")
@click.option("--target", default=None,
              help="conjunctive-search: the target, category=NAME,ATTRIBUTE=VALUE (e.g. category=sphere,colour=red); "
                   "default: the one a `comco render --task conjunctive-search` dataset names")
@click.option("--modality", type=click.Choice(["image", "text", "both"]), default="both", show_default=True)
@click.option("--split", default=None, help="dataset split to probe (default: test, else the first split)")
@click.option("--attributes", default=None, help="comma-separated attributes (default: all of the dataset's)")
@settings_options(ProbeSettings, "settings", ProbeSettings.of,
                  only=("protocol", "fractions", "min_objects", "steps", "lr", "weight_decay", "seed"))
@click.option("--out", default=None, help="result JSON (default DATA/eval/probe-<model>-<tag>.json)")
@click.option("--overwrite", is_flag=True, help="replace an existing --out file")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def bindscope_probe(data, encoder, task, target, modality, split, attributes, settings, out, overwrite, quiet):
    """Linear probes on frozen embeddings of dataset DATA: one probe per target object and attribute.

    Each probe is Linear(D, n_classes) on image or caption embeddings, trained with cross-entropy on samples
    containing the target object (label = its attribute value); train/val/test are held out by attribute-object
    combination (bindscope: the other objects' category and value; authors: the whole scene's), none in two
    splits. Prints accuracy per attribute next to chance and the bag-of-words baselines, and per number of objects
    (docs/alignment.md). With --task conjunctive-search: a presence probe on image embeddings, accuracy per
    number of distractors against a bag-of-words probe.
    """
    from bindscope.alignment.api import probe

    names = [a.strip() for a in attributes.split(",")] if attributes else None
    run = probe(data, encoder, task=task, modality=modality, split=split, attributes=names, settings=settings,
                target=target, out=out, overwrite=overwrite, progress=not quiet)
    split, metrics, out_path = run.result["settings"]["split"], run.result["metrics"], run.path
    if task == "conjunctive-search":
        _conjunctive_table(run.result["settings"]["target"], split, metrics)
        click.echo(f"wrote {out_path}")
        return
    modalities, names = run.result["settings"]["modalities"], run.result["settings"]["attributes"]
    settings = run.result["settings"]
    click.echo(f"linear probes on split {split!r}, protocol {settings['protocol']}"
               + (f" (overrides: {', '.join(settings['overrides'])})" if settings["overrides"] else "")
               + f": {settings['optimiser']} lr {settings['lr']:g}, {settings['schedule']}, "
               f"inputs {settings['inputs']}; test accuracy on held-out combinations (mean over target objects)")
    click.echo(f"{'attribute':<12}{'modality':<9}{'probe':>7}{'BoW probe':>11}{'BoW bound':>11}{'chance':>8}"
               f"{'targets':>9}{'n_test':>8}")
    for m in modalities:
        for a in names:
            s = metrics["modalities"][m][a]
            click.echo(f"{a:<12}{m:<9}{_fmt(s['accuracy']):>7}{_fmt(s['bag_of_words']):>11}"
                       f"{_fmt(s['bag_of_words_bound']):>11}{_fmt(s['chance']):>8}{s['n_targets']:>9}{s['n_test']:>8}")
    click.echo("by number of objects in view (test pairs pooled over targets): probe / bag-of-words probe (n)")
    for m in modalities:
        for a in names:
            cells = [f"{k}: {_fmt(c['accuracy']).strip()} / {_fmt(c['bag_of_words']).strip()} ({c['total']})"
                     for k, c in metrics["modalities"][m][a]["by_object_count"].items()]
            click.echo(f"{a:<12}{m:<9}" + "   ".join(cells))
    click.echo(f"wrote {out_path}")


def _conjunctive_table(target: dict, split: str, metrics: dict) -> None:
    """The table of ``bindscope probe --task conjunctive-search``."""
    from bindscope.alignment.conjunctive import target_words

    click.echo(f"conjunctive search for '{target_words(target)}' on split {split!r} "
               f"({metrics['n_train']} train / {metrics['n_val']} val / {metrics['n_test']} test scenes)")
    click.echo(f"{'distractors':<13}{'probe':>7}{'95% CI':>16}{'BoW probe':>11}{'present':>9}{'absent':>8}")
    rows = list(metrics["by_distractors"].items()) + [("all", {**metrics, "n_present": None, "n_absent": None})]
    for k, c in rows:
        ci = c["accuracy"]["ci95"]
        ci_text = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-"
        click.echo(f"{k:<13}{_fmt(c['accuracy']['accuracy']):>7}{ci_text:>16}"
                   f"{_fmt(c['bag_of_words']['accuracy']):>11}{c['n_present'] if c['n_present'] is not None else '':>9}"
                   f"{c['n_absent'] if c['n_absent'] is not None else '':>8}")


@click.group("labclip")
def bindscope_labclip():
    """LABCLIP: a linear map on text embeddings that restores cross-modal binding (Koishigarina et al.)."""


@bindscope_labclip.command("fit")
@click.argument("data", type=click.Path(file_okay=False))
@_model_options
@click.option("--out", required=True, help="where to write the map (e.g. labclip.pt)")
@click.option("--overwrite", is_flag=True, help="replace an existing --out file")
@click.option("--split", default=None, help="split to fit on (default: test, else the first split)")
@settings_options(LabclipOptions, "options")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def bindscope_labclip_fit(data, encoder, out, overwrite, split, options, quiet):
    """Fit the D x D LABCLIP map on dataset DATA and write it to --out.

    The map (no bias, identity initialisation, learnable log-temperature) is trained with Adam on frozen
    embeddings; negatives are the attribute-swapped captions (MADMAN's stored binding negatives; ComCO swaps
    built from the object table), or, with --negatives shuffled (the default where a split has none, e.g. a
    COCO import), each caption with its nouns and adjectives shuffled. Samples that describe a held-out
    combination (shuffled: a held-out share of the images) are kept for `labclip eval`. --protocol authors takes
    the LABCLIP authors' settings (docs/alignment.md#protocols).
    """
    from bindscope.alignment.api import labclip_fit

    labclip = labclip_fit(data, encoder, out, options=options, split=split, overwrite=overwrite, progress=not quiet)
    split, out_path = labclip.meta["split"], out
    losses = labclip.meta["loss_history"]
    kept = "" if labclip.meta["negatives"] == "shuffled" else \
        f" with {len(labclip.meta['held_out'])} held-out combinations"
    click.echo(f"LABCLIP fitted on {labclip.meta['n_fit_samples']} samples ({labclip.meta['n_fit_negatives']} "
               f"{labclip.meta['negatives']} negatives) of split {split!r}; {labclip.meta['n_held_out_samples']} "
               f"samples{kept} kept for evaluation")
    settings = labclip.meta["settings"]
    click.echo(f"protocol {settings['protocol']}" + (f" (overrides: {', '.join(settings['overrides'])})"
                                                     if settings["overrides"] else "")
               + f": {settings['epochs']} epochs of {settings['batch_size']} pairs, Adam lr {settings['lr']:g}, "
               f"temperature from {settings['init_logit_scale']:.4g}"
               + (f", captions {settings['captions']} ({settings['caption_text']}), tagger {settings['tagger']}"
                  if labclip.meta["negatives"] == "shuffled" else ""))
    if settings["tagger_fallback"]:
        click.echo(f"note: {settings['tagger_fallback']}")
    click.echo(f"loss {losses[0]:.4f} (identity) -> {losses[-1]:.4f}; temperature s = {labclip.logit_scale:.2f}")
    click.echo(f"wrote {out_path}")


def _report_rows(metrics: dict) -> list[str]:
    """Before/after table; ``n`` is the number of negatives counted (before / after where they differ:
    binding given recognition counts only where recognition passed, which the map can change)."""
    lines = [f"{'':<30}{'before':>8}{'after':>8}{'n':>12}"]

    def row(label, b, a):
        b, a = b or {"accuracy": None, "n": 0}, a or {"accuracy": None, "n": 0}
        n = f"{b['n']}" if b["n"] == a["n"] else f"{b['n']}/{a['n']}"
        lines.append(f"{label:<30}{_fmt(b['accuracy']):>8}{_fmt(a['accuracy']):>8}{n:>12}")

    for key, label in (("binding", "binding"), ("binding_given_recognition", "binding | recognition"),
                       ("recognition", "recognition")):
        b, a = metrics["before"][key], metrics["after"][key]
        row(label, b, a)
        for attr in dict.fromkeys(list(b["per_attribute"]) + list(a["per_attribute"])):
            row("  " + attr, b["per_attribute"].get(attr), a["per_attribute"].get(attr))
    lines.append(f"{'modality gap (normalised)':<30}{metrics['before']['modality_gap']:>8.3f}"
                 f"{metrics['after']['modality_gap']:>8.3f}")
    return lines


@bindscope_labclip.command("eval")
@click.argument("data", type=click.Path(file_okay=False))
@_model_options
@click.option("--labclip", "labclip_path", required=True, type=click.Path(dir_okay=False),
              help="map written by `bindscope labclip fit`, or the LABCLIP authors' state dict (linear.weight, t)")
@click.option("--split", default=None,
              help="split to evaluate (default: the map's fitting split, whose held-out combinations are used)")
@click.option("--out", default=None, help="result JSON (default DATA/eval/labclip-<model>-<tag>.json)")
@click.option("--overwrite", is_flag=True, help="replace an existing --out file")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def bindscope_labclip_eval(data, encoder, labclip_path, split, out, overwrite, quiet):
    """Binding, recognition and the modality gap of DATA before and after a LABCLIP map.

    On the map's fitting split only the held-out combinations count; on another split every sample with
    attribute-swapped negatives. Binding is strict (a tie counts as wrong); the modality gap is the distance
    between the mean image and the mean caption embedding, both L2-normalised.
    """
    import warnings

    from bindscope.alignment.api import labclip_eval

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = labclip_eval(data, encoder, labclip_path, split=split, out=out, overwrite=overwrite,
                           progress=not quiet)
    for warning in caught:
        click.echo(f"warning: {warning.message}", err=True)
    split, metrics, out_path = run.result["settings"]["split"], run.result["metrics"], run.path
    click.echo(f"LABCLIP on split {split!r}: {metrics['evaluated_on']} ({metrics['n_eval_samples']} samples)")
    for line in _report_rows(metrics):
        click.echo(line)
    click.echo(f"wrote {out_path}")


@bindscope_labclip.command("apply")
@click.argument("embeddings", type=click.Path(dir_okay=False))
@click.option("--labclip", "labclip_path", required=True, type=click.Path(dir_okay=False),
              help="map written by `bindscope labclip fit`, or the LABCLIP authors' state dict (linear.weight, t)")
@click.option("--out", required=True, help="where to write the mapped embeddings (.npy)")
@click.option("--overwrite", is_flag=True, help="replace an existing --out file")
def bindscope_labclip_apply(embeddings, labclip_path, out, overwrite):
    """Apply a LABCLIP map to stored text EMBEDDINGS (.npy, (N, D)) without re-encoding; writes (N, D) float32."""
    from bindscope.alignment.api import labclip_apply

    mapped = labclip_apply(embeddings, labclip_path, out, overwrite=overwrite)
    out_path = out
    click.echo(f"mapped {mapped.shape[0]} embeddings of dimension {mapped.shape[1]}; wrote {out_path}")


