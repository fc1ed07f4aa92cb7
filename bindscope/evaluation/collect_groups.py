"""What ``bindscope collect`` adds over single result files: the results of a ``madman sweep`` folder, and results
that differ only in their seed, grouped.

- **Sweep folders.** A folder holding ``sweep.json`` or the sweep's ownership marker is read as ``madman sweep``
  lays it out (``runs/<property>=<value>/seed-<seed>/result.json``; points not finished yet are left out): each
  row gains the swept ``property``, its ``value`` and the training ``seed``.
- **Seeds.** A trained model's result records its training seed and the sha256 of its run's identity without the
  seed (``model.run``, written by training); rows of one kind, dataset (manifest sha256), evaluation settings,
  training step and swept value whose models are runs of one identity but their seed form a group, and so do
  rows of one model, kind, dataset and step evaluated with different evaluation seeds (``settings.seed``: the
  sampled captions or matching negatives drawn). A group of two or more seeds reports, per column, the mean over
  its seeds, each seed's value and a 95% Student t interval over the seeds (n - 1 degrees of freedom:
  :func:`bindscope.evaluation.stats.seed_interval`), which says how much the figure moves between seeds, not how
  precisely one run measures it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from bindscope.evaluation.stats import seed_interval

SWEEP_RECORD = "sweep.json"
RUNS = "runs"
RESULT = "result.json"
SEED_PREFIX = "seed-"


def is_sweep_folder(folder: Path) -> bool:
    """True when ``folder`` is a ``madman sweep`` output: it holds ``sweep.json`` or bindscope's marker of kind
    ``sweep``."""
    from bindscope.io.ownership import read_marker

    marker = read_marker(folder)
    return (folder / SWEEP_RECORD).is_file() or (marker is not None and marker.get("kind") == "sweep")


def sweep_results(folder: Path) -> list[tuple[Path, dict]]:
    """The finished points of the sweep folder ``folder``: ``(result.json, {"property", "value", "seed"})`` per
    ``runs/<property>=<value>/seed-<seed>/`` that holds a ``result.json``, sorted by property, value and seed.
    Folders of another name are left out."""
    found = []
    for point in sorted((folder / RUNS).iterdir()) if (folder / RUNS).is_dir() else []:
        key, sep, text = point.name.partition("=")
        try:
            value = float(text)
        except ValueError:
            continue
        if not sep or not math.isfinite(value) or not point.is_dir():
            continue
        for run in sorted(point.iterdir()):
            seed = run.name[len(SEED_PREFIX):]
            if run.name.startswith(SEED_PREFIX) and seed.isdigit() and (run / RESULT).is_file():
                found.append((run / RESULT, {"property": key, "value": value, "seed": int(seed)}))
    return sorted(found, key=lambda item: (item[1]["property"], item[1]["value"], item[1]["seed"]))


def row_seeds(result: dict, sweep: dict | None) -> tuple[tuple, int | None]:
    """``(group key part, seed)`` of a row: a trained model's run identity without its seed and its training
    seed (from ``model.run``, else from the sweep folder), or the model's name and tag with the evaluation seed
    (``settings.seed``); ``seed`` None where neither is recorded."""
    model = result.get("model") or {}
    run = model.get("run")
    settings = {k: v for k, v in (result.get("settings") or {}).items() if k != "seed"}
    evaluation = json.dumps(settings, sort_keys=True)
    if run:
        return ("run", run["identity_except_seed_sha256"], evaluation, (result.get("settings") or {}).get("seed")), \
            run["seed"]
    if sweep is not None:
        return ("sweep", sweep["property"], evaluation, (result.get("settings") or {}).get("seed")), sweep["seed"]
    seed = (result.get("settings") or {}).get("seed")
    name = model.get("resolved_name", model.get("name"))
    return ("model", name, model.get("pretrained"), evaluation), seed if isinstance(seed, int) else None


def seed_groups(rows: list[dict], columns: list[str]) -> list[dict]:
    """Groups of two or more rows that differ only in seed (``row["group"]``: the key :func:`row_seeds` made with
    the kind, dataset, step and swept value), in row order: ``{"kind", "model", "pretrained", "step",
    "property", "value", "seeds", "files", "figures": {column: {"value": mean, "low", "high", "interval":
    "seeds", "unit", "values": [per seed, in seed order], "n"}}}`` (percent or the column's unit)."""
    members: dict = {}
    for row in rows:
        if row.get("seed") is not None:
            members.setdefault(row["group"], []).append(row)
    groups = []
    for group in members.values():
        group = sorted(group, key=lambda r: r["seed"])
        if len(group) < 2 or len({r["seed"] for r in group}) < len(group):  # one seed twice: not a seed group
            continue
        figures = {}
        for column in columns:
            values = [(r["figures"].get(column) or {}).get("value") for r in group]
            if all(v is None for v in values):
                continue
            unit = next(r["figures"][column].get("unit", "%") for r in group if r["figures"].get(column))
            interval = seed_interval(values)
            figures[column] = {"value": interval["mean"], "low": interval["low"], "high": interval["high"],
                               "interval": "seeds" if interval["low"] is not None else "", "unit": unit,
                               "values": values, "n": interval["n"]}
        first = group[0]
        groups.append({**{k: first.get(k) for k in ("kind", "model", "pretrained", "step", "property", "value")},
                       "seeds": [r["seed"] for r in group], "files": [r["file"] for r in group], "figures": figures})
    return groups


def group_lines(table: dict, cell) -> list[str]:
    """The Markdown lines of the seed groups of ``table`` (none when it has none): a row per group with the mean
    over seeds, its 95% t interval over seeds and each seed's value per column (``cell`` formats a figure)."""
    groups = table.get("groups") or []
    if not groups:
        return []
    swept = any(g.get("property") for g in groups)
    header = ["kind", "model", "pretrained", "step"] + (["property", "value"] if swept else []) + ["seeds"]
    header += [f"{c} [seeds]" for c in table["columns"]]
    lines = ["", "Over seeds: mean [95% Student t interval over the seeds, n - 1 degrees of freedom] (each seed's "
             "value, in seed order); the interval is the spread between seeds, not the precision of one run.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for g in groups:
        cells = [g["kind"], g["model"], g["pretrained"], "" if g["step"] is None else str(g["step"])]
        cells += [g.get("property") or "", "" if g.get("value") is None else f"{g['value']:g}"] if swept else []
        cells.append(", ".join(map(str, g["seeds"])))
        for c in table["columns"]:
            f = g["figures"].get(c)
            if f is None:
                cells.append("")
                continue
            digits = 1 if f["unit"] == "%" else 3
            each = "; ".join("" if v is None else f"{v:.{digits}f}" for v in f["values"])
            cells.append(f"{cell(f)} ({each})")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def curve(rows: list[dict], x_key: str, column: str) -> tuple[list, list, list, list]:
    """``(x, mean, low, high)`` of ``column`` over the rows' ``x_key`` (``step`` or the swept ``value``), sorted
    by x: one row at an x gives its value and its own interval; several (seeds) their mean and the t interval
    over them. NaN where nothing was measured."""
    by_x: dict = {}
    for row in rows:
        by_x.setdefault(row[x_key], []).append(row["figures"].get(column) or {})
    xs, mean, low, high = [], [], [], []
    nan = float("nan")
    for x in sorted(by_x):
        figures = by_x[x]
        if len(figures) == 1:
            f = figures[0]
            values = (f.get("value"), f.get("low"), f.get("high"))
        else:
            s = seed_interval([f.get("value") for f in figures])
            values = (s["mean"], s["low"], s["high"])
        xs.append(x)
        for out, v in zip((mean, low, high), values):
            out.append(nan if v is None else v)
    return xs, mean, low, high
