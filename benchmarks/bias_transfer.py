"""Does caption order in the training data decide CLIP's first-mention and large-object biases? A causal test of
the ComCO paper's origin-of-bias argument (Abbasi et al., CVPR 2025; docs/papers.md section 1).

The same small CLIP is trained from scratch on MADMAN datasets that differ only in how captions order the two
digits:

- ``size-0.5``, ``size-0.75``, ``size-1.0``: ``saliency: size``, the larger digit described first with
  probability 0.5 / 0.75 / 1.0 (digits of one size level in random order);
- ``centre-1.0`` (control): ``saliency: centre``, the centred digit (object 1) always first, unrelated to size.

Every training image has two digits, both described (``multi_object_images`` and ``multi_object_captions`` 1);
only colour and two size levels vary (small 0.2, large 0.41; one value of every other attribute) and captions name
the colour only (``"red 7 and blue 4"``), so a digit's size is seen in the image, never read in the text. Each run
keeps its weights every ``--eval-every`` steps (``keep_checkpoints``); every kept model is then scored on one
shared evaluation set (the ``test`` split of the ``size-0.5`` dataset: mention order uniform, both digits
described) with ``madman eval``'s tasks (:mod:`bindscope.evaluation.saliency`):

- ``first-mention`` (text side): share of captions closer to the first-mentioned digit's description, overall
  and when the first-mentioned digit is the larger (``first_larger``) or the smaller (``first_smaller``);
- ``large-object`` (image side): share of images closer to the render of their larger digit alone.

Each share has a Wilson 95 % interval and a bootstrap interval over images (one comparison per image).

Model (the MADMAN reproduction's small ViT, docs/training.md): embed 64, both towers width 64 and 2 blocks,
patch 12, word tokenizer, batch 128, lr 2e-3, 100 warm-up steps, seed 0, one torch thread per run, ``--jobs``
runs at a time. Measured on the project's 2-core CPU: the default (4 models x 2,000 steps, 20,000 training
images each) took 27.2 min wall (training 25.2) and 32.6 CPU min with the test suite running beside it (load
1.9-3.2); figures in docs/results.md.

Usage::

    nice .venv/bin/python benchmarks/bias_transfer.py --work /tmp/bias-transfer --json bias.json --plot bias.png
    nice .venv/bin/python benchmarks/bias_transfer.py --quick      # about two minutes: a smoke run

A rerun with the same ``--work`` reuses the datasets and finished runs (``bindscope.train`` resumes or returns a
finished run). Prints one table (model, step, shares with intervals) and the wall and CPU minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

MODELS = {"size-0.5": ("size", 0.5), "size-0.75": ("size", 0.75), "size-1.0": ("size", 1.0),
          "centre-1.0": ("centre", 1.0)}
"""Model name -> (saliency, saliency_bias) of its training data."""

SIZES = {"small": 0.2, "large": 0.41}
ONE_OF_EACH = {"thickness": {"regular": 0.12}, "rotation": {"upright": 0}, "swelling": {"unswollen": 0.0},
               "fracture": {"intact": 0}}
TRAIN = {"embed_dim": 64, "vision_width": 64, "vision_layers": 2, "text_width": 64, "text_layers": 2,
         "patch_size": 12, "tokenizer": "word", "batch_size": 128, "lr": 2e-3, "warmup_steps": 100, "seed": 0,
         "threads": 1, "device": "cpu"}
"""The small CLIP and its optimisation (``bindscope.train`` options), the same for every model."""


def data_config(saliency: str, bias: float, train: int, test: int) -> dict:
    """The MADMAN config overrides of one model's training data (and the shared evaluation split)."""
    return {"saliency": saliency, "saliency_bias": bias, "multi_object_images": 1.0, "multi_object_captions": 1.0,
            "attributes": {"size": SIZES, **ONE_OF_EACH}, "caption_order": ["colour"], "attribute_density": 1.0,
            "eval_attribute_density": 1.0, "splits": {"train": train, "test": test}, "ood": {"holdout": []}}


def make_data(work: Path, train: int, test: int, jobs: int) -> dict[str, Path]:
    import bindscope

    out = {}
    for name, (saliency, bias) in MODELS.items():
        folder = work / "data" / name
        if not (folder / "manifest.json").exists():
            bindscope.madman.generate(folder, seed=0, jobs=jobs, progress=False,
                                      **data_config(saliency, bias, train, test))
        out[name] = folder
    return out


def train_one(args: tuple) -> dict:
    """One model (run in a worker process): train, keeping the weights every ``eval_every`` steps."""
    name, data, eval_data, run, steps, eval_every = args
    import bindscope

    summary = bindscope.train(data, run, eval_data=eval_data, eval_splits="test", steps=steps,
                              eval_every=eval_every, keep_checkpoints=True, checkpoint_every=eval_every,
                              progress=False, **TRAIN)
    return {"name": name, "steps": summary.get("steps"), "steps_per_s": summary.get("steps_per_s")}


def kept_models(run: Path) -> list[tuple[int, Path]]:
    """(step, path) of every kept model of a run, by step."""
    found = []
    for path in (run / "checkpoints").glob("step-*.pt"):
        found.append((int(path.stem.split("-")[1]), path))
    return sorted(found)


def share(p: dict) -> dict:
    return {"share": p["accuracy"], "n": p["total"], "ci95": p["ci95"], "ci95_cluster": p["ci95_cluster"]}


def score(eval_data: Path, model: Path) -> dict:
    """first-mention and large-object shares of one kept model on the shared evaluation split."""
    from bindscope.encoders.registry import load_adapter
    from bindscope.evaluation.saliency import evaluate_saliency

    adapter = load_adapter(str(model), device="cpu")
    result = evaluate_saliency(eval_data, adapter, ["first-mention", "large-object"], splits=["test"],
                               progress=False)
    text, image = result["metrics"]["first_mention"]["test"], result["metrics"]["large_object"]["test"]
    out = {"first_mention": share(text["all"]), "large_object": share(image["all"])}
    for relation in ("first_larger", "first_smaller"):
        if relation in text["by_relation"]:
            out[f"first_mention/{relation}"] = share(text["by_relation"][relation])
    return out


def interval(p: dict) -> str:
    low, high = p["ci95_cluster"] or (float("nan"), float("nan"))
    return f"{100 * p['share']:5.1f} [{100 * low:4.1f}, {100 * high:4.1f}]"


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, key, title in ((axes[0], "first_mention", "text side: caption ~ first-mentioned digit"),
                           (axes[1], "large_object", "image side: image ~ larger digit")):
        for name in MODELS:
            mine = [r for r in rows if r["model"] == name]
            ax.plot([r["step"] for r in mine], [100 * r[key]["share"] for r in mine], marker="o", label=name)
            ax.fill_between([r["step"] for r in mine], [100 * r[key]["ci95_cluster"][0] for r in mine],
                            [100 * r[key]["ci95_cluster"][1] for r in mine], alpha=0.15)
        ax.axhline(50, color="grey", lw=0.8, ls="--")
        ax.set(title=title, xlabel="training step", ylabel="share (%)")
    axes[0].legend(title="training captions")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=2000, help="training steps per model")
    parser.add_argument("--eval-every", type=int, default=500, help="steps between kept (scored) models")
    parser.add_argument("--train-images", type=int, default=20000)
    parser.add_argument("--test-images", type=int, default=1000, help="images of the shared evaluation split")
    parser.add_argument("--jobs", type=int, default=2, help="models trained at a time (one torch thread each)")
    parser.add_argument("--quick", action="store_true", help="60 steps, 600 / 200 images: a smoke run")
    parser.add_argument("--work", default=None, help="folder of datasets and runs (default: $TMPDIR/bias-transfer)")
    parser.add_argument("--json", default=None, help="write the table and settings to this JSON file")
    parser.add_argument("--plot", default=None, help="write the shares over training steps to this PNG")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.eval_every, args.train_images, args.test_images = 60, 30, 600, 200
    work = Path(args.work or Path(os.environ.get("TMPDIR", "/tmp")) / "bias-transfer")
    work.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    print(f"machine: {platform.platform()} | CPUs {os.cpu_count()} | load average {[round(x, 2) for x in load]}",
          flush=True)
    t0, cpu0 = time.perf_counter(), time.process_time()
    data = make_data(work, args.train_images, args.test_images, args.jobs)
    eval_data = data["size-0.5"]
    tag = f"s{args.steps}-e{args.eval_every}-n{args.train_images}"
    runs = {name: work / "runs" / f"{name}-{tag}" for name in MODELS}
    jobs = [(name, data[name], eval_data, runs[name], args.steps, args.eval_every) for name in MODELS]
    t_train = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        trained = list(pool.map(train_one, jobs))
    train_wall = time.perf_counter() - t_train
    rows = []
    for name in MODELS:
        for step, path in kept_models(runs[name]):
            rows.append({"model": name, "step": step, **score(eval_data, path)})
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0 + children.ru_utime + children.ru_stime
    print(f"\n{'model':<11} {'step':>5}  {'first-mention % [95% CI, images]':<32} {'  first larger':<24}"
          f" {'  first smaller':<24} {'large-object %':<24}")
    for r in rows:
        cells = [interval(r[k]) if k in r else "-" for k in
                 ("first_mention", "first_mention/first_larger", "first_mention/first_smaller", "large_object")]
        print(f"{r['model']:<11} {r['step']:>5}  {cells[0]:<32} {cells[1]:<24} {cells[2]:<24} {cells[3]:<24}")
    print(f"\nwall {wall / 60:.1f} min (training {train_wall / 60:.1f} min), CPU {cpu / 60:.1f} min; load average "
          f"at the end {[round(x, 2) for x in os.getloadavg()]}; evaluation set: {eval_data} (test split)")
    out = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_start": list(load),
                       "load_end": list(os.getloadavg())},
           "settings": {"steps": args.steps, "eval_every": args.eval_every, "train_images": args.train_images,
                        "test_images": args.test_images, "jobs": args.jobs, "train": TRAIN,
                        "data": {n: data_config(s, b, args.train_images, args.test_images)
                                 for n, (s, b) in MODELS.items()}},
           "trained": trained, "rows": rows, "wall_minutes": wall / 60, "cpu_minutes": cpu / 60}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
