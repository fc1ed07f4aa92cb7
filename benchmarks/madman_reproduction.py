"""MADMAN reproduction: the same small CLIP trained on `ideal` vs `realistic` data, binding on one held-out set.

The MADMAN paper (Gurung, Hoffmann, Brox, GCPR 2025) finds that the data, not the architecture, decides binding:
with "ideal" data a small CLIP trained from scratch binds attributes (>90% on 4 of 6 attributes), with
"realistic" data it stays near chance (50%). This script:

1. generates (or reuses) three datasets with `madman generate`: an `ideal` and a `realistic` training set of
   `--num-train` images (same data seed), and one evaluation set — the `ideal` preset's `test` split of
   `--num-test` images (two digits, both described, from the MNIST digits kept out of training);
2. trains the same model (same architecture, steps, batch size, learning rate and seed) on each training set;
3. evaluates both on the same evaluation set and prints binding and recognition accuracy per attribute, wall
   times, steps/s, the machine and the load.

Target (issue 5) on a 2-core CPU, both trainings together under 45 minutes: ideal >= 85% binding on at least
4 of 6 attributes, realistic < 65% on all. The script prints whether the run met it.

Run: `.venv/bin/python benchmarks/madman_reproduction.py [--steps 3000] [--num-train 20000] ...` (see --help).
The work folder (default `runs/madman-reproduction`, git-ignored) keeps datasets and runs, so a rerun reuses them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ATTRIBUTES = ("colour", "size", "thickness", "rotation", "swelling", "fracture")


def machine() -> str:
    import torch

    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    return (f"{platform.platform()}; {platform.processor() or platform.machine()}; CPUs: {os.cpu_count()}; "
            f"torch {torch.__version__} threads: {torch.get_num_threads()}; CUDA: {torch.cuda.is_available()}; "
            f"load average (1, 5, 15 min): {load}")


def generate(out: Path, preset: str, splits: dict, seed: int, jobs: int, work: Path) -> float:
    """`madman generate` into ``out`` unless finished there already; returns the seconds taken."""
    if (out / "manifest.json").is_file():
        manifest = json.loads((out / "manifest.json").read_text())
        config = manifest["config"]
        if (config.get("preset") != preset or manifest["seed"] != seed
                or {k: v for k, v in config["splits"].items() if v} != {k: v for k, v in splits.items() if v}):
            raise SystemExit(f"{out} holds another dataset (preset {config.get('preset')}, seed {manifest['seed']}, "
                             f"splits {config['splits']}); remove it or choose another --work")
        return 0.0
    config = work / f"{out.name}.yaml"
    config.write_text(json.dumps({"splits": splits, "shard_size": 2000}))  # JSON is YAML
    madman = Path(sys.executable).with_name("madman")
    start = time.perf_counter()
    subprocess.run([str(madman), "generate", "--out", str(out), "--preset", preset, "--config", str(config),
                    "--seed", str(seed), "--jobs", str(jobs), "--no-progress", "--resume"], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--work", default="runs/madman-reproduction", help="datasets and runs go here")
    parser.add_argument("--num-train", type=int, default=20000, help="training images per preset")
    parser.add_argument("--num-test", type=int, default=1000, help="evaluation images (ideal test split)")
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--embed-dim", type=int, default=64)
    parser.add_argument("--width", type=int, default=64, help="width of both towers")
    parser.add_argument("--layers", type=int, default=2, help="blocks of both towers")
    parser.add_argument("--patch-size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0, help="training seed (same for both presets)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0 = torch default)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--jobs", type=int, default=2, help="generation processes")
    parser.add_argument("--eval-every", type=int, default=0)
    parser.add_argument("--hard-negatives", action="store_true",
                        help="NegCLIP for both presets: each sample's binding negatives (1 per sample) in the batch")
    args = parser.parse_args()

    from bindscope.training.model import ModelConfig
    from bindscope.training.train import TrainConfig, Trainer

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    print(f"machine at start: {machine()}", flush=True)
    data = {"ideal": work / "train-ideal", "realistic": work / "train-realistic", "eval": work / "eval-ideal-test"}
    gen_seconds = {
        "ideal": generate(data["ideal"], "ideal", {"train": args.num_train, "test": 0, "ood": 0}, args.data_seed,
                          args.jobs, work),
        "realistic": generate(data["realistic"], "realistic", {"train": args.num_train, "test": 0, "ood": 0},
                              args.data_seed, args.jobs, work),
        # a different data seed than training, and the test split draws from the held-out MNIST digits
        "eval": generate(data["eval"], "ideal", {"train": 0, "test": args.num_test, "ood": 0}, args.data_seed + 1,
                         args.jobs, work),
    }
    print("generation seconds (0 = reused): " + ", ".join(f"{k} {v:.0f}" for k, v in gen_seconds.items()))

    model = ModelConfig(embed_dim=args.embed_dim, image_size=64, patch_size=args.patch_size, vision_width=args.width,
                        vision_layers=args.layers, text_width=args.width, text_layers=args.layers)
    tag = (f"d{args.embed_dim}-w{args.width}-l{args.layers}-p{args.patch_size}-b{args.batch_size}-s{args.steps}"
           f"-lr{args.lr:g}-seed{args.seed}{'-negclip' if args.hard_negatives else ''}")
    results, timing = {}, {}
    total_start = time.perf_counter()
    for preset in ("ideal", "realistic"):
        config = TrainConfig(data=str(data[preset]), out=str(work / "runs" / f"{preset}-{tag}"),
                             eval_data=str(data["eval"]), model=model, batch_size=args.batch_size, steps=args.steps,
                             lr=args.lr, warmup_steps=args.warmup, seed=args.seed, device=args.device,
                             hard_negatives=1 if args.hard_negatives else 0,
                             threads=args.threads, checkpoint_every=500, log_every=50, eval_every=args.eval_every)
        start = time.perf_counter()
        summary = Trainer(config, progress=False).run()
        wall = time.perf_counter() - start
        results[preset] = summary["result"]
        timing[preset] = {"wall_s": wall, "train_s": summary["train_seconds"], "steps_per_s": summary["steps_per_s"],
                          "resumed_from": summary["resumed_from"], "final_loss": summary["final_loss"]}
        steps_per_s = summary["steps_per_s"]
        print(f"{preset}: wall {wall:.0f} s (training {summary['train_seconds']:.0f} s, "
              f"{'n/a' if steps_per_s is None else f'{steps_per_s:.2f}'} steps/s, steps {summary['resumed_from']}"
              f"..{summary['steps']}), final loss {summary['final_loss']:.3f}", flush=True)
    total = time.perf_counter() - total_start

    print(f"\nsetting: {tag}, {args.num_train} training images per preset, evaluation on "
          f"{data['eval']} ({args.num_test} images, ideal test split)")
    print("binding = the paper's measure (conditional on recognition of the attribute for both digits), with n and "
          "Wilson 95% interval; unconditional = over every binding negative; recognition over every recognition "
          "negative. Chance is 50% for binding.")
    header = ["binding ideal", "binding realistic", "uncond. ideal", "uncond. realistic", "recog. ideal",
              "recog. realistic"]
    print(f"{'attribute':<10} " + " ".join(f"{h:>26}" for h in header))
    binding = {}
    for attribute in ATTRIBUTES:
        cells = []
        for kind in ("binding", "binding_unconditional", "recognition"):
            for preset in ("ideal", "realistic"):
                block = results[preset]["metrics"]["splits"]["test"][kind]["per_attribute"].get(attribute)
                accuracy = None if block is None else block["accuracy"]
                binding.setdefault((kind, preset), {})[attribute] = accuracy
                if accuracy is None:
                    cells.append("-")
                else:
                    low, high = block["ci95"]
                    cells.append(f"{100 * accuracy:.1f}% n={block['total']} [{100 * low:.0f},{100 * high:.0f}]")
        print(f"{attribute:<10} " + " ".join(f"{c:>26}" for c in cells))
    ideal_ok = sum((binding[("binding", "ideal")][a] or 0) >= 0.85 for a in ATTRIBUTES)
    realistic_max = max((binding[("binding", "realistic")][a] or 0) for a in ATTRIBUTES)
    print(f"\nideal >= 85% binding on {ideal_ok} of 6 attributes (target >= 4); realistic best binding "
          f"{100 * realistic_max:.1f}% (target < 65% on all)")
    met = ideal_ok >= 4 and realistic_max < 0.65
    print(f"both trainings: {total:.0f} s wall ({total / 60:.1f} min; target < 45 min) -> "
          f"{'TARGET MET' if met and total < 45 * 60 else 'target not met'}")
    print(f"machine at end: {machine()}")
    (work / f"summary-{tag}.json").write_text(json.dumps({"timing": timing, "binding": {
        f"{k}/{p}": v for (k, p), v in binding.items()}, "total_wall_s": total, "args": vars(args)}, indent=2))


if __name__ == "__main__":
    main()
