"""Human-readable tables and bar plots of evaluation results (the JSON result is the record; these are views)."""

from __future__ import annotations

import os
from pathlib import Path

from bindscope.io.atomic import save_figure

PLOT_SUFFIXES = (".png", ".pdf", ".svg")


def _pct(value) -> str:
    return "   n/a" if value is None else f"{100 * value:6.2f}"


def _ci(ci) -> str:
    return "" if ci is None else f"[{100 * ci[0]:5.1f}, {100 * ci[1]:5.1f}]"


def _truncation_warning(result: dict) -> list[str]:
    """A warning line when the tokenizer cut texts at the context length (the captions are among the texts)."""
    t = result["counts"]["truncation"]
    if not t["texts_truncated"]:
        return []
    return [f"WARNING: {t['texts_truncated']} of {t['texts']} texts exceed the {t['context_length']}-token "
            "context and were truncated"]


def _random_weights_warning(result: dict) -> list[str]:
    """A warning when the model has random weights: they are not a neutral baseline (docs/evaluation.md)."""
    if result["model"]["pretrained"] != "none":
        return []
    return ["WARNING: random weights (pretrained none) are not a neutral baseline (an untrained open_clip text "
            "tower, for one, already favours the first-mentioned object in TOR; docs/evaluation.md): use them to "
            "test the pipeline, not as chance level"]


def _model_line(result: dict) -> str:
    m = result["model"]
    data = result["dataset"]["path"] if result["dataset"] else "(sampled captions, no dataset)"
    transform = result["settings"].get("text_transform")
    extra = f", text transform {transform}" if transform else ""
    return f"model {m['resolved_name']} (pretrained {m['pretrained']}{extra}) on {data}"


def format_madman(result: dict) -> str:
    """Per split: recognition and binding accuracy (%) per attribute with Wilson 95% CI and counts."""
    lines = [_model_line(result)]
    for name, split in result["metrics"].get("splits", {}).items():
        lines.append("")
        lines.append(f"split {name} ({split['role']}): {split['num_scored']} of {split['num_samples']} samples "
                     "scored")
        lines += _recognition_binding_lines(split)
    if "splits" in result["metrics"]:
        lines.append("")
        lines.append("binding: counted only where recognition of that attribute succeeded for both digits (paper); "
                     "binding (all): every binding negative. Ties count as wrong. 95% CI: Wilson per comparison; "
                     "CI (images): bootstrap over images (an image's negatives are not independent).")
    lines += _saliency_lines(result["metrics"])
    return "\n".join(lines + _truncation_warning(result) + _random_weights_warning(result))


def _saliency_lines(metrics: dict) -> list[str]:
    """The first-mention and large-object shares (``madman eval --tasks first-mention,large-object``)."""
    lines = []
    for task, key, groups, title in (
            ("first_mention", "by_relation", "caption ~ first-mentioned digit", "first-mention (text side)"),
            ("large_object", "by_size_pair", "image ~ larger digit", "large-object (image side)")):
        for name, block in metrics.get(task, {}).items():
            lines += ["", f"{title}, split {name}: {block['num_scored']} images; share {groups} (chance 50%)"]
            for label, p in [("all", block["all"]), *block[key].items()]:
                lines.append(f"  {label:<16} {_pct(p['accuracy']):>7}  CI (images) {_ci(p.get('ci95_cluster')):<16} "
                             f"n={p['total']}")
    if lines:
        lines += ["", "first-mention / large-object: strict > (ties count as wrong); CI (images): bootstrap over "
                      "images, one comparison per image."]
    return lines


def _recognition_binding_lines(split: dict) -> list[str]:
    """Recognition and binding table (%, Wilson 95% CI, n, excluded) of a ``score_split`` block."""
    lines = [f"  {'attribute':<12} {'recognition %':>13} {'95% CI':>14} {'n':>6}   {'binding %':>9} "
             f"{'95% CI':>14} {'CI (images)':>14} {'n':>6} {'excl.':>6}   {'binding (all) %':>15}"]
    rec, bind, allb = split["recognition"], split["binding"], split["binding_unconditional"]
    names = list(dict.fromkeys(list(rec["per_attribute"]) + list(bind["per_attribute"])))
    for a in names:
        r = rec["per_attribute"].get(a, {"accuracy": None, "ci95": None, "total": 0})
        b = bind["per_attribute"].get(a, {"accuracy": None, "ci95": None, "total": 0})
        u = allb["per_attribute"].get(a, {"accuracy": None})
        lines.append(f"  {a:<12} {_pct(r['accuracy']):>13} {_ci(r['ci95']):>14} {r['total']:>6}   "
                     f"{_pct(b['accuracy']):>9} {_ci(b['ci95']):>14} {_ci(b.get('ci95_cluster')):>14} "
                     f"{b['total']:>6} {bind['excluded'].get(a, 0):>6}   {_pct(u['accuracy']):>15}")
    for label, key in (("macro avg", "macro"), ("micro avg", "micro")):
        rv = rec["average"][key] if key == "macro" else rec["average"]["micro"]["accuracy"]
        bv = bind["average"][key] if key == "macro" else bind["average"]["micro"]["accuracy"]
        uv = allb["average"][key] if key == "macro" else allb["average"]["micro"]["accuracy"]
        lines.append(f"  {label:<12} {_pct(rv):>13} {'':>14} {'':>6}   {_pct(bv):>9} {'':>14} {'':>14} "
                     f"{'':>6} {'':>6}   {_pct(uv):>15}")
    return lines


def _retrieval_lines(title: str, block: dict, position_word: str) -> list[str]:
    lines = [f"{title}  (top-1 among {block['candidates']} candidates, by {block['ordered_by']})"]
    for n, g in block["by_num_objects"].items():
        lines.append(f"  {n} objects: {g['num_queries']} queries, top-1 in query {g['top1_in_query']}, "
                     f"not in query {g['top1_not_in_query']}, ties {g['ties']}")
        lines.append(f"    {position_word:<10} {'unconditional %':>15} {'conditional %':>14} {'count':>7}")
        for p in g["positions"]:
            lines.append(f"    {p['position']:<10} {_pct(p['unconditional']['share']):>15} "
                         f"{_pct(p['conditional']['share']):>14} {p['unconditional']['count']:>7}")
    return lines


def format_comco(result: dict) -> str:
    """TOR/IOR/I2TOR shares (unconditional and conditional, %) per position; matching accuracy per scenario."""
    metrics = result["metrics"]
    lines = [_model_line(result), ""]
    if "tor" in metrics:
        lines += _retrieval_lines("TOR", metrics["tor"], "position") + [""]
    for group in ("large_first", "small_first"):
        if group in metrics.get("claim1", {}):
            lines += _retrieval_lines(f"Claim 1, {group.replace('_', '-')}", metrics["claim1"][group], "position")
            lines.append("")
    if "ior" in metrics:
        lines += _retrieval_lines("IOR", metrics["ior"], "size rank") + [""]
    if "i2tor" in metrics:
        lines += _retrieval_lines("I2TOR", metrics["i2tor"], "size rank") + [""]
    if "binding" in metrics:
        lines.append(f"recognition and binding on {metrics['binding']['num_scored']} scenes with attribute negatives "
                     "(binding: conditional on recognition for both objects; binding (all): every negative)")
        lines += _recognition_binding_lines(metrics["binding"]) + [""]
    if "matching" in metrics:
        lines.append("image-text matching (share of (image, wrong caption) pairs with correct > wrong)")
        for scenario, block in metrics["matching"].items():
            a = block["all"]
            lines.append(f"  {scenario.replace('_', ' ')}: {_pct(a['accuracy'])} %  Wilson {_ci(a['ci95'])}  "
                         f"bootstrap over images {_ci(a.get('ci95_cluster'))}  ({a['correct']}/{a['total']} pairs "
                         f"from {a.get('clusters', '?')} images)")
        lines.append("")
    lines.append("unconditional = share of all queries; conditional = share of queries whose top-1 is one of their "
                 "objects. Ties count as wrong. CI: Wilson 95%; matching also bootstrap over images.")
    return "\n".join(lines + _truncation_warning(result) + _random_weights_warning(result))


def _attention_blocks(result: dict) -> list[tuple[str, dict]]:
    """``(title, block)`` for each reported block of an attention result (layers by index, then rollout)."""
    metrics = result["metrics"]
    blocks = [(f"block {k}", b) for k, b in metrics["layers"].items()]
    if "rollout" in metrics:
        blocks.append(("rollout", metrics["rollout"]))
    return blocks


def format_attention(result: dict) -> str:
    """CLS attention per size rank: mean attention mass (%, bootstrap CI), mass per patch, area, top-k patches."""
    m = result["metrics"]
    lines = [_model_line(result),
             f"patch grid {m['grid'][0]}x{m['grid'][1]}, {m['blocks']} blocks, top-k = {m['top_k']}", ""]
    for title, block in _attention_blocks(result):
        lines.append(f"CLS attention, {title} (all scenes)")
        lines.append(f"  {'size rank':<10} {'objects':>7} {'mass %':>8} {'95% CI':>14} {'mass/patch %':>12} "
                     f"{'area (patches)':>14} {'top-k patches':>13}")
        for r in block["all"]:
            lines.append(f"  {r['size_rank']:<10} {r['objects']:>7} {_pct(r['mass']['mean']):>8} "
                         f"{_ci(r['mass']['ci95']):>14} {_pct(r['mass_per_patch']['mean']):>12} "
                         f"{r['patch_area']['mean']:>14.2f} {r['top_k_patches']['mean']:>13.2f}")
        lines.append("")
    lines.append("mass = share of the CLS attention on the object's pixels; size rank 1 = largest visible area. "
                 "CI: 95% percentile bootstrap over scenes.")
    return "\n".join(lines + _random_weights_warning(result))


def format_result(result: dict) -> str:
    """The terminal table of a result (madman eval, comco eval or comco attention)."""
    if result["kind"] == "madman-eval":
        return format_madman(result)
    if result["kind"] == "comco-attention":
        return format_attention(result)
    return format_comco(result)


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
    """Bar plot of a result: MADMAN: recognition and binding per attribute (one panel per split); ComCO: the
    conditional share per position / size rank (one panel per task, one bar group per object count) and
    matching accuracy. Written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    path = Path(path)
    panels = []
    if result["kind"] == "madman-eval":
        for name, split in result["metrics"].get("splits", {}).items():
            attrs = list(split["recognition"]["per_attribute"])
            series = {"recognition": [split["recognition"]["per_attribute"][a]["accuracy"] for a in attrs],
                      "binding": [split["binding"]["per_attribute"].get(a, {}).get("accuracy") for a in attrs]}
            panels.append((f"{name} ({split['role'].split(' (')[0]})", attrs, series, "accuracy", 0.5, 1.0))
        for task, key, title in (("first_mention", "by_relation", "first-mention"),
                                 ("large_object", "by_size_pair", "large-object")):
            for name, block in result["metrics"].get(task, {}).items():
                labels = ["all", *block[key]]
                values = [block["all"]["accuracy"], *(p["accuracy"] for p in block[key].values())]
                panels.append((f"{title}, {name}", labels, {"share": values}, "share", 0.5, 1.0))
    elif result["kind"] == "comco-attention":
        grid = result["metrics"]["grid"]
        uniform = 1.0 / (grid[0] * grid[1])
        for title, block in _attention_blocks(result)[-2:]:
            width = max((len(g) for g in block["by_num_objects"].values()), default=1)
            labels = [str(k) for k in range(1, width + 1)]
            figures = {"mass": {}, "mass_per_patch": {}}
            for n, ranks in block["by_num_objects"].items():
                pad = [None] * (width - len(ranks))
                for field, series in figures.items():
                    series[f"{n} objects"] = [r[field]["mean"] for r in ranks] + pad
            panels.append((f"CLS attention on the object, {title}", labels, figures["mass"],
                           "share of CLS attention, by size rank", None, None))
            panels.append((f"per patch of the object, {title} (dotted: uniform)", labels, figures["mass_per_patch"],
                           "share of CLS attention per patch", uniform, None))
    else:
        metrics = result["metrics"]
        blocks = [(k.upper(), metrics[k]) for k in ("tor", "ior", "i2tor") if k in metrics]
        blocks += [(f"Claim 1 {g}", metrics["claim1"][g]) for g in metrics.get("claim1", {})]
        for title, block in blocks:
            width = max(int(n) for n in block["by_num_objects"]) if block["by_num_objects"] else 1
            labels = [str(k) for k in range(1, width + 1)]
            series = {}
            for n, g in block["by_num_objects"].items():
                values = [p["conditional"]["share"] for p in g["positions"]]
                series[f"{n} objects"] = values + [None] * (width - len(values))
            panels.append((f"{title} (conditional)", labels, series, f"share by {block['ordered_by']}", None, 1.0))
        if "matching" in metrics:
            labels = list(metrics["matching"])
            series = {"accuracy": [metrics["matching"][s]["all"]["accuracy"] for s in labels]}
            panels.append(("image-text matching", labels, series, "accuracy", None, 1.0))
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
