"""Probes -> LABCLIP (and conjunctive search) on a small SimCO-attribute dataset, end to end, with figures.

Usage:
    .venv/bin/python benchmarks/simco_attribute_labclip.py                     # random-weight ViT-B-32
    .venv/bin/python benchmarks/simco_attribute_labclip.py --model runs/x/model.pt -n 400 --conjunctive 200
    .venv/bin/python benchmarks/simco_attribute_labclip.py --data data/simco-attr   # reuse a rendered dataset

Steps (all through the public functions the CLI uses):
1. ``comco render --set simco18 --attributes colour,material --size-mode equal`` (``-n`` scenes, 2-5 objects,
   ``--resolution`` px) into ``--work`` unless ``--data`` is given (resumes if interrupted);
2. ``bindscope probe``: image and text probes per attribute, with chance, the bag-of-words probe and the
   accuracy per object count;
3. ``bindscope labclip fit`` on the scenes outside a 10 % hold-out of (category, attribute, value)
   combinations, then ``labclip eval`` on the held-out ones: binding before/after, modality gap before/after;
4. with ``--conjunctive N``: a conjunctive-search dataset of N scenes and its presence probe per number of
   distractors against the bag-of-words probe.

The model is a random-weight open_clip ``ViT-B-32`` (``--pretrained none``, seeded) unless ``--model`` names a
checkpoint trained by this project (``madman train``) or any open_clip model available on the machine. Random
weights give a reference point: what a linear read-out of an untrained network's features recovers. Prints
the machine, the load and the timings.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _render(out: Path, n: int, resolution: int, samples: int, jobs: int, task: str) -> float:
    from bindscope.build.builder import build_dataset
    from bindscope.generators.comco.config import resolve_render_config
    from bindscope.generators.comco.generator import ComcoGenerator

    config = resolve_render_config(None, {"set": "simco18", "n": n, "resolution": resolution, "samples": samples,
                                          "size_mode": "equal", "references": False, "task": task,
                                          "attributes": "colour" if task == "conjunctive-search"
                                          else "colour,material"})
    generator = ComcoGenerator(config, seed=0, threads=max(1, (os.cpu_count() or 1) // jobs), device="cpu")
    generator.check()
    start = time.perf_counter()
    if not (out / "manifest.json").is_file():
        build_dataset(generator, out, jobs=jobs, progress=True)
    return time.perf_counter() - start


def _f(value) -> str:
    return "  -  " if value is None else f"{value:.3f}"


def main() -> None:
    from bindscope.alignment.conjunctive import conjunctive_search
    from bindscope.alignment.data import make_embedder
    from bindscope.alignment.api import evaluate_on_dataset, fit_on_dataset, probe_dataset
    from bindscope.alignment.probes import ProbeSettings
    from bindscope.encoders.registry import load_adapter
    from bindscope.format.reader import Dataset

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default=str(ROOT / "data" / "bench-simco-attr"))
    parser.add_argument("--data", default=None, help="an existing SimCO-attribute dataset (skips rendering)")
    parser.add_argument("-n", type=int, default=300)
    parser.add_argument("--conjunctive", type=int, default=0, help="scenes of a conjunctive-search dataset (0: skip)")
    parser.add_argument("--resolution", type=int, default=128)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--model", default="ViT-B-32")
    parser.add_argument("--pretrained", default="none")
    parser.add_argument("--steps", type=int, default=300, help="probe Adam steps")
    parser.add_argument("--epochs", type=int, default=20, help="LABCLIP epochs")
    args = parser.parse_args()

    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    work = Path(args.work)
    data = Path(args.data) if args.data else work / "scenes"
    timings = {}
    if not args.data:
        timings["render"] = _render(data, args.n, args.resolution, args.samples, args.jobs, "scenes")
    adapter = load_adapter(args.model, args.pretrained, device="cpu")
    embedder = make_embedder(adapter, use_cache=False)
    print(f"model: {adapter.name} ({args.pretrained}), D = {adapter.embed_dim}")
    with Dataset(data) as ds:
        start = time.perf_counter()
        probes = probe_dataset(ds, embedder, settings=ProbeSettings(steps=args.steps))
        timings["probe"] = time.perf_counter() - start
        print(f"\nprobes on {probes['n_samples']} scenes of {data} (test accuracy on held-out combinations)")
        print(f"{'attribute':<10}{'modality':<9}{'probe':>7}{'BoW':>7}{'chance':>8}  by object count (probe / BoW, n)")
        for modality, per in probes["modalities"].items():
            for attribute in ("colour", "material"):
                s = per[attribute]
                counts = "  ".join(f"{k}: {_f(c['accuracy'])}/{_f(c['bag_of_words'])} ({c['total']})"
                                   for k, c in s["by_object_count"].items())
                print(f"{attribute:<10}{modality:<9}{_f(s['accuracy']):>7}{_f(s['bag_of_words']):>7}"
                      f"{_f(s['chance']):>8}  {counts}")
        start = time.perf_counter()
        labclip = fit_on_dataset(ds, embedder, holdout=0.1, epochs=args.epochs)
        report = evaluate_on_dataset(ds, embedder, labclip)
        timings["labclip"] = time.perf_counter() - start
    print(f"\nLABCLIP: fitted on {labclip.meta['n_fit_samples']} scenes, evaluated on {report['n_eval_samples']} "
          f"held-out scenes ({report['n_held_out_combinations']} held-out combinations)")
    for key in ("binding", "binding_given_recognition", "recognition"):
        b, a = report["before"][key], report["after"][key]
        print(f"  {key:<27} {_f(b['accuracy'])} -> {_f(a['accuracy'])}  (n = {b['n']}/{a['n']})")
    print(f"  {'modality gap':<27} {report['before']['modality_gap']:.3f} -> {report['after']['modality_gap']:.3f}")
    if args.conjunctive:
        cs_data = work / "conjunctive"
        timings["render conjunctive"] = _render(cs_data, args.conjunctive, args.resolution, args.samples,
                                                args.jobs, "conjunctive-search")
        with Dataset(cs_data) as ds:
            start = time.perf_counter()
            cs = conjunctive_search(ds, embedder, settings=ProbeSettings(steps=args.steps))
            timings["conjunctive"] = time.perf_counter() - start
        print(f"\nconjunctive search for '{cs['target']['colour']} {cs['target']['category']}' "
              f"({cs['n_train']}/{cs['n_val']}/{cs['n_test']} train/val/test scenes)")
        for k, c in [*cs["by_distractors"].items(), ("all", cs)]:
            ci = c["accuracy"]["ci95"]
            print(f"  distractors {k:<4} probe {_f(c['accuracy']['accuracy'])} [{ci[0]:.3f}, {ci[1]:.3f}]  "
                  f"bag of words {_f(c['bag_of_words']['accuracy'])}  (n = {c['accuracy']['total']})")
    print("\ntimings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items())
          + f"; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
