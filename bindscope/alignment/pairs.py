"""Embedded (image, caption, negative) pairs of a split and their binding report: what LABCLIP fits on and is
scored by (Koishigarina, Uselis, Oh; docs/alignment.md), with the evaluation module's protocol core."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bindscope.alignment.data import SplitTable, encode_split_images, encode_texts
from bindscope.alignment.gap import modality_gap
from bindscope.alignment.splits import hold_out_triples
from bindscope.errors import BadInput


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
    """Embed the images, captions and ``kinds`` negatives of ``samples`` (rows of ``table``: sample indices of its
    split, or (sample, caption) rows, :attr:`~bindscope.alignment.data.SplitTable.sample_of`).

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
    images = encode_split_images(embedder, dataset, table.split, [table.sample(s) for s in samples])
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


def hold_out_samples(items: np.ndarray, holdout: float, seed: int, groups: np.ndarray | None = None) -> np.ndarray:
    """A seeded share ``holdout`` of ``items`` (sample indices) held out whole: ``max(1, round(holdout * n))``
    of them, drawn with ``numpy.random.default_rng(seed)``. With ``groups`` (per item, its group: the sample of a
    (sample, caption) row) the draw is over the distinct groups and a group's items go together. Returns a bool
    mask over ``items``."""
    if groups is not None:
        distinct, inverse = np.unique(np.asarray(groups), return_inverse=True)
        return hold_out_samples(distinct, holdout, seed)[inverse]
    count = max(1, int(round(holdout * len(items))))
    held = np.zeros(len(items), bool)
    held[np.random.default_rng(seed).choice(len(items), size=min(count, len(items)), replace=False)] = True
    return held


def plan_fit(table: SplitTable, holdout: float = 0.1, seed: int = 0,
             by_sample: bool = False) -> tuple[set, np.ndarray, np.ndarray]:
    """Choose the held-out combinations of a split and the samples LABCLIP may fit on (no model needed).

    ``by_sample``: hold out a seeded share of the samples themselves (:func:`hold_out_samples`; shuffled
    negatives of natural captions, which describe no (category, attribute, value) combination) instead of a
    share of the combinations; the rows of one sample's captions (:func:`~bindscope.alignment.data.caption_rows`)
    go together.

    Returns:
        ``(held_out, fit_rows, held_rows)``: the held-out ``(category, attribute, value)`` triples (empty with
        ``by_sample``), and the sample indices for fitting / for evaluation.

    Raises:
        BadInput: fewer than 4 samples with binding negatives, or a hold-out that leaves < 2 for fitting.
    """
    items = labclip_items(table)
    if len(items) < 4:
        what = ("shuffled negatives (captions with two different nouns or two different adjectives)"
                if by_sample else "attribute-swapped (binding) negatives")
        hint = "" if by_sample else \
            "; or make negatives from the captions with negatives='shuffled'"
        raise BadInput(f"split {table.split!r} has {len(items)} samples with {what}; LABCLIP needs at least 4"
                       + ("" if by_sample else " captions that give one attribute, with different values, for two "
                          "objects") + hint)
    if by_sample:
        groups = np.array([table.sample(i) for i in items]) if table.sample_of else None
        held_out, is_held = set(), hold_out_samples(items, holdout, seed, groups)
    else:
        held_out, is_held = hold_out_triples([table.triples(i) for i in items], holdout, seed)
    fit_rows = items[~is_held]
    if len(fit_rows) < 2:
        raise BadInput(f"holdout {holdout}: leaves {len(fit_rows)} of the {len(items)} samples of split "
                       f"{table.split!r} with binding negatives for fitting ({len(items) - len(fit_rows)} "
                       + ("held out" if by_sample else f"describe one of the {len(held_out)} held-out combinations")
                       + "); LABCLIP needs at least 2; lower it",
                       param="holdout")
    return held_out, fit_rows, items[is_held]
