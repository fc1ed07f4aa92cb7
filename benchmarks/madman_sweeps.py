"""The MADMAN paper's four data-property curves with seeds and paired tests: binding against the share of
multi-object images, the share of multi-object captions, attribute density and saliency bias.

The MADMAN paper (Gurung, Hoffmann, Brox, GCPR 2025; docs/papers.md section 2) varies one data property at a time
from its "ideal" setting, trains a small CLIP from scratch per value and plots binding per attribute. This script
does the same with one fixed model per scale, keeps every finished point's result in the repository and draws the
curves from the points recorded so far:

- **Data.** Every point is what ``madman sweep --base-preset ideal --config SCALE.yaml --property P --values V``
  trains on: the ``ideal`` preset with the scale's config layer (:data:`SCALES`) and the property set to the value,
  ``train`` split only, data seed 0; the base point (every property at its ideal value) is shared by the four
  curves.
- **Evaluation.** Two evaluation sets, each shared by all points: the same config's ``test`` split (two digits,
  both described with the same attributes, mention order uniform, from the MNIST digits kept out of training), its
  captions naming ``full``: every caption attribute (``madman sweep``'s evaluation set of this config), or
  ``base``: as many as the base point's training captions on average (``eval_attribute_density``). Training
  captions name fewer attributes than ``full`` at every density below the largest and more than ``base`` at the
  larger densities, so along the density curve each set favours the densities whose captions it resembles; the
  other three curves are trained at the base density, where ``base`` matches the training captions.
- **cpu scale** (default): captions and evaluation restricted to colour, size and thickness (``caption_order``), the
  attributes the small ViT recognises (docs/results.md, "MADMAN reproduction"); rotation, swelling and fracture
  held at one value (upright, unswollen, intact), so the images vary only in what captions can name. Attribute
  density d of 3 stands for the paper's 2d of 6 (the same share of the attributes named): 0.5, 1, 1.75, 2.5, 3
  are the paper's 1, 2, 3.5, 5, 6, and the ideal 1.75 its optimum of 3.5. Model: ViT, embedding 64, both towers
  width 64 x 2 blocks, patch 12, word tokenizer, batch 128, lr 2e-3, 100 warm-up steps, 1,000 steps, 20,000
  training images per value, 2,000 evaluation images per set; about 2 CPU minutes per point with one torch
  thread.
- **gpu scale** (``--scale gpu``, run by ``bash benchmarks/gpu_check.sh --sweeps`` on a CUDA machine): all six
  attributes, the ideal preset as it is (density 1, 2, 3.5, 5, 6 of 6), the reproduction's "larger model and
  batch" (both towers width 256 x 6 blocks, patch 8, batch 512, bf16), 2,000 steps, 60,000 training images per
  value, 2,000 evaluation images per set.
- **cpu-half-captions** (``--scale cpu-half-captions``): the cpu scale with ``multi_object_captions`` 0.5, the
  saliency curve only: half the two-digit images get a caption of one digit, the one the saliency bias picks.
- **Values**: see :data:`SWEEPS`, seeds 0, 1, 2 (each seed trains one model per value; the data seed is fixed).

Each finished (point, seed) is one small JSON file in ``--results`` (default ``benchmarks/results/madman_sweeps``,
kept in the repository): the settings' identity, per evaluation set and attribute recognition and (conditional)
binding with its count, and the per-comparison binding outcomes (passed, and counted: recognition passed for
both digits) packed as bits. A rerun skips every recorded point, so the curves fill in across runs;
``--no-train`` only redraws.
Between neighbouring values and between the ends of each curve: the exact McNemar test on the binding comparisons
counted for both models, seed s against seed s, pooled over the seeds both values have (``paired_tests.py``), and
the per-seed differences, per evaluation set, pooled over the attributes and for colour alone. One plot per curve
(a panel per evaluation set; binding per attribute and pooled, mean over seeds, band = the seeds' range) into
``--plots``; ``--json`` writes everything printed.

Usage::

    nice -n 10 .venv/bin/python benchmarks/madman_sweeps.py --json sweeps.json      # the grid, resumable
    .venv/bin/python benchmarks/madman_sweeps.py --no-train                        # tables and plots only
    nice -n 10 .venv/bin/python benchmarks/madman_sweeps.py --scale cpu-half-captions   # the saliency variant
    .venv/bin/python benchmarks/madman_sweeps.py --quick --work /tmp/sweeps-quick   # about a minute: a smoke run
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import resource
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from arguments import bounded_int, seed_list  # noqa: E402
from bindscope.limits import MAX_JOBS  # noqa: E402
from paired_tests import mcnemar, pack, seed_interval, unpack  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ONE_VALUE = {"rotation": {"upright": 0}, "swelling": {"unswollen": 0.0}, "fracture": {"intact": 0}}
SWEEPS = {"multi-object-images": "multi_object_images", "multi-object-captions": "multi_object_captions",
          "attribute-density": "attribute_density", "saliency-bias": "saliency_bias"}
"""Curve name (the ``madman sweep --property`` spelling) -> MADMAN config key."""

CPU_TRAIN = {"embed_dim": 64, "vision": "vit", "vision_width": 64, "vision_layers": 2, "text_width": 64,
             "text_layers": 2, "patch_size": 12, "head_width": 32, "tokenizer": "word", "context_length": 12,
             "batch_size": 128, "steps": 1000, "lr": 2e-3, "warmup_steps": 100, "precision": "fp32"}
SCALES = {
    "cpu": {"attributes": ["colour", "size", "thickness"],
            "config": {"caption_order": ["size", "colour", "thickness"], "attributes": ONE_VALUE,
                       "attribute_density": 1.75, "eval_attribute_density": 3},
            "values": {"multi_object_images": [0.25, 0.5, 0.75, 1.0], "multi_object_captions": [0.25, 0.5, 0.75, 1.0],
                       "attribute_density": [0.5, 1.0, 1.75, 2.5, 3.0], "saliency_bias": [0.5, 0.75, 0.9, 1.0]},
            "evals": {"full": 3, "base": 1.75},
            "turning": {"attribute_density": 1.75, "saliency_bias": 0.75},
            "paper_scale": {"attribute_density": 2.0},
            "num_train": 20000, "num_test": 2000, "train": CPU_TRAIN, "device": "cpu",
            "results": "benchmarks/results/madman_sweeps", "plots": "docs/images", "suffix": ""},
    "gpu": {"attributes": ["colour", "size", "thickness", "rotation", "swelling", "fracture"],
            "config": {"eval_attribute_density": 6},
            "values": {"multi_object_images": [0.25, 0.5, 0.75, 1.0], "multi_object_captions": [0.25, 0.5, 0.75, 1.0],
                       "attribute_density": [1.0, 2.0, 3.5, 5.0, 6.0], "saliency_bias": [0.5, 0.75, 0.9, 1.0]},
            "evals": {"full": 6, "base": 3.5},
            "turning": {"attribute_density": 3.5, "saliency_bias": 0.75},
            "paper_scale": {"attribute_density": 1.0},
            "num_train": 60000, "num_test": 2000, "device": "cuda",
            "train": {**CPU_TRAIN, "vision_width": 256, "vision_layers": 6, "text_width": 256, "text_layers": 6,
                      "patch_size": 8, "context_length": 18, "batch_size": 512, "steps": 2000, "precision": "bf16"},
            "results": "benchmarks/results/madman_sweeps_gpu", "plots": "docs/images", "suffix": "_gpu"},
}
SCALES["cpu-half-captions"] = {
    **SCALES["cpu"], "config": {**SCALES["cpu"]["config"], "multi_object_captions": 0.5}, "sweeps": ["saliency-bias"],
    "results": "benchmarks/results/madman_sweeps_half_captions", "suffix": "_half_captions"}
"""Per scale: the evaluated attributes, the config layer over the ideal preset, the values of each curve, the
evaluation sets (name -> attributes named per digit, ``eval_attribute_density``), the paper's turning points
(marked in the plots), the factor to the paper's density scale, sizes, model, device, default results and plot
folders, and (``sweeps``) the curves run by default where not all four. ``cpu-half-captions`` is the cpu scale
with half the two-digit images' captions describing one digit (``multi_object_captions`` 0.5), for the saliency
curve: there the bias decides which digit a one-digit caption describes, not only which is named first."""

QUICK = {"num_train": 96, "num_test": 40, "seeds": [0, 1],
         "train": {"embed_dim": 16, "image_size": 32, "vision_width": 32, "vision_layers": 1, "text_width": 32,
                   "text_layers": 1, "patch_size": 8, "batch_size": 16, "steps": 4, "warmup_steps": 1}}
"""``--quick``: two values per curve (its first value and the ideal one, or the ideal and the last where the ideal
is first), two seeds, a toy model on the CPU (a smoke run of the whole pipeline)."""
RUNTIME = {"threads": 1, "checkpoint_every": 250, "log_every": 50}
DATA_SEED = 0
SHARE = (0.0, 1.0)
"""The limits of a share: its interval over seeds is clipped to them."""


# ---------------------------------------------------------------------------------------------------- the plan
def settings(scale: str, quick: bool) -> dict:
    """The resolved settings of a run: scale entries, with ``--quick``'s overrides."""
    s = json.loads(json.dumps(SCALES[scale]))
    s["seeds"] = [0, 1, 2]
    if quick:
        for key, values in s["values"].items():
            ideal = base_value(s, key)
            s["values"][key] = [ideal, values[-1]] if values[0] == ideal else [values[0], ideal]
        for key in ("num_train", "num_test", "seeds"):
            s[key] = QUICK[key]
        s["train"].update(QUICK["train"])
        s["device"] = "cpu"
        s["train"]["precision"] = "fp32"
    return s


def point_name(key: str, value: float) -> str:
    """The name of a point other than the base point, e.g. ``saliency_bias=0.75``."""
    return f"{key}={value:g}"


def base_value(s: dict, key: str) -> float:
    from bindscope.generators.madman import config as madman_config

    return float(madman_config.resolve("ideal", s["config"], None, DATA_SEED)[key])


def curve_points(s: dict, key: str) -> list[tuple[float, str]]:
    """(value, point name) of one curve, by value; the ideal value is the shared base point."""
    ideal = base_value(s, key)
    return [(v, "base" if v == ideal else point_name(key, v)) for v in s["values"][key]]


def data_flags(s: dict, point: str, num_train: int) -> dict:
    """The config flags of a point's training set over ``s["config"]`` (what ``madman sweep`` sets)."""
    flags = {"splits": {"train": num_train, "test": 0, "ood": 0}}
    if point != "base":
        key, value = point.split("=")
        flags[key] = float(value)
    return flags


def eval_flags(s: dict, name: str) -> dict:
    """The config flags of the evaluation set ``name`` (:data:`SCALES` ``evals``) over ``s["config"]``."""
    return {"splits": {"train": 0, "test": s["num_test"], "ood": 0}, "eval_attribute_density": s["evals"][name]}


def shown(resolved: dict) -> dict:
    """A resolved MADMAN config without the settings no image of it can show: the cut settings
    (``morpho.fracture_*``) when every fracture level is 0 (every digit intact), as at the cpu scale. Such a
    setting changes no array of the dataset, so a point recorded before it changed keeps its record."""
    if all(level == 0 for level in resolved["attributes"]["fracture"].values()):
        morpho = {k: v for k, v in resolved["morpho"].items() if not k.startswith("fracture_")}
        resolved = {**resolved, "morpho": morpho}
    return resolved


def identity(s: dict, point: str, seed: int) -> str:
    """sha256 of everything a point's result depends on: resolved training and evaluation configs (what their
    images can show, :func:`shown`), data seed, model and optimisation (not the device, threads or logging)."""
    from bindscope.generators.madman import config as madman_config
    from bindscope.io.canonical import canonical_json

    named = {"train_data": shown(madman_config.resolve("ideal", s["config"], data_flags(s, point, s["num_train"]),
                                                       DATA_SEED)),
             "eval_data": {name: shown(madman_config.resolve("ideal", s["config"], eval_flags(s, name), DATA_SEED))
                           for name in s["evals"]},
             "data_seed": DATA_SEED, "train": s["train"], "seed": seed}
    return hashlib.sha256(canonical_json(named).encode()).hexdigest()


def record_path(results: Path, point: str, seed: int) -> Path:
    return results / point / f"seed-{seed}.json"


def plan(s: dict, sweeps: list[str]) -> list[tuple[str, int]]:
    """Every (point, seed) of the chosen curves, seed by seed; within a seed the base point, then each curve's two
    ends, then its inner values, the curves taken in turn (so that a partial grid has whole curves of seed 0)."""
    order: list[str] = ["base"]
    columns = []
    for name in sweeps:
        points = [p for _, p in curve_points(s, SWEEPS[name])]
        columns.append([points[0], points[-1], *points[1:-1]])
    for rank in range(max(len(c) for c in columns)):
        order += [c[rank] for c in columns if rank < len(c) and c[rank] not in order]
    return [(point, seed) for seed in s["seeds"] for point in order]


# ---------------------------------------------------------------------------------------------- one point
def ensure_data(s: dict, work: Path, point: str | None, jobs: int, evaluation: str | None = None) -> Path:
    """Generate, resume or keep (the same config finished) a point's training set or (``point`` None) the
    evaluation set ``evaluation``; returns its folder. A folder holding another dataset is refused (BadInput)."""
    import bindscope
    from bindscope.generators.madman import config as madman_config

    folder = work / "data" / (f"eval-{evaluation}" if point is None else point)
    flags = eval_flags(s, evaluation) if point is None else data_flags(s, point, s["num_train"])
    manifest = folder / "manifest.json"
    wanted = madman_config.resolve("ideal", s["config"], flags, DATA_SEED)
    made = json.loads(manifest.read_text())["config"] if manifest.is_file() else None
    # a finished dataset records its digits too (their checksum, the ones left out): compare what was asked
    if made is None or any(made.get(k) != v for k, v in wanted.items() if k != "digits") or any(
            made["digits"].get(k) != v for k, v in wanted["digits"].items()):
        bindscope.madman.generate(folder, preset="ideal", seed=DATA_SEED, jobs=jobs, progress=False,
                                  **{**s["config"], **flags})
    return folder


def binding_rows(rows: list[dict], attributes: list[str]) -> dict:
    """Per attribute (in ``attributes`` order) the binding comparisons of :func:`evaluate_madman`'s rows:
    ``{"passed": (N,) bool, "counted": (N,) bool, "key": sha256 of their (sample, negative caption) list}``."""
    import numpy as np

    out = {}
    for attribute in attributes:
        mine = [r for r in rows if r["task"] == "binding" and r["attribute"] == attribute]
        key = hashlib.sha256("\n".join(f"{r['sample']}\t{r['negative']}" for r in mine).encode()).hexdigest()
        out[attribute] = {"passed": np.array([r["passed"] for r in mine], bool),
                          "counted": np.array([bool(r["counted_in_binding"]) for r in mine], bool), "key": key}
    return out


def recognition(rows: list[dict], attribute: str) -> float | None:
    mine = [r["passed"] for r in rows if r["task"] == "recognition" and r["attribute"] == attribute]
    return sum(mine) / len(mine) if mine else None


def training_cpu_s(run: Path) -> float:
    """CPU seconds of a run's training as its ``log.jsonl`` reports them (``cpu_s`` counts from each start of the
    process, so a resumed run's segments are added up)."""
    total = last = 0.0
    for line in (run / "log.jsonl").read_text().splitlines():
        value = json.loads(line).get("cpu_s")
        if value is not None:
            if value < last:
                total += last
            last = value
    return round(total + last, 1)


def run_point(task: dict) -> dict:
    """Train one (point, seed) model, score it on the evaluation set and write its record (atomically); runs in
    a worker process. Returns the record."""
    import bindscope
    from bindscope.evaluation.madman import evaluate_madman
    from bindscope.evaluation.results import read_rows
    from bindscope.format.manifest import load_manifest
    from bindscope.io.atomic import write_text_atomic
    from bindscope.training.checkpoint import load_trained_adapter

    start, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    s = task["settings"]
    summary = bindscope.train(task["data"], task["run"], eval_data=task["eval"]["full"], eval_splits="test",
                              seed=task["seed"], device=s["device"], progress=False, **s["train"], **RUNTIME)
    adapter = load_trained_adapter(task["run"], device=s["device"])
    evals = {}
    for name, folder in task["eval"].items():
        rows: list[dict] = []
        if name == "full":  # the run's final evaluation scored this set already: its per-sample rows
            rows = read_rows(Path(task["run"]) / "result.json")
        else:
            evaluate_madman(folder, adapter, splits=["test"], rows=rows, progress=False, check=False)
        evals[name] = {}
        for attribute, o in binding_rows(rows, s["attributes"]).items():
            counted = int(o["counted"].sum())
            evals[name][attribute] = {
                "recognition": recognition(rows, attribute), "comparisons": len(o["passed"]), "counted": counted,
                "binding": float((o["passed"] & o["counted"]).sum() / counted) if counted else None,
                "binding_unconditional": float(o["passed"].mean()) if len(o["passed"]) else None,
                "passed": pack(o["passed"]), "counted_bits": pack(o["counted"]), "key": o["key"]}
    used = resource.getrusage(resource.RUSAGE_SELF)
    record = {"point": task["point"], "seed": task["seed"], "identity": task["identity"],
              "realised": load_manifest(task["data"])["statistics"]["train"]["realised"],
              "settings": {"config": s["config"], "flags": data_flags(s, task["point"], s["num_train"]),
                           "num_test": s["num_test"], "data_seed": DATA_SEED, "train": s["train"]},
              "evals": evals, "steps_per_s": summary.get("steps_per_s"),
              "train_cpu_s": training_cpu_s(Path(task["run"])),
              "cpu_s": round(used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime, 1),
              "wall_s": round(time.perf_counter() - start, 1), "machine": platform.machine()}
    path = Path(task["record"])
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(record, indent=1) + "\n")
    return record


# ------------------------------------------------------------------------------------------- the records
def load_records(s: dict, results: Path, points: list[tuple[str, int]]) -> dict:
    """``{(point, seed): record}`` of the recorded points of this plan.

    Raises:
        SystemExit: a record of the plan's name recorded with other settings (its identity differs).
    """
    found = {}
    for point, seed in points:
        path = record_path(results, point, seed)
        if path.is_file():
            record = json.loads(path.read_text())
            if record.get("identity") != identity(s, point, seed):
                raise SystemExit(f"Error: {path} was recorded with other settings; move it away or give another "
                                 "--results folder")
            found[(point, seed)] = record
    return found


def outcomes(record: dict, evaluation: str, attributes: list[str]):
    """``(passed, counted, key)`` of a record on one evaluation set over the given attributes, comparisons in
    attribute order."""
    import numpy as np

    passed, counted, keys = [], [], []
    for a in attributes:
        block = record["evals"][evaluation][a]
        passed.append(unpack(block["passed"], block["comparisons"]))
        counted.append(unpack(block["counted_bits"], block["comparisons"]))
        keys.append(block["key"])
    return np.concatenate(passed), np.concatenate(counted), "/".join(keys)


def pooled_binding(record: dict, evaluation: str, attributes: list[str]) -> float | None:
    passed, counted, _ = outcomes(record, evaluation, attributes)
    return float((passed & counted).sum() / counted.sum()) if counted.sum() else None


def paired(records: dict, first: str, second: str, seeds: list[int], evaluation: str, attributes: list[str]) -> dict:
    """McNemar (binding comparisons counted for both models, seed s against seed s, pooled over the seeds both
    points have) and the per-seed differences of pooled binding (percentage points), for ``attributes`` on the
    evaluation set ``evaluation``."""
    strata, per_seed = [], []
    for seed in seeds:
        if (first, seed) not in records or (second, seed) not in records:
            continue
        pa, ca, ka = outcomes(records[(first, seed)], evaluation, attributes)
        pb, cb, kb = outcomes(records[(second, seed)], evaluation, attributes)
        if ka != kb:
            raise SystemExit(f"Error: points {first} and {second} (seed {seed}) were scored on different "
                             "evaluation comparisons")
        both = ca & cb
        strata.append((pa[both], pb[both]))
        per_seed.append(100 * (pooled_binding(records[(second, seed)], evaluation, attributes)
                               - pooled_binding(records[(first, seed)], evaluation, attributes)))
    test = mcnemar(strata)
    test["seeds"] = len(strata)
    test["per_seed_difference"] = [round(d, 2) for d in per_seed]
    return test


def verdict(test: dict) -> str:
    """``higher`` / ``lower`` (p < 0.05 and every seed's difference of that sign; ``..., one seed`` when only one
    seed is paired), else ``no difference shown``."""
    if not test["seeds"] or test["difference"] is None:
        return "not measured"
    signs = {d > 0 for d in test["per_seed_difference"]}
    if test["p"] < 0.05 and len(signs) == 1:
        return ("higher" if test["difference"] > 0 else "lower") + (", one seed" if test["seeds"] == 1 else "")
    return "no difference shown"


def curves(s: dict, records: dict, sweeps: list[str]) -> dict:
    """Per curve: the table (value, point, realised value, per evaluation set per attribute and pooled binding over
    seeds) and, per evaluation set, the paired tests between neighbouring values and between the two ends."""
    attributes = s["attributes"]
    out = {}
    for name in sweeps:
        key = SWEEPS[name]
        points = curve_points(s, key)
        rows = []
        for value, point in points:
            mine = [records[(point, seed)] for seed in s["seeds"] if (point, seed) in records]
            row = {"value": value, "point": point, "seeds": [r["seed"] for r in mine],
                   "paper_value": value * s["paper_scale"].get(key, 1.0),
                   "realised": seed_interval([r["realised"].get(key) for r in mine])["mean"],
                   "binding": {}, "recognition": {}}
            for ev in s["evals"]:
                row["binding"][ev] = {a: seed_interval([r["evals"][ev][a]["binding"] for r in mine], SHARE)
                                      for a in attributes}
                row["binding"][ev]["all"] = seed_interval([pooled_binding(r, ev, attributes) for r in mine], SHARE)
                row["recognition"][ev] = {a: seed_interval([r["evals"][ev][a]["recognition"] for r in mine])["mean"]
                                          for a in attributes}
            rows.append(row)
        pairs = [(points[i], points[i + 1], "neighbours") for i in range(len(points) - 1)]
        pairs.append((points[0], points[-1], "ends"))
        tests = []
        for ev in s["evals"]:
            for (va, pa), (vb, pb), kind in pairs:
                for group in ("all", "colour"):
                    test = paired(records, pa, pb, s["seeds"], ev, attributes if group == "all" else [group])
                    tests.append({"eval": ev, "from": va, "to": vb, "kind": kind, "attributes": group, **test,
                                  "verdict": verdict(test)})
        out[name] = {"key": key, "rows": rows, "tests": tests, "turning": s["turning"].get(key)}
    return out


# ------------------------------------------------------------------------------------------ printing, plots
def pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def interval_text(block: dict) -> str:
    if block["mean"] is None:
        return "-"
    if block["ci95"] is None:
        return f"{100 * block['mean']:.1f}"
    return f"{100 * block['mean']:.1f} [{100 * block['ci95'][0]:.1f}, {100 * block['ci95'][1]:.1f}]"


def tables(result: dict, attributes: list[str]) -> str:
    lines = []
    evals = result["settings"]["evals"]
    for name, curve in result["curves"].items():
        for ev, named in evals.items():
            lines.append(f"\n{name} ({curve['key']}), evaluation set {ev!r} ({named:g} attributes named per digit):"
                         " conditional binding %, mean over seeds [95% t interval over seeds]; chance 50")
            lines.append(f"{'value':>6} {'paper':>6} {'realised':>8} {'seeds':>5}  {'pooled':<20} "
                         + " ".join(f"{a:<20}" for a in attributes))
            for row in curve["rows"]:
                realised = "-" if row["realised"] is None else f"{row['realised']:.3f}"
                lines.append(f"{row['value']:>6g} {row['paper_value']:>6g} {realised:>8} {len(row['seeds']):>5}  "
                             f"{interval_text(row['binding'][ev]['all']):<20} "
                             + " ".join(f"{interval_text(row['binding'][ev][a]):<20}" for a in attributes))
        lines.append("paired: exact McNemar on comparisons counted for both, seed against seed, pooled; "
                     "per-seed differences in points")
        for t in curve["tests"]:
            if not t["seeds"]:
                lines.append(f"  {t['eval']}: {t['from']:g} -> {t['to']:g} ({t['kind']}, {t['attributes']}): "
                             "not measured")
                continue
            lines.append(f"  {t['eval']}: {t['from']:g} -> {t['to']:g} ({t['kind']}, {t['attributes']}): "
                         f"{pct(t['first'])} -> {pct(t['second'])} on n={t['n']}, discordant {t['first_only']}/"
                         f"{t['second_only']}, p={t['p']:.2g}, seeds {t['per_seed_difference']} -> {t['verdict']}")
    return "\n".join(lines)


def plot(name: str, curve: dict, s: dict, path: Path, scale: str) -> None:
    """Binding (%) against the value, one panel per evaluation set: per attribute and pooled, mean over seeds,
    band = the seeds' range; chance dashed, the paper's turning point dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bindscope.io.atomic import save_figure

    attributes = s["attributes"]
    fig, axes = plt.subplots(1, len(s["evals"]), figsize=(5.6 * len(s["evals"]), 4.4), sharey=True, squeeze=False)
    seeds = "-".join(map(str, sorted({len(r["seeds"]) for r in curve["rows"]})))
    for ax, (ev, named) in zip(axes[0], s["evals"].items()):
        for index, attribute in enumerate(["all", *attributes]):
            rows = [r for r in curve["rows"] if r["binding"][ev][attribute]["mean"] is not None]
            if not rows:
                continue
            xs = [r["value"] for r in rows]
            style = {"color": "black", "linewidth": 2.2} if attribute == "all" else {"color": f"C{index - 1}"}
            ax.plot(xs, [100 * r["binding"][ev][attribute]["mean"] for r in rows], marker="o",
                    label="pooled" if attribute == "all" else attribute, **style)
            ax.fill_between(xs, [100 * r["binding"][ev][attribute]["min"] for r in rows],
                            [100 * r["binding"][ev][attribute]["max"] for r in rows], alpha=0.15,
                            color=style["color"])
        ax.axhline(50, color="grey", linestyle="--", linewidth=1)
        if curve["turning"] is not None:
            ax.axvline(curve["turning"], color="grey", linestyle=":", linewidth=1)
        ax.set(xlabel=curve["key"].replace("_", " ") + (f" (of {len(attributes)} attributes)"
                                                        if curve["key"] == "attribute_density" else ""),
               ylabel="binding accuracy (%)", ylim=(40, 101),
               title=f"evaluation {ev!r}: {named:g} of {len(attributes)} attributes named")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{name}, {scale} scale ({seeds} seeds per value)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=110)


# ------------------------------------------------------------------------------------------------ training
def train(s: dict, work: Path, results: Path, todo: list[tuple[str, int]], records: dict, jobs: int,
          budget: float, start: float) -> list[dict]:
    """Train and record the ``todo`` points, ``jobs`` at a time (worker processes), adding each record to
    ``records``; with ``budget`` (seconds since ``start``; 0: none) no point starts once the time left is under 1.1
    times the slowest point so far. Returns what each trained point cost."""
    if not todo:
        return []
    ran, slowest = [], 0.0
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    eval_dirs = {ev: str(ensure_data(s, work, None, jobs, ev)) for ev in s["evals"]}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        running = {}
        queue = list(todo)
        while queue or running:
            while queue and len(running) < jobs:
                left = budget - (time.perf_counter() - start) if budget else math.inf
                if slowest and left < 1.1 * slowest:
                    print(f"stopping: {left:.0f} s left, the slowest point took {slowest:.0f} s", flush=True)
                    queue = []
                    break
                point, seed = queue.pop(0)
                data = ensure_data(s, work, point, 1 if running else jobs)  # at most `jobs` processes
                task = {"settings": s, "point": point, "seed": seed, "data": str(data), "eval": eval_dirs,
                        "run": str(work / "runs" / point / f"seed-{seed}"), "identity": identity(s, point, seed),
                        "record": str(record_path(results, point, seed))}
                running[pool.submit(run_point, task)] = (point, seed, time.perf_counter())
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                point, seed, began = running.pop(future)
                record = future.result()
                records[(point, seed)] = record
                slowest = max(slowest, time.perf_counter() - began)
                ran.append({"point": point, "seed": seed, "cpu_s": record["cpu_s"], "wall_s": record["wall_s"],
                            "train_cpu_s": record["train_cpu_s"]})
                binding = "; ".join(f"{ev}: " + ", ".join(f"{a} {pct(v['binding'])}" for a, v in blocks.items())
                                    for ev, blocks in record["evals"].items())
                print(f"recorded {point} seed {seed}: binding {binding} ({record['cpu_s']:.0f} CPU s, "
                      f"{record['wall_s']:.0f} s wall now; training {record['train_cpu_s']:.0f} CPU s)", flush=True)
    return ran


# ---------------------------------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--scale", default="cpu", choices=sorted(SCALES), help="model, data and attributes")
    parser.add_argument("--sweeps", default=None, help="comma-separated curves [the scale's: all four, or "
                        "saliency-bias at cpu-half-captions]")
    parser.add_argument("--seeds", type=seed_list, default=None,
                        help="comma-separated training seeds [0,1,2; --quick 0,1]")
    parser.add_argument("--work", default=None, help="datasets and runs [runs/madman-sweeps-SCALE]")
    parser.add_argument("--results", default=None, help="point records [the scale's folder under "
                        "benchmarks/results; --quick: WORK/results]")
    parser.add_argument("--plots", default=None, help="plot folder [docs/images; --quick: WORK/plots]")
    parser.add_argument("--json", default=None, help="write the tables, tests and settings here")
    parser.add_argument("--jobs", type=bounded_int(1, MAX_JOBS), default=2,
                        help="points trained at a time, one torch thread each (also the generation processes)")
    parser.add_argument("--budget", type=float, default=0, help="seconds: start no point that the slowest point "
                        "so far would carry past them (0: no limit)")
    parser.add_argument("--max-points", type=bounded_int(0, 10_000), default=0,
                        help="train at most this many points (0: all)")
    parser.add_argument("--no-train", action="store_true", help="only read the records: tables and plots")
    parser.add_argument("--quick", action="store_true", help="two values per curve, two seeds, a toy model")
    args = parser.parse_args()

    start = time.perf_counter()
    s = settings(args.scale, args.quick)
    sweeps = [name.strip() for name in (args.sweeps or ",".join(s.get("sweeps", SWEEPS))).split(",") if name.strip()]
    unknown = [name for name in sweeps if name not in SWEEPS]
    if unknown or not sweeps:
        raise SystemExit(f"Error: --sweeps {args.sweeps!r}: allowed {', '.join(SWEEPS)}")
    if args.seeds:
        s["seeds"] = args.seeds
    work = Path(args.work or ROOT / "runs" / f"madman-sweeps-{args.scale}")
    results = Path(args.results or (work / "results" if args.quick else ROOT / s["results"]))
    plots = Path(args.plots or (work / "plots" if args.quick else ROOT / s["plots"]))
    points = plan(s, sweeps)
    records = load_records(s, results, points)
    todo = [p for p in points if p not in records]
    if args.max_points:
        todo = todo[:args.max_points]
    print(f"{len(points)} points ({len(records)} recorded, {len(todo)} to train); load average "
          f"{[round(x, 2) for x in os.getloadavg()]}", flush=True)
    ran = [] if args.no_train else train(s, work, results, todo, records, args.jobs, args.budget, start)
    result = {"scale": args.scale, "quick": args.quick, "settings": s, "curves": curves(s, records, sweeps),
              "recorded": len([p for p in points if p in records]), "planned": len(points), "trained": ran,
              "results": str(results), "wall_s": round(time.perf_counter() - start, 1),
              "load_average_end": [round(x, 2) for x in os.getloadavg()]}
    print(tables(result, s["attributes"]))
    files = {}
    for name, curve in result["curves"].items():
        if any(row["seeds"] for row in curve["rows"]):
            files[name] = str(plots / f"madman_sweep_{name.replace('-', '_')}{s['suffix']}.png")
            plot(name, curve, s, Path(files[name]), args.scale)
    result["plots"] = files
    print(f"\n{result['recorded']} of {result['planned']} points recorded in {results}; trained {len(ran)} now "
          f"({sum(r['cpu_s'] for r in ran) / 60:.1f} CPU min); wall {result['wall_s'] / 60:.1f} min; plots: "
          + ", ".join(files.values()))
    if args.json:
        from bindscope.io.atomic import write_text_atomic

        write_text_atomic(args.json, json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
