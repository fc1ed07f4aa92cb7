"""One table from result JSONs of every kind: one row per result file, one column per figure, with intervals.

``bindscope collect`` reads every result file the project writes, identifies its kind by the ``kind`` key it
records and validates it with that kind's JSON Schema (:data:`bindscope.evaluation.collect_kinds.KINDS`):

- ``madman-eval``, ``comco-eval``, ``comco-attention``, ``bench`` (``bindscope/schemas/eval_result.json``): ``madman
  eval``, ``comco eval`` (TOR / IOR / I2TOR, matching, binding, retrieval, clip-oscope statistics, TOC / IOC
  heads), ``comco attention``, ``bindscope bench``, and a training run's ``result.json`` (a ``madman eval`` or
  ``comco eval`` result of the final model);
- ``probe``, ``conjunctive-search``, ``labclip-eval`` (``alignment_result.json``): ``bindscope probe`` (both tasks)
  and ``bindscope labclip eval`` (``labclip fit`` writes a map, not a result);
- ``madman-audit`` (``audit_result.json``): ``madman audit --out``;
- ``caption-bias`` (``caption_bias_result.json``): ``bindscope caption-bias``;
- ``t2i-score`` (``t2i_result.json``): ``comco t2i-score``.

Rows are result files (model, pretrained tag, training step for checkpoints); columns are the figures each kind
gives (:mod:`bindscope.evaluation.collect_kinds` names and defines them: conditional or unconditional, macro or
micro, the sampling unit). Shares are percentages with their 95% interval; where a result holds the cluster
bootstrap interval (``ci95_cluster``: over images, or over prompts for ``t2i-score``) the table uses it, else the
Wilson interval (``ci95``), and the column header says which (``[img]`` / ``[prompt]`` / ``[W]``). The LABCLIP modality gap is a distance (unit ``distance``).

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
  transform (``--labclip``) also ``retrieval/before/...``, the figures without it;
- ``probe``: ``probe/<modality>/<attribute>/macro`` (test accuracy, mean over target categories), ``.../micro``
  (pooled test pairs), ``.../bag_of_words/macro|micro``, ``.../bag_of_words_bound``, ``.../chance``,
  ``.../majority``, ``.../<m>obj`` (micro accuracy with m objects in view, Wilson);
- ``conjunctive-search``: ``conjunctive-search/accuracy``, ``.../bag_of_words`` (Wilson over test scenes),
  ``.../chance``, ``.../<k>distractors`` and ``.../<k>distractors/bag_of_words``;
- ``labclip-eval``: ``labclip/<before|after>/binding/<attribute>`` (conditional on recognition),
  ``.../binding_all/...`` (unconditional: LABCLIP's binding), ``.../recognition/...``, each with ``macro`` and
  ``micro``; ``labclip/<before|after>/modality_gap`` (a distance);
- ``madman-audit``: ``audit/<attribute>``, ``audit/digit`` (oracle CNN test accuracy, Wilson over objects),
  ``.../macro`` (mean per-class accuracy), ``audit/<size>/<attribute>`` per size level;
- ``caption-bias``: ``caption-bias/pos<k>``, ``caption-bias/not_mentioned`` (share of all captions, bootstrap
  over images), ``caption-bias/first_when_mentioned`` (conditional on a mention),
  ``caption-bias/<m>mentioned/pos<k>``;
- ``t2i-score``: ``t2i/<scorer>/pos<k>`` (share of prompt objects at mention position k that the image shows, by
  the ``detector`` or the ``clip`` scorer; interval: bootstrap over prompts), ``t2i/<scorer>/all``,
  ``t2i/<scorer>/first``, ``t2i/<scorer>/last`` and ``t2i/<scorer>/<n>obj/pos<k>``.

A file that is not JSON, records no known kind or fails its kind's schema stops the collection with one
:class:`~bindscope.errors.BadInput` naming the file and why (exit status 2 from the CLI, nothing written).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path

from bindscope.errors import BadInput
from bindscope.evaluation.collect_kinds import load_result, result_columns, result_kind

TABLE_SUFFIXES = (".csv", ".md", ".json")
ID_COLUMNS = ("file", "kind", "model", "pretrained", "step", "dataset")
MODEL_FREE = {"madman-audit": ("oracle CNN", "(trained)"), "caption-bias": ("(no model)", "")}
MAX_STEP = 2 ** 53  # the largest step a float64 (a plot's axis) holds exactly


def result_figures(result: dict) -> dict[str, dict]:
    """Column name -> ``{"value", "low", "high", "interval", "unit"}`` (percent, or a distance for ``unit``
    ``"distance"``; interval ``img`` = bootstrap over images, ``W`` = Wilson, ``""`` none) for one validated
    result (see the module docstring for the names)."""
    return result_columns(result).figures


def result_files(paths: list[str | os.PathLike]) -> list[Path]:
    """Result files named by ``paths``: files as given, a ``madman sweep`` folder by its finished points'
    ``runs/<property>=<value>/seed-<seed>/result.json``, other folders by their ``*.json`` (sorted, not recursive).

    Raises:
        BadInput: no path, a path that does not exist, or a folder with no JSON file (a sweep folder: no
            finished point).
    """
    return list(_sources(paths))


def _sources(paths: list[str | os.PathLike]) -> dict[Path, dict | None]:
    """:func:`result_files` -> the sweep point of each (``{"property", "value", "seed"}``, None outside a sweep)."""
    from bindscope.evaluation.collect_groups import is_sweep_folder, sweep_results

    if not paths:
        raise BadInput("name at least one result JSON file or folder of results")
    files: dict[Path, dict | None] = {}
    for p in map(Path, paths):
        if p.is_dir() and is_sweep_folder(p):
            found = sweep_results(p)
            if not found:
                raise BadInput(f"sweep folder {str(p)!r} holds no finished point (no runs/<property>=<value>/"
                               "seed-<seed>/result.json)")
            for file, point in found:
                files.setdefault(file, point)
        elif p.is_dir():
            found = sorted(p.glob("*.json"))
            if not found:
                raise BadInput(f"folder {str(p)!r} holds no .json result")
            for file in found:
                files.setdefault(file, None)
        elif p.is_file():
            files.setdefault(p, None)
        else:
            raise BadInput(f"result {str(p)!r} does not exist")
    return files


def _identity(result: dict, kind: str, where: str) -> tuple[str, str, int | None]:
    """(model, pretrained, step) of a row: a trained model's path by its file name, "(file)" as its tag.
    Raises BadInput naming ``where`` for a step above :data:`MAX_STEP`."""
    if kind in MODEL_FREE:
        return (*MODEL_FREE[kind], None)
    if kind == "t2i-score":  # its scorers' models: the detector's and the CLIP encoder's
        models = {name: s["model"] for name, s in result["scorers"].items()}
        names = [Path(m["name"]).name if os.sep in m["name"] else m["name"] for m in models.values()]
        return " + ".join(names), models.get("clip", {}).get("pretrained", ""), None
    model = result["model"]
    step = model.get("step")
    if step is not None and step > MAX_STEP:
        digits = str(step)
        shown = digits if len(digits) <= 20 else f"{digits[:12]}... ({len(digits)} digits)"
        raise BadInput(f"{where}: model.step {shown} is not a training step bindscope collect can place: at most "
                       f"2**53 = {MAX_STEP:,}")
    name = model.get("resolved_name", model["name"])
    if os.sep in name:  # a trained model's path: its file name says enough
        return Path(name).name, "(file)", step
    return name, model["pretrained"], step


def collect(paths: list[str | os.PathLike]) -> dict:
    """Collect result files of every kind into one table.

    Args:
        paths: result JSON files and/or folders of them (see :func:`result_files`).

    Returns:
        ``{"columns": [figure column names, in first-seen order], "definitions": {column: what it counts, its
        interval}, "rows": [{"file", "kind", "model", "pretrained", "step", "dataset", "seed", "property",
        "value", "group", "figures": {column: {"value", "low", "high", "interval", "unit"}}}], "groups": [...],
        "summary": {kind: {"files": n, "columns": distinct columns of that kind}}}``; rows are sorted by kind,
        swept property and value, model, pretrained, step (training checkpoints in step order) and seed, then
        file. ``seed`` is the training seed of a trained model (else the evaluation seed), ``property`` /
        ``value`` the swept property of a ``madman sweep`` point (else None), ``group`` the key of results that
        differ only in seed; ``groups`` (:func:`bindscope.evaluation.collect_groups.seed_groups`) the mean, each
        seed's value and the t interval over the seeds of every group of two or more seeds.

    Raises:
        BadInput: a missing path or a file that is not a valid result of a known kind (named, with the reason),
            or whose ``model.step`` is above :data:`MAX_STEP`.
    """
    from bindscope.evaluation.collect_groups import row_seeds, seed_groups

    rows, definitions, by_kind = [], {}, {}
    for path, sweep in _sources(paths).items():
        result = load_result(path)
        kind = result_kind(result)
        columns = result_columns(result)
        for name, text in columns.definitions.items():
            definitions.setdefault(name, text)
        seen = by_kind.setdefault(kind, [0, set()])
        seen[0] += 1
        seen[1].update(columns.figures)
        model, pretrained, step = _identity(result, kind, str(path))
        dataset = result.get("dataset") or {}
        key, seed = row_seeds(result, sweep) if kind not in MODEL_FREE else ((), None)
        point = sweep or {}
        rows.append({"file": str(path), "kind": kind, "model": model, "pretrained": pretrained, "step": step,
                     "dataset": dataset.get("path", ""), "seed": seed, "property": point.get("property"),
                     "value": point.get("value"), "figures": columns.figures,
                     "group": json.dumps([kind, dataset.get("manifest_sha256"), step, point.get("property"),
                                          point.get("value"), *key], sort_keys=True, default=str)})
    rows.sort(key=lambda r: (r["kind"], r["property"] or "", -math.inf if r["value"] is None else r["value"],
                             r["model"], r["pretrained"], -1 if r["step"] is None else r["step"],
                             -1 if r["seed"] is None else r["seed"], r["file"]))
    summary = {kind: {"files": n, "columns": len(names)} for kind, (n, names) in sorted(by_kind.items())}
    columns = list(definitions)
    return {"columns": columns, "definitions": definitions, "rows": rows, "groups": seed_groups(rows, columns),
            "summary": summary}


def format_summary(table: dict) -> str:
    """One line: how many files of which kind were read and how many columns each kind gave."""
    parts = [f"{s['files']} {kind} ({s['columns']} columns)" for kind, s in table["summary"].items()]
    return f"read {len(table['rows'])} result files: {', '.join(parts)}; {len(table['columns'])} columns in all"


def _cell(figure: dict | None) -> str:
    if figure is None or figure["value"] is None:
        return ""
    digits = 1 if figure.get("unit", "%") == "%" else 3
    if figure["low"] is None:
        return f"{figure['value']:.{digits}f}"
    return f"{figure['value']:.{digits}f} [{figure['low']:.{digits}f}, {figure['high']:.{digits}f}]"


def _id_columns(table: dict) -> list[str]:
    """:data:`ID_COLUMNS`, then ``property`` and ``value`` where a row is a sweep point and ``seed`` where a row
    records one."""
    rows = table["rows"]
    extra = ["property", "value"] if any(r.get("property") for r in rows) else []
    return list(ID_COLUMNS) + extra + (["seed"] if any(r.get("seed") is not None for r in rows) else [])


def format_table(table: dict, fmt: str) -> str:
    """The table of :func:`collect` as ``csv`` (the id columns, with ``property``, ``value`` and ``seed`` where
    rows have them, then one value/low/high column triple per figure, numbers in the figure's unit: percent, or a
    distance; then a row per seed group, ``file`` = ``mean over seeds``, its seeds in ``seed``, the t interval
    over them as low/high), ``md`` (a Markdown table with a row per result file, ``value [low, high]`` per cell,
    the interval kind in the header, then the seed groups, every column's definition, the summary of
    :func:`format_summary` and, with a ``comparison``, its table) or ``json`` (the table dict, canonical JSON)."""
    if fmt == "json":
        from bindscope.io.canonical import canonical_json

        return canonical_json(table)
    ids = _id_columns(table)
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(ids + [f"{c}{s}" for c in table["columns"] for s in ("", ".low", ".high")])
        groups = [{**g, "file": "mean over seeds", "dataset": "", "seed": ";".join(map(str, g["seeds"]))}
                  for g in table.get("groups") or []]
        for row in table["rows"] + groups:
            cells = [row[k] if row.get(k) is not None else "" for k in ids]
            for c in table["columns"]:
                f = row["figures"].get(c)
                cells += ["" if f is None or f[k] is None else f"{f[k]:.4f}" for k in ("value", "low", "high")]
            writer.writerow(cells)
        return buffer.getvalue()
    from bindscope.evaluation.collect_groups import group_lines

    kinds = {}
    for row in table["rows"]:
        for c, f in row["figures"].items():
            kinds.setdefault(c, set()).add(f["interval"] if f["low"] is not None else "")
    shown = ["kind", "model", "pretrained", "step"] + [k for k in ids if k not in ID_COLUMNS]
    header = ["file"] + shown + [
        f"{c} [{'/'.join(sorted(k - {''})) or '-'}]" for c, k in ((c, kinds.get(c, set())) for c in table["columns"])]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table["rows"]:
        cells = [Path(row["file"]).name] + ["" if row.get(k) is None else
                                            f"{row[k]:g}" if k == "value" else str(row[k]) for k in shown]
        cells += [_cell(row["figures"].get(c)) for c in table["columns"]]
        lines.append("| " + " | ".join(cells) + " |")
    lines += group_lines(table, _cell)
    lines.append("")
    lines.append("Percent (distances where a column says so), 95% intervals: [img] bootstrap over images "
                 "(clustered), [prompt] bootstrap over prompts, [W] Wilson score, [seeds] Student t over seeds, [-] "
                 "none. Columns:")
    lines.append("")
    lines += [f"- `{c}`: {table.get('definitions', {}).get(c, '')}" for c in table["columns"]]
    if "summary" in table:
        lines += ["", format_summary(table)]
    if table.get("comparison"):
        from bindscope.evaluation.compare import Comparison

        lines += ["", Comparison.from_dict(table["comparison"]).format("md").rstrip("\n")]
    return "\n".join(lines) + "\n"


def plot_table(table: dict, path: str | os.PathLike, columns: list[str] | None = None) -> Path:
    """A figure of the table, written atomically.

    When every row is a point of a ``madman sweep`` (a swept ``value``), the chosen columns are drawn against the
    swept value; else when every row has a training ``step`` (checkpoints of one run), as curves over steps; in
    both, rows at one x from several seeds are drawn as their mean with the 95% t interval over the seeds as a
    band, and a single row with its own interval as the band
    (:func:`bindscope.evaluation.collect_groups.curve`). Otherwise grouped bars (one group per column, one bar
    per row). ``columns`` defaults to the binding and recognition micro averages when present, else the first 8
    columns.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from bindscope.evaluation.collect_groups import curve
    from bindscope.io.atomic import save_figure

    if columns is None:
        preferred = [c for c in table["columns"] if c.endswith(("/binding/micro", "/recognition/micro"))]
        columns = preferred or table["columns"][:8]
    rows = table["rows"]
    fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(columns) + 3), 3.8))
    x_key = "value" if rows and all(r.get("value") is not None for r in rows) else \
        "step" if rows and all(r["step"] is not None for r in rows) else None
    if x_key is not None:
        for c in columns:
            xs, mean, low, high = curve(rows, x_key, c)
            ax.plot(xs, mean, marker="o", label=c)
            ax.fill_between(xs, low, high, alpha=0.2)
        swept = sorted({r["property"] for r in rows}) if x_key == "value" else []
        ax.set_xlabel(", ".join(swept).replace("_", " ") + " (swept)" if swept else "training step")
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
