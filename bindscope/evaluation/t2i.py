"""Which prompt objects a text-to-image model draws, by mention position (``comco t2i-score``).

The ComCO paper's practical-impact experiment (Abbasi et al., CVPR 2025): the text encoder's bias towards the
first-mentioned object carries into text-to-image models, where a prompt's order changes which objects appear.
On a dataset of generated images whose object table lists each prompt's objects in mention order (``comco t2i``;
any dataset with images, captions and mention positions), every (image, prompt object) pair is one observation:
*present* or not, decided by up to two scorers.

- ``detector``: an open-vocabulary detector (:class:`bindscope.evaluation.detection.OpenVocabularyDetector`,
  OWLv2 / OWL-ViT) queried with ``"a photo of a <name>"`` for each of the image's prompt objects; present when the
  best box's score reaches ``threshold``.
- ``clip``: a CLIP-style encoder (:class:`~bindscope.encoders.settings.EncoderSettings`; cosine similarity of the
  image and ``"a photo of a <name>"``) ranks every candidate name (the dataset's name list: ``config.categories``
  of a ``comco t2i`` dataset, else the categories its objects name); an object of a ``k``-object prompt is present
  when its rank is at most ``k`` (ties count against it, as everywhere in bindscope). The mean similarity per
  position is reported too.

Reported per scorer (:func:`presence_block`): the presence rate of all mentions, by mention position, and the same
per number of objects in the prompt; and first against last (:func:`first_vs_last`): per prompt, over its images,
whether its first-mentioned object appears in more images than its last-mentioned one (a *discordant* prompt) or in
fewer; the exact McNemar test is the two-sided binomial test of those counts at 1/2 (:func:`scipy.stats.binomtest`),
which is McNemar's exact test on (prompt, image) pairs when each prompt has one image.

Sampling unit. The images of one prompt share it, and with ``--order rotations`` the prompts of one object set share
their objects; every share carries ``ci95`` (Wilson score, each mention treated as independent: too narrow) and
``ci95_cluster`` (percentile cluster bootstrap over prompts, :func:`bindscope.evaluation.stats.cluster_bootstrap`,
seeded), the one to quote.
"""

from __future__ import annotations

import os
from itertools import islice
from pathlib import Path

import numpy as np

from bindscope.errors import BadInput
from bindscope.evaluation import DETECTION_THRESHOLD
from bindscope.evaluation.detection import check_threshold, query
from bindscope.evaluation.stats import cluster_bootstrap, cluster_codes, share

KIND = "t2i-score"
INTERVALS = {"ci95": "Wilson score, 95 %, each (image, prompt object) treated as independent (too narrow: the images "
                     "of a prompt share it)",
             "ci95_cluster": "percentile cluster bootstrap over prompts, 95 %, 2000 resamples, seeded"}
TEST = ("exact McNemar test, two-sided: per prompt, first-mentioned object present in more of its images than the "
        "last-mentioned (first_more) or in fewer (last_more); binomial test of first_more out of first_more + "
        "last_more at 1/2 (scipy.stats.binomtest); prompts of one object are left out")
CLIP_RULE = "present when the object's name ranks within the prompt's object count among all candidate names by " \
            "cosine similarity to the image (ties count against it)"
DETECTOR_RULE = "present when the best box's score for the object's query reaches the threshold"
CHUNK = 64  # images read, detected and encoded at a time


def _share(hit: np.ndarray, clusters: np.ndarray, seed: int) -> dict:
    block = share(int(hit.sum()), int(hit.size))
    block["ci95_cluster"] = cluster_bootstrap(hit.astype(float), np.ones(hit.size), clusters, seed=seed) \
        if hit.size else None
    return block


def first_vs_last(present, position, count, prompt, seed: int = 0) -> dict:
    """First- against last-mentioned objects, paired by prompt (see the module docstring).

    Args:
        present: (M,) bool, one per (image, prompt object). position: (M,) its 1-based mention position.
        count: (M,) objects mentioned in its prompt. prompt: (M,) the prompt's label (any hashable numpy dtype).
        seed: bootstrap seed.

    Returns:
        ``{"first", "last"}`` (shares with intervals), ``"difference"`` (first share minus last share, None without
        data), ``"prompts"``, ``"first_more"``, ``"last_more"``, ``"ties"`` (prompts), ``"p_value"`` (None without a
        discordant prompt) and ``"test"`` (what was tested).
    """
    present, position, count = (np.asarray(a) for a in (present, position, count))
    keep = count >= 2
    present, position, count, prompt = present[keep].astype(bool), position[keep], count[keep], np.asarray(prompt)[keep]
    first, last = position == 1, position == count
    codes, prompts = cluster_codes(prompt)
    first_hits = np.bincount(codes[first], weights=present[first], minlength=prompts)
    last_hits = np.bincount(codes[last], weights=present[last], minlength=prompts)
    more, fewer = int((first_hits > last_hits).sum()), int((first_hits < last_hits).sum())
    from scipy.stats import binomtest

    out = {"first": _share(present[first], prompt[first], seed), "last": _share(present[last], prompt[last], seed)}
    both = out["first"]["share"] is not None and out["last"]["share"] is not None
    out.update(difference=out["first"]["share"] - out["last"]["share"] if both else None, prompts=prompts,
               first_more=more, last_more=fewer, ties=prompts - more - fewer,
               p_value=float(binomtest(more, more + fewer, 0.5).pvalue) if more + fewer else None, test=TEST)
    return out


def presence_block(present, position, count, prompt, seed: int = 0) -> dict:
    """Presence rates of one scorer (arguments as :func:`first_vs_last`).

    Returns:
        ``{"all", "by_position": {"1": ..., ...}, "first_vs_last", "by_objects": {"<k>": {"prompts", "mentions",
        "by_position", "first_vs_last"}}}``; every share is ``{"count", "of", "share", "ci95", "ci95_cluster"}``.
    """
    present = np.asarray(present, dtype=bool)
    position, count, prompt = np.asarray(position), np.asarray(count), np.asarray(prompt)

    def positions(keep):
        return {str(p): _share(present[keep & (position == p)], prompt[keep & (position == p)], seed)
                for p in sorted(set(position[keep].tolist()))}

    everything = np.ones(present.size, bool)
    by_objects = {}
    for k in sorted(set(count.tolist())):
        keep = count == k
        by_objects[str(k)] = {"prompts": cluster_codes(prompt[keep])[1], "mentions": int(keep.sum()),
                              "by_position": positions(keep),
                              "first_vs_last": first_vs_last(present[keep], position[keep], count[keep], prompt[keep],
                                                             seed)}
    return {"all": _share(present, prompt, seed), "by_position": positions(everything),
            "first_vs_last": first_vs_last(present, position, count, prompt, seed), "by_objects": by_objects}


def strict_ranks(similarity: np.ndarray, targets: list[int]) -> np.ndarray:
    """1-based rank of each ``targets`` column in the row ``similarity`` (C,): the number of columns at least as
    similar, itself included (a tie ranks the target below the columns it ties with)."""
    similarity = np.asarray(similarity)
    return (similarity[None, :] >= similarity[list(targets)][:, None]).sum(axis=1)


def _mentions(sample) -> list:
    return sorted((o for o in sample.objects if o.mention_position > 0), key=lambda o: o.mention_position)


def candidate_names(ds, split: str) -> list[str]:
    """The CLIP scorer's candidates: the manifest config's ``categories`` (a ``comco t2i`` dataset's name list), else
    every category the split's mentioned objects name, sorted."""
    names = ds.manifest.get("config", {}).get("categories")
    if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
        return list(names)
    return sorted({o.category for sample in ds.split(split) for o in _mentions(sample)})


def choose_split(ds, split: str | None) -> str:
    """``split``, else ``images`` when the dataset has it, else its only split; DatasetError / BadInput otherwise."""
    if split is not None:
        ds.split(split)
        return split
    if "images" in ds.split_names or len(ds.split_names) == 1:
        return "images" if "images" in ds.split_names else ds.split_names[0]
    raise BadInput(f"dataset {str(ds.path)!r} has the splits {', '.join(ds.split_names)}; name one with split",
                   param="split")
def _mean_block(values: np.ndarray, clusters: np.ndarray, seed: int) -> dict:
    return {"mean": float(values.mean()) if values.size else None, "of": int(values.size),
            "ci95_cluster": cluster_bootstrap(values, np.ones(values.size), clusters, seed=seed) if values.size
            else None}


def score_t2i(dataset, detector=None, adapter=None, *, split: str | None = None,
              threshold: float = DETECTION_THRESHOLD, seed: int = 0, cache=None, progress: bool = True,
              rows: list | None = None, check: bool = True) -> dict:
    """Score a dataset of generated images (see the module docstring) with a loaded detector and/or encoder.

    Args:
        dataset: a dataset folder or an open :class:`~bindscope.format.reader.Dataset` with images and mention
            positions (``comco t2i``). detector: an object with ``detect(images, queries)`` and ``info()``
            (:class:`~bindscope.evaluation.detection.OpenVocabularyDetector`), or None. adapter: an
            :class:`~bindscope.encoders.interface.EncoderAdapter` with images, or None.
        split: the split (default ``images``, or the only one). threshold: the detector's score threshold, 0..1.
        seed: bootstrap seed. cache: the adapter's embedding cache (or None). progress: a tqdm bar over images.
        rows: a list to append one row per scored image to (``index``, ``prompt``, ``objects`` and per scorer its
            scores and verdicts), or None. check: verify the split's shards (sha256) first.

    Returns:
        The result dict (``kind`` ``t2i-score``, validated by ``bindscope/schemas/t2i_result.json``): ``dataset``,
        ``unit``, ``intervals``, ``seed``, ``num_images``, ``num_prompts``, ``num_mentions``, ``skipped``, ``scorers``
        (``detector`` and/or ``clip``: ``model``, the rule, ``presence`` (:func:`presence_block`); ``clip`` also
        ``candidates`` and ``similarity_by_position``), ``versions``.

    Raises:
        BadInput: neither scorer, a threshold outside 0..1, an encoder without images, a split without images whose
            captions mention objects. DatasetError: a missing or corrupt dataset, an unknown split.
    """
    from tqdm.auto import tqdm

    from bindscope.encoders.embedding_cache import Embedder
    from bindscope.evaluation.results import SCHEMA_VERSION, dataset_info, model_info, open_dataset, versions
    from bindscope.schemas import validate

    if detector is None and adapter is None:
        raise BadInput("t2i scoring needs a detector, an encoder or both", param="detector")
    threshold = check_threshold(threshold)
    if adapter is not None and not getattr(adapter, "supports_images", True):
        raise BadInput(f"model {adapter.name!r} encodes no images; the CLIP scorer needs an image encoder",
                       param="model")
    ds = open_dataset(dataset)
    split = choose_split(ds, split)
    if check:
        ds.check([split])
    candidates = candidate_names(ds, split) if adapter is not None else []
    column = {name: i for i, name in enumerate(candidates)}
    embedder = Embedder(adapter, cache) if adapter is not None else None
    texts = embedder.texts([query(name) for name in candidates]) if embedder is not None else None
    prompt, position, count, found, shown, similarity = [], [], [], [], [], []
    skipped = 0
    with tqdm(total=len(ds.split(split)), unit="img", desc="t2i-score", disable=not progress) as bar:
        samples = iter(ds.split(split))
        while batch := list(islice(samples, CHUNK)):
            mentions = [_mentions(s) for s in batch]
            kept = [k for k, m in enumerate(mentions) if m]
            skipped += len(batch) - len(kept)
            images = [batch[k].image for k in kept]
            queries = [[query(o.category) for o in mentions[k]] for k in kept]
            detected = detector.detect(images, queries) if detector is not None and kept else [None] * len(kept)
            sims = embedder.images(images) @ texts.T if embedder is not None and kept else [None] * len(kept)
            for k, found_k, sims_k in zip(kept, detected, sims):
                sample, objects = batch[k], mentions[k]
                row = {"index": sample.index, "prompt": sample.caption, "objects": [o.category for o in objects]}
                prompt += [sample.caption] * len(objects)
                position += [o.mention_position for o in objects]
                count += [len(objects)] * len(objects)
                if found_k is not None:
                    hit = found_k[0] >= threshold
                    found += hit.tolist()
                    row.update(detector_scores=found_k[0].tolist(), detector_present=hit.tolist())
                if sims_k is not None:
                    targets = [column[o.category] for o in objects]
                    ranks = strict_ranks(sims_k, targets)
                    shown += (ranks <= len(objects)).tolist()
                    similarity += sims_k[targets].astype(float).tolist()
                    row.update(clip_similarity=sims_k[targets].astype(float).tolist(), clip_rank=ranks.tolist())
                if rows is not None:
                    rows.append(row)
            bar.update(len(batch))
    if not prompt:
        raise BadInput(f"dataset {str(ds.path)!r}, split {split!r}: no image whose caption mentions an object; "
                       "t2i scoring needs the object table of `comco t2i`")
    prompt, position, count = np.array(prompt), np.array(position), np.array(count)
    scorers = {}
    if detector is not None:
        scorers["detector"] = {"model": detector.info(), "threshold": float(threshold), "rule": DETECTOR_RULE,
                               "presence": presence_block(np.array(found), position, count, prompt, seed)}
    if adapter is not None:
        sims = np.array(similarity)
        scorers["clip"] = {"model": model_info(adapter), "candidates": len(candidates), "text": query("<name>"),
                           "rule": CLIP_RULE, "presence": presence_block(np.array(shown), position, count, prompt,
                                                                         seed),
                           "similarity_by_position": {str(p): _mean_block(sims[position == p], prompt[position == p],
                                                                          seed)
                                                      for p in sorted(set(position.tolist()))}}
    result = {"schema_version": SCHEMA_VERSION, "kind": KIND, "dataset": dataset_info(ds, [split]),
              "unit": "a prompt object in one image (clustered by prompt)", "intervals": dict(INTERVALS),
              "seed": seed, "num_images": len(ds.split(split)) - skipped, "num_prompts": cluster_codes(prompt)[1],
              "num_mentions": int(prompt.size), "skipped": {"samples": skipped}, "scorers": scorers,
              "versions": versions()}
    validate(result, "t2i_result", "t2i-score result (internal error)", error=RuntimeError)
    return result


def _slug(value: str) -> str:
    from bindscope.evaluation.results import short_hash, slug

    local = Path(value)
    return f"{slug(local.resolve().name)}-{short_hash(str(local.resolve()))}" if local.is_dir() else slug(value)


def t2i_score(data, encoder=None, detector: str | None = None, *, threshold: float = DETECTION_THRESHOLD,
              split: str | None = None, seed: int = 0, out: str | os.PathLike | None = None, overwrite: bool = False,
              progress: bool = True):
    """Score a ``comco t2i`` dataset: which prompt objects each image shows, by mention position (the library call
    behind ``comco t2i-score``; see the module docstring). Writes the result JSON and its per-image rows
    (``<result>.samples.jsonl``).

    Args:
        data: the dataset folder.
        encoder: the CLIP scorer's encoder (:class:`~bindscope.encoders.settings.EncoderSettings` or a model name),
            or None (no CLIP scorer). The detector runs with its ``device``, ``precision`` and ``batch_size``
            (without an encoder: ``auto``, ``fp32``, 8 images).
        detector: an OWLv2 / OWL-ViT repository id or folder (``google/owlv2-base-patch16-ensemble``), or None (no
            detector scorer). At least one scorer.
        threshold: the detector's score threshold, 0..1. split: default ``images`` (or the only split).
        seed: bootstrap seed (>= 0). out: result JSON (default ``DATA/eval/t2i-score-<detector>-<model>.json``).
        overwrite: replace an existing result. progress: a tqdm bar.

    Returns:
        ``Evaluation(result, out path, None)`` (:class:`bindscope.evaluation.api.Evaluation`).

    Raises:
        BadInput / DatasetError: as :func:`score_t2i`, an existing result without ``overwrite``, a detector or
            encoder that cannot be loaded (offline and not cached, custom code, another model family); all before
            the result is written.
    """
    from bindscope.encoders.embedding_cache import open_cache
    from bindscope.encoders.registry import load_encoder
    from bindscope.encoders.settings import EncoderSettings
    from bindscope.errors import check_int
    from bindscope.evaluation.api import Evaluation, check_locations, model_slug
    from bindscope.evaluation.detection import OpenVocabularyDetector
    from bindscope.evaluation.results import check_result_path, open_dataset, write_result

    check_int("seed", seed, 0)
    check_threshold(threshold)
    settings = EncoderSettings.of(encoder) if encoder is not None else None
    ds = open_dataset(data)
    split = choose_split(ds, split)
    ds.check([split])  # before any model loads
    parts = [_slug(str(detector))] if detector is not None else []
    parts += [model_slug(settings)] if settings is not None else []
    out_path = check_result_path(out or Path(data) / "eval" / f"t2i-score-{'-'.join(parts)}.json", overwrite)
    check_locations(out_path, None)
    device, precision, batch = (settings.device, settings.precision, settings.batch_size or 8) if settings \
        else ("auto", "fp32", 8)
    loaded = OpenVocabularyDetector(detector, device, precision, batch) if detector is not None else None
    adapter = load_encoder(settings) if settings is not None else None
    cache = open_cache(adapter, settings.cache_dir, settings.use_cache) if adapter is not None else None
    rows: list = []
    result = score_t2i(ds, loaded, adapter, split=split, threshold=threshold, seed=seed, cache=cache,
                       progress=progress, rows=rows, check=False)
    write_result(out_path, result, overwrite=overwrite, rows=rows, schema="t2i_result")
    return Evaluation(result, out_path, None)


def format_t2i(result: dict) -> str:
    """A terminal table of a :func:`score_t2i` result: presence rate by mention position per scorer (cluster
    intervals), then first against last with the test's p-value."""
    lines = [f"{result['num_images']} images of {result['num_prompts']} prompts, {result['num_mentions']} prompt "
             "objects (95% CI: bootstrap over prompts)"]
    for name, scorer in result["scorers"].items():
        block = scorer["presence"]
        lines += ["", f"{name} ({scorer['model']['name']}): present in {block['all']['share']:.1%} of mentions",
                  f"{'position':<10}{'present':>9}  {'95% CI':<15}{'of':>7}"]
        for key, share_block in block["by_position"].items():
            low, high = share_block["ci95_cluster"] or (float("nan"),) * 2
            lines.append(f"{key:<10}{share_block['share']:>9.1%}  {low:.1%}..{high:.1%}".ljust(36)
                         + f"{share_block['of']:>7}")
        test = block["first_vs_last"]
        p = "n/a" if test["p_value"] is None else f"{test['p_value']:.3g}"
        lines.append(f"first vs last: {test['first_more']} prompts favour the first, {test['last_more']} the last, "
                     f"{test['ties']} tie; exact McNemar p = {p}")
    return "\n".join(lines)
