"""Linear probes on frozen embeddings: is attribute–object binding linearly decodable in one modality?

Protocol (Koishigarina, Uselis, Oh, "CLIP Behaves like a Bag-of-Words Model Cross-modally but not
Uni-modally"; docs/papers.md section 3; project choices marked as such in docs/alignment.md):

* one probe per (modality, attribute, target object category); samples that contain exactly one object of
  the target category (and, by default, at least two objects in the modality's view); label = that object's
  value of the attribute;
* the probe is ``torch.nn.Linear(D, n_classes)`` on frozen L2-normalised embeddings, trained with
  cross-entropy (Adam, full batch). Inputs are standardised with the training mean and standard deviation
  first — an affine change that a linear layer absorbs, so the probe is still linear in the embedding; it
  only makes one learning rate fit every encoder;
* splits are held out by attribute–object combination (:func:`probe_splits`): for each target category the
  combinations of the *other* objects (category, value) are dealt wholly to train, val or test, so no
  combination beside the target is in two splits; validation accuracy picks the training step (early
  stopping); test accuracy is reported;
* every one of these settings is a field of :class:`~bindscope.alignment.protocols.ProbeSettings`; the LABCLIP
  authors' protocol (``protocol="authors"``: unnormalised, unstandardised inputs, SGD on mini-batches, the last
  epoch, the whole scene held out) is its other instance (:data:`bindscope.alignment.protocols.PROBE_PROTOCOLS`);
* baselines: chance (1 / number of classes), and two bag-of-words figures built from the multiset of the
  attribute's values among the objects in the modality's view (no pairing of values to objects): the
  **bag-of-words probe** (the same linear probe trained on those value counts) and the **bag-of-words
  bound** (the expected accuracy of guessing uniformly among the distinct values present).

Torch is imported inside the functions, so importing this module stays light.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from bindscope.alignment.protocols import ProbeSettings
from bindscope.alignment.splits import SPLIT_NAMES, distractor_combination, split_by_combination, swap_combination
from bindscope.errors import BadInput


MODALITIES = ("image", "text")


@dataclass
class LinearProbe:
    """A fitted linear probe: ``logits = ((x - mean) / std) @ weight.T + bias``.

    Attributes:
        mean, std: ``(D,)`` float32 standardisation from the training inputs (0 and 1 without standardisation).
        weight: ``(C, D)`` float32. bias: ``(C,)`` float32.
        best_step: step (epoch) whose weights were kept (with early stopping the highest validation accuracy,
            earliest on ties; else the last).
        val_accuracy: validation accuracy at ``best_step`` (NaN without validation data).
    """

    mean: np.ndarray
    std: np.ndarray
    weight: np.ndarray
    bias: np.ndarray
    best_step: int
    val_accuracy: float

    def logits(self, x: np.ndarray) -> np.ndarray:
        """``(N, C)`` float32 logits of ``(N, D)`` inputs."""
        return ((np.asarray(x, np.float32) - self.mean) / self.std) @ self.weight.T + self.bias

    def predict(self, x: np.ndarray) -> np.ndarray:
        """``(N,)`` int64 predicted class ids."""
        return np.argmax(self.logits(x), axis=1)

    def accuracy(self, x: np.ndarray, y: np.ndarray) -> float:
        """Share of rows whose predicted class equals ``y`` (NaN for no rows)."""
        return float(np.mean(self.predict(x) == np.asarray(y))) if len(y) else float("nan")


def fit_linear_probe(x_train: np.ndarray, y_train: np.ndarray, n_classes: int,
                     x_val: np.ndarray | None = None, y_val: np.ndarray | None = None,
                     settings: ProbeSettings = ProbeSettings()) -> LinearProbe:
    """Fit ``torch.nn.Linear(D, n_classes)`` with cross-entropy (CPU, float32) as ``settings`` say: Adam or SGD
    (``optimiser``, ``lr``, ``weight_decay``), ``steps`` full-batch steps or, with ``batch_size``, ``steps`` epochs
    of mini-batches shuffled with ``seed``; inputs standardised with the training mean and standard deviation when
    ``standardise``; weights drawn uniformly in +-1/sqrt(D) with ``seed``, bias 0.

    Args:
        x_train: ``(N, D)`` features (embeddings, or bag-of-words counts). y_train: ``(N,)`` ints in
            ``[0, n_classes)``.
        x_val, y_val: validation data. With ``settings.early_stopping`` every ``eval_every`` steps (epochs) the
            weights with the best validation accuracy so far are kept; otherwise, or without validation data, the
            last step's.
        settings: a :class:`ProbeSettings`; ``fractions``, ``min_objects``, ``normalise`` and ``hold_out`` do not
            apply here.

    Raises:
        BadInput: empty training data, labels out of range, or ``n_classes < 2``.
    """
    from bindscope.encoders.interface import torch_threads

    with torch_threads(1):
        return _fit_linear_probe(x_train, y_train, n_classes, x_val, y_val, settings)


def _fit_linear_probe(x_train, y_train, n_classes, x_val, y_val, settings: ProbeSettings) -> LinearProbe:
    import torch

    x_train = np.asarray(x_train, np.float32)
    y_train = np.asarray(y_train, np.int64)
    if x_train.ndim != 2 or not len(x_train) or len(y_train) != len(x_train):
        raise BadInput(f"probe training data must be a non-empty (N, D) array with N labels; got "
                       f"{x_train.shape} and {y_train.shape}")
    if n_classes < 2 or y_train.min() < 0 or y_train.max() >= n_classes:
        raise BadInput(f"probe labels must lie in [0, {n_classes}) with at least 2 classes")
    if settings.standardise:
        mean = x_train.mean(axis=0)
        std = np.maximum(x_train.std(axis=0), 1e-6).astype(np.float32)
    else:
        mean, std = np.zeros(x_train.shape[1], np.float32), np.ones(x_train.shape[1], np.float32)
    has_val = x_val is not None and y_val is not None and len(y_val) > 0
    generator = torch.Generator().manual_seed(settings.seed)
    layer = torch.nn.Linear(x_train.shape[1], n_classes)
    with torch.no_grad():
        bound = 1.0 / np.sqrt(x_train.shape[1])
        layer.weight.uniform_(-bound, bound, generator=generator)
        layer.bias.zero_()
    xt = torch.from_numpy((x_train - mean) / std)
    yt = torch.from_numpy(y_train)
    xv = torch.from_numpy((np.asarray(x_val, np.float32) - mean) / std) if has_val else None
    yv = torch.from_numpy(np.asarray(y_val, np.int64)) if has_val else None
    kind = torch.optim.Adam if settings.optimiser == "adam" else torch.optim.SGD
    optimiser = kind(layer.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    batch = len(xt) if settings.batch_size is None else settings.batch_size

    def val_accuracy() -> float:
        with torch.no_grad():
            return float((layer(xv).argmax(dim=1) == yv).float().mean())

    best = (-1.0, 0, layer.weight.detach().clone(), layer.bias.detach().clone())
    steps = settings.steps
    for step in range(1, steps + 1):
        order = torch.randperm(len(xt), generator=generator) if settings.batch_size is not None else None
        for start in range(0, len(xt), batch):
            rows = slice(None) if order is None else order[start:start + batch]
            optimiser.zero_grad()
            loss = torch.nn.functional.cross_entropy(layer(xt[rows]), yt[rows])
            loss.backward()
            optimiser.step()
        if has_val and settings.early_stopping and (step % settings.eval_every == 0 or step == steps):
            acc = val_accuracy()
            if acc > best[0]:
                best = (acc, step, layer.weight.detach().clone(), layer.bias.detach().clone())
    if not has_val or not settings.early_stopping:
        best = (val_accuracy() if has_val else float("nan"), steps, layer.weight.detach().clone(),
                layer.bias.detach().clone())
    return LinearProbe(mean=mean.astype(np.float32), std=std, weight=best[2].numpy(), bias=best[3].numpy(),
                       best_step=best[1], val_accuracy=best[0])


def _view(table, sample: int, modality: str, attribute: str):
    """Objects a modality 'sees' in a sample, and which of them show the attribute."""
    objects = table.objects[sample]
    if modality == "image":
        seen = list(objects)
        shows = {o.index for o in seen if o.attributes.get(attribute, "")}
    else:
        described = table.described[sample]
        seen = [o for o in objects if o.mention_position > 0]
        shows = {o.index for o in seen if attribute in described.get(o.index, set())}
    return seen, shows


def bag_of_words_features(table, samples: list[int], modality: str, attribute: str,
                          values: list[str]) -> np.ndarray:
    """``(len(samples), len(values))`` float32: the multiset of ``attribute`` values in each sample's view.

    Row = count of each value among the modality's objects that show the attribute (image: every object
    with a value other than ``""``; text: the mentioned objects the caption gives it for). Which object has
    which value is dropped — that pairing is exactly what a bag of words lacks.
    """
    col = {v: i for i, v in enumerate(values)}
    out = np.zeros((len(samples), len(values)), np.float32)
    for row, sample in enumerate(samples):
        seen, shows = _view(table, sample, modality, attribute)
        for o in seen:
            value = o.attributes.get(attribute, "")
            if o.index in shows and value in col:
                out[row, col[value]] += 1
    return out


def bag_of_words_bound(features: np.ndarray) -> np.ndarray:
    """Per row, ``1 / (number of distinct values present)``: the expected accuracy of guessing uniformly among
    the values in the bag — the best a bag of words can do without a prior over values (1.0 when only one
    value is present). ``features`` as returned by :func:`bag_of_words_features`."""
    distinct = np.count_nonzero(np.asarray(features) > 0, axis=1)
    return 1.0 / np.maximum(distinct, 1)


def probe_targets(table, modality: str, attribute: str, min_objects: int = 2) -> dict[str, list[tuple[int, str]]]:
    """Eligible ``(sample, label value)`` pairs per target category for one modality and attribute.

    A sample is eligible for target category ``c`` when it contains exactly one object of ``c``, that object
    shows the attribute in the modality (image: value not ``""``; text: the caption gives the value for it),
    and the modality's view holds at least ``min_objects`` objects.
    """
    out: dict[str, list[tuple[int, str]]] = {}
    for sample in range(len(table)):
        seen, shows = _view(table, sample, modality, attribute)
        if len(seen) < min_objects:
            continue
        counts = Counter(o.category for o in table.objects[sample])
        for o in seen:
            if counts[o.category] == 1 and o.index in shows:
                out.setdefault(o.category, []).append((sample, o.attributes[attribute]))
    return {c: out[c] for c in sorted(out, key=lambda c: (len(c), c))}


def probe_splits(table, attribute: str, fractions=(0.6, 0.2, 0.2), seed: int = 0,
                 hold_out: str = "distractor") -> dict[str, dict[int, int]]:
    """Train (0) / val (1) / test (2) per target category, held out by combination.

    For each category, every sample holding exactly one object of it is keyed (from the object table, so both
    modalities share the split) by ``hold_out``: ``"distractor"``,
    :func:`~bindscope.alignment.splits.distractor_combination` (the other objects' combination), or ``"scene"``,
    :func:`~bindscope.alignment.splits.swap_combination` (the whole scene's, with its attribute-swapped twin: the
    LABCLIP authors'); :func:`~bindscope.alignment.splits.split_by_combination` deals the keys out (``seed`` offset
    by the category's rank, so targets do not share one shuffle). A category with too few distinct keys gets no
    split (its probes are skipped).

    Returns:
        ``{category: {sample index: split id}}``.
    """
    members: dict[str, list[tuple[int, tuple]]] = {}
    for sample, objects in enumerate(table.objects):
        counts = Counter(o.category for o in objects)
        for o in objects:
            if counts[o.category] == 1:
                key = distractor_combination(objects, o.index, attribute) if hold_out == "distractor" else \
                    swap_combination(objects, attribute)
                members.setdefault(o.category, []).append((sample, key))
    out = {}
    for rank, category in enumerate(sorted(members, key=lambda c: (len(c), c))):
        rows = members[category]
        try:
            ids = split_by_combination([k for _, k in rows], fractions, seed + rank)
        except BadInput:
            continue
        out[category] = {s: int(i) for (s, _), i in zip(rows, ids)}
    return out


def _mean(values: list[float]) -> float | None:
    values = [v for v in values if v == v]
    return float(np.mean(values)) if values else None


def _by_object_count(targets: list[dict]) -> dict:
    """Test accuracy pooled over targets (micro) per number of objects in the modality's view, with Wilson
    intervals: ``{"2": {"accuracy", "correct", "total", "ci95", "bag_of_words"}, ...}`` (LABCLIP's robustness
    test: does the probe hold up as scenes get more crowded)."""
    from bindscope.evaluation.stats import proportion

    pooled: dict[int, list[int]] = {}
    for t in targets:
        for m, c in t["by_object_count"].items():
            tally = pooled.setdefault(int(m), [0, 0, 0])
            tally[0] += c["correct"]
            tally[1] += c["bag_of_words_correct"]
            tally[2] += c["n"]
    return {str(m): {**proportion(c, n), "bag_of_words": b / n} for m, (c, b, n) in sorted(pooled.items())}


def _probe_target(table, emb: np.ndarray, modality: str, attribute: str, pairs: list, part: np.ndarray,
                  all_values: list[str], settings: ProbeSettings) -> dict:
    """One target category's probe and bag-of-words probe (see :func:`run_probes`): ``pairs`` are its
    (sample, value) pairs, ``part`` their split (0 train, 1 val, 2 test, -1 none)."""
    samples = np.array([s for s, _ in pairs])
    labels_text = [v for _, v in pairs]
    train_values = sorted({v for v, p in zip(labels_text, part) if p == 0})
    info = {"n_train": int(np.sum(part == 0)), "n_val": int(np.sum(part == 1)), "n_test": int(np.sum(part == 2))}
    if len(train_values) < 2 or info["n_test"] == 0:
        info["skipped"] = "fewer than 2 classes in training" if len(train_values) < 2 else "no test sample"
        return info
    cls = {v: i for i, v in enumerate(train_values)}
    y = np.array([cls.get(v, -1) for v in labels_text])  # -1: a value unseen in training (wrong)
    masks = [part == s for s in range(3)]
    train, val, test = ((samples[m], y[m]) for m in masks)
    val_ok = val[1] >= 0
    x = np.asarray(emb[samples], np.float32)
    probe = fit_linear_probe(x[masks[0]], train[1], len(cls), x[masks[1]][val_ok], val[1][val_ok], settings)
    bow = bag_of_words_features(table, list(samples), modality, attribute, all_values)
    bow_probe = fit_linear_probe(bow[masks[0]], train[1], len(cls), bow[masks[1]][val_ok], val[1][val_ok],
                                 settings)
    predicted = probe.predict(x[masks[2]]) == test[1]
    bow_predicted = bow_probe.predict(bow[masks[2]]) == test[1]
    by_count: dict[int, list[int]] = {}
    for sample, ok, bow_ok in zip(test[0], predicted, bow_predicted):
        tally = by_count.setdefault(len(_view(table, int(sample), modality, attribute)[0]), [0, 0, 0])
        tally[0] += int(ok)
        tally[1] += int(bow_ok)
        tally[2] += 1
    train_counts = Counter(train[1].tolist())
    majority_class = min(train_counts, key=lambda c: (-train_counts[c], c))
    info.update({
        "n_classes": len(cls),
        "accuracy": probe.accuracy(x[masks[2]], test[1]),
        "bag_of_words": bow_probe.accuracy(bow[masks[2]], test[1]),
        "bag_of_words_bound": float(bag_of_words_bound(bow[masks[2]]).mean()),
        "chance": 1.0 / len(cls),
        "majority": float(np.mean(test[1] == majority_class)),
        "correct": int(predicted.sum()),
        "bag_of_words_correct": int(bow_predicted.sum()),
        "by_object_count": {str(m): {"correct": c, "bag_of_words_correct": b, "n": n}
                            for m, (c, b, n) in sorted(by_count.items())},
    })
    return info


def _summary(targets: dict) -> dict:
    """An attribute's summary over its target categories (see :func:`run_probes`)."""
    done = [t for t in targets.values() if "accuracy" in t]
    n_test = sum(t["n_test"] for t in done)
    return {
        "accuracy": _mean([t["accuracy"] for t in done]),
        "accuracy_micro": sum(t["correct"] for t in done) / n_test if n_test else None,
        "bag_of_words": _mean([t["bag_of_words"] for t in done]),
        "bag_of_words_micro": sum(t["bag_of_words_correct"] for t in done) / n_test if n_test else None,
        "bag_of_words_bound": _mean([t["bag_of_words_bound"] for t in done]),
        "chance": _mean([t["chance"] for t in done]),
        "majority": _mean([t["majority"] for t in done]),
        "n_targets": len(done),
        "n_test": n_test,
        "by_object_count": _by_object_count(done),
        "targets": targets,
    }


def run_probes(table, embeddings: dict[str, np.ndarray], attributes: list[str] | None = None,
               settings: ProbeSettings = ProbeSettings(), progress=None) -> dict:
    """Train and test every probe and its bag-of-words baseline.

    Args:
        table: a :class:`bindscope.alignment.data.SplitTable`.
        embeddings: ``{"image"|"text": (len(table), D) float32}``, row i = sample i (image embedding, or caption
            embedding), L2-normalised or not as ``settings.normalise`` says. Rows of ineligible samples are not
            read (may be NaN).
        attributes: attributes to probe (default: all of the table's).
        settings: :class:`ProbeSettings` (``fractions``: sample shares of the combination hold-out, ``hold_out``
            its key; ``seed``: split, initialisation and mini-batches; ``min_objects``; the probes' optimiser).
        progress: optional callable receiving one string per finished attribute.

    Returns:
        ``{"modalities": {modality: {attribute: summary}}, "splits": {attribute: {category: {split: n}}}}``
        where ``summary`` holds ``accuracy`` (mean over targets), ``accuracy_micro`` (pooled test samples),
        ``bag_of_words`` / ``bag_of_words_micro`` (bag-of-words probe), ``bag_of_words_bound``, ``chance`` (mean
        of 1/n_classes), ``majority`` (mean share of the most frequent training class in test), ``n_targets``,
        ``n_test``, ``by_object_count`` (micro accuracy per number of objects in the view, with Wilson interval
        and bag-of-words probe accuracy; the sampling unit is a (sample, target) test pair), and ``targets``:
        per target category its ``accuracy``, ``bag_of_words``, ``bag_of_words_bound``, ``chance``, ``majority``,
        ``n_classes``, ``n_train``/``n_val``/``n_test`` — or ``skipped`` with the reason.

    Raises:
        BadInput: an unknown modality or attribute, or embeddings of the wrong length.
    """
    attributes = list(table.attributes if attributes is None else attributes)
    for a in attributes:
        if a not in table.attributes:
            raise BadInput(f"attribute {a!r}: the dataset has {', '.join(table.attributes)}")
    for modality, emb in embeddings.items():
        if modality not in MODALITIES:
            raise BadInput(f"modality {modality!r}: choose from {', '.join(MODALITIES)}")
        if len(emb) != len(table):
            raise BadInput(f"{modality} embeddings have {len(emb)} rows for {len(table)} samples")
    result = {"modalities": {m: {} for m in embeddings}, "splits": {}}
    for attribute in attributes:
        split_of = probe_splits(table, attribute, settings.fractions, settings.seed, settings.hold_out)
        all_values = sorted({o.attributes.get(attribute, "") for objs in table.objects for o in objs} - {""})
        result["splits"][attribute] = {
            c: {name: int(sum(1 for v in per.values() if v == s)) for s, name in enumerate(SPLIT_NAMES)}
            for c, per in split_of.items()}
        for modality, emb in embeddings.items():
            targets = {}
            for category, pairs in probe_targets(table, modality, attribute, settings.min_objects).items():
                part = np.array([split_of.get(category, {}).get(int(s), -1) for s, _ in pairs])
                targets[category] = _probe_target(table, emb, modality, attribute, pairs, part, all_values,
                                                  settings)
            result["modalities"][modality][attribute] = _summary(targets)
        if progress is not None:
            progress(attribute)
    return result


def check_probe_table(table, modalities, attributes=None, min_objects: int = 2) -> dict:
    """Count the eligible probe samples per modality and attribute, before any model is loaded.

    Returns:
        ``{modality: {attribute: number of (sample, target) pairs}}``.

    Raises:
        BadInput: an unknown modality or attribute; not a single eligible sample anywhere; or no attribute
            that takes two values on the eligible objects of one category (nothing to probe: a COCO import's
            only attribute, ``supercategory``, is fixed by the category).
    """
    attributes = list(table.attributes if attributes is None else attributes)
    counts = {}
    varies = False  # some target category shows two values of some attribute: a probe has two classes
    for m in modalities:
        if m not in MODALITIES:
            raise BadInput(f"modality {m!r}: choose from {', '.join(MODALITIES)}")
        counts[m] = {}
        for a in attributes:
            if a not in table.attributes:
                raise BadInput(f"attribute {a!r}: the dataset has {', '.join(table.attributes)}")
            targets = probe_targets(table, m, a, min_objects).values()
            counts[m][a] = sum(len(v) for v in targets)
            varies = varies or any(len({value for _, value in pairs}) > 1 for pairs in targets)
    if not any(n for per in counts.values() for n in per.values()):
        raise BadInput(f"split {table.split!r} has no sample to probe: probes need samples with at least "
                       f"{min_objects} objects (text: mentioned) whose target object shows the attribute")
    if not varies:
        raise BadInput(f"split {table.split!r} has nothing to probe: every attribute probed ({', '.join(attributes)}) "
                       "takes one value on all eligible objects of a category, and a probe needs an attribute whose "
                       "value differs between objects of one category (MADMAN's attributes, comco render "
                       "--attributes colour,material)", param="attributes")
    return counts
