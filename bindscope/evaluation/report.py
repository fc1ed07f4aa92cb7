"""Human-readable tables and bar plots of evaluation results (the JSON result is the record; these are views)."""

from __future__ import annotations

import os
from pathlib import Path

from bindscope.io.atomic import save_figure

PLOT_SUFFIXES = (".png", ".pdf", ".svg")
POSITION_NOTE = ("unconditional = share of all queries; conditional = share of queries whose top-1 is one of their "
                 "objects. Ties count as wrong. 95% CI of the conditional share: Wilson per query, or (images) a "
                 "bootstrap over images where an image has several queries (its captions).")


def pct(value) -> str:
    """A 0..1 share as a percent cell (``n/a`` for None)."""
    return "   n/a" if value is None else f"{100 * value:6.2f}"


def ci(interval) -> str:
    """A 95% interval as ``[low, high]`` in percent (empty for None)."""
    return "" if interval is None else f"[{100 * interval[0]:5.1f}, {100 * interval[1]:5.1f}]"


def truncation_warning(result: dict) -> list[str]:
    """A warning line when the tokenizer cut texts at the context length (the captions are among the texts)."""
    t = result["counts"]["truncation"]
    if not t["texts_truncated"]:
        return []
    return [f"WARNING: {t['texts_truncated']} of {t['texts']} texts exceed the {t['context_length']}-token "
            "context and were truncated"]


def random_weights_warning(result: dict) -> list[str]:
    """A warning when the model has random weights: they are not a neutral baseline (docs/evaluation.md)."""
    if result["model"]["pretrained"] != "none":
        return []
    return ["WARNING: random weights (pretrained none) are not a neutral baseline (an untrained open_clip text "
            "tower, for one, already favours the first-mentioned object in TOR; docs/evaluation.md): use them to "
            "test the pipeline, not as chance level"]


def model_line(result: dict) -> str:
    """``model NAME (pretrained TAG[, text transform T]) on DATA``."""
    m = result["model"]
    settings = result["settings"]
    data = result["dataset"]["path"] if result["dataset"] else settings.get("data") or (
        f"(captions {settings['captions']}, no dataset)" if settings.get("captions") else
        "(sampled captions, no dataset)")
    transform = result["settings"].get("text_transform")
    extra = f", text transform {transform}" if transform else ""
    return f"model {m['resolved_name']} (pretrained {m['pretrained']}{extra}) on {data}"


def recognition_binding_lines(split: dict) -> list[str]:
    """Recognition and binding table (%, Wilson 95% CI, n, excluded) of a ``score_split`` block."""
    lines = [f"  {'attribute':<12} {'recognition %':>13} {'95% CI':>14} {'n':>6}   {'binding %':>9} "
             f"{'95% CI':>14} {'CI (images)':>14} {'n':>6} {'excl.':>6}   {'binding (all) %':>15}"]
    rec, bind, allb = split["recognition"], split["binding"], split["binding_unconditional"]
    names = list(dict.fromkeys(list(rec["per_attribute"]) + list(bind["per_attribute"])))
    for a in names:
        r = rec["per_attribute"].get(a, {"accuracy": None, "ci95": None, "total": 0})
        b = bind["per_attribute"].get(a, {"accuracy": None, "ci95": None, "total": 0})
        u = allb["per_attribute"].get(a, {"accuracy": None})
        lines.append(f"  {a:<12} {pct(r['accuracy']):>13} {ci(r['ci95']):>14} {r['total']:>6}   "
                     f"{pct(b['accuracy']):>9} {ci(b['ci95']):>14} {ci(b.get('ci95_cluster')):>14} "
                     f"{b['total']:>6} {bind['excluded'].get(a, 0):>6}   {pct(u['accuracy']):>15}")
    for label, key in (("macro avg", "macro"), ("micro avg", "micro")):
        rv = rec["average"][key] if key == "macro" else rec["average"]["micro"]["accuracy"]
        bv = bind["average"][key] if key == "macro" else bind["average"]["micro"]["accuracy"]
        uv = allb["average"][key] if key == "macro" else allb["average"]["micro"]["accuracy"]
        lines.append(f"  {label:<12} {pct(rv):>13} {'':>14} {'':>6}   {pct(bv):>9} {'':>14} {'':>14} "
                     f"{'':>6} {'':>6}   {pct(uv):>15}")
    return lines


def retrieval_lines(title: str, block: dict, position_word: str) -> list[str]:
    lines = [f"{title}  (top-1 among {block['candidates']} candidates, by {block['ordered_by']})"]
    for n, g in block["by_num_objects"].items():
        lines.append(f"  {n} objects: {g['num_queries']} queries, top-1 in query {g['top1_in_query']}, "
                     f"not in query {g['top1_not_in_query']}, ties {g['ties']}")
        clustered = any("ci95_cluster" in p["conditional"] for p in g["positions"])
        label = "95% CI (images)" if clustered else "95% CI"
        lines.append(f"    {position_word:<10} {'unconditional %':>15} {'conditional %':>14} {label:>16} {'count':>7}")
        for p in g["positions"]:
            cond = p["conditional"]
            lines.append(f"    {p['position']:<10} {pct(p['unconditional']['share']):>15} "
                         f"{pct(cond['share']):>14} {ci(cond.get('ci95_cluster', cond['ci95'])):>16} "
                         f"{p['unconditional']['count']:>7}")
    return lines


def position_panel(title: str, block: dict) -> tuple:
    """The plot panel of a retrieval block (TOR, IOR, I2TOR, Claim 1): the conditional share per position, one bar
    group per number of objects."""
    width = max(int(n) for n in block["by_num_objects"]) if block["by_num_objects"] else 1
    labels = [str(k) for k in range(1, width + 1)]
    series = {}
    for n, g in block["by_num_objects"].items():
        values = [p["conditional"]["share"] for p in g["positions"]]
        series[f"{n} objects"] = values + [None] * (width - len(values))
    return (f"{title} (conditional)", labels, series, f"share by {block['ordered_by']}", None, 1.0)


def format_result(result: dict) -> str:
    """The terminal report of an evaluation result (what ``madman eval``, ``comco eval``, ``comco attention`` and
    ``bindscope bench`` print): the model line, each registered task's lines (:attr:`Task.report
    <bindscope.evaluation.tasks.registry.Task.report>`, registration order), the notes of the tasks that reported,
    then the warnings (truncated texts, random weights)."""
    from bindscope.evaluation.tasks.registry import tasks

    lines, notes = [model_line(result)], []
    for task in tasks(result["kind"]):
        part = task.report(result) if task.report is not None else []
        if part:
            lines += [""] + part
            if task.note and task.note not in notes:
                notes.append(task.note)
    lines += ([""] + notes if notes else [])
    return "\n".join(lines + truncation_warning(result) + random_weights_warning(result))


def check_plot_path(path: str | os.PathLike | None) -> Path | None:
    """Validate a ``plot`` path before any work: suffix .png/.pdf/.svg. Raises BadInput otherwise."""
    from bindscope.errors import BadInput

    if path is None:
        return None
    path = Path(path)
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise BadInput(f"plot {str(path)!r}: the file name must end in one of {', '.join(PLOT_SUFFIXES)}",
                       param="plot")
    if path.is_dir():
        raise BadInput(f"plot {str(path)!r} is a folder", param="plot")
    return path


def plot_result(result: dict, path: str | os.PathLike) -> Path:
    """Bar plot of a result: the panels of its tasks (:attr:`Task.panels
    <bindscope.evaluation.tasks.registry.Task.panels>`), e.g. recognition and binding per attribute (one panel per
    split), the conditional share per position / size rank (one bar group per object count), matching accuracy.
    Written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from bindscope.evaluation.tasks.registry import tasks

    path = Path(path)
    panels = [panel for task in tasks(result["kind"]) if task.panels is not None for panel in task.panels(result)]
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(4.5 * max(1, len(panels)), 3.6), squeeze=False)
    for ax, (title, labels, series, ylabel, chance, ymax) in zip(axes[0], panels):
        x = np.arange(len(labels))
        width = 0.8 / max(1, len(series))
        for k, (label, values) in enumerate(series.items()):
            ax.bar(x + k * width - 0.4 + width / 2, [np.nan if v is None else v for v in values], width, label=label)
        if chance is not None:
            ax.axhline(chance, color="grey", linestyle=":", linewidth=1)
        ax.set_xticks(x, labels, rotation=30 if len(labels) > 4 else 0)
        ax.set_ylim(0, ymax)  # None: matplotlib's autoscale (attention shares are small)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.legend(fontsize=7)
    fig.suptitle(f"{result['model']['resolved_name']} ({result['model']['pretrained']})", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, path, dpi=120)
