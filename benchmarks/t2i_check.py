"""The text-to-image step of the GPU check (``benchmarks/gpu_check.py``), also runnable alone; prints ONE JSON object.

With real checkpoints, on ``cuda``, when their weights are in the Hugging Face cache (nothing is downloaded: run the
commands of docs/t2i.md once where the Hub is reachable, and carry the cache along as ``$HF_HOME``):

1. ``comco t2i`` with ``stabilityai/sd-turbo`` (1 step, guidance 0, 512 px, fp16): 8 object sets of 2-3 COCO
   objects in every rotation, 2 images per prompt (40 images); images/s;
2. ``comco t2i-score`` of those images with ``google/owlv2-base-patch16-ensemble`` (threshold 0.3) and, when its
   weights are cached, the CLIP ``openai/clip-vit-base-patch32`` (``hf-vlm:``): presence by mention position and
   first against last per scorer;
3. ``bindscope caption-bias`` on the same images and prompts written as WebDataset shards (what img2dataset writes),
   objects from the COCO lexicon, areas from ``facebook/sam-vit-base`` masks in the OWLv2 boxes: the largest-first
   share.

A missing package or weight gives ``{"skipped": reason}``; so does ``--dry-run`` (sd-turbo on the CPU takes
minutes). The JSON object holds ``commands`` (the equivalent command lines), ``clip_scored`` (false: the CLIP weights
were not cached and only the detector scored), ``images``, ``generation_images_per_s``,
``presence`` (scorer -> position -> share), ``first_vs_last`` (scorer -> ``{first, last, first_more, last_more,
p_value}``), ``caption_bias`` and ``wall_s``.

    python benchmarks/t2i_check.py [--work DIR] [--out FILE] [--dry-run]
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import tarfile
import tempfile
import time
from pathlib import Path

PIPELINE = "stabilityai/sd-turbo"
DETECTOR = "google/owlv2-base-patch16-ensemble"
SEGMENTER = "facebook/sam-vit-base"
CLIP = "openai/clip-vit-base-patch32"
THRESHOLD = 0.3
WEIGHT_FILES = {PIPELINE: "model_index.json", DETECTOR: "config.json", SEGMENTER: "config.json", CLIP: "config.json"}


def cached(repo: str) -> bool:
    """Whether the Hugging Face cache holds ``repo``'s index or config file (a sign its weights were fetched)."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo, WEIGHT_FILES[repo]), str)


def write_pairs(data: Path, out: Path) -> Path:
    """The images and prompts of a ``comco t2i`` dataset as one WebDataset shard (``<key>.jpg`` + ``<key>.txt``)."""
    from PIL import Image

    from bindscope.format.reader import Dataset

    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out / "00000.tar", "w") as archive:
        for sample in Dataset(data).split("images"):
            for suffix, payload in (("jpg", _jpeg(Image.fromarray(sample.image))), ("txt", sample.caption.encode())):
                info = tarfile.TarInfo(f"{sample.index:09d}.{suffix}")
                info.size = len(payload)
                archive.addfile(info, io.BytesIO(payload))
    return out


def _jpeg(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


def run(work: Path, device: str = "cuda", dry: bool = False) -> dict:
    """The step (see the module docstring); ``{"skipped": reason}`` when it cannot run here."""
    if dry:
        return {"skipped": "dry run: the text-to-image step runs on a GPU only"}
    for module in ("diffusers", "transformers"):
        if importlib.util.find_spec(module) is None:
            return {"skipped": f"{module} is not installed (pip install 'bindscope[t2i]')"}
    missing = [repo for repo in (PIPELINE, DETECTOR, SEGMENTER) if not cached(repo)]
    if missing:
        return {"skipped": f"weights not in the Hugging Face cache: {', '.join(missing)}"}
    import bindscope
    from bindscope.encoders.settings import EncoderSettings

    start = time.perf_counter()
    data = work / "t2i-sd-turbo"
    bindscope.comco.t2i(data, PIPELINE, names="coco", objects="2-3", n=8, images_per_prompt=2, steps=1, guidance=0.0,
                        resolution=512, precision="fp16", device=device, overwrite=True, progress=False)
    generated = time.perf_counter() - start
    images = bindscope.Dataset(data).manifest["splits"]["images"]["num_samples"]
    encoder = EncoderSettings(f"hf-vlm:{CLIP}", device=device, use_cache=False) if cached(CLIP) else None
    score = bindscope.t2i_score(data, encoder, DETECTOR, threshold=THRESHOLD, out=work / "t2i-score.json",
                                overwrite=True, progress=False).result
    pairs = write_pairs(data, work / "t2i-pairs")
    bias = bindscope.caption_bias(pairs, detector=DETECTOR, segmenter=SEGMENTER, threshold=THRESHOLD, device=device,
                                  out=work / "t2i-caption-bias.json", overwrite=True, progress=False).result
    commands = [f"comco t2i --pipeline {PIPELINE} --names coco --objects 2-3 -n 8 --images-per-prompt 2 --steps 1 "
                f"--guidance 0 --resolution 512 --precision fp16 --device {device} --out {data}",
                f"comco t2i-score {data} --detector {DETECTOR} --threshold {THRESHOLD} --model hf-vlm:{CLIP} --device {device}",
                f"bindscope caption-bias {pairs} --detector {DETECTOR} --segmenter {SEGMENTER} --threshold "
                f"{THRESHOLD} --device {device} --out {work / 't2i-caption-bias.json'}"]
    tests = {name: s["presence"]["first_vs_last"] for name, s in score["scorers"].items()}
    return {"commands": commands, "clip_scored": encoder is not None,
            "images": images, "generation_images_per_s": round(images / generated, 2),
            "presence": {name: {k: b["share"] for k, b in s["presence"]["by_position"].items()}
                         for name, s in score["scorers"].items()},
            "first_vs_last": {name: {"first": t["first"]["share"], "last": t["last"]["share"],
                                     "first_more": t["first_more"], "last_more": t["last_more"],
                                     "p_value": t["p_value"]} for name, t in tests.items()},
            "caption_bias": {"captions": bias["num_captions"], "largest_first_share": bias["largest_first_share"],
                             "skipped": bias["skipped"]["samples"]},
            "wall_s": round(time.perf_counter() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "bindscope-t2i-check"))
    parser.add_argument("--out", default=None, help="also write the JSON object to this file")
    parser.add_argument("--dry-run", action="store_true", help="report the step as skipped (no GPU)")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    report = run(work, dry=args.dry_run)
    text = json.dumps(report, sort_keys=True)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text, flush=True)


if __name__ == "__main__":
    main()
