"""How close the harness around the model comes to the storage's own speed: images/s per stage, in one run.

Stages (each on the same datasets, back to back in this process tree, so the ratios compare like with like):

- (a) raw h5py reads of a split: the ``images`` dataset of every shard read in contiguous slices of 256 (the
  storage's ceiling: gzip decoding of one chunk per image);
- (b) the torch reader: ``Split.as_torch()`` in a DataLoader (batches of 256) with 0 and 2 worker processes;
- (c) ``bindscope.evaluate`` with a zero-cost encoder (registered as a real adapter through
  :func:`bindscope.encoders.registry.register_encoder`) on a MADMAN dataset (``--images`` test images, 96 px,
  made by ``bindscope.madman.generate``) and on a ComCO-style dataset (224 px scenes with 2-4 objects, made by the
  project's builder and a synthetic generator: Blender renders ~1 scene/s here), no embedding cache;
- (d) the same MADMAN evaluation with a random-weight open_clip ViT-B-32 on ``--device`` (on a CPU a subset of
  ``--vit-images`` images, its own dataset);

then the ratios (b)/(a), (c)/(a) and (d)/(a). The machine is printed first (CPUs, torch threads, GPU or none,
load average): on a shared machine absolute figures move with the load; the ratios, measured back to back, much
less. (a) is measured before and after the other stages; ratios use the mean.

Datasets are cached under ``--work`` (default: ``$TMPDIR/bindscope-eval-ceiling``), so a rerun skips generation.

Usage::

    python benchmarks/eval_ceiling.py [--images 10000] [--comco-images 2000] [--device auto] [--quick]
                                      [--precision fp32] [--json out.json]
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

def madman_dataset(work: Path, n: int) -> Path:
    import bindscope

    out = work / f"madman-test{n}"
    if not (out / "manifest.json").is_file():
        t0 = time.perf_counter()
        bindscope.madman.generate(out, seed=0, jobs=os.cpu_count() or 1, progress=False, shard_size=1000,
                                  splits={"train": 0, "test": n, "ood": 0})
        print(f"  generated {out} ({n} test images, 96 px) in {time.perf_counter() - t0:.0f} s")
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
        print(f"  built {out} ({n} scenes, 224 px) in {time.perf_counter() - t0:.0f} s")
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


def torch_reader(path: Path, split: str, workers: int) -> float:
    """(b) images/s of the documented torch reader: ``Split.as_torch()`` in a DataLoader, batches of 256."""
    import torch
    from torch.utils.data import DataLoader

    from bindscope.format import torchdata
    from bindscope.format.reader import Dataset

    with Dataset(path) as ds:
        data = ds.split(split).as_torch()
        pin = torch.cuda.is_available()
        if hasattr(torchdata, "loader"):
            loader = torchdata.loader(data, batch_size=BATCH, num_workers=workers, pin_memory=pin)
        else:
            loader = DataLoader(data, batch_size=BATCH, num_workers=workers, collate_fn=torchdata.collate,
                                pin_memory=pin)
        n = 0
        t0 = time.perf_counter()
        for batch in loader:
            n += len(batch["image"])
        return n / (time.perf_counter() - t0)


def evaluate_rate(path: Path, model: str, count: int, **options) -> tuple[float, dict]:
    """(c)/(d) images/s of ``bindscope.evaluate`` (no cache, nothing written) and its result."""
    import bindscope

    t0 = time.perf_counter()
    run = bindscope.evaluate(path, model, out=False, use_cache=False, progress=False, **options)
    return count / (time.perf_counter() - t0), run.result


def vit_rate(path: Path, count: int, options: dict):
    """(d): a random-weight ViT-B-32 loaded first (not timed), then evaluated through ``bindscope.evaluate``
    by way of a registered kind that hands out the loaded adapter. Returns (images/s, result, adapter)."""
    from bindscope.encoders.registry import EncoderKind, load_adapter, register_encoder

    adapter = load_adapter("ViT-B-32", "none", **options)
    adapter.encode_images(np.zeros((2, 96, 96, 3), np.uint8))  # warm-up (kernels, allocator)
    adapter.forward_seconds = 0.0
    register_encoder(EncoderKind("loaded:", lambda m: m.startswith("loaded:"), lambda m, p, **o: adapter,
                                 slug=lambda m: "loaded"))
    rate, result = evaluate_rate(path, "loaded:vit", count)
    return rate, result, adapter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=10000, help="MADMAN test images (96 px)")
    parser.add_argument("--comco-images", type=int, default=2000, help="ComCO-style scenes (224 px)")
    parser.add_argument("--vit-images", type=int, default=None,
                        help="images for (d) (default: --images on CUDA, 32 on a CPU)")
    parser.add_argument("--device", default="auto", help="device of (d): auto, cpu, cuda")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"], help="precision of (d)")
    parser.add_argument("--batch-size", type=int, default=None, help="encoder batch size of (d) (default: by device)")
    parser.add_argument("--quick", action="store_true", help="small sizes (1,000 / 200 / 32 images): a smoke run")
    parser.add_argument("--skip-vit", action="store_true", help="leave out (d)")
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "bindscope-eval-ceiling"),
                        help="folder caching the generated datasets")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.quick:
        args.images, args.comco_images = min(args.images, 1000), min(args.comco_images, 200)
        args.vit_images = args.vit_images or 32

    import torch

    from bindscope.encoders.interface import resolve_device

    device = resolve_device(args.device)
    if args.vit_images is None:
        args.vit_images = args.images if device.startswith("cuda") else 32
    info = machine()
    print(f"machine: {info['platform']} | CPUs {info['cpus']} | torch threads {info['torch_threads']} | "
          f"GPU {info['gpu']} | load average {info['load_average']}")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    madman = madman_dataset(work, args.images)
    comco = comco_dataset(work, args.comco_images)
    vit_data = madman if args.vit_images == args.images else madman_dataset(work, args.vit_images)
    zero_cost_kind()
    out: dict = {"machine": info, "images": {"madman": args.images, "comco": args.comco_images,
                                             "vit": args.vit_images}, "device": device,
                 "precision": args.precision, "rates": {}, "ratios": {}}
    rates = out["rates"]

    def show(key: str, label: str, value: float) -> None:
        rates[key] = round(value, 1)
        print(f"  {label:<62s} {value:>10,.1f} images/s")

    for path in (madman, comco):  # warm-up: HDF5 and the page cache
        raw_reads(path, "test" if path == madman else "scenes")
    print(f"(a) raw h5py reads (contiguous slices of {BATCH})")
    raw_m = [raw_reads(madman, "test")]
    raw_c = [raw_reads(comco, "scenes")]
    show("raw_madman_first", "MADMAN 96 px, first", raw_m[0])
    show("raw_comco_first", "ComCO 224 px, first", raw_c[0])
    print(f"(b) torch reader, batches of {BATCH}")
    show("torch_0_workers", "MADMAN, 0 workers", torch_reader(madman, "test", 0))
    show("torch_2_workers", "MADMAN, 2 workers", torch_reader(madman, "test", 2))
    print("(c) bindscope.evaluate, zero-cost encoder, no cache")
    rate, _ = evaluate_rate(madman, "zero:", args.images, device="cpu")
    show("evaluate_zero_madman", "MADMAN (test split)", rate)
    rate, _ = evaluate_rate(comco, "zero:", args.comco_images, device="cpu")
    show("evaluate_zero_comco", "ComCO (tor, ior, i2tor, matching: every task)", rate)
    if not args.skip_vit:
        print(f"(d) bindscope.evaluate, random-weight ViT-B-32 on {device}, {args.precision}")
        options = {"device": device, "precision": args.precision}
        if args.batch_size:
            options["batch_size"] = args.batch_size
        rate, result, adapter = vit_rate(vit_data, args.vit_images, options)
        show("evaluate_vit_madman", f"MADMAN ({args.vit_images} images and their texts)", rate)
        rates["vit_forward_share"] = round(adapter.forward_seconds / (args.vit_images / rate), 3)
        print(f"  share of that wall time in the encoders' forward passes: {rates['vit_forward_share']:.2f}")
    print("(a) again")
    raw_m.append(raw_reads(madman, "test"))
    raw_c.append(raw_reads(comco, "scenes"))
    show("raw_madman_second", "MADMAN 96 px, second", raw_m[1])
    show("raw_comco_second", "ComCO 224 px, second", raw_c[1])
    raw_madman, raw_comco = float(np.mean(raw_m)), float(np.mean(raw_c))
    rates["raw_madman"], rates["raw_comco"] = round(raw_madman, 1), round(raw_comco, 1)
    ratios = out["ratios"]
    ratios["torch_0_workers/raw"] = rates["torch_0_workers"] / raw_madman
    ratios["torch_2_workers/raw"] = rates["torch_2_workers"] / raw_madman
    ratios["evaluate_zero_madman/raw"] = rates["evaluate_zero_madman"] / raw_madman
    ratios["evaluate_zero_comco/raw"] = rates["evaluate_zero_comco"] / raw_comco
    if "evaluate_vit_madman" in rates:
        ratios["evaluate_vit_madman/raw"] = rates["evaluate_vit_madman"] / raw_madman
    print("ratios (to the mean of the two raw reads of the same dataset)")
    for key, value in ratios.items():
        ratios[key] = round(value, 3)
        print(f"  {key:<62s} {value:>10.3f}")
    out["torch_version"] = torch.__version__
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    print(f"machine at the end: load average {machine()['load_average']}")


if __name__ == "__main__":
    sys.exit(main())
