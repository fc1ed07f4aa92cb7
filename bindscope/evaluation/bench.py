"""External compositionality benchmarks read from their published file layouts: ARO and SugarCrepe.

Every item is one image and several captions, one of them correct; the model is right when the correct caption's
cosine similarity with the image is strictly higher than every wrong caption's (a tie counts as wrong, as
everywhere in bindscope). Accuracy per subset with a Wilson 95 % interval (``ci95``, one item = one trial) and an
image-cluster bootstrap interval (``ci95_cluster``: items sharing an image, such as the five captions of an image in
ARO's order subsets, are not independent); averages over subsets both macro (unweighted mean of subset accuracies)
and micro (pooled items), labelled. ``--labclip`` applies
a fitted LABCLIP map to the L2-normalised text embeddings (:mod:`bindscope.alignment.labclip`).

Layouts (facts from the benchmarks' releases; see docs/real-data.md for downloads):

- **SugarCrepe** (Hsieh et al., NeurIPS 2023 Datasets and Benchmarks): ``DATA/<subset>.json`` for the seven
  subsets ``add_att add_obj replace_att replace_obj replace_rel swap_att swap_obj``; each file is an object keyed by
  (non-contiguous) string ids, each value ``{"filename", "caption", "negative_caption"}``; images are COCO val2017
  (``--images`` = the ``val2017`` folder). Options: [caption, negative_caption].
- **ARO** (Yuksekgonul et al., ICLR 2023):
  ``vg_relation``: ``DATA/visual_genome_relation.json``, a list of ``{"image_path", "bbox_x", "bbox_y", "bbox_w",
  "bbox_h", "true_caption", "false_caption", "relation_name"}``, images under ``DATA/images/``; the image is cropped
  to the box. Per-relation accuracies are reported too (``groups``), with their macro average.
  ``vg_attribution``: ``DATA/visual_genome_attribution.json``, the same with ``"attributes": [a, b]`` (groups
  ``a_b``). ``coco_order``: ``DATA/coco_karpathy_test.json``, a list of ``{"image": <path under --images>,
  "caption": [...]}``; ``flickr_order``: ``DATA/flickr30k_test.json``, the same with paths under
  ``--flickr-images``. Each caption is one item: the caption (lower-cased, punctuation removed, at most 30 words)
  against four perturbations of it: nouns and adjectives shuffled among themselves; every other word shuffled
  among themselves; words shuffled within each trigram; trigrams shuffled. Nouns and adjectives come from a
  part-of-speech tagger (:class:`bindscope.evaluation.aro.OrderTagger`: spaCy ``en_core_web_sm`` where it is
  installed, else the word-list tagger, recorded). Perturbations are seeded by (seed, subset, item, kind); one that
  cannot differ from the caption (e.g. a single noun) is left out.

ARO's own macro averages of the VG subsets (relations in its list ``symmetric`` and attribute pairs with fewer than
25 items left out) are reported beside bindscope's as ``aro_macro`` (:mod:`bindscope.evaluation.aro`).

Images (after any box crop) are brought to a square of the model's input side by ``image_fit``:
``"centre-crop"`` (the default: the shorter side scaled to the side with bicubic resampling, then the centred square
kept, as CLIP's and open_clip's own preprocessing does, which ARO's and SugarCrepe's scripts use, so figures compare
with their tables) or ``"letterbox"`` (the longer side scaled, black padding: every pixel kept, bindscope's rule
elsewhere).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from tqdm.auto import tqdm

from bindscope.encoders.embedding_cache import Embedder, EmbeddingCache
from bindscope.encoders.interface import EncoderAdapter
from bindscope.errors import BadInput, check_text
from bindscope.evaluation import IMAGE_FITS
from bindscope.evaluation.results import (
    TextTransform,
    apply_text_transform,
    encoder_counts,
    envelope,
    transform_name,
    truncation_counts,
)
from bindscope.evaluation.stats import averages, clustered_proportion
from bindscope.io.image_input import image_size
from bindscope.io.json_input import load_json

SUGARCREPE_SUBSETS = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")
ARO_SUBSETS = ("vg_relation", "vg_attribution", "coco_order", "flickr_order")
BENCHMARKS = {"sugarcrepe": SUGARCREPE_SUBSETS, "aro": ARO_SUBSETS}
ARO_FILES = {"vg_relation": "visual_genome_relation.json", "vg_attribution": "visual_genome_attribution.json",
             "coco_order": "coco_karpathy_test.json", "flickr_order": "flickr30k_test.json"}
ORDER_WORDS = 30  # ARO truncates order captions to 30 words
ORDER_PERTURBATIONS = ("shuffle_nouns_and_adjectives", "shuffle_all_but_nouns_and_adjectives",
                       "shuffle_within_trigrams", "shuffle_trigrams")
Tagger = Callable[[list[str]], list[bool]]  # words -> is each a noun or an adjective


@dataclass(frozen=True)
class BenchItem:
    """One benchmark item: an image (optionally a crop ``(x, y, w, h)`` in pixels), its captions and which is right."""

    image: str
    captions: tuple[str, ...]
    correct: int = 0
    crop: tuple[float, float, float, float] | None = None
    group: str = ""


def _load(path: Path, what: str):
    if not path.is_file():
        raise BadInput(f"{what}: {str(path)!r} is missing")
    return load_json(path, f"{what}:")


def _image_path(root: Path, name, where: str, key: str, checked: set[str] | None = None) -> str:
    """The checked image file ``name`` under ``root`` (inside it, present, a readable image within
    :data:`bindscope.io.image_input.MAX_IMAGE_PIXELS`; the header read once per file, ``checked`` remembers);
    ``key`` is the entry's field of the path (``filename``, ``image_path``, ``image``)."""
    if not isinstance(name, str) or not name:
        raise BadInput(f"{where}: the image path must be a non-empty string, got {name!r}")
    check_text(f"{where}: {key}", name, name=True)
    path = (root / name).resolve()
    if root.resolve() not in path.parents:
        raise BadInput(f"{where}: image {name!r} points outside {str(root)!r}")
    if not path.is_file():
        raise BadInput(f"{where}: image {name!r} is missing from {str(root)!r}")
    if checked is None or str(path) not in checked:
        image_size(path, f"{where}: image")
        if checked is not None:
            checked.add(str(path))
    return str(path)


def _check_captions(where: str, entry: dict, keys: tuple[str, ...]) -> None:
    for key in keys:
        check_text(f"{where}: {key}", entry[key])


def _read_sugarcrepe(data: Path, subset: str, images: Path) -> list[BenchItem]:
    entries = _load(data / f"{subset}.json", f"sugarcrepe {subset}")
    if not isinstance(entries, dict):
        raise BadInput(f"sugarcrepe {subset}: {subset}.json must be an object keyed by item id")
    items, checked = [], set()
    for key, entry in entries.items():
        where = f"sugarcrepe {subset}.json item {key!r}"
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("caption", "negative_caption")):
            raise BadInput(f"{where}: needs 'filename', 'caption' and 'negative_caption' strings")
        _check_captions(where, entry, ("caption", "negative_caption"))
        items.append(BenchItem(_image_path(images, entry.get("filename"), where, "filename", checked),
                               (entry["caption"], entry["negative_caption"])))
    return items


def _read_vg(data: Path, subset: str) -> list[BenchItem]:
    entries = _load(data / ARO_FILES[subset], f"aro {subset}")
    if not isinstance(entries, list):
        raise BadInput(f"aro {subset}: {ARO_FILES[subset]} must be a list of items")
    items, checked = [], set()
    for k, entry in enumerate(entries):
        where = f"aro {ARO_FILES[subset]} item {k}"
        box = [entry.get(f"bbox_{c}") for c in "xywh"] if isinstance(entry, dict) else []
        if (not isinstance(entry, dict) or not all(isinstance(entry.get(c), str) for c in ("true_caption", "false_caption"))
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in box)
                or box[2] <= 0 or box[3] <= 0):
            raise BadInput(f"{where}: needs 'image_path', 'true_caption', 'false_caption' and a box 'bbox_x', 'bbox_y', "
                           "'bbox_w' > 0, 'bbox_h' > 0")
        _check_captions(where, entry, ("true_caption", "false_caption"))
        if subset == "vg_relation":
            check_text(f"{where}: relation_name", entry.get("relation_name"), name=True)
            group = str(entry.get("relation_name", ""))
        else:
            attributes = entry.get("attributes")
            for a, attribute in enumerate(attributes if isinstance(attributes, list) else []):
                check_text(f"{where}: attributes[{a}]", attribute, name=True)
            group = "_".join(map(str, attributes)) if isinstance(attributes, list) else ""
        items.append(BenchItem(_image_path(data / "images", entry.get("image_path"), where, "image_path", checked),
                               (entry["true_caption"], entry["false_caption"]), crop=tuple(box), group=group))
    return items


def order_words(caption: str) -> list[str]:
    """ARO's caption normalisation for the order subsets: lower case, punctuation removed, at most 30 words."""
    return re.sub(r"[^\w\s']", " ", caption.lower()).split()[:ORDER_WORDS]


def perturb(words: list[str], kind: str, rng: np.random.Generator, tagger: Tagger | None) -> list[str]:
    """One ARO order perturbation of ``words`` (see :data:`ORDER_PERTURBATIONS` and the module docstring)."""
    out = list(words)
    if kind in ORDER_PERTURBATIONS[:2]:
        flags = tagger(words)
        want = kind == ORDER_PERTURBATIONS[0]
        slots = [i for i, flag in enumerate(flags) if bool(flag) == want]
        for i, j in zip(slots, rng.permutation(slots)):
            out[i] = words[j]
        return out
    chunks = [words[i:i + 3] for i in range(0, len(words), 3)]
    if kind == "shuffle_trigrams":
        return [w for k in rng.permutation(len(chunks)) for w in chunks[k]]
    return [w for chunk in chunks for w in (chunk[k] for k in rng.permutation(len(chunk)))]


def _read_order(data: Path, subset: str, images: Path, tagger: Tagger, seed: int) -> list[BenchItem]:
    entries = _load(data / ARO_FILES[subset], f"aro {subset}")
    if not isinstance(entries, list):
        raise BadInput(f"aro {subset}: {ARO_FILES[subset]} must be a list of images")
    items, checked = [], set()
    number = ARO_SUBSETS.index(subset)
    for k, entry in enumerate(entries):
        where = f"aro {ARO_FILES[subset]} item {k}"
        if not isinstance(entry, dict) or not isinstance(entry.get("caption"), list):
            raise BadInput(f"{where}: needs 'image' and a 'caption' list")
        image = _image_path(images, entry.get("image"), where, "image", checked)
        for c, caption in enumerate(entry["caption"]):
            if not isinstance(caption, str):
                raise BadInput(f"{where}: captions must be strings, got {caption!r}")
            check_text(f"{where}: caption[{c}]", caption)
            words = order_words(caption)
            options = [" ".join(words)]
            for p, kind in enumerate(ORDER_PERTURBATIONS):
                rng = np.random.default_rng([seed, number, len(items), p])
                for _ in range(10):  # redraw a permutation that left the caption unchanged
                    text = " ".join(perturb(words, kind, rng, tagger))
                    if text != options[0]:
                        options.append(text)
                        break
            items.append(BenchItem(image, tuple(options)))
    return items


def read_bench(benchmark: str, data: str | os.PathLike, images: str | os.PathLike | None = None,
               flickr_images: str | os.PathLike | None = None, subsets: list[str] | None = None,
               tagger: Tagger | str | None = None, seed: int = 0) -> dict[str, list[BenchItem]]:
    """Read and check a benchmark's files before any model is loaded: JSON within bounds
    (:func:`bindscope.io.json_input.load_json`), captions, labels and image paths without control characters,
    every image present, inside its folder and a readable image of at most
    :data:`bindscope.io.image_input.MAX_IMAGE_PIXELS` pixels (its header is read).

    Args:
        benchmark: ``aro`` or ``sugarcrepe``.
        data: the folder with the benchmark's JSON files (and, for ARO's VG subsets, ``images/``).
        images: SugarCrepe: the COCO val2017 image folder (required). ARO coco_order: the COCO root the karpathy
            paths are relative to (default ``data``).
        flickr_images: ARO flickr_order: the Flickr30k root (default ``data``).
        subsets: the subsets to read; None = every subset whose file is in ``data`` (at least one).
        tagger: noun/adjective tagger for the order subsets: a callable, or a name or None for
            :class:`bindscope.evaluation.aro.OrderTagger` (None: spaCy, else the word-list tagger).
        seed: seed of the order perturbations.

    Returns:
        subset -> items, in the benchmark's subset order.

    Raises:
        BadInput: unknown benchmark or subset, missing folder/file/image, an image too large or unreadable,
            malformed entry (named); ``tagger="spacy"`` without spaCy or its model.
    """
    from bindscope.evaluation.aro import OrderTagger

    if not callable(tagger):
        tagger = OrderTagger(tagger)
    if benchmark not in BENCHMARKS:
        raise BadInput(f"unknown benchmark {benchmark!r}; allowed: {', '.join(BENCHMARKS)}")
    data = Path(data)
    if not data.is_dir():
        raise BadInput(f"data {str(data)!r} is not a folder", param="data")
    names = BENCHMARKS[benchmark]
    file_of = (lambda s: f"{s}.json") if benchmark == "sugarcrepe" else ARO_FILES.get
    if subsets:
        for subset in subsets:
            if subset not in names:
                raise BadInput(f"unknown {benchmark} subset {subset!r}; allowed: {', '.join(names)}")
        chosen = [s for s in names if s in subsets]
    else:
        chosen = [s for s in names if (data / file_of(s)).is_file()]
        if not chosen:
            raise BadInput(f"data {str(data)!r} holds none of the {benchmark} files "
                           f"({', '.join(file_of(s) for s in names)})", param="data")
    if benchmark == "sugarcrepe":
        if images is None or not Path(images).is_dir():
            raise BadInput("images: sugarcrepe needs the COCO val2017 image folder"
                           + (f" ({str(images)!r} is not a folder)" if images is not None else ""), param="images")
        return {s: _read_sugarcrepe(data, s, Path(images)) for s in chosen}
    out = {}
    for subset in chosen:
        if subset.startswith("vg_"):
            out[subset] = _read_vg(data, subset)
            continue
        root = Path((images if subset == "coco_order" else flickr_images) or data)
        if not root.is_dir():
            raise BadInput(f"aro {subset}: image folder {str(root)!r} is not a folder")
        out[subset] = _read_order(data, subset, root, tagger, seed)
    return out


def centre_crop_image(path: str | os.PathLike, size: int,
                      crop: tuple[float, float, float, float] | None = None) -> np.ndarray:
    """The image file ``path`` as ``(size, size, 3)`` uint8 RGB: optionally cropped to ``crop = (x, y, w, h)``
    (pixels), then scaled (bicubic) so that its shorter side is ``size`` pixels (the longer side ``int(size * long /
    short)``) and the centred ``size`` x ``size`` square kept (offsets ``round((side - size) / 2)``): the resize and
    centre crop of torchvision's ``Resize(size)`` + ``CenterCrop(size)``, the preprocessing of CLIP's and open_clip's
    models.

    Raises:
        BadInput: the file is not a readable image, or declares too many pixels
            (:func:`bindscope.io.image_input.read_rgb`).
    """
    from PIL import Image

    from bindscope.io.image_input import read_rgb

    rgb = read_rgb(path)
    if crop is not None:
        x, y, w, h = crop
        rgb = rgb.crop((x, y, x + w, y + h))
    width, height = rgb.size
    new = (size, max(1, int(size * height / width))) if width <= height else \
        (max(1, int(size * width / height)), size)
    if new != rgb.size:
        rgb = rgb.resize(new, Image.BICUBIC)
    left, top = int(round((new[0] - size) / 2.0)), int(round((new[1] - size) / 2.0))
    return np.asarray(rgb.crop((left, top, left + size, top + size)), dtype=np.uint8)


def _read_image(key: tuple[str, tuple | None], size: int, image_fit: str) -> np.ndarray:
    from bindscope.importers.coco import letterbox_image

    if image_fit == "letterbox":
        return letterbox_image(key[0], size, key[1])  # BadInput naming the file if unreadable or too large
    return centre_crop_image(key[0], size, key[1])


def evaluate_bench(benchmark: str, items: dict[str, list[BenchItem]], adapter: EncoderAdapter,
                   text_transform: TextTransform | None = None, cache: EmbeddingCache | None = None,
                   embedder: Embedder | None = None, image_size: int | None = None, data: str | None = None,
                   seed: int = 0, image_fit: str = "centre-crop", tagger=None, progress: bool = True) -> dict:
    """Accuracy per subset (and per group for ARO's VG subsets) on items from :func:`read_bench`.

    Args:
        benchmark: ``aro`` or ``sugarcrepe`` (recorded). items: subset -> items.
        adapter: an encoder with an image tower. text_transform: e.g. a LABCLIP map (applied to L2-normalised
            text embeddings, rows re-normalised). cache / embedder: embedding cache / front end.
        image_size: side of the square the images (after any box crop) are brought to before the adapter's own
            preprocessing; default the adapter's input size, else 224 pixels.
        data: the data folder (recorded). seed: the order perturbations' seed (recorded).
        image_fit: ``"centre-crop"`` or ``"letterbox"`` (module docstring). tagger: the
            :class:`~bindscope.evaluation.aro.OrderTagger` the order subsets were read with (its tagger and any
            fallback are recorded).

    Returns:
        A result valid against ``eval_result`` (``kind = "bench"``): ``metrics.subsets[<subset>]`` =
        ``{"accuracy": proportion, "options": k, "groups": {group: proportion}, "group_average": average or
        None}`` plus, for ARO's VG subsets, ``"aro_macro"`` (:func:`bindscope.evaluation.aro.aro_macro`)
        (proportions with ``ci95`` and ``ci95_cluster`` over images), ``metrics.average`` = macro and micro over
        subsets.

    Raises:
        BadInput: a text-only adapter, an unreadable image, an unknown ``image_fit``.
    """
    from bindscope.evaluation.aro import aro_macro

    if image_fit not in IMAGE_FITS:
        raise BadInput(f"image_fit {image_fit!r} is not allowed; allowed: {', '.join(IMAGE_FITS)}",
                       param="image_fit")
    if not adapter.supports_images:
        raise BadInput(f"bench needs an image encoder; {adapter.name!r} is text-only")
    size = int(image_size or getattr(adapter, "image_size", 0) or 224)
    embedder = embedder or Embedder(adapter, cache, progress=progress)
    subsets, texts_used, outcomes, images = {}, [], [], []
    try:
        for subset, rows in items.items():
            keys = list(dict.fromkeys((r.image, r.crop) for r in rows))  # each image (crop) read once
            slot = {key: k for k, key in enumerate(keys)}
            image_emb = embedder.images((_read_image(key, size, image_fit) for key in keys), total=len(keys))
            captions = [c for r in rows for c in r.captions]
            text_emb = apply_text_transform(embedder.texts(captions), text_transform)
            texts_used += captions
            right, groups, clusters = [], {}, []
            start = 0
            for r in tqdm(rows, desc=f"{benchmark} {subset}", disable=not progress, leave=False):
                scores = text_emb[start:start + len(r.captions)] @ image_emb[slot[(r.image, r.crop)]]
                start += len(r.captions)
                wrong = np.delete(scores, r.correct)
                ok = bool(wrong.size == 0 or scores[r.correct] > wrong.max())
                right.append(ok)
                clusters.append(r.image)
                if r.group:
                    groups.setdefault(r.group, []).append((ok, r.image))
            per_group = {g: clustered_proportion([ok for ok, _ in v], [im for _, im in v], seed=seed)
                         for g, v in sorted(groups.items())}
            outcomes += right
            images += clusters
            subsets[subset] = {"accuracy": clustered_proportion(right, clusters, seed=seed),
                               "options": max((len(r.captions) for r in rows), default=0),
                               "groups": per_group, "group_average": averages(per_group) if per_group else None}
            ours = aro_macro(subset, per_group) if benchmark == "aro" else None
            if ours is not None:
                subsets[subset]["aro_macro"] = ours
    finally:
        embedder.flush()
    metrics = {"benchmark": benchmark, "subsets": subsets,
               "average": averages({s: b["accuracy"] for s, b in subsets.items()},
                                   micro=clustered_proportion(outcomes, images, seed=seed))}
    counts = encoder_counts(embedder)
    counts["truncation"] = truncation_counts(adapter, texts_used, texts_used)
    settings = {"task": "bench", "benchmark": benchmark, "data": data, "subsets": list(items), "seed": seed,
                "text_transform": transform_name(text_transform), "comparison": "strict > (ties count as wrong)",
                "interval": "ci95 = Wilson score 95%, one item = one trial; ci95_cluster = 95% percentile bootstrap "
                            "over images (ARO's order subsets have 5 captions per image, VG images recur)",
                "average": "macro = unweighted mean of the subset accuracies; micro = items pooled over subsets",
                "image_fit": image_fit,
                "image_preprocessing": f"crop to the box (ARO VG subsets), {image_fit} to {size}x{size} px, then the "
                                       "model's"}
    if any(s.endswith("_order") for s in items) and getattr(tagger, "label", None):
        settings["tagger"] = tagger.label
        if tagger.fallback:
            settings["tagger_fallback"] = tagger.fallback
    return envelope("bench", adapter, None, settings, metrics, counts)


def format_bench(result: dict) -> str:
    """A terminal table of a bench result: accuracy and both intervals per subset, then macro and micro."""
    metrics = result["metrics"]
    lines = [f"{metrics['benchmark']} - {result['model']['name']} ({result['model']['pretrained']})"
             + (f", text transform {result['settings']['text_transform']}" if result["settings"]["text_transform"]
                else ""), "",
             f"{'subset':<16}{'items':>7}{'images':>7}{'accuracy':>10}  {'95% CI (images)':<17}95% CI (Wilson, items)"]
    for subset, block in metrics["subsets"].items():
        acc = block["accuracy"]
        wilson, cluster = acc["ci95"] or [float("nan")] * 2, acc["ci95_cluster"] or [float("nan")] * 2
        lines.append(f"{subset:<16}{acc['total']:>7}{acc['clusters']:>7}{acc['accuracy'] or 0:>10.1%}  "
                     + f"{cluster[0]:.1%}..{cluster[1]:.1%}".ljust(17) + f"{wilson[0]:.1%}..{wilson[1]:.1%}")
        if block["group_average"] is not None:
            lines.append(f"{'  macro over ' + str(len(block['groups'])) + ' groups':<33}"
                         f"{block['group_average']['macro']:.1%}")
        if block.get("aro_macro") is not None:
            aro = block["aro_macro"]
            value = "-" if aro["macro"] is None else f"{aro['macro']:.1%}"
            lines.append(f"{'  ARO macro over ' + str(len(aro['over'])) + ' groups':<33}{value}  (ARO's definition: "
                         f"{len(aro['excluded'])} left out)")
    average = metrics["average"]
    settings = result["settings"]
    if settings.get("tagger"):
        lines += ["", f"order perturbations tagged by {settings['tagger']}"
                  + (f" ({settings['tagger_fallback']})" if settings.get("tagger_fallback") else "")]
    lines += ["", f"macro (mean of subset accuracies): {average['macro']:.1%}",
              f"micro (items pooled): {average['micro']['accuracy']:.1%} of {average['micro']['total']} items"]
    return "\n".join(lines)
