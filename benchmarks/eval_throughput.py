"""Evaluation throughput of a random-weight open_clip ViT-B-32 on this machine (CPU unless a GPU is visible).

Prints:
  1. raw encoder throughput: images/s and texts/s (forward passes of ``encode_images`` / ``encode_texts``);
  2. one full ``comco eval`` run (TOR, IOR, I2TOR, matching) on a freshly rendered tiny ComCO dataset with an
     empty embedding cache, then the same run again with the cache filled: the miss/hit wall-time ratio, and for
     the cold run the share of wall time spent outside the encoders' forward passes (target < 10%);
  3. (unless --skip-minilm) all-MiniLM-L6-v2 TOR shares on sampled 4-object ComCO-72 captions, exactly as
     ``comco eval --tasks tor --objects 4 --vocab comco72 -n 2000 --model sentence-transformers/all-MiniLM-L6-v2``.

Usage: .venv/bin/python benchmarks/eval_throughput.py [--scenes 24] [--resolution 224] [--tor-n 2000]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path


def machine() -> str:
    import torch

    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return (f"{platform.platform()} | {platform.processor() or platform.machine()} | CPUs {os.cpu_count()} | "
            f"torch threads {torch.get_num_threads()} | GPU {gpu} | load average {tuple(round(x, 2) for x in load)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenes", type=int, default=24, help="ComCO scenes to render for the evaluation run")
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--images", type=int, default=64, help="images for the raw throughput figure")
    parser.add_argument("--texts", type=int, default=256, help="captions for the raw throughput figure")
    parser.add_argument("--matching-negatives", type=int, default=8)
    parser.add_argument("--tor-n", type=int, default=2000)
    parser.add_argument("--skip-minilm", action="store_true")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()

    import numpy as np
    from click.testing import CliRunner

    from bindscope.cli.main import comco
    from bindscope.encoders.embedding_cache import EmbeddingCache
    from bindscope.encoders.registry import load_adapter
    from bindscope.evaluation.comco import evaluate_comco, evaluate_tor_sampled
    from bindscope.evaluation.sampled import SampledCaptions
    from bindscope.format.reader import Dataset

    print(f"machine: {machine()}")
    work = Path(tempfile.mkdtemp(prefix="bindscope-eval-bench-"))
    try:
        data = work / "comco"
        t0 = time.perf_counter()
        r = CliRunner().invoke(comco, ["render", "-n", str(args.scenes), "--objects", "2-4", "--set", "simco18",
                                       "--resolution", str(args.resolution), "--samples", "1", "--out", str(data)])
        if r.exit_code != 0:
            raise SystemExit(f"comco render failed:\n{r.output}")
        print(f"rendered {args.scenes} scenes + 18 references at {args.resolution}px in "
              f"{time.perf_counter() - t0:.1f} s (not part of the figures below)")

        t0 = time.perf_counter()
        vit = load_adapter("ViT-B-32", "none", device=args.device, batch_size=32)
        print(f"loaded ViT-B-32 (random weights) on {vit.device} in {time.perf_counter() - t0:.1f} s")

        # 1. raw encoder throughput
        with Dataset(data) as ds:
            pool = [s.image for s in ds.split("scenes")] + [s.image for s in ds.split("references")]
        images = np.stack([pool[i % len(pool)] for i in range(args.images)])
        vit.encode_images(images[:4])  # warm-up
        vit.forward_seconds = 0.0
        t0 = time.perf_counter()
        vit.encode_images(images)
        wall = time.perf_counter() - t0
        print(f"[1] images: {args.images / wall:.2f} img/s end to end ({args.images / vit.forward_seconds:.2f} img/s "
              f"in forward passes), batch 32, {args.resolution}px -> 224px")
        texts = [f"cube and sphere and object {i} and torus" for i in range(args.texts)]
        vit.forward_seconds = 0.0
        t0 = time.perf_counter()
        vit.encode_texts(texts)
        wall = time.perf_counter() - t0
        print(f"[1] texts:  {args.texts / wall:.2f} text/s end to end ({args.texts / vit.forward_seconds:.2f} text/s "
              "in forward passes), batch 32, 77 tokens")

        # 2. a full evaluation, cold cache then warm cache
        cache_dir = work / "cache"
        vit.forward_seconds = 0.0
        t0 = time.perf_counter()
        cold = evaluate_comco(data, vit, options={"matching": {"matching_negatives": args.matching_negatives}},
                              cache=EmbeddingCache(cache_dir, vit.cache_key), progress=False)
        cold_wall = time.perf_counter() - t0
        cold_fwd = vit.forward_seconds
        vit.forward_seconds = 0.0
        t0 = time.perf_counter()
        warm = evaluate_comco(data, vit, options={"matching": {"matching_negatives": args.matching_negatives}},
                              cache=EmbeddingCache(cache_dir, vit.cache_key), progress=False)
        warm_wall = time.perf_counter() - t0
        c, w = cold["counts"], warm["counts"]
        print(f"[2] cold run (cache empty): {cold_wall:.2f} s wall, {cold_fwd:.2f} s in forward passes; encoded "
              f"{c['images_encoded']} images + {c['texts_encoded']} texts "
              f"({c['images_requested']} + {c['texts_requested']} requested)")
        print(f"[2] share of wall time outside the forward passes: {100 * (1 - cold_fwd / cold_wall):.1f} % "
              "(target < 10 %)")
        print(f"[2] warm run (cache full): {warm_wall:.2f} s wall, {vit.forward_seconds:.2f} s in forward passes; "
              f"cache hits {w['image_cache_hits']} images + {w['text_cache_hits']} texts, encoded "
              f"{w['images_encoded']} + {w['texts_encoded']}")
        print(f"[2] cache miss / hit wall-time ratio: {cold_wall / warm_wall:.1f}x")
        assert warm["metrics"] == cold["metrics"]

        # 3. all-MiniLM-L6-v2 TOR on sampled 4-object ComCO-72 captions
        if not args.skip_minilm:
            sbert = load_adapter("sentence-transformers/all-MiniLM-L6-v2", device=args.device)
            sbert.forward_seconds = 0.0
            t0 = time.perf_counter()
            tor = evaluate_tor_sampled(sbert, SampledCaptions(vocab="comco72", objects=4, n=args.tor_n), seed=0)
            wall = time.perf_counter() - t0
            g = tor["metrics"]["tor"]["by_num_objects"]["4"]
            cond = " / ".join(f"{100 * p['conditional']['share']:.2f}" for p in g["positions"])
            unc = " / ".join(f"{100 * p['unconditional']['share']:.2f}" for p in g["positions"])
            print(f"[3] all-MiniLM-L6-v2 TOR, {args.tor_n} 4-object comco72 captions (seed 0), % top-1 at position "
                  f"1/2/3/4: conditional {cond}; unconditional {unc}; top-1 in caption {g['top1_in_query']}, "
                  f"ties {g['ties']}; {wall:.1f} s ({(args.tor_n + 72) / sbert.forward_seconds:.0f} text/s in "
                  "forward passes)")
        print(f"machine at the end: {machine()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
