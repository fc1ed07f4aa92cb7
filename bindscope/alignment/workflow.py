"""Dataset-level drivers behind ``bindscope probe`` and ``bindscope labclip fit|eval`` (and the benchmark).

They read a split (:mod:`bindscope.alignment.data`), embed through the evaluation module's cached
``Embedder``, and call the numeric cores in :mod:`~bindscope.alignment.probes`,
:mod:`~bindscope.alignment.labclip` and :mod:`~bindscope.alignment.gap`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bindscope.alignment.data import SplitTable, encode_split_images, encode_texts, load_table
from bindscope.alignment.gap import modality_gap
from bindscope.alignment.labclip import LabclipMap, fit_labclip
from bindscope.alignment.probes import MODALITIES, run_probes
from bindscope.alignment.splits import hold_out_triples
from bindscope.errors import BadInput


def dataset_identity(dataset) -> str:
    """A string naming a dataset exactly: its manifest's ``config_sha256`` when present, else its absolute path."""
    return dataset.manifest.get("config_sha256") or str(dataset.path.resolve())


def default_split(dataset) -> str:
    """``"test"`` (MADMAN's two-digit evaluation split), else ``"scenes"`` (ComCO), else the first split."""
    for name in ("test", "scenes"):
        if name in dataset.split_names:
            return name
    return dataset.split_names[0]


# ----------------------------------------------------------------------------------------------- probes

def probe_dataset(dataset, embedder, split: str | None = None, modalities=MODALITIES, attributes=None,
                  fractions=(0.6, 0.2, 0.2), seed: int = 0, min_objects: int = 2, steps: int = 300,
                  lr: float = 0.01, weight_decay: float = 1e-4, progress=None, table: SplitTable | None = None) -> dict:
    """Linear probes per modality on one split (see :func:`bindscope.alignment.probes.run_probes`).

    Only samples with at least ``min_objects`` objects are embedded. ``table`` may hold the split's
    :func:`load_table` result already (as checked by :func:`check_probe_table`). Returns run_probes' dict
    plus ``split``, ``n_samples`` and ``caption_attributes`` (attributes written into recomposed captions).

    Raises:
        BadInput: unknown modality, text-only model asked for images, or no eligible sample.
    """
    split = split or default_split(dataset)
    if table is None:
        table = load_table(dataset, split, build_swaps=False)
        check_probe_table(table, modalities, attributes, min_objects)
    dim = embedder.adapter.embed_dim
    embeddings = {}
    if "image" in modalities:
        rows = [i for i in range(len(table)) if len(table.objects[i]) >= min_objects]
        emb = np.full((len(table), dim), np.nan, np.float32)
        emb[rows] = encode_split_images(embedder, dataset, split, rows)
        embeddings["image"] = emb
    if "text" in modalities:
        rows = [i for i in range(len(table))
                if sum(o.mention_position > 0 for o in table.objects[i]) >= min_objects]
        emb = np.full((len(table), dim), np.nan, np.float32)
        emb[rows] = encode_texts(embedder, [table.captions[i] for i in rows])
        embeddings["text"] = emb
    embedder.flush()
    result = run_probes(table, embeddings, attributes, fractions, seed, min_objects, steps, lr,
                        weight_decay, progress)
    result.update({"split": split, "n_samples": len(table), "caption_attributes": table.composed})
    return result


def check_probe_table(table: SplitTable, modalities, attributes=None, min_objects: int = 2) -> dict:
    """Count the eligible probe samples per modality and attribute, before any model is loaded.

    Returns:
        ``{modality: {attribute: number of (sample, target) pairs}}``.

    Raises:
        BadInput: an unknown modality or attribute, or not a single eligible sample anywhere.
    """
    from bindscope.alignment.probes import probe_targets

    attributes = list(table.attributes if attributes is None else attributes)
    counts = {}
    for m in modalities:
        if m not in MODALITIES:
            raise BadInput(f"modality {m!r}: choose from {', '.join(MODALITIES)}")
        counts[m] = {}
        for a in attributes:
            if a not in table.attributes:
                raise BadInput(f"attribute {a!r}: the dataset has {', '.join(table.attributes)}")
            counts[m][a] = sum(len(v) for v in probe_targets(table, m, a, min_objects).values())
    if not any(n for per in counts.values() for n in per.values()):
        raise BadInput(f"split {table.split!r} has no sample to probe: probes need samples with at least "
                       f"{min_objects} objects (text: mentioned) whose target object shows the attribute")
    return counts


# ----------------------------------------------------------------------------------------------- LABCLIP

@dataclass
class Pairs:
    """Embedded (image, caption) pairs of some samples with their negatives.

    Attributes:
        samples: ``(N,)`` sample indices in the split. images / texts: ``(N, D)`` unit-norm embeddings.
        negatives: ``(M, D)`` unit-norm negative caption embeddings; owners: ``(M,)`` row in ``samples``.
        kinds / attributes: per negative, ``"binding"``/``"recognition"``/... and the attribute changed.
        objects: per negative, the object indices changed. triples: per negative, the
            ``(category, attribute, original value)`` combinations it changes.
    """

    samples: np.ndarray
    images: np.ndarray
    texts: np.ndarray
    negatives: np.ndarray
    owners: np.ndarray
    kinds: list[str] = field(default_factory=list)
    attributes: list[str] = field(default_factory=list)
    objects: list[tuple[int, ...]] = field(default_factory=list)
    triples: list[set] = field(default_factory=list)


def embed_pairs(table: SplitTable, dataset, embedder, samples, kinds=("binding", "recognition")) -> Pairs:
    """Embed the images, captions and ``kinds`` negatives of ``samples`` (sample indices) of ``table``'s split.

    Returns:
        :class:`Pairs` of float32 unit-norm embeddings: images and captions ``(len(samples), D)``, negatives
        ``(M, D)`` in sample order.

    Raises:
        BadInput: the model is text-only (images cannot be embedded).
    """
    samples = np.asarray(samples, np.int64)
    owners, texts, kind_list, attrs, objs, triples = [], [], [], [], [], []
    for row, s in enumerate(samples):
        by_index = {o.index: o for o in table.objects[s]}
        for n in table.negatives[s]:
            if n.kind not in kinds:
                continue
            owners.append(row)
            texts.append(n.caption)
            kind_list.append(n.kind)
            attrs.append(n.attribute)
            objs.append(tuple(n.objects))
            triples.append({(by_index[k].category, n.attribute, by_index[k].attributes.get(n.attribute, ""))
                            for k in n.objects if k in by_index})
    images = encode_split_images(embedder, dataset, table.split, samples)
    captions = encode_texts(embedder, [table.captions[s] for s in samples])
    negatives = encode_texts(embedder, texts)
    embedder.flush()
    return Pairs(samples, images, captions, negatives, np.asarray(owners, np.int64), kind_list, attrs, objs,
                 triples)


def _rates(block: dict) -> dict:
    """The evaluation module's ``{"per_attribute": {a: proportion}, "average": ...}`` as this module's rates."""
    per = {a: {"accuracy": p["accuracy"], "correct": p["correct"], "n": p["total"], "ci95": p["ci95"]}
           for a, p in block["per_attribute"].items()}
    micro = block["average"]["micro"]
    return {"accuracy": micro["accuracy"], "macro": block["average"]["macro"], "n": micro["total"],
            "ci95": micro["ci95"], "per_attribute": per}


def binding_report(pairs: Pairs, text_transform=None, select_binding: np.ndarray | None = None,
                   attributes: list[str] | None = None) -> dict:
    """Binding, binding given recognition, recognition and the modality gap of ``pairs``.

    Scored by the evaluation module's protocol core :func:`bindscope.evaluation.madman.score_split` (a negative
    is passed when ``cos(image, caption) > cos(image, negative)``, strict: a tie is wrong):

    * ``binding``: share of the selected binding negatives passed — the LABCLIP paper's binding accuracy,
      chance 0.5 (``binding_unconditional`` of the evaluation module);
    * ``binding_given_recognition``: the same, counted only where that sample passed every recognition
      negative of the attribute for both objects (MADMAN protocol, Gurung et al.; ``binding`` of the
      evaluation module);
    * ``recognition``: share of all recognition negatives passed;
    * ``modality_gap``: :func:`~bindscope.alignment.gap.modality_gap` of the images and their (mapped)
      captions, on L2-normalised embeddings.

    Each rate has ``accuracy`` (micro, pooled), ``macro`` (mean over attributes), ``n``, ``ci95`` (Wilson) and
    ``per_attribute``. ``select_binding`` (bool per negative) restricts the binding negatives counted.
    """
    from bindscope.evaluation.madman import score_split
    from bindscope.format.records import Negative

    texts = pairs.texts if text_transform is None else text_transform(pairs.texts)
    negs = pairs.negatives if text_transform is None or not len(pairs.negatives) \
        else text_transform(pairs.negatives)
    per_sample = [[] for _ in range(len(pairs.samples))]
    rows = [[] for _ in range(len(pairs.samples))]
    for i, owner in enumerate(pairs.owners):
        if pairs.kinds[i] == "binding" and select_binding is not None and not select_binding[i]:
            continue
        per_sample[owner].append(Negative(pairs.kinds[i], "", pairs.attributes[i], tuple(pairs.objects[i])))
        rows[owner].append(i)
    dim = pairs.images.shape[1]
    negative_emb = [negs[r] if r else np.zeros((0, dim), np.float32) for r in rows]
    names = attributes or sorted(set(pairs.attributes))
    scores = score_split(pairs.images, texts, per_sample, negative_emb, names)
    return {"binding": _rates(scores["binding_unconditional"]),
            "binding_given_recognition": _rates(scores["binding"]),
            "recognition": _rates(scores["recognition"]),
            "modality_gap": modality_gap(pairs.images, texts)}


def labclip_items(table: SplitTable) -> np.ndarray:
    """Indices of the samples that have at least one binding negative (LABCLIP's usable pairs)."""
    return np.array([i for i in range(len(table)) if any(n.kind == "binding" for n in table.negatives[i])],
                    np.int64)


def plan_fit(table: SplitTable, holdout: float = 0.1, seed: int = 0) -> tuple[set, np.ndarray, np.ndarray]:
    """Choose the held-out combinations of a split and the samples LABCLIP may fit on (no model needed).

    Returns:
        ``(held_out, fit_rows, held_rows)``: the held-out ``(category, attribute, value)`` triples, and the
        sample indices for fitting / for evaluation.

    Raises:
        BadInput: fewer than 4 samples with binding negatives, or a hold-out that leaves < 2 for fitting.
    """
    items = labclip_items(table)
    if len(items) < 4:
        raise BadInput(f"split {table.split!r} has {len(items)} samples with attribute-swapped (binding) "
                       "negatives; LABCLIP needs at least 4 captions that give one attribute, with different "
                       "values, for two objects")
    held_out, is_held = hold_out_triples([table.triples(i) for i in items], holdout, seed)
    fit_rows = items[~is_held]
    if len(fit_rows) < 2:
        raise BadInput(f"holdout {holdout}: leaves {len(fit_rows)} samples for fitting; lower it", param="holdout")
    return held_out, fit_rows, items[is_held]


def fit_on_dataset(dataset, embedder, split: str | None = None, holdout: float = 0.1, seed: int = 0,
                   epochs: int = 20, batch_size: int = 128, lr: float = 1e-3, progress=None,
                   table: SplitTable | None = None) -> LabclipMap:
    """Fit LABCLIP on the samples of ``split`` that describe no held-out combination.

    The held-out ``(category, attribute, value)`` combinations (:func:`hold_out_triples` over the samples
    with binding negatives, share ``holdout``, ``seed``) are stored in the map's ``meta`` so that
    :func:`evaluate_on_dataset` tests on exactly the held-out samples.

    Raises:
        BadInput: the split has no binding negatives, or too few samples remain for fitting.
    """
    split = split or default_split(dataset)
    if table is None:
        table = load_table(dataset, split)
    held_out, fit_rows, held_rows = plan_fit(table, holdout, seed)
    pairs = embed_pairs(table, dataset, embedder, fit_rows, kinds=("binding",))
    labclip, _ = fit_labclip(pairs.images, pairs.texts, pairs.negatives, pairs.owners, epochs=epochs,
                             batch_size=batch_size, lr=lr, seed=seed, progress=progress)
    adapter = embedder.adapter
    labclip.meta.update({
        "model": adapter.name, "pretrained": adapter.pretrained, "cache_key": adapter.cache_key,
        "embed_dim": adapter.embed_dim, "dataset": str(dataset.path.resolve()),
        "dataset_id": dataset_identity(dataset), "split": split, "holdout": holdout,
        "held_out": sorted([list(t) for t in held_out]), "n_fit_samples": int(len(fit_rows)),
        "n_fit_negatives": int(len(pairs.negatives)), "n_held_out_samples": int(len(held_rows)),
        "caption_attributes": table.composed,
    })
    return labclip


def evaluate_on_dataset(dataset, embedder, labclip: LabclipMap, split: str | None = None) -> dict:
    """Binding, recognition and modality gap before (identity) and after the map.

    On the map's own split: the held-out samples (those describing a held-out combination); ``binding``
    counts only the binding negatives that swap a held-out combination, and ``fit_samples`` repeats the
    figures on the fitting samples. On any other split: every sample with binding negatives.
    """
    meta = labclip.meta
    split = split or meta.get("split") or default_split(dataset)
    table = load_table(dataset, split)
    items = labclip_items(table)
    same = split == meta.get("split") and dataset_identity(dataset) == meta.get("dataset_id") \
        and "held_out" in meta
    result = {"split": split, "n_samples_with_binding_negatives": int(len(items))}
    if same:
        held_out = {tuple(t) for t in meta["held_out"]}
        is_held = np.array([bool(held_out & table.triples(i)) for i in items], bool)
        eval_rows, fit_rows = items[is_held], items[~is_held]
        result["evaluated_on"] = "held-out combinations of the fitting split"
        result["n_held_out_combinations"] = len(held_out)
    else:
        eval_rows, fit_rows, held_out = items, np.zeros(0, np.int64), None
        result["evaluated_on"] = "every sample of the split with binding negatives"
    if not len(eval_rows):
        raise BadInput(f"split {split!r} has no sample to evaluate LABCLIP on")
    pairs = embed_pairs(table, dataset, embedder, eval_rows)
    select = None
    if held_out is not None:
        select = np.array([bool(t & held_out) for t in pairs.triples], bool)
    result["n_eval_samples"] = int(len(eval_rows))
    result["before"] = binding_report(pairs, None, select, table.attributes)
    result["after"] = binding_report(pairs, labclip, select, table.attributes)
    if len(fit_rows):
        fit_pairs = embed_pairs(table, dataset, embedder, fit_rows)
        result["fit_samples"] = {"n_samples": int(len(fit_rows)),
                                 "before": binding_report(fit_pairs, None, None, table.attributes),
                                 "after": binding_report(fit_pairs, labclip, None, table.attributes)}
    return result
