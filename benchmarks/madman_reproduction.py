"""MADMAN reproduction: the same small CLIP trained on `ideal` vs `realistic` data, binding on one held-out set.

The MADMAN paper (Gurung, Hoffmann, Brox, GCPR 2025; docs/papers.md section 2) finds that the data, not the
architecture, decides binding: a small CLIP trained from scratch on "ideal" data binds attributes (> 90% on 4 of
6 attributes), on "realistic" data it stays near chance (50%). This script:

1. generates (or reuses) three datasets with `madman generate`: an `ideal` and a `realistic` training set of
   `--num-train` images (same data seed), and one evaluation set, the `ideal` preset's `test` split of
   `--num-test` images (two digits, both described, from the MNIST digits kept out of training);
2. trains the same model (architecture, steps, batch size, learning rate, seed) on each training set with
   `madman train`, the two runs in parallel processes with `--threads` torch threads each (one thread each
   uses a 2-core machine best);
3. reads both runs' evaluation on the same evaluation set (recognition and binding per attribute; binding
   conditional on recognition of the attribute for both digits, as in the paper; Wilson 95% intervals) and
   writes `--out` (JSON) and a table with wall times, steps/s, the machine and its load.

Target on a 2-core CPU, both models together in at most 45 minutes: ideal >= 90% binding on at
least 4 of 6 attributes; realistic <= 60% on at least 4 of 6; each such figure resting on >= 200 samples. The
script prints whether the run met it. On a machine shared with other jobs the wall clock is inflated, so the
script also measures each run's own CPU time (`os.wait4`) and reports what the runs need on an idle 2-core
machine (`idle_2core_minutes`: the larger of the two CPU times when they run in parallel, one thread each).
With `--eval-every K` each run's log also holds binding every K steps (the binding-vs-steps curve, written to
`--out` as `curve`).

Run: `.venv/bin/python benchmarks/madman_reproduction.py --out result.json [--steps 8000] ...` (see --help).
The work folder (default `runs/madman-reproduction`, git-ignored) keeps datasets and runs, so a rerun reuses them
(a finished run only reprints its result).
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
PRESETS = ("ideal", "realistic")
IDEAL_MIN, REALISTIC_MAX, MIN_N, MIN_ATTRIBUTES, MAX_MINUTES = 0.90, 0.60, 200, 4, 45


def machine() -> dict:
    import torch

    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "torch": torch.__version__, "cuda": torch.cuda.is_available(),
            "load_average_1_5_15": [round(v, 2) for v in os.getloadavg()]}


def madman_command() -> str:
    return str(Path(sys.executable).with_name("madman"))


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
    start = time.perf_counter()
    subprocess.run([madman_command(), "generate", "--out", str(out), "--preset", preset, "--config", str(config),
                    "--seed", str(seed), "--jobs", str(jobs), "--quiet"], check=True)
    return time.perf_counter() - start


def train_flags(args) -> list[str]:
    """The `madman train` options shared by both presets."""
    flags = ["--embed-dim", args.embed_dim, "--vision", args.vision, "--vision-width", args.width,
             "--vision-layers", args.layers, "--patch-size", args.patch_size, "--text-width", args.width,
             "--text-layers", args.layers, "--head-width", args.head_width, "--tokenizer", args.tokenizer,
             "--context-length", args.context_length,
             "--batch-size", args.batch_size, "--steps", args.steps, "--lr", args.lr, "--warmup", args.warmup,
             "--seed", args.seed, "--threads", args.threads, "--device", args.device, "--precision", args.precision,
             "--loader-jobs", args.loader_jobs, "--log-every", 50,
             "--checkpoint-every", 500, "--eval-every", args.eval_every, "--quiet"]
    if args.hard_negatives:
        flags += ["--negatives", "stored", "--negatives-per-sample", args.hard_negatives]
    return [str(f) for f in flags]


def per_attribute(result: dict, kind: str) -> dict:
    return result["metrics"]["splits"]["test"][kind]["per_attribute"]


def curve(run: Path) -> list[dict]:
    """Binding and recognition (%) on the test split at every logged evaluation of a run."""
    points = []
    for line in (run / "log.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "eval" in record:
            test = record["eval"]["test"]
            points.append({"step": record["step"], **{kind: {a: None if v is None else round(100 * v, 1)
                                                             for a, v in test[kind].items()}
                                                      for kind in ("binding", "recognition")}})
    return points


def steps_per_second(run: Path) -> float | None:
    """Training steps per second of a run (from its log: last training line's step / elapsed seconds)."""
    lines = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    train = [r for r in lines if "elapsed_s" in r]
    return train[-1]["step"] / train[-1]["elapsed_s"] if train and train[-1]["elapsed_s"] else None


def diagnostics(run: Path, eval_data: Path, work: Path) -> dict:
    """Four diagnostics of a trained model beside the paper's measures, on the evaluation set:

    - ``digit_recognition``: :func:`bindscope.evaluation.madman.digit_recognition` in %, with its Wilson interval
      and n;
    - ``binding_by_size_relation``: binding (conditional, %) and n per attribute, for images whose two digits
      share a size level and for the others (:func:`bindscope.evaluation.madman.binding_by_size_relation`);
    - ``binding_additivity``: per attribute, the correlation r of the binding margin with the sum of the two
      recognition margins (:func:`bindscope.evaluation.madman.binding_additivity`): near 1, the conditional
      binding figure says little about binding;
    - ``image_probes``: per attribute, the test accuracy (%) of linear probes on the frozen image embeddings
      (:func:`bindscope.probe`, LABCLIP's protocol, docs/alignment.md: one probe per digit, label =
      that digit's value, held out by the other digit's combination), next to chance and the bag-of-words probe
      (which knows every value in the image but not whose it is). Near chance, the image embedding does not
      hold the attribute at all, so no text side could bind it. The full result is ``work/probe-<run>.json``.
    """
    from bindscope.alignment.api import probe
    from bindscope.encoders.settings import EncoderSettings
    from bindscope.evaluation.madman import (
        binding_additivity,
        binding_by_size_relation,
        digit_recognition,
        evaluate_madman,
        size_pairs,
    )
    from bindscope.training.checkpoint import load_trained_adapter

    adapter = load_trained_adapter(run, device="cpu")
    digits = digit_recognition(eval_data, adapter)
    rows = []
    evaluate_madman(eval_data, adapter, splits=["test"], rows=rows, progress=False)
    groups = binding_by_size_relation(rows, size_pairs(eval_data, "test"))
    probes = probe(eval_data, EncoderSettings(run, device="cpu", use_cache=False), modality="image", split="test",
                   out=work / f"probe-{run.name}.json", overwrite=True, progress=False).result["metrics"]
    return {"digit_recognition": {"accuracy": round(100 * digits["accuracy"], 2), "n": digits["total"],
                                  "ci95": [round(100 * v, 2) for v in digits["ci95"]]},
            "binding_by_size_relation": {group: {a: {"binding": round(100 * p["accuracy"], 2), "n": p["total"]}
                                                 for a, p in per.items()} for group, per in groups.items()},
            "binding_additivity": {a: {"r": None if v["r"] is None else round(v["r"], 3), "n": v["n"]}
                                   for a, v in binding_additivity(rows).items()},
            "image_probes": {a: {k: round(100 * p[k], 1) for k in ("accuracy", "chance", "bag_of_words")}
                             | {"n": p["n_test"]} for a, p in probes["modalities"]["image"].items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--out", default="result.json", help="JSON result file")
    parser.add_argument("--work", default="runs/madman-reproduction", help="datasets and runs go here")
    parser.add_argument("--num-train", type=int, default=60000, help="training images per preset")
    parser.add_argument("--num-test", type=int, default=3000, help="evaluation images (ideal test split)")
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=8000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--embed-dim", type=int, default=64)
    parser.add_argument("--vision", default="vit", choices=["vit", "cnn", "resnet"])
    parser.add_argument("--width", type=int, default=64, help="width of both towers")
    parser.add_argument("--layers", type=int, default=2, help="blocks of both towers")
    parser.add_argument("--patch-size", type=int, default=12,
                        help="ViT patch side: the 96-pixel default canvas gives 8 x 8 patches")
    parser.add_argument("--head-width", type=int, default=32,
                        help="features per attention head in both towers (heads = width / head width)")
    parser.add_argument("--tokenizer", default="word", choices=["word", "bpe"])
    parser.add_argument("--context-length", type=int, default=18,
                        help="tokens per caption (a 2-digit, 6-attribute caption has 15 words + start/end)")
    parser.add_argument("--seed", type=int, default=0, help="training seed (same for both presets)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per run")
    parser.add_argument("--sequential", action="store_true", help="train one preset after the other")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"],
                        help="autocast precision of training (bf16 or fp16 on a GPU)")
    parser.add_argument("--loader-jobs", type=int, default=0, help="DataLoader workers per run")
    parser.add_argument("--jobs", type=int, default=2, help="generation processes")
    parser.add_argument("--eval-every", type=int, default=0, help="log binding every K steps (0 = at the end)")
    parser.add_argument("--hard-negatives", type=int, default=0,
                        help="NegCLIP: binding negatives per sample added to the batch's texts (0 = plain CLIP, the "
                             "paper's setting for the ideal-vs-realistic contrast; the same for both presets)")
    args = parser.parse_args()

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    start_machine = machine()
    print(f"machine at start: {start_machine}", flush=True)
    data = {"ideal": work / "train-ideal", "realistic": work / "train-realistic", "eval": work / "eval-ideal-test"}
    generation = {
        preset: generate(data[preset], preset, {"train": args.num_train, "test": 0, "ood": 0}, args.data_seed,
                         args.jobs, work) for preset in PRESETS}
    # a different data seed than training, and the test split draws from the held-out MNIST digits
    generation["eval"] = generate(data["eval"], "ideal", {"train": 0, "test": args.num_test, "ood": 0},
                                  args.data_seed + 1, args.jobs, work)
    print("generation seconds (0 = reused): " + ", ".join(f"{k} {v:.0f}" for k, v in generation.items()), flush=True)

    tag = (f"{args.vision}-{args.tokenizer}-d{args.embed_dim}-w{args.width}-l{args.layers}-p{args.patch_size}"
           f"-b{args.batch_size}-s{args.steps}-lr{args.lr:g}-seed{args.seed}"
           + (f"-h{args.head_width}" if args.head_width != 32 else "")
           + (f"-neg{args.hard_negatives}" if args.hard_negatives else "")
           + (f"-{args.precision}" if args.precision != "fp32" else ""))
    runs = {preset: work / "runs" / f"{preset}-{tag}" for preset in PRESETS}
    commands = {preset: [madman_command(), "train", str(data[preset]), "--eval", str(data["eval"]),
                         "--eval-split", "test", "--out", str(runs[preset]), *train_flags(args)]
                for preset in PRESETS}
    # a finished run only reprints its result: its training is not timed here
    reused = [preset for preset in PRESETS if (runs[preset] / "result.json").is_file()]
    start = time.perf_counter()
    processes, cpu = {}, {}

    def finish(preset: str) -> None:  # wait4 gives the child's own CPU time (user + system, all threads)
        _, status, usage = os.wait4(processes[preset].pid, 0)
        cpu[preset] = usage.ru_utime + usage.ru_stime
        if os.waitstatus_to_exitcode(status):
            raise SystemExit(f"madman train for {preset} failed (exit {os.waitstatus_to_exitcode(status)}); see "
                             f"{work / f'train-{preset}-{tag}.log'}")

    for preset in PRESETS:
        runs[preset].parent.mkdir(parents=True, exist_ok=True)
        log = open(work / f"train-{preset}-{tag}.log", "w")
        print(" ".join(commands[preset]), flush=True)
        processes[preset] = subprocess.Popen(commands[preset], stdout=log, stderr=subprocess.STDOUT)
        if args.sequential:
            finish(preset)
    if not args.sequential:
        for preset in PRESETS:
            finish(preset)
    wall = time.perf_counter() - start

    presets = {}
    for preset in PRESETS:
        result = json.loads((runs[preset] / "result.json").read_text())
        binding, recognition = per_attribute(result, "binding"), per_attribute(result, "recognition")
        unconditional = per_attribute(result, "binding_unconditional")
        pct = lambda block: None if block["accuracy"] is None else round(100 * block["accuracy"], 2)  # noqa: E731
        ci = lambda block: None if block["ci95"] is None else [round(100 * v, 2) for v in block["ci95"]]  # noqa: E731
        presets[preset] = {
            "binding": {a: pct(binding[a]) for a in ATTRIBUTES if a in binding},
            "recognition": {a: pct(recognition[a]) for a in ATTRIBUTES if a in recognition},
            "n": {a: binding[a]["total"] for a in ATTRIBUTES if a in binding},
            "binding_ci95": {a: ci(binding[a]) for a in ATTRIBUTES if a in binding},
            "recognition_n": {a: recognition[a]["total"] for a in ATTRIBUTES if a in recognition},
            "binding_unconditional": {a: pct(unconditional[a]) for a in ATTRIBUTES if a in unconditional},
            "binding_unconditional_n": {a: unconditional[a]["total"] for a in ATTRIBUTES if a in unconditional},
            "steps_per_s": steps_per_second(runs[preset]),
            "cpu_minutes": round(cpu[preset] / 60, 2),
            "run": str(runs[preset]),
            "curve": curve(runs[preset]),
            **diagnostics(runs[preset], data["eval"], work),
        }

    def attributes_meeting(preset: str, test) -> list[str]:
        block = presets[preset]
        return [a for a in ATTRIBUTES if block["binding"].get(a) is not None and block["n"][a] >= MIN_N
                and test(block["binding"][a])]

    ideal_ok = attributes_meeting("ideal", lambda v: v >= 100 * IDEAL_MIN)
    realistic_ok = attributes_meeting("realistic", lambda v: v <= 100 * REALISTIC_MAX)
    idle_minutes = (sum(cpu.values()) if args.sequential else max(cpu.values())) / 60
    binding_met = len(ideal_ok) >= MIN_ATTRIBUTES and len(realistic_ok) >= MIN_ATTRIBUTES
    end_machine = machine()
    report = {
        "presets": presets,
        "wall_minutes": round(wall / 60, 2),
        # what the same work needs on an otherwise idle 2-core machine: the runs in parallel, one core each
        "cpu_minutes": round(sum(cpu.values()) / 60, 2),
        "idle_2core_minutes": round(idle_minutes, 2),
        "generation_minutes": round(sum(generation.values()) / 60, 2),
        "settings": {**vars(args), "num_test": args.num_test, "train_commands": {p: " ".join(c) for p, c in
                                                                                   commands.items()},
                     "evaluation": "ideal preset, test split (held-out MNIST digits), binding conditional on "
                                   "recognition of the attribute for both digits (paper), strict >, Wilson 95%"},
        "target": {"ideal_at_least_90": ideal_ok, "realistic_at_most_60": realistic_ok,
                   "min_n": MIN_N, "max_minutes": MAX_MINUTES, "binding_met": binding_met,
                   # None: a run was reused (finished before this call), so the times are not its training's
                   "within_minutes_wall": None if reused else wall <= MAX_MINUTES * 60,
                   "within_minutes_idle_2core": None if reused else idle_minutes <= MAX_MINUTES,
                   "reused_runs": reused},
        "machine": {"start": start_machine, "end": end_machine},
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")

    print(f"\nsetting: {tag}, {args.num_train} training images per preset; evaluation: {data['eval']} "
          f"({args.num_test} ideal test images). Binding = conditional on recognition (paper), % with n and Wilson "
          "95% interval; recognition %; chance 50%.")
    print(f"{'attribute':<10} {'binding ideal':>26} {'binding realistic':>26} {'recog. ideal':>13} "
          f"{'recog. realistic':>17}")
    for a in ATTRIBUTES:
        cells = []
        for preset in PRESETS:
            block = presets[preset]
            value = block["binding"].get(a)
            cells.append("-" if value is None else
                         f"{value:.1f}% n={block['n'][a]} [{block['binding_ci95'][a][0]:.0f},"
                         f"{block['binding_ci95'][a][1]:.0f}]")
        rec = ["-" if presets[p]["recognition"].get(a) is None else f"{presets[p]['recognition'][a]:.1f}%"
               for p in PRESETS]
        print(f"{a:<10} {cells[0]:>26} {cells[1]:>26} {rec[0]:>13} {rec[1]:>17}")
    digits = [f"{presets[p]['digit_recognition']['accuracy']:.1f}%" for p in PRESETS]
    print(f"{'digit':<10} {'':>26} {'':>26} {digits[0]:>13} {digits[1]:>17}  (digit recognition, a diagnostic)")
    print("binding (%) where the two digits share a size level / differ in size (a diagnostic: size can stand in "
          "for the digit's shape only where they differ)")
    for a in ATTRIBUTES:
        cells = []
        for preset in PRESETS:
            groups = presets[preset]["binding_by_size_relation"]
            cells.append(" / ".join("-" if a not in groups[g] else
                                    f"{groups[g][a]['binding']:.1f} n={groups[g][a]['n']}"
                                    for g in ("same_size", "different_size")))
        print(f"{a:<10} {cells[0]:>26} {cells[1]:>26}")
    print("r of the binding margin with the summed recognition margins (near 1: the conditional binding figure "
          "says little about binding): " + "; ".join(
              f"{p} " + ", ".join(f"{a} {v['r']:.2f}" for a, v in presets[p]["binding_additivity"].items()
                                  if v["r"] is not None) for p in PRESETS))
    print("linear probes on the frozen image embeddings, test accuracy % (chance; bag-of-words probe), a "
          "diagnostic: near chance, the image tower does not encode the attribute")
    for a in ATTRIBUTES:
        cells = [("-" if a not in presets[p]["image_probes"] else
                  "{accuracy:.1f} ({chance:.0f}; {bag_of_words:.1f})".format(**presets[p]["image_probes"][a]))
                 for p in PRESETS]
        print(f"{a:<10} {cells[0]:>26} {cells[1]:>26}")
    speeds = ", ".join(f"{p} {presets[p]['steps_per_s']:.2f}" for p in PRESETS if presets[p]["steps_per_s"])
    print(f"\nsteps/s: {speeds}; both models (training + evaluation, "
          f"{'sequential' if args.sequential else 'in parallel'}): {wall / 60:.1f} min wall "
          f"(target <= {MAX_MINUTES}), CPU time {report['cpu_minutes']:.1f} min (idle 2-core machine: about "
          f"{report['idle_2core_minutes']:.1f} min wall); generation {sum(generation.values()) / 60:.1f} min")
    print(f"ideal >= 90% (n >= {MIN_N}) on {len(ideal_ok)} of 6: {', '.join(ideal_ok) or '-'}; realistic <= 60% "
          f"(n >= {MIN_N}) on {len(realistic_ok)} of 6: {', '.join(realistic_ok) or '-'} -> "
          f"binding target {'MET' if binding_met else 'not met'}; time target (<= {MAX_MINUTES} min) "
          + (f"not measured: finished runs reused ({', '.join(reused)})" if reused else
             f"{'met' if wall <= MAX_MINUTES * 60 else 'not met'} in wall clock, "
             f"{'met' if idle_minutes <= MAX_MINUTES else 'not met'} as idle 2-core time"))
    print(f"machine at end: {end_machine}\nwrote {args.out}")


if __name__ == "__main__":
    main()
