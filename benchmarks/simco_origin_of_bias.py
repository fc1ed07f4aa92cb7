"""Does the mention order of training captions give CLIP its first-mention (text) and large-object (image) biases on
SimCO scenes? The ComCO paper's origin-of-bias test (Abbasi et al., "CLIP Under the Microscope", CVPR 2025;
docs/papers.md section 1) with caption order controlled by ``comco render --saliency``.

Three training sets render the same SimCO scenes (the same plans, images and masks; only the captions differ,
tested in tests/test_comco_planning.py):

- ``size``: ``saliency: size``, ``saliency_bias: 1``: the large object (one-large mode) always named first, the
  others after it in random order;
- ``uniform``: mention order uniformly random (the default);
- ``position``: ``saliency: position``, ``saliency_bias: 1``: the objects named left to right.

The same small CLIP (``bindscope.train``; settings :data:`TRAIN`) is trained from scratch on each, with
``--seeds`` seeds per ordering; a seed fixes the initial weights and the batch order, so models of one seed see the
same images in the same batches and differ only in their captions. Each final model is scored on one evaluation
render (another seed, mention order uniform, framed reference images) with ``comco eval --tasks tor,ior``
(docs/evaluation.md):

- TOR (text side): share of captions whose text embedding is closest to the name at mention position k;
- IOR (image side): share of scenes whose image embedding is closest to the reference image of the object of size
  rank k (1 = the largest visible area).

Shares are unconditional (over all queries; the rest of the queries retrieve an absent category or tie); beside
them, the share of queries whose top-1 is one of their own objects (``in query``) and the position-1 share those
queries would give without any preference among their m objects (each 1 / m, ``no pref.``). The
project has no comparison command yet, so the paired tests are computed here, over the same queries: for the
TOR position-1 hit and the IOR rank-1 hit, an exact McNemar test (two-sided binomial test on the discordant
queries, ``scipy.stats.binomtest``) between the two orderings' models of one seed, and the difference of the
seed-averaged shares with a paired bootstrap interval over queries (``scipy.stats.bootstrap``, ``paired=True``,
percentile, 2,000 resamples). Between-seed variation is not in these intervals; the per-seed rows show it.

Usage::

    nice .venv/bin/python benchmarks/simco_origin_of_bias.py --work /work/tmp-comco/origin-of-bias --json oob.json
    nice .venv/bin/python benchmarks/simco_origin_of_bias.py --quick       # a smoke run (a few minutes)

The defaults are the run recorded in docs/results.md (2,000 training scenes per ordering, 500 evaluation scenes,
64 px, 4 samples, 1,000 steps, 2 seeds: about two hours on the shared 2-core CPU, over half of it rendering). A
rerun with the same ``--work`` reuses the rendered datasets, finished runs and evaluations. Prints the render
command of each dataset, one table (ordering, seed, TOR and IOR shares by position) and the paired comparisons, the
wall minutes per stage and the training CPU minutes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ORDERINGS = {"size": {"saliency": "size", "saliency_bias": 1.0}, "uniform": {},
             "position": {"saliency": "position", "saliency_bias": 1.0}}
"""Training-caption ordering -> its ``comco render`` mention-order keys."""
COMPARISONS = [("size", "uniform"), ("position", "uniform"), ("size", "position")]
SCENES = {"set": "simco18", "objects": "2-4", "size_mode": "one-large"}
"""The scenes of every dataset (``comco render`` keys; resolution and samples from the command line)."""
TRAIN = {"embed_dim": 64, "vision_width": 64, "vision_layers": 2, "text_width": 64, "text_layers": 2,
         "patch_size": 8, "tokenizer": "word", "batch_size": 128, "lr": 2e-3, "warmup_steps": 100,
         "threads": 1, "device": "cpu"}
"""The small CLIP and its optimisation (``bindscope.train`` options), the same for every model."""
BOOTSTRAP = 2000


def render_args(overrides: dict, n: int, resolution: int, samples: int, seed: int, references: bool) -> list[str]:
    """The ``comco render`` flags of one dataset (printed, so each dataset can be made by hand)."""
    args = [f"--set {SCENES['set']}", f"--objects {SCENES['objects']}", f"--size-mode {SCENES['size_mode']}",
            f"-n {n}", f"--resolution {resolution}", f"--samples {samples}", f"--seed {seed}",
            "--references" if references else "--no-references", "--device cpu", "--threads 1"]
    args += [f"--{k.replace('_', '-')} {v:g}" if isinstance(v, float) else f"--{k.replace('_', '-')} {v}"
             for k, v in overrides.items()]
    return args


def render(folder: Path, overrides: dict, n: int, resolution: int, samples: int, seed: int,
           references: bool) -> dict:
    """Render one dataset (or find it finished); return its command and wall seconds (the render runs in a worker
    process)."""
    import bindscope

    command = f"comco render {' '.join(render_args(overrides, n, resolution, samples, seed, references))} --out {folder}"
    t0 = time.perf_counter()
    result = bindscope.comco.render(folder, seed=seed, jobs=1, threads=1, device="cpu", progress=False, n=n,
                                    resolution=resolution, samples=samples, references=references,
                                    **SCENES, **overrides)
    return {"folder": str(folder), "command": command, "already_complete": result.already_complete,
            "wall_s": time.perf_counter() - t0, "statistics": result.manifest["statistics"]["scenes"]}


def train_one(args: tuple) -> dict:
    """One model (run in a worker process); ``cpu_s``: that process's CPU seconds (one torch thread)."""
    name, seed, data, eval_data, run, steps, batch_size = args
    import bindscope

    t0 = time.process_time()
    summary = bindscope.train(data, run, eval_data=eval_data, eval_tasks="tor,ior", steps=steps, progress=False,
                              seed=seed, **{**TRAIN, "batch_size": batch_size})
    return {"ordering": name, "seed": seed, "steps": summary.get("steps"), "steps_per_s": summary.get("steps_per_s"),
            "final_loss": summary.get("final_loss"), "cpu_s": time.process_time() - t0}


def evaluate(eval_data: Path, run: Path, out: Path) -> list[dict]:
    """``comco eval --tasks tor,ior`` of a run's final model; its per-query rows."""
    import bindscope
    from bindscope.evaluation.results import read_rows

    if not out.is_file():
        encoder = bindscope.EncoderSettings(str(run / "model.pt"), device="cpu", use_cache=False)
        bindscope.evaluate(eval_data, encoder, tasks="tor,ior", out=out, overwrite=True, progress=False)
    return read_rows(out)


def hits(rows: list[dict], task: str, position: int) -> np.ndarray:
    """Per query of ``task`` (ordered by sample): 1 when the top-1 is the object at ``position`` (ties: 0)."""
    mine = sorted((r for r in rows if r["task"] == task), key=lambda r: r["sample"])
    return np.array([r["top1_position"] == position for r in mine], dtype=float)


def shares(rows: list[dict], task: str, positions: int) -> list[float]:
    return [float(hits(rows, task, k).mean()) for k in range(1, positions + 1)]


def no_preference(rows: list[dict], task: str) -> dict:
    """``in_query``: share of ``task`` queries whose top-1 is one of their own objects; ``position_1``: the
    position-1 share those queries would give if the top-1 fell on each of their m objects with chance 1 / m
    (the share without any preference for position 1)."""
    mine = [r for r in rows if r["task"] == task]
    found = [r for r in mine if r["top1_position"]]
    return {"in_query": len(found) / len(mine), "position_1": sum(1 / len(r["objects"]) for r in found) / len(mine)}


def mcnemar(a: np.ndarray, b: np.ndarray) -> dict:
    """Exact McNemar test of two paired 0/1 vectors (:func:`bindscope.evaluation.paired.mcnemar_exact`, the
    test of ``bindscope compare``)."""
    from bindscope.evaluation.paired import mcnemar_exact

    only_a, only_b = int(((a == 1) & (b == 0)).sum()), int(((a == 0) & (b == 1)).sum())
    return {"only_a": only_a, "only_b": only_b, "p": mcnemar_exact(only_a, only_b)}


def paired_difference(a: np.ndarray, b: np.ndarray, seed: int = 0) -> dict:
    """Mean of ``a - b`` with a paired percentile bootstrap 95 % interval over queries (scipy)."""
    from scipy.stats import bootstrap

    diff = float(a.mean() - b.mean())
    if np.all(a == b):
        return {"difference": diff, "ci95": [diff, diff]}
    res = bootstrap((a, b), lambda x, y, axis=-1: x.mean(axis=axis) - y.mean(axis=axis), paired=True,
                    vectorized=True, n_resamples=BOOTSTRAP, method="percentile", random_state=seed)
    return {"difference": diff, "ci95": [float(res.confidence_interval.low), float(res.confidence_interval.high)]}


def compare(rows: dict, seeds: list[int]) -> list[dict]:
    """Every comparison of :data:`COMPARISONS` on the TOR position-1 and IOR rank-1 hits."""
    out = []
    for (a, b), (task, label) in itertools.product(COMPARISONS, (("tor", "TOR position 1"), ("ior", "IOR rank 1"))):
        per_seed = {s: mcnemar(hits(rows[a, s], task, 1), hits(rows[b, s], task, 1)) for s in seeds}
        mean_a = np.mean([hits(rows[a, s], task, 1) for s in seeds], axis=0)
        mean_b = np.mean([hits(rows[b, s], task, 1) for s in seeds], axis=0)
        out.append({"a": a, "b": b, "metric": label, "queries": len(mean_a), "mcnemar_by_seed": per_seed,
                    **paired_difference(mean_a, mean_b)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train-scenes", type=int, default=2000, help="scenes of each training render")
    parser.add_argument("--eval-scenes", type=int, default=500, help="scenes of the evaluation render")
    parser.add_argument("--resolution", type=int, default=64, help="image side of every render (pixels)")
    parser.add_argument("--samples", type=int, default=4, help="Cycles samples per pixel")
    parser.add_argument("--steps", type=int, default=1000, help="training steps per model")
    parser.add_argument("--batch-size", type=int, default=TRAIN["batch_size"], help="training batch size")
    parser.add_argument("--seeds", type=int, default=2, help="training seeds per ordering (0, 1, ...)")
    parser.add_argument("--jobs", type=int, default=2, help="models trained at a time (one torch thread each)")
    parser.add_argument("--quick", action="store_true",
                        help="48 / 24 scenes at 32 px, 1 sample, 30 steps of batch 16, 2 seeds: a smoke run")
    parser.add_argument("--work", default=None,
                        help="folder of datasets, runs and evaluations (default: $TMPDIR/simco-origin-of-bias)")
    parser.add_argument("--json", default=None, help="write the table, comparisons and settings to this JSON file")
    args = parser.parse_args()
    if args.quick:
        args.train_scenes, args.eval_scenes, args.resolution, args.samples, args.steps = 48, 24, 32, 1, 30
        args.batch_size = 16
    seeds = list(range(args.seeds))
    work = Path(args.work or Path(os.environ.get("TMPDIR", "/tmp")) / "simco-origin-of-bias")
    work.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    print(f"machine: {platform.platform()} | CPUs {os.cpu_count()} | load average {[round(x, 2) for x in load]}",
          flush=True)
    t0 = time.perf_counter()
    tag = f"r{args.resolution}-s{args.samples}"
    renders = {name: render(work / "data" / f"{name}-{tag}-n{args.train_scenes}", keys, args.train_scenes,
                            args.resolution, args.samples, 0, False) for name, keys in ORDERINGS.items()}
    renders["eval"] = render(work / "data" / f"eval-{tag}-n{args.eval_scenes}", {}, args.eval_scenes,
                             args.resolution, args.samples, 1, True)
    for name, r in renders.items():
        done = "already rendered" if r["already_complete"] else f"{r['wall_s'] / 60:.1f} min wall"
        print(f"{name}: {r['command']}  [{done}]", flush=True)
    render_wall = time.perf_counter() - t0
    runs = {(name, s): work / "runs" / f"{name}-{tag}-n{args.train_scenes}-b{args.batch_size}-steps{args.steps}-seed{s}"
            for name in ORDERINGS for s in seeds}
    t_train = time.perf_counter()
    jobs = [(name, s, renders[name]["folder"], renders["eval"]["folder"], run, args.steps, args.batch_size)
            for (name, s), run in runs.items()]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        trained = list(pool.map(train_one, jobs))
    train_wall = time.perf_counter() - t_train
    t_eval = time.perf_counter()
    rows = {key: evaluate(Path(renders["eval"]["folder"]), run, work / "evals" / f"{run.name}.json")
            for key, run in runs.items()}
    eval_wall = time.perf_counter() - t_eval
    table = [{"ordering": name, "seed": s, "tor": shares(rows[name, s], "tor", 4), "ior": shares(rows[name, s], "ior", 4),
              "tor_no_preference": no_preference(rows[name, s], "tor"),
              "ior_no_preference": no_preference(rows[name, s], "ior"),
              "tor_queries": int(sum(r["task"] == "tor" for r in rows[name, s])),
              "ior_queries": int(sum(r["task"] == "ior" for r in rows[name, s]))}
             for name, s in runs]
    comparisons = compare(rows, seeds)
    wall = time.perf_counter() - t0
    train_cpu = sum(t["cpu_s"] for t in trained)
    pct = lambda v: f"{100 * v:5.1f}"  # noqa: E731
    print(f"\n{'ordering':<9} {'seed':>4}  {'TOR % at mention position 1-4':<27} {'(in query, no pref.)':<21}"
          f"{'IOR % at size rank 1-4':<27} (in query, no pref.)")
    for r in table:
        tor, ior = r["tor_no_preference"], r["ior_no_preference"]
        print(f"{r['ordering']:<9} {r['seed']:>4}  {' '.join(pct(v) for v in r['tor']):<27}"
              f"({pct(tor['in_query'])}, {pct(tor['position_1'])})     {' '.join(pct(v) for v in r['ior']):<27}"
              f"({pct(ior['in_query'])}, {pct(ior['position_1'])})")
    print(f"\n{'comparison':<20} {'metric':<15} {'difference, pp [95% paired bootstrap]':<38} "
          "exact McNemar p by seed (queries only a / only b)")
    for c in comparisons:
        low, high = c["ci95"]
        by_seed = ", ".join(f"seed {s}: {m['p']:.2g} ({m['only_a']}/{m['only_b']})"
                            for s, m in c["mcnemar_by_seed"].items())
        print(f"{c['a'] + ' - ' + c['b']:<20} {c['metric']:<15} "
              f"{100 * c['difference']:+6.1f} [{100 * low:+6.1f}, {100 * high:+6.1f}]{'':<15} {by_seed}")
    print(f"\nwall {wall / 60:.1f} min (rendering {render_wall / 60:.1f}, training {train_wall / 60:.1f}, evaluation "
          f"{eval_wall / 60:.1f}); training CPU {train_cpu / 60:.1f} min over {len(trained)} models; load average at "
          f"the end {[round(x, 2) for x in os.getloadavg()]}")
    out = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_start": list(load),
                       "load_end": list(os.getloadavg())},
           "settings": {"train_scenes": args.train_scenes, "eval_scenes": args.eval_scenes,
                        "resolution": args.resolution, "samples": args.samples, "steps": args.steps, "seeds": seeds,
                        "batch_size": args.batch_size, "jobs": args.jobs, "scenes": SCENES, "orderings": ORDERINGS, "train": TRAIN,
                        "bootstrap_resamples": BOOTSTRAP},
           "renders": renders, "trained": trained, "table": table, "comparisons": comparisons,
           "minutes": {"wall": wall / 60, "render": render_wall / 60, "train": train_wall / 60,
                       "eval": eval_wall / 60, "train_cpu": train_cpu / 60}}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
