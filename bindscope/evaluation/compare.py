"""``bindscope compare``: paired tests between evaluation results of one task on the same samples.

Every claim of the papers bindscope reproduces is a difference between two measurements on the same samples:
ideal against realistic training data, first against last mention, before against after a LABCLIP map, two
checkpoints of one run. :func:`compare` reads two or more result files of ``madman eval`` / ``comco eval`` (or a
training run's ``result.json``) with the per-sample rows written beside each (``<stem>.samples.jsonl``,
:func:`bindscope.evaluation.results.samples_path`), checks that they score the same samples, and for every figure
they share reports, for each result after the first against the first:

- the difference (second minus first, percentage points);
- its 95% interval: the percentile interval of a paired bootstrap over the sampling unit (the image, or the
  caption for captions sampled without a dataset; :func:`bindscope.evaluation.paired.paired_bootstrap`, all
  outcomes of one unit resampled together, the two results on the same draw);
- a p-value: the exact McNemar test (:func:`~bindscope.evaluation.paired.mcnemar_exact`) where every unit gives one
  binary outcome scored over the same items in both results (a TOR or IOR query of a scene, a first-mention
  caption, a large-object image), else the paired bootstrap's (several comparisons of one image, conditional
  shares whose denominators differ between the results, macro averages);
- the p-value after Holm's correction over all the tests of the call (:func:`~bindscope.evaluation.paired.holm`).

The figures are the :mod:`bindscope.evaluation.collect` columns the rows determine (names as there):
recognition, binding (conditional on recognition) and binding (all) per attribute with their micro and macro
averages (per split for MADMAN); TOR / IOR / I2TOR / Claim 1 conditional and unconditional position shares;
matching per scenario; retrieval R@k; first-mention and large-object shares. The ComCO authors' statistics
(``--protocol clip-oscope``), the TOC / IOC heads and the benchmarks are not compared (their results keep no
paired per-item outcome of this kind).

Same samples means: the same result kind; the same dataset (the sha256 of its ``manifest.json``) and splits, or
the same sampled or given captions; the same evaluation seed (it draws matching negatives and sampled captions);
and, per task, the same per-sample items (sample ids and what each item is: its objects, negative caption,
scenario). Anything else is refused with one :class:`~bindscope.errors.BadInput` naming what differs.
"""

from __future__ import annotations

import csv
import io
import os
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from bindscope.errors import BadInput
from bindscope.evaluation.stats import BOOTSTRAP_RESAMPLES

FORMATS = ("md", "csv", "json")
COMPARED_KINDS = ("madman-eval", "comco-eval")
CONTENT = ("attribute", "objects", "negative", "scenario", "correct", "wrong_caption", "caption", "relation", "pair",
           "larger_object")
"""The row fields that say what an item is (equal in both results for the same samples)."""
SAMPLE_SETTINGS = ("seed", "vocabulary", "objects", "n", "captions", "scenes", "matching_negatives",
                   "matching_bias_position", "object_order", "references")
"""The settings that decide which items an evaluation scores (the rest describe the model or the report)."""
POSITION_TASKS = ("tor", "ior", "i2tor")


@dataclass(frozen=True)
class MetricComparison:
    """One figure of one result against the baseline (the first result).

    Attributes:
        metric: the :mod:`bindscope.evaluation.collect` column name (e.g. ``test/binding/colour``,
            ``tor/3obj/pos1/uncond``).
        result: the compared result's file (the baseline is :attr:`Comparison.baseline`).
        baseline_value / value: the figure of the baseline and of the result, in percent (None where nothing
            was scored).
        difference: ``value - baseline_value``, percentage points.
        low / high: its 95% interval (paired bootstrap over :attr:`Comparison.unit`), percentage points.
        p_value: two-sided p of the test named in ``test``; p_holm: after Holm's correction over every test of
            the call (in 0..1).
        test: ``"McNemar exact"`` or ``"paired bootstrap"``.
        items: paired items (comparisons, queries, pairs); units: sampling units resampled.
        discordant: for McNemar, ``[b, c]``: items right only in the baseline, right only in the result.
    """

    metric: str
    result: str
    baseline_value: float | None
    value: float | None
    difference: float | None
    low: float | None
    high: float | None
    p_value: float
    p_holm: float
    test: str
    items: int
    units: int
    discordant: list[int] | None = None


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare` returns.

    Attributes:
        kind: the result kind (``madman-eval`` or ``comco-eval``).
        baseline: the first result file; results: the others, each compared with it.
        labels: file -> a short label (model name or file name, training step) for tables.
        dataset: the dataset path of the baseline ("" for sampled captions).
        unit: the sampling unit resampled (``image`` or ``caption``).
        resamples / seed: the bootstrap's replicates and seed.
        metrics: one :class:`MetricComparison` per (result, figure), figures in ``bindscope collect``'s column
            order.
        not_compared: the tasks of the rows that have no paired figure (e.g. ``clip-oscope-tor``), sorted.
    """

    kind: str
    baseline: str
    results: list[str]
    labels: dict[str, str]
    dataset: str
    unit: str
    resamples: int
    seed: int
    metrics: list[MetricComparison] = field(default_factory=list)
    not_compared: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict) -> "Comparison":
        """A comparison from its dict (``dataclasses.asdict`` of one, as ``bindscope collect --compare`` stores
        it in its table)."""
        return cls(**{**data, "metrics": [MetricComparison(**m) for m in data["metrics"]]})

    def format(self, fmt: str = "md") -> str:
        """The comparison as ``md`` (a Markdown table and what each column means), ``csv`` (one row per metric
        and result; percent and percentage points) or ``json`` (canonical JSON of this dataclass)."""
        return format_comparison(self, fmt)


# ------------------------------------------------------------------------------------------------ reading
def _load(path: Path) -> tuple[dict, list[dict]]:
    """A result of a compared kind and its per-sample rows. Raises BadInput naming the file."""
    from bindscope.evaluation.collect_kinds import load_result
    from bindscope.evaluation.results import read_rows, samples_path

    result = load_result(path)
    if result["kind"] not in COMPARED_KINDS:
        raise BadInput(f"result {str(path)!r} is of kind {result['kind']!r}; bindscope compare reads results of "
                       f"kind {' or '.join(COMPARED_KINDS)} (with their per-sample rows)")
    if not samples_path(path).is_file():
        raise BadInput(f"result {str(path)!r} has no per-sample rows {str(samples_path(path))!r}; evaluate again "
                       "with a bindscope that writes them (madman eval / comco eval / bindscope train)")
    return result, read_rows(path)


def _label(result: dict, path: Path) -> str:
    model = result["model"]
    name = model.get("resolved_name", model["name"])
    name = Path(name).name if os.sep in name else f"{name} ({model['pretrained']})"
    step = model.get("step")
    return f"{path.name}: {name}" + (f", step {step}" if step is not None else "")


def _sample_settings(result: dict) -> dict:
    settings = result["settings"]
    return {key: settings[key] for key in SAMPLE_SETTINGS if key in settings}


def _check_same(paths: list[Path], results: list[dict]) -> None:
    """BadInput naming the first file that differs from the first in kind, dataset, splits or sample settings."""
    first, where = results[0], str(paths[0])
    for path, result in zip(paths[1:], results[1:]):
        here = f"results {where!r} and {str(path)!r}"
        if result["kind"] != first["kind"]:
            raise BadInput(f"{here} are of different kinds ({first['kind']} and {result['kind']}); compare results "
                           "of one task on the same samples")
        data_a, data_b = first["dataset"] or {}, result["dataset"] or {}
        if data_a.get("manifest_sha256") != data_b.get("manifest_sha256"):
            raise BadInput(f"{here} are not on the same dataset: manifest sha256 "
                           f"{data_a.get('manifest_sha256') or '(none: sampled captions)'} ({data_a.get('path', '')}) "
                           f"and {data_b.get('manifest_sha256') or '(none: sampled captions)'} "
                           f"({data_b.get('path', '')}); compare results on the same samples")
        if data_a.get("splits") != data_b.get("splits"):
            raise BadInput(f"{here} score different splits ({', '.join(data_a.get('splits', []))} and "
                           f"{', '.join(data_b.get('splits', []))}); compare results on the same samples")
        sa, sb = _sample_settings(first), _sample_settings(result)
        for key in SAMPLE_SETTINGS:
            if sa.get(key) != sb.get(key):
                raise BadInput(f"{here} differ in settings.{key} ({sa.get(key)!r} and {sb.get(key)!r}), which "
                               "decides the samples scored; compare results on the same samples")


def _items(rows: list[dict]) -> dict[str, dict[tuple, tuple]]:
    """Per row task: item key ``(split, scenario, sample, occurrence)`` -> (what the item is, the row)."""
    from bindscope.io.canonical import canonical_json

    out: dict[str, dict[tuple, tuple]] = defaultdict(dict)
    seen: dict[tuple, int] = defaultdict(int)
    for row in rows:
        task = str(row.get("task"))
        base = (task, row.get("split"), row.get("scenario"), row.get("sample"))
        key = base[1:] + (seen[base],)
        seen[base] += 1
        out[task][key] = (canonical_json({k: row.get(k) for k in CONTENT}), row)
    return out


def _check_items(paths: list[Path], items: list[dict]) -> list[str]:
    """The row tasks of every result, after BadInput naming the first item that differs from the first result's."""
    common = sorted(set.intersection(*(set(i) for i in items)))
    for path, other in zip(paths[1:], items[1:]):
        for task in common:
            a, b = items[0][task], other[task]
            if a.keys() != b.keys():
                missing = min(set(a) ^ set(b), key=repr)
                raise BadInput(f"results {str(paths[0])!r} and {str(path)!r} score different samples in task "
                               f"{task} ({len(a)} and {len(b)} items; e.g. item (split, scenario, sample, "
                               f"occurrence) {missing} is in one only); compare results on the same samples")
            for key, (content, _) in a.items():
                if b[key][0] != content:
                    raise BadInput(f"results {str(paths[0])!r} and {str(path)!r} differ in task {task}, item "
                                   f"(split, scenario, sample, occurrence) {key}: {content} against {b[key][0]}; "
                                   "compare results on the same samples")
    return common


# ------------------------------------------------------------------------------------------------ figures
def _observations(task: str, row: dict, recall_ks: dict) -> list[tuple[str, str, float, float]]:
    """The ``(metric, part, numerator, denominator)`` contributions of one row (part: the attribute of a macro
    average, else "")."""
    split = f"{row['split']}/" if row.get("split") is not None else ""
    if task in ("recognition", "binding"):
        a, ok = row["attribute"], float(bool(row["passed"]))
        keys = ((a, ""), ("micro", ""), ("macro", a))  # (column, part of the macro average)
        name = "recognition" if task == "recognition" else "binding_all"
        out = [(f"{split}{name}/{key}", part, ok, 1.0) for key, part in keys]
        if task == "binding":  # conditional: counted where both objects passed recognition
            counted = float(bool(row["counted_in_binding"]))
            out += [(f"{split}binding/{key}", part, ok * counted, counted) for key, part in keys]
        return out
    if task in POSITION_TASKS or task.startswith("claim1_"):
        prefix = task if task in POSITION_TASKS else f"claim1/{task[len('claim1_'):]}"
        n, position = len(row["objects"]), row["top1_position"]
        inside = float(position is not None and position > 0)
        out = []
        for k in range(1, n + 1):
            hit = float(position == k)
            out += [(f"{prefix}/{n}obj/pos{k}", "", hit, inside), (f"{prefix}/{n}obj/pos{k}/uncond", "", hit, 1.0)]
        return out
    if task == "matching":
        return [(f"matching/{row['scenario']}", "", float(bool(row["passed"])), 1.0)]
    if task.startswith("retrieval-"):
        direction = task[len("retrieval-"):]
        return [(f"retrieval/{direction}/R@{k}", "", float(row["rank"] <= int(k)), 1.0)
                for k in recall_ks.get(direction, [])]
    if task == "first-mention":
        ok = float(bool(row["first_wins"]))
        return [(f"{split}first_mention", "", ok, 1.0), (f"{split}first_mention/{row['relation']}", "", ok, 1.0)]
    if task == "large-object":
        ok = float(bool(row["larger_wins"]))
        return [(f"{split}large_object", "", ok, 1.0), (f"{split}large_object/{row['pair']}", "", ok, 1.0)]
    return []


def _recall_ks(result: dict) -> dict:
    block = result["metrics"].get("retrieval") or {}
    return {name: list(block.get(key, {}).get("recall", {}))
            for key, name in (("text_to_image", "text-to-image"), ("image_to_text", "image-to-text"))}


def _figures(items: dict, tasks: list[str], recall_ks: dict) -> dict[str, dict[tuple, tuple]]:
    """metric -> item key -> (sampling unit, part, numerator, denominator), in row order."""
    out: dict[str, dict[tuple, tuple]] = {}
    for task in tasks:
        for key, (_, row) in items[task].items():
            for metric, part, num, den in _observations(task, row, recall_ks):
                out.setdefault(metric, {})[(task, key)] = (row["sample"], part, num, den)
    return out


def _test(metric: str, first: dict, second: dict, seed: int, resamples: int) -> dict:
    """The fields of a :class:`MetricComparison` (but ``result`` and ``p_holm``) from the two results' items of one
    figure (:func:`_figures`; the same keys in both)."""
    from bindscope.evaluation.paired import mcnemar_exact, paired_bootstrap

    keys = list(first)
    a = np.array([first[k][2:] for k in keys], dtype=np.float64).reshape(-1, 2)
    b = np.array([second[k][2:] for k in keys], dtype=np.float64).reshape(-1, 2)
    units = [first[k][0] for k in keys]
    parts = [first[k][1] for k in keys]
    macro = any(parts)
    shares = paired_bootstrap((a[:, 0], a[:, 1]), (b[:, 0], b[:, 1]), units, parts if macro else None,
                              resamples=resamples, seed=seed)
    binary = not macro and len(set(units)) == len(units) and bool(np.all(a[:, 1] == 1) and np.all(b[:, 1] == 1))
    discordant = None
    p = shares.p_value
    if binary:
        discordant = [int(np.sum((a[:, 0] == 1) & (b[:, 0] == 0))), int(np.sum((a[:, 0] == 0) & (b[:, 0] == 1)))]
        p = mcnemar_exact(*discordant)

    def pct(v):
        return None if v is None else 100.0 * v
    return {"metric": metric, "baseline_value": pct(shares.first), "value": pct(shares.second),
            "difference": pct(shares.difference), "low": pct(shares.low), "high": pct(shares.high), "p_value": p,
            "test": "McNemar exact" if binary else "paired bootstrap", "items": len(keys), "units": shares.units,
            "discordant": discordant}


def compare_results(paths: list[str | os.PathLike], seed: int = 0,
                    resamples: int = BOOTSTRAP_RESAMPLES) -> Comparison:
    """Compare result files (see the module docstring): every result after the first against the first.

    Args:
        paths: two or more result JSON files of ``madman eval`` / ``comco eval`` / a training run, each with its
            ``<stem>.samples.jsonl`` beside it.
        seed: the bootstrap's numpy seed (>= 0). resamples: bootstrap replicates (1..100,000).

    Returns:
        :class:`Comparison`.

    Raises:
        BadInput: fewer than two files, a missing or invalid file, a result of another kind or without per-sample
            rows, results not on the same samples (what differs is named), or no figure they share.
    """
    from bindscope.errors import check_int
    from bindscope.evaluation.paired import holm
    from bindscope.limits import MAX_SEED

    check_int("seed", seed, 0, MAX_SEED)
    check_int("resamples", resamples, 1, 100_000)
    files = list(dict.fromkeys(Path(p) for p in paths))
    if len(files) < 2:
        raise BadInput(f"name at least two different result files to compare; got {len(files)}", param="results")
    for path in files:
        if not path.is_file():
            raise BadInput(f"result {str(path)!r} does not exist or is not a file", param="results")
    loaded = [_load(path) for path in files]
    results = [r for r, _ in loaded]
    _check_same(files, results)
    items = [_items(rows) for _, rows in loaded]
    tasks = _check_items(files, items)
    ks = _recall_ks(results[0])
    figures = [_figures(i, tasks, ks) for i in items]
    from bindscope.evaluation.collect_kinds import result_columns

    order = {name: i for i, name in enumerate(result_columns(results[0]).figures)}
    metrics = sorted(figures[0], key=lambda m: order.get(m, len(order)))  # stable: the rest in row order
    tests = []
    for path, theirs in zip(files[1:], figures[1:]):
        for metric in metrics:
            ours = figures[0][metric]
            tests.append({"result": str(path), **_test(metric, ours, theirs[metric], seed, resamples)})
    if not tests:
        raise BadInput(f"results {', '.join(map(str, files))} share no figure bindscope compare can pair (their "
                       f"rows' tasks: {', '.join(tasks) or 'none in common'})", param="results")
    adjusted = holm([t["p_value"] for t in tests])
    compared = {t for t in tasks if any(_observations(t, row, ks) for _, row in items[0][t].values())}
    return Comparison(kind=results[0]["kind"], baseline=str(files[0]), results=[str(f) for f in files[1:]],
                      labels={str(f): _label(r, f) for f, r in zip(files, results)},
                      dataset=(results[0]["dataset"] or {}).get("path", ""),
                      unit="image" if results[0]["dataset"] else "caption", resamples=resamples, seed=seed,
                      metrics=[MetricComparison(p_holm=p, **t) for t, p in zip(tests, adjusted)],
                      not_compared=sorted(set(tasks) - compared))


# ------------------------------------------------------------------------------------------------ output
def _num(value, digits: int = 1, signed: bool = False) -> str:
    if value is None:
        return ""
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _p(value: float) -> str:
    return f"{value:.2g}" if value < 0.001 else f"{value:.3f}"


def format_comparison(comparison: Comparison, fmt: str = "md") -> str:
    """See :meth:`Comparison.format`. Raises BadInput for another ``fmt``."""
    if fmt not in FORMATS:
        raise BadInput(f"format {fmt!r} is not allowed; use one of {', '.join(FORMATS)}", param="format")
    if fmt == "json":
        from bindscope.io.canonical import canonical_json

        return canonical_json(asdict(comparison))
    fields = ["metric", "result", "baseline_value", "value", "difference", "low", "high", "p_value", "p_holm",
              "test", "items", "units", "discordant"]
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["baseline"] + fields)
        for m in comparison.metrics:
            row = asdict(m)
            row["discordant"] = "" if m.discordant is None else " ".join(map(str, m.discordant))
            writer.writerow([comparison.baseline] + ["" if row[k] is None else
                                                     f"{row[k]:.6g}" if isinstance(row[k], float) else row[k]
                                                     for k in fields])
        return buffer.getvalue()
    several = len(comparison.results) > 1
    lines = [f"Paired comparison ({comparison.kind}, {comparison.dataset or 'sampled captions'}):",
             f"A = {comparison.labels[comparison.baseline]}"]
    names = {}
    for number, path in enumerate(comparison.results):
        names[path] = "B" if not several else f"B{number + 1}"
        lines.append(f"{names[path]} = {comparison.labels[path]}")
    header = ["metric"] + (["result"] if several else []) + ["A %", "B %", "B - A (pp)", "95% CI (pp)", "p",
                                                               "p (Holm)", "test", f"items / {comparison.unit}s"]
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for m in comparison.metrics:
        interval = "" if m.low is None else f"[{m.low:+.1f}, {m.high:+.1f}]"
        test = m.test + (f" (b={m.discordant[0]}, c={m.discordant[1]})" if m.discordant else "")
        cells = [m.metric] + ([names[m.result]] if several else []) + [
            _num(m.baseline_value), _num(m.value), _num(m.difference, signed=True), interval, _p(m.p_value),
            _p(m.p_holm), test, f"{m.items} / {m.units}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"Differences in percentage points (B - A). 95% CI: percentile interval of a paired bootstrap over "
              f"{comparison.unit}s ({comparison.resamples:,} resamples, seed {comparison.seed}; all items of one "
              f"{comparison.unit} resampled together, both results on the same draw). p: exact McNemar test where "
              f"each {comparison.unit} gives one binary outcome in both results (b: items right only in A, c: right "
              "only in B), else the paired bootstrap's two-sided p. p (Holm): Holm's correction over the "
              f"{len(comparison.metrics)} tests of this comparison."]
    if comparison.not_compared:
        lines.append(f"Not compared (no paired figure): {', '.join(comparison.not_compared)}.")
    return "\n".join(lines) + "\n"


def compare(results: list[str | os.PathLike], *, out: str | os.PathLike | None = None, fmt: str | None = None,
            seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES, overwrite: bool = False) -> Comparison:
    """Paired tests between results of one task on the same samples (the library call behind ``bindscope
    compare``; see :mod:`bindscope.evaluation.compare`): per figure the difference, its 95% interval and a
    p-value (exact McNemar or paired bootstrap over images), Holm-corrected over the call.

    Args:
        results: two or more result files (the first is the baseline every other is compared with).
        out: also write the comparison to this file, atomically (``.md``, ``.csv`` or ``.json``; the format is
            ``fmt`` or the suffix). fmt: ``md``, ``csv`` or ``json`` (must agree with ``out``'s suffix).
        seed: bootstrap seed. resamples: bootstrap replicates. overwrite: replace an existing ``out``.

    Returns:
        The :class:`Comparison` (``.format(fmt)`` gives its text).

    Raises:
        BadInput: see :func:`compare_results`; a bad ``fmt`` or ``out`` suffix, the two disagreeing, an existing
            ``out`` without ``overwrite``; before anything is written.
    """
    from bindscope.io.atomic import write_text_atomic
    from bindscope.io.ownership import check_output_location

    out_path = None if out is None else Path(out)
    fmt = output_format(out_path, fmt)
    if out_path is not None:
        if out_path.exists() and not overwrite:
            raise BadInput(f"out {str(out_path)!r} already exists; pass overwrite=True to replace it", param="out")
        check_output_location("out", out_path)
    comparison = compare_results(results, seed=seed, resamples=resamples)
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out_path, comparison.format(fmt))
    return comparison


def output_format(out: Path | None, fmt: str | None) -> str:
    """The format of a comparison: ``fmt``, else ``out``'s suffix, else ``md``. Raises BadInput for an unknown
    format or suffix, or the two disagreeing."""
    if fmt is not None and fmt not in FORMATS:
        raise BadInput(f"format {fmt!r} is not allowed; use one of {', '.join(FORMATS)}", param="format")
    if out is None:
        return fmt or "md"
    suffix = out.suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise BadInput(f"out {str(out)!r}: the file name must end in one of .md, .csv, .json", param="out")
    if fmt is not None and fmt != suffix:
        raise BadInput(f"format {fmt} and out {str(out)!r} disagree; give one or make them agree", param="format")
    return suffix
