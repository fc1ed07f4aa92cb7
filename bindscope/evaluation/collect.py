"""Paper-style tables from result JSONs: one row per result (model), one column per figure, with intervals.

``bindscope collect`` reads the evaluation results (``madman eval``, ``comco eval``, ``comco attention``,
``bindscope bench``), validated by ``bindscope/schemas/eval_result.json``, and lays them out as the papers do:
rows are models (or checkpoints), columns are positions (TOR / IOR / I2TOR), matching scenarios, attributes
(recognition, binding), benchmark subsets or size ranks (attention). Every figure is a percentage with its 95%
interval; where a result holds the cluster-bootstrap interval over images (``ci95_cluster``) the table uses it,
else the Wilson interval (``ci95``), and the column header says which (``[img]`` / ``[W]``).

Column names (stable, for scripts):

- ``madman``: ``<split>/binding/<attribute>`` (conditional on recognition, the paper's),
  ``<split>/binding_all/<attribute>`` (unconditional), ``<split>/recognition/<attribute>``, and ``.../macro``,
  ``.../micro`` averages;
- ``comco``: ``<task>/<n>obj/pos<k>`` (conditional share: top-1 at position k among queries whose top-1 is one of
  their objects, as the paper's tables) and ``<task>/<n>obj/pos<k>/uncond``; ``claim1/<group>/<n>obj/pos<k>``;
  ``matching/<scenario>``;
- ``comco`` on a dataset with attributes (``--tasks binding``): ``binding/<attribute>``, ``binding_all/<attribute>``,
  ``recognition/<attribute>`` and ``.../macro``, ``.../micro``;
- ``bench``: ``<benchmark>/<subset>`` (accuracy), ``<benchmark>/macro``, ``<benchmark>/micro``;
- ``attention``: ``attention/<block>/rank<r>`` (mean share of CLS attention on the object of size rank r);
- ``comco`` with ``--protocol clip-oscope|both`` (the authors' statistics, :mod:`bindscope.evaluation.clip_oscope`):
  ``clip-oscope/<task>/<n>obj/top<n>`` (top-n accuracy), ``.../pos<k>`` (position k given a correct top-n),
  ``.../pos<k>/all`` (TOR: position k of the top-1 over all captions), ``.../present<k>`` (IOR: most similar
  among the present objects), ``.../precision``, ``.../recall``, ``.../f1``, ``.../map``, ``.../ndcg``,
  ``.../P@<k>``, ``.../R@<k>``;
- ``toc`` / ``ioc`` (position heads): ``<task>/<n>obj/pos<k>`` (test accuracy) and ``.../majority``;
- ``retrieval`` (image-text retrieval, :mod:`bindscope.evaluation.retrieval`): ``retrieval/text-to-image/R@<k>``
  (interval: bootstrap over images) and ``retrieval/image-to-text/R@<k>`` (Wilson over images); with a text
  transform (``--labclip``) also ``retrieval/before/...``, the figures without it.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from bindscope.errors import BadInput
from bindscope.schemas import validate

TABLE_SUFFIXES = (".csv", ".md")
ID_COLUMNS = ("file", "kind", "model", "pretrained", "step", "dataset")


def _figure(value, ci, clustered: bool) -> dict:
    return {"value": None if value is None else 100.0 * value,
            "low": None if not ci else 100.0 * ci[0], "high": None if not ci else 100.0 * ci[1],
            "interval": "img" if clustered else "W"}


def _proportion(p: dict) -> dict:
    clustered = p.get("ci95_cluster") is not None
    return _figure(p["accuracy"], p["ci95_cluster"] if clustered else p["ci95"], clustered)


def result_figures(result: dict) -> dict[str, dict]:
    """Column name -> ``{"value", "low", "high", "interval"}`` (percent; interval ``img`` = bootstrap over
    images, ``W`` = Wilson) for one validated result (see the module docstring for the names)."""
    out: dict[str, dict] = {}
    metrics = result["metrics"]
    if result["kind"] == "madman-eval":
        for split, block in metrics["splits"].items():
            out.update(_binding_figures(block, f"{split}/"))
    elif result["kind"] == "bench":
        name = metrics["benchmark"]
        for subset, block in metrics["subsets"].items():
            out[f"{name}/{subset}"] = _proportion(block["accuracy"])
        out[f"{name}/macro"] = _figure(metrics["average"]["macro"], None, False)
        out[f"{name}/micro"] = _proportion(metrics["average"]["micro"])
    elif result["kind"] == "comco-eval":
        if "binding" in metrics:
            out.update(_binding_figures(metrics["binding"], ""))
        blocks = [(task, metrics[task]) for task in ("tor", "ior", "i2tor") if task in metrics]
        blocks += [(f"claim1/{group}", b) for group, b in metrics.get("claim1", {}).items()]
        for task, block in blocks:
            for n, g in block["by_num_objects"].items():
                for p in g["positions"]:
                    key = f"{task}/{n}obj/pos{p['position']}"
                    out[key] = _figure(p["conditional"]["share"], p["conditional"]["ci95"], False)
                    out[f"{key}/uncond"] = _figure(p["unconditional"]["share"], p["unconditional"]["ci95"], False)
        for scenario, block in metrics.get("matching", {}).items():
            out[f"matching/{scenario}"] = _proportion(block["all"])
        out.update(_oscope_figures(metrics))
        out.update(_retrieval_figures(metrics))
    elif result["kind"] == "comco-attention":
        blocks = [(f"block{b}", v) for b, v in metrics["layers"].items()]
        if "rollout" in metrics:
            blocks.append(("rollout", metrics["rollout"]))
        for name, block in blocks:
            for r in block["all"]:
                out[f"attention/{name}/rank{r['size_rank']}"] = _figure(r["mass"]["mean"], r["mass"]["ci95"], True)
    return out


def _binding_figures(block: dict, prefix: str) -> dict[str, dict]:
    """``<prefix>binding|binding_all|recognition/<attribute>`` and ``.../macro``, ``.../micro`` of a block
    holding the three accuracy blocks (a MADMAN split, a ComCO ``binding`` task)."""
    out: dict[str, dict] = {}
    for key, name in (("binding", "binding"), ("binding_unconditional", "binding_all"),
                      ("recognition", "recognition")):
        for attribute, p in block[key]["per_attribute"].items():
            out[f"{prefix}{name}/{attribute}"] = _proportion(p)
        average = block[key]["average"]
        out[f"{prefix}{name}/macro"] = _figure(average["macro"], None, False)
        out[f"{prefix}{name}/micro"] = _proportion(average["micro"])
    return out


def _oscope_figures(metrics: dict) -> dict[str, dict]:
    """Columns of the clip-oscope blocks and the TOC/IOC heads of a ``comco eval`` result (module docstring)."""
    out: dict[str, dict] = {}
    for task, block in metrics.get("clip_oscope", {}).items():
        for n, g in block["by_num_objects"].items():
            key = f"clip-oscope/{task}/{n}obj"
            out[f"{key}/top{n}"] = _figure(g["top_n_accuracy"]["value"], g["top_n_accuracy"]["ci95"], False)
            families = (("position_given_correct_top_n", "pos{}"), ("position_of_top1", "pos{}/all"),
                        ("most_similar_among_present", "present{}"))
            for family, name in families:
                for p in g.get(family, {}).get("positions", []):
                    out[f"{key}/{name.format(p['position'])}"] = _figure(p["value"], p["ci95"], False)
            for field, name in (("mean_precision", "precision"), ("mean_recall", "recall"), ("mean_f1", "f1"),
                                ("map", "map"), ("ndcg", "ndcg")):
                out[f"{key}/{name}"] = _figure(g[field]["value"], None, False)
            for field, name in (("precision_at_k", "P@{}"), ("recall_at_k", "R@{}")):
                for v in g[field]["values"]:
                    out[f"{key}/{name.format(v['k'])}"] = _figure(v["value"], None, False)
    for task in ("toc", "ioc"):
        for n, g in metrics.get(task, {}).get("by_num_objects", {}).items():
            for p in g["positions"]:
                out[f"{task}/{n}obj/pos{p['position']}"] = _proportion(p["test"])
                out[f"{task}/{n}obj/pos{p['position']}/majority"] = _proportion(p["majority_baseline"])
    return out


def _retrieval_figures(metrics: dict) -> dict[str, dict]:
    """Columns of the image-text retrieval block of a ``comco eval`` result (module docstring)."""
    out: dict[str, dict] = {}
    block = metrics.get("retrieval")
    for prefix, part in (("retrieval", block), ("retrieval/before", (block or {}).get("before_text_transform"))):
        for direction, name in (("text_to_image", "text-to-image"), ("image_to_text", "image-to-text")):
            for k, p in (part or {}).get(direction, {}).get("recall", {}).items():
                out[f"{prefix}/{name}/R@{k}"] = _proportion(p)
    return out


def result_files(paths: list[str | os.PathLike]) -> list[Path]:
    """Result files named by ``paths``: files as given, folders by their ``*.json`` (sorted, not recursive).

    Raises:
        BadInput: no path, a path that does not exist, or a folder with no JSON file.
    """
    if not paths:
        raise BadInput("name at least one result JSON file or folder of results")
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("*.json"))
            if not found:
                raise BadInput(f"folder {str(p)!r} holds no .json result")
            files += found
        elif p.is_file():
            files.append(p)
        else:
            raise BadInput(f"result {str(p)!r} does not exist")
    return list(dict.fromkeys(files))


def load_result(path: Path) -> dict:
    """A result JSON, validated by the ``eval_result`` schema. Raises BadInput naming the file otherwise."""
    from bindscope.io.json_input import load_json

    result = load_json(path, "result")
    validate(result, "eval_result", f"result {str(path)!r}")
    return result


def collect(paths: list[str | os.PathLike]) -> dict:
    """Collect result files into one table.

    Args:
        paths: result JSON files and/or folders of them (see :func:`result_files`).

    Returns:
        ``{"columns": [figure column names, in first-seen order], "rows": [{"file", "kind", "model",
        "pretrained", "step", "dataset", "figures": {column: {"value", "low", "high", "interval"}}}]}``; rows
        are sorted by kind, model, pretrained and step (training checkpoints in step order).

    Raises:
        BadInput: a missing path or a file that is not a valid result (named).
    """
    rows, columns = [], {}
    for path in result_files(paths):
        result = load_result(path)
        figures = result_figures(result)
        for name in figures:
            columns.setdefault(name, None)
        model = result["model"]
        local = os.sep in model["resolved_name"]  # a trained model's path: its file name says enough
        rows.append({"file": str(path), "kind": result["kind"],
                     "model": Path(model["resolved_name"]).name if local else model["resolved_name"],
                     "pretrained": "(file)" if local else model["pretrained"], "step": model.get("step"),
                     "dataset": (result["dataset"] or {}).get("path", ""), "figures": figures})
    rows.sort(key=lambda r: (r["kind"], r["model"], r["pretrained"], -1 if r["step"] is None else r["step"],
                             r["file"]))
    return {"columns": list(columns), "rows": rows}


def _cell(figure: dict | None) -> str:
    if figure is None or figure["value"] is None:
        return ""
    if figure["low"] is None:
        return f"{figure['value']:.1f}"
    return f"{figure['value']:.1f} [{figure['low']:.1f}, {figure['high']:.1f}]"


def format_table(table: dict, fmt: str) -> str:
    """The table as ``csv`` (one value/low/high column triple per figure, numbers in percent) or ``md`` (a
    Markdown table, ``value [low, high]`` per cell, the interval kind in the header)."""
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(list(ID_COLUMNS) + [f"{c}{s}" for c in table["columns"] for s in ("", ".low", ".high")])
        for row in table["rows"]:
            cells = [row[k] if row[k] is not None else "" for k in ID_COLUMNS]
            for c in table["columns"]:
                f = row["figures"].get(c)
                cells += ["" if f is None or f[k] is None else f"{f[k]:.4f}" for k in ("value", "low", "high")]
            writer.writerow(cells)
        return buffer.getvalue()
    kinds = {}
    for row in table["rows"]:
        for c, f in row["figures"].items():
            kinds.setdefault(c, set()).add(f["interval"] if f["low"] is not None else "")
    header = ["model", "pretrained", "step"] + [f"{c} [{'/'.join(sorted(k - {''})) or '-'}]"
                                                for c, k in ((c, kinds.get(c, set())) for c in table["columns"])]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table["rows"]:
        cells = [row["model"], row["pretrained"], "" if row["step"] is None else str(row["step"])]
        cells += [_cell(row["figures"].get(c)) for c in table["columns"]]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Percent, 95% intervals: [img] bootstrap over images (clustered), [W] Wilson score. Conditional "
                 "shares unless the column ends in /uncond.")
    return "\n".join(lines) + "\n"


def plot_table(table: dict, path: str | os.PathLike, columns: list[str] | None = None) -> Path:
    """A figure of the table, written atomically.

    When every row has a training ``step`` (checkpoints of one run), the chosen columns are drawn as curves over
    steps with their intervals as bands (the binding/recognition-over-training curve); otherwise as grouped bars
    (one group per column, one bar per row). ``columns`` defaults to the binding and recognition macro averages
    when present, else the first 8 columns.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from bindscope.io.atomic import save_figure

    if columns is None:
        preferred = [c for c in table["columns"] if c.endswith(("/binding/micro", "/recognition/micro"))]
        columns = preferred or table["columns"][:8]
    rows = table["rows"]
    fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(columns) + 3), 3.8))
    if rows and all(r["step"] is not None for r in rows):
        steps = np.array([r["step"] for r in rows])
        for c in columns:
            values = np.array([np.nan if r["figures"].get(c, {}).get("value") is None else r["figures"][c]["value"]
                               for r in rows])
            low = np.array([np.nan if r["figures"].get(c, {}).get("low") is None else r["figures"][c]["low"]
                            for r in rows])
            high = np.array([np.nan if r["figures"].get(c, {}).get("high") is None else r["figures"][c]["high"]
                             for r in rows])
            ax.plot(steps, values, marker="o", label=c)
            ax.fill_between(steps, low, high, alpha=0.2)
        ax.set_xlabel("training step")
    else:
        x = np.arange(len(columns))
        width = 0.8 / max(1, len(rows))
        for k, r in enumerate(rows):
            values = [np.nan if r["figures"].get(c, {}).get("value") is None else r["figures"][c]["value"]
                      for c in columns]
            ax.bar(x + k * width - 0.4 + width / 2, values, width, label=f"{r['model']} ({r['pretrained']})")
        ax.set_xticks(x, columns, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("percent")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, Path(path), dpi=120)
