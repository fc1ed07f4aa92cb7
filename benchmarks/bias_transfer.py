"""Does caption order in the training data decide CLIP's first-mention and large-object biases? A causal test of
the ComCO paper's origin-of-bias argument (Abbasi et al., CVPR 2025; docs/papers.md section 1), with seeds,
paired tests and a control for ink area.

The same small CLIP is trained from scratch on MADMAN datasets that differ only in how captions order the two
digits:

- ``size-0.5``, ``size-0.75``, ``size-1.0``: ``saliency: size``, the larger digit described first with
  probability 0.5 / 0.75 / 1.0 (digits of one size level in random order);
- ``centre-1.0`` (control): ``saliency: centre``, the centred digit (object 1) always first, unrelated to size.

Every training image has two digits, both described (``multi_object_images`` and ``multi_object_captions`` 1);
only colour and two size levels vary (small 0.2, large 0.41; one value of every other attribute) and captions name
the colour only (``"red 7 and blue 4"``), so a digit's size is seen in the image, never read in the text. Each
model is trained with ``--seeds`` training seeds (default 0, 1, 2; same data). Each run keeps its weights every
``--eval-every`` steps (``keep_checkpoints``); every kept model is scored on one shared evaluation set (the
``test`` split of the ``size-0.5`` dataset: mention order uniform, both digits described) with ``madman eval``'s
tasks (:mod:`bindscope.evaluation.saliency`):

- ``first-mention`` (text side): share of captions closer to the first-mentioned digit's description, overall
  and when the first-mentioned digit is the larger (``first_larger``) or the smaller (``first_smaller``);
- ``large-object`` (image side): share of images closer to the render of their larger digit alone.

**Ink control.** A larger digit also has more ink (at one stroke thickness, 1.2 to 16 times the smaller digit's
visible pixels in the evaluation set; never within 10 %), so the large-object share can reward ink area instead
of size. The control scores the final models on images whose two digits differ in size level but have equal ink
within ``--ink-tolerance`` (10 %; ink = the digit's visible pixel count, its mask area): a second evaluation set of
``--ink-images`` images drawn like the shared one except that strokes are thin (0.05) or thick (0.29), so that a
thin large digit and a thick small one can carry the same ink; the pairs within the tolerance are kept. The
thicknesses are outside the training data (0.12 only), the same for every model.

**Paired tests** (``paired_tests.py``): every difference between two models is measured on the same images, seed s
against seed s, with the exact McNemar test on the per-image outcomes pooled over seeds (first-mention: every
caption; large-object: every image of two size levels; equal-ink: the control pairs); each model's equal-ink
share against chance with a bootstrap over the pairs of the share of seeds that prefer the larger digit.

Model (the MADMAN reproduction's small ViT, docs/training.md): embed 64, both towers width 64 and 2 blocks,
patch 12, word tokenizer, batch 128, lr 2e-3, 100 warm-up steps, one torch thread per run, ``--jobs`` runs at a
time; 2,000 steps, 20,000 training images per model, 1,000 evaluation images, 12,000 control images.

Usage::

    nice .venv/bin/python benchmarks/bias_transfer.py --work runs/bias-transfer --json bias.json --plot bias.png
    nice .venv/bin/python benchmarks/bias_transfer.py --quick      # a few minutes: a smoke run

A rerun with the same ``--work`` reuses the datasets and finished runs (``bindscope.train`` resumes or returns a
finished run). Prints the shares at the last step (mean over seeds, 95 % t interval over seeds, each seed), the
paired tests, the shares over training steps, and the wall and CPU minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from arguments import bounded_int, seed_list  # noqa: E402
from bindscope.limits import MAX_COUNT, MAX_JOBS  # noqa: E402
from paired_tests import mcnemar, paired_bootstrap, seed_interval  # noqa: E402

MODELS = {"size-0.5": ("size", 0.5), "size-0.75": ("size", 0.75), "size-1.0": ("size", 1.0),
          "centre-1.0": ("centre", 1.0)}
"""Model name -> (saliency, saliency_bias) of its training data."""
DIFFERENCES = [("size-0.5", "size-0.75"), ("size-0.5", "size-1.0"), ("size-0.5", "centre-1.0"),
               ("centre-1.0", "size-1.0")]
"""The paired differences reported (second minus first): each model against size-0.5 (caption order carries no
size information there), and size-first against centre-first captions."""
MEASURES = {"first_mention": "first-mention", "large_object": "large-object", "equal_ink": "large-object, equal ink"}

SIZES = {"small": 0.2, "large": 0.41}
ONE_OF_EACH = {"thickness": {"regular": 0.12}, "rotation": {"upright": 0}, "swelling": {"unswollen": 0.0},
               "fracture": {"intact": 0}}
INK_THICKNESS = {"thin": 0.05, "thick": 0.29}
"""Stroke thicknesses of the ink-control images (stroke width / glyph height): a thin large digit and a thick small
one carry about the same ink."""
TRAIN = {"embed_dim": 64, "vision_width": 64, "vision_layers": 2, "text_width": 64, "text_layers": 2,
         "patch_size": 12, "tokenizer": "word", "batch_size": 128, "lr": 2e-3, "warmup_steps": 100,
         "threads": 1, "device": "cpu"}
"""The small CLIP and its optimisation (``bindscope.train`` options), the same for every model and seed."""


def data_config(saliency: str, bias: float, train: int, test: int, thickness: dict | None = None) -> dict:
    """The MADMAN config overrides of one model's training data (and the shared evaluation split); ``thickness``
    replaces the one stroke thickness (the ink control's evaluation set)."""
    attributes = {"size": SIZES, **ONE_OF_EACH, **({"thickness": thickness} if thickness else {})}
    return {"saliency": saliency, "saliency_bias": bias, "multi_object_images": 1.0, "multi_object_captions": 1.0,
            "attributes": attributes, "caption_order": ["colour"], "attribute_density": 1.0,
            "eval_attribute_density": 1.0, "splits": {"train": train, "test": test}, "ood": {"holdout": []}}


def make_data(work: Path, train: int, test: int, ink_images: int, jobs: int) -> dict[str, Path]:
    """Every model's training set (its test split: the shared evaluation set of ``size-0.5``) and the ink control's
    evaluation set (``ink``)."""
    import bindscope

    configs = {name: data_config(saliency, bias, train, test) for name, (saliency, bias) in MODELS.items()}
    configs["ink"] = data_config("size", 0.5, 0, ink_images, INK_THICKNESS)
    out = {}
    for name, config in configs.items():
        folder = work / "data" / name
        if not (folder / "manifest.json").exists():
            bindscope.madman.generate(folder, seed=0, jobs=jobs, progress=False, **config)
        out[name] = folder
    return out


def equal_ink_pairs(folder: Path, tolerance: float) -> dict:
    """The control images: those whose two digits differ in size level and whose visible pixel counts differ by at
    most ``tolerance`` (relative to the smaller count), with both single-digit renders.

    Returns:
        ``{"samples": [index], "images": (M, S, S, 3) uint8, "renders": (M, 2, S, S, 3) uint8 (object 1 first),
        "sizes": [(size of object 1, of object 2)], "levels": {size: parameter}, "candidates": images of two size
        levels scanned}``.
    """
    import numpy as np

    from bindscope.build.registry import rebuild_generator
    from bindscope.format.reader import Dataset

    ds = Dataset(folder)
    generator = rebuild_generator(ds.generator, ds.manifest["config"], ds.manifest["seed"])
    samples, images, renders, sizes, candidates = [], [], [], [], 0
    for sample in ds.split("test"):
        one, two = sorted(sample.objects, key=lambda o: o.index)
        pair = (one.attributes["size"], two.attributes["size"])
        if pair[0] == pair[1]:
            continue
        candidates += 1
        if abs(one.area - two.area) > tolerance * min(one.area, two.area):
            continue
        samples.append(sample.index)
        images.append(sample.image)
        renders.append([generator.render_alone(sample.spec, k)[0] for k in (1, 2)])
        sizes.append(pair)
    if not samples:
        raise SystemExit(f"Error: no image of {folder} has two digits of different size with equal ink within "
                         f"{100 * tolerance:g} %; raise --ink-images or --ink-tolerance")
    return {"samples": samples, "images": np.stack(images), "renders": np.stack(renders), "sizes": sizes,
            "levels": ds.manifest["config"]["attributes"]["size"], "candidates": candidates}


def train_one(args: tuple) -> dict:
    """One model and seed (run in a worker process): train, keeping the weights every ``eval_every`` steps."""
    name, seed, data, eval_data, run, steps, eval_every = args
    import bindscope

    summary = bindscope.train(data, run, eval_data=eval_data, eval_splits="test", steps=steps, seed=seed,
                              eval_every=eval_every, keep_checkpoints=True, checkpoint_every=eval_every,
                              progress=False, **TRAIN)
    return {"name": name, "seed": seed, "steps": summary.get("steps"), "steps_per_s": summary.get("steps_per_s")}


def kept_models(run: Path) -> list[tuple[int, Path]]:
    """(step, path) of every kept model of a run, by step."""
    found = []
    for path in (run / "checkpoints").glob("step-*.pt"):
        found.append((int(path.stem.split("-")[1]), path))
    return sorted(found)


def share(p: dict) -> dict:
    return {"share": p["accuracy"], "n": p["total"], "ci95": p["ci95"], "ci95_cluster": p["ci95_cluster"]}


def score(eval_data: Path, model: Path, ink: dict | None = None) -> tuple[dict, dict]:
    """first-mention and large-object shares of one kept model on the shared evaluation split, and its per-image
    outcomes ``{measure: {sample: won}}`` (with ``ink``: also on the control pairs, ``equal_ink``)."""
    from bindscope.encoders.registry import load_adapter
    from bindscope.evaluation.saliency import evaluate_saliency, score_large_object

    adapter = load_adapter(str(model), device="cpu")
    rows: list[dict] = []
    result = evaluate_saliency(eval_data, adapter, ["first-mention", "large-object"], splits=["test"],
                               progress=False, rows=rows)
    text, image = result["metrics"]["first_mention"]["test"], result["metrics"]["large_object"]["test"]
    out = {"first_mention": share(text["all"]), "large_object": share(image["all"])}
    for relation in ("first_larger", "first_smaller"):
        if relation in text["by_relation"]:
            out[f"first_mention/{relation}"] = share(text["by_relation"][relation])
    wins = {"first_mention": {r["sample"]: r["first_wins"] for r in rows if r["task"] == "first-mention"},
            "large_object": {r["sample"]: r["larger_wins"] for r in rows if r["task"] == "large-object"}}
    if ink is not None:
        count = len(ink["samples"])
        emb = adapter.encode_images(ink["images"])
        renders = adapter.encode_images(ink["renders"].reshape(-1, *ink["renders"].shape[2:])).reshape(count, 2, -1)
        ink_rows: list[dict] = []
        block = score_large_object(emb, renders, ink["sizes"], ink["levels"], ink["samples"], ink_rows)
        out["equal_ink"] = share(block["all"])
        wins["equal_ink"] = {r["sample"]: r["larger_wins"] for r in ink_rows}
    return out, wins


def paired_differences(outcomes: dict, seeds: list[int]) -> list[dict]:
    """For each of :data:`DIFFERENCES` and each measure: McNemar on the per-image outcomes, seed against seed,
    pooled over the seeds both models have."""
    import numpy as np

    tests = []
    for first, second in DIFFERENCES:
        for measure in MEASURES:
            strata = []
            for seed in seeds:
                a, b = outcomes.get((first, seed), {}).get(measure), outcomes.get((second, seed), {}).get(measure)
                if a is None or b is None:
                    continue
                if sorted(a) != sorted(b):
                    raise SystemExit(f"Error: {first} and {second} (seed {seed}) were scored on different images")
                keys = sorted(a)
                strata.append((np.array([a[k] for k in keys]), np.array([b[k] for k in keys])))
            tests.append({"first": first, "second": second, "measure": measure, "seeds": len(strata),
                          **{("first_share" if k == "first" else "second_share" if k == "second" else k): v
                             for k, v in mcnemar(strata).items()}})
    return tests


def against_chance(outcomes: dict, seeds: list[int]) -> dict:
    """Per model: its equal-ink share (per pair, the share of seeds preferring the larger digit) against 50 %,
    bootstrap over the pairs."""
    import numpy as np

    out = {}
    for name in MODELS:
        per_seed = [outcomes[(name, s)]["equal_ink"] for s in seeds if "equal_ink" in outcomes.get((name, s), {})]
        if not per_seed:
            continue
        keys = sorted(per_seed[0])
        mean = np.array([np.mean([seed_wins[k] for seed_wins in per_seed]) for k in keys])
        out[name] = {"seeds": len(per_seed), **paired_bootstrap(np.full(len(keys), 0.5), mean)}
    return out


def final_table(rows: list[dict], seeds: list[int]) -> dict:
    """Per model and measure at the last step: the seeds' shares and their mean with a 95 % t interval."""
    last = max(r["step"] for r in rows)
    table = {}
    for name in MODELS:
        mine = {r["seed"]: r for r in rows if r["model"] == name and r["step"] == last}
        table[name] = {}
        for measure in (*MEASURES, "first_mention/first_larger", "first_mention/first_smaller"):
            values = [mine[s][measure]["share"] if s in mine and measure in mine[s] else None for s in seeds]
            n = [mine[s][measure]["n"] for s in seeds if s in mine and measure in mine[s]]
            table[name][measure] = {**seed_interval(values, (0.0, 1.0)), "per_seed": values, "n": n}
    return {"step": last, "models": table}


def pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def summary_text(block: dict) -> str:
    if block["mean"] is None:
        return "-"
    ci = block["ci95"]
    seeds = " / ".join(pct(v) for v in block["per_seed"])
    return f"{pct(block['mean'])} [{pct(ci[0])}, {pct(ci[1])}] ({seeds})" if ci else f"{pct(block['mean'])} ({seeds})"


def plot(rows: list[dict], path: str) -> None:
    """Both shares over training steps: mean over seeds, band = the seeds' range."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, key, title in ((axes[0], "first_mention", "text side: caption ~ first-mentioned digit"),
                           (axes[1], "large_object", "image side: image ~ larger digit")):
        for name in MODELS:
            steps = sorted({r["step"] for r in rows if r["model"] == name})
            shares = [[100 * r[key]["share"] for r in rows if r["model"] == name and r["step"] == step]
                      for step in steps]
            ax.plot(steps, [sum(s) / len(s) for s in shares], marker="o", label=name)
            ax.fill_between(steps, [min(s) for s in shares], [max(s) for s in shares], alpha=0.15)
        ax.axhline(50, color="grey", lw=0.8, ls="--")
        ax.set(title=title, xlabel="training step", ylabel="share (%), mean and range over seeds")
    axes[0].legend(title="training captions")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    steps, images = bounded_int(1, 1_000_000), bounded_int(1, MAX_COUNT)
    parser.add_argument("--steps", type=steps, default=2000, help="training steps per model")
    parser.add_argument("--eval-every", type=steps, default=500, help="steps between kept (scored) models")
    parser.add_argument("--train-images", type=images, default=20000)
    parser.add_argument("--test-images", type=images, default=1000, help="images of the shared evaluation split")
    parser.add_argument("--ink-images", type=images, default=12000, help="images scanned for equal-ink control pairs")
    parser.add_argument("--ink-tolerance", type=float, default=0.10,
                        help="largest relative difference of the two digits' ink in a control pair, in (0, 1]")
    parser.add_argument("--seeds", type=seed_list, default="0,1,2",
                        help="comma-separated training seeds of every model")
    parser.add_argument("--jobs", type=bounded_int(1, MAX_JOBS), default=2,
                        help="models trained at a time (one torch thread each)")
    parser.add_argument("--quick", action="store_true",
                        help="60 steps, 600 / 200 / 2,000 images, two seeds, 25 %% ink tolerance: a smoke run")
    parser.add_argument("--work", default=None, help="folder of datasets and runs (default: $TMPDIR/bias-transfer)")
    parser.add_argument("--json", default=None, help="write the tables, tests and settings to this JSON file")
    parser.add_argument("--plot", default=None, help="write the shares over training steps to this PNG")
    args = parser.parse_args()
    if not 0 < args.ink_tolerance <= 1:
        parser.error(f"argument --ink-tolerance: {args.ink_tolerance!r} is not allowed; use a number in (0, 1]")
    seeds = args.seeds
    if args.quick:
        args.steps, args.eval_every, args.train_images, args.test_images = 60, 30, 600, 200
        args.ink_images, args.ink_tolerance, seeds = 2000, 0.25, seeds[:2]
    work = Path(args.work or Path(os.environ.get("TMPDIR", "/tmp")) / "bias-transfer")
    work.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    print(f"machine: {platform.platform()} | CPUs {os.cpu_count()} | load average {[round(x, 2) for x in load]}",
          flush=True)
    t0, cpu0 = time.perf_counter(), time.process_time()
    data = make_data(work, args.train_images, args.test_images, args.ink_images, args.jobs)
    eval_data = data["size-0.5"]
    tag = f"s{args.steps}-e{args.eval_every}-n{args.train_images}"
    runs = {(name, seed): work / "runs" / f"{name}-{tag}-seed{seed}" for name in MODELS for seed in seeds}
    jobs = [(name, seed, data[name], eval_data, run, args.steps, args.eval_every) for (name, seed), run in runs.items()]
    t_train = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        trained = list(pool.map(train_one, jobs))
    train_wall = time.perf_counter() - t_train
    ink = equal_ink_pairs(data["ink"], args.ink_tolerance)
    print(f"ink control: {len(ink['samples'])} of {ink['candidates']} images of two size levels have equal ink "
          f"within {100 * args.ink_tolerance:g} %", flush=True)
    rows, outcomes = [], {}
    for (name, seed), run in runs.items():
        kept = kept_models(run)
        for step, path in kept:
            final = step == kept[-1][0]
            shares, wins = score(eval_data, path, ink if final else None)
            rows.append({"model": name, "seed": seed, "step": step, **shares})
            if final:
                outcomes[(name, seed)] = wins
    table, tests, chance = final_table(rows, seeds), paired_differences(outcomes, seeds), against_chance(outcomes, seeds)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0 + children.ru_utime + children.ru_stime

    print(f"\nshares at step {table['step']} (%): mean over {len(seeds)} seeds [95% t interval over seeds] "
          "(each seed)")
    for measure in (*MEASURES, "first_mention/first_larger", "first_mention/first_smaller"):
        print(f"  {measure}")
        for name in MODELS:
            print(f"    {name:<11} {summary_text(table['models'][name][measure])}")
    print("equal-ink share against chance (bootstrap over pairs of the share of seeds preferring the larger digit): "
          + "; ".join(f"{n} {pct(c['second'])} (p={c['p']:.2g}, n={c['n']})" for n, c in chance.items()))
    print("paired differences (second - first, points; exact McNemar, seed against seed, pooled over seeds):")
    for t in tests:
        if t["seeds"]:
            print(f"  {t['second']:<11} - {t['first']:<11} {MEASURES[t['measure']]:<24} {100 * t['difference']:+6.1f}"
                  f" on n={t['n']}, discordant {t['first_only']}/{t['second_only']}, p={t['p']:.2g}")
    print(f"\n{'model':<11} {'seed':>4} {'step':>5}  {'first-mention % [95% CI, images]':<32} {'large-object %':<24}")
    for r in rows:
        print(f"{r['model']:<11} {r['seed']:>4} {r['step']:>5}  "
              + " ".join(f"{pct(r[k]['share']):>5} [{pct(r[k]['ci95_cluster'][0])}, {pct(r[k]['ci95_cluster'][1])}]"
                         f"{'':<10}" for k in ("first_mention", "large_object")))
    print(f"\nwall {wall / 60:.1f} min (training {train_wall / 60:.1f} min), CPU {cpu / 60:.1f} min; load average "
          f"at the end {[round(x, 2) for x in os.getloadavg()]}; evaluation set: {eval_data} (test split)")
    out = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_start": list(load),
                       "load_end": list(os.getloadavg())},
           "settings": {"steps": args.steps, "eval_every": args.eval_every, "train_images": args.train_images,
                        "test_images": args.test_images, "seeds": seeds, "jobs": args.jobs, "train": TRAIN,
                        "ink_images": args.ink_images, "ink_tolerance": args.ink_tolerance,
                        "ink_thickness": INK_THICKNESS,
                        "data": {n: data_config(s, b, args.train_images, args.test_images)
                                 for n, (s, b) in MODELS.items()}},
           "ink_control": {"pairs": len(ink["samples"]), "candidates": ink["candidates"]},
           "trained": trained, "final": table, "tests": tests, "equal_ink_against_chance": chance, "rows": rows,
           "wall_minutes": wall / 60, "cpu_minutes": cpu / 60}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
