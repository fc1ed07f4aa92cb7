"""Conjunctive search on image embeddings (LABCLIP's unimodal test; Koishigarina, Uselis, Oh; docs/papers.md
section 3): is a target conjunction (e.g. a red sphere) present among distractors?

The target is a category and one attribute value, ``{"category": "sphere", "colour": "red"}``. Scenes from
``comco render --task conjunctive-search`` (see :func:`bindscope.generators.comco.attributes.plan_conjunctive`)
name their own target, and their target-present and target-absent scenes hold the same multiset of shapes and of
colours, so only the pairing of colour to shape tells them apart. Any other dataset whose objects have the
target's attribute (a CLEVR or PUG import, a SimCO render with ``--attributes``) is searched for a target given
by the caller; its scenes are taken as they are, present and absent scenes are not matched on their bags, and the
bag-of-words baseline shows how much the bag alone tells (``bags_matched`` in the result says which case it is).

Protocol (this project's choices, docs/alignment.md): label = target present (any object of the target
category with the target's value, read from the object table); samples are dealt into train / val / test at
random (seeded) within each (number of distractors, label) stratum; a linear probe (``Linear(D, 2)``,
:func:`~bindscope.alignment.probes.fit_linear_probe`) on the L2-normalised image embedding decides presence,
validation accuracy picks the step. Baseline: the same probe on the bag of words of the scene, the counts of
each category and of each value of the target's attribute (no pairing), which on a conjunctive-search render
carries no signal by construction (expected 0.5). Accuracy is reported overall and per number of distractors
(objects - 1) with 95% Wilson intervals; the sampling unit is a test scene.
"""

from __future__ import annotations

import numpy as np

from bindscope.alignment.data import SplitTable
from bindscope.alignment.probes import ProbeSettings, fit_linear_probe
from bindscope.errors import BadInput


def target_attribute(target: dict) -> str:
    """The attribute of a target ``{"category", <attribute>: value}`` (its one key besides ``category``)."""
    return next(k for k in target if k != "category")


def target_words(target: dict) -> str:
    """A target as words: ``"red sphere"``."""
    return f"{target[target_attribute(target)]} {target['category']}"


def parse_target(text: str) -> dict:
    """``"category=sphere,colour=red"`` -> ``{"category": "sphere", "colour": "red"}``.

    Raises:
        BadInput: not ``category=NAME`` and one ``ATTRIBUTE=VALUE``, comma-separated.
    """
    pairs = [part.partition("=") for part in text.split(",")]
    target = {key.strip(): value.strip() for key, sep, value in pairs if sep and key.strip() and value.strip()}
    if len(target) != 2 or len(pairs) != 2 or "category" not in target:
        raise BadInput(f"target {text!r} is not allowed; give the category and one attribute value, e.g. "
                       "category=sphere,colour=red", param="target")
    return target


def conjunctive_target(dataset, target: dict | str | None = None) -> dict:
    """The target ``{"category", <attribute>: value}`` of a conjunctive search on ``dataset``.

    Args:
        dataset: an open :class:`~bindscope.format.reader.Dataset`.
        target: the caller's target (a dict, or text for :func:`parse_target`); None: the one a ``comco render
            --task conjunctive-search`` dataset names in its config. A given target must be a category and one of
            the dataset's attributes.

    Raises:
        BadInput: no target given for a dataset that names none, or a target whose attribute the dataset's
            objects do not have.
    """
    config = dataset.manifest.get("config", {})
    if target is None:
        if config.get("task") != "conjunctive-search" or "target" not in (config.get("conjunctive_search") or {}):
            raise BadInput(f"task conjunctive-search needs a target: {str(dataset.path)!r} was not rendered with "
                           "task='conjunctive-search', which names its own; give one, e.g. "
                           "target='category=sphere,colour=red'", param="task")
        return dict(config["conjunctive_search"]["target"])
    target = parse_target(target) if isinstance(target, str) else dict(target)
    if len(target) != 2 or "category" not in target or not all(isinstance(v, str) for v in target.values()):
        raise BadInput(f"target {target!r} is not allowed; give the category and one attribute value, e.g. "
                       "category=sphere,colour=red", param="target")
    if target_attribute(target) not in dataset.attribute_names:
        raise BadInput(f"target attribute {target_attribute(target)!r}: the dataset's objects have "
                       f"{', '.join(dataset.attribute_names) or 'no attributes'}", param="target")
    return target


def bags_matched(dataset) -> bool:
    """Whether the dataset's present and absent scenes hold the same bags by construction (a conjunctive-search
    render)."""
    return dataset.manifest.get("config", {}).get("task") == "conjunctive-search"


def presence_labels(table: SplitTable, target: dict) -> np.ndarray:
    """``(len(table),)`` int64: 1 where an object has the target's category and value, else 0."""
    attribute = target_attribute(target)
    return np.array([int(any(o.category == target["category"] and o.attributes.get(attribute) == target[attribute]
                             for o in objects)) for objects in table.objects], np.int64)


def bag_features(table: SplitTable, attribute: str = "colour") -> np.ndarray:
    """``(len(table), C + K)`` float32: per sample the count of each category (sorted) and of each value of
    ``attribute`` (sorted) among its objects - the scene as a bag of words, without which value goes with which
    category."""
    categories = sorted({o.category for objects in table.objects for o in objects})
    values = sorted({o.attributes.get(attribute, "") for objects in table.objects for o in objects} - {""})
    col = {("category", c): i for i, c in enumerate(categories)}
    col.update({("value", v): len(categories) + i for i, v in enumerate(values)})
    out = np.zeros((len(table), len(col)), np.float32)
    for row, objects in enumerate(table.objects):
        for o in objects:
            out[row, col[("category", o.category)]] += 1
            if o.attributes.get(attribute):
                out[row, col[("value", o.attributes[attribute])]] += 1
    return out


def stratified_split(strata: list, fractions=(0.6, 0.2, 0.2), seed: int = 0) -> np.ndarray:
    """Split id (0 train, 1 val, 2 test) per item, dealt at random (``seed``) within each stratum: of a stratum's
    n items, ``round(n * train)`` go to train, ``round(n * val)`` to val, the rest to test."""
    from bindscope.alignment.splits import check_fractions

    shares = check_fractions(fractions)
    rng = np.random.default_rng(seed)
    out = np.zeros(len(strata), np.int64)
    for key in sorted(set(strata)):
        rows = np.array([i for i, s in enumerate(strata) if s == key])
        rows = rows[rng.permutation(len(rows))]
        n_train, n_val = int(round(len(rows) * shares[0])), int(round(len(rows) * shares[1]))
        out[rows[n_train:n_train + n_val]] = 1
        out[rows[n_train + n_val:]] = 2
    return out


def run_conjunctive_search(table: SplitTable, image_embeddings: np.ndarray, target: dict,
                           settings: ProbeSettings = ProbeSettings()) -> dict:
    """Fit and test the presence probe and its bag-of-words baseline (see the module docstring).

    Args:
        table: the split's :class:`SplitTable`. image_embeddings: ``(len(table), D)`` unit-norm float32.
        target: ``{"category", <attribute>: value}``. settings: ``fractions`` and ``seed`` of the stratified
            split, the probe's optimiser (``min_objects`` does not apply).

    Returns:
        ``{"target", "n_train", "n_val", "n_test", "accuracy", "bag_of_words", "chance": 0.5, "by_distractors":
        {"k": {"accuracy", "bag_of_words", "n_present", "n_absent"}}}``; ``accuracy`` / ``bag_of_words`` are
        :func:`~bindscope.evaluation.stats.proportion` dicts (correct, total, accuracy, ci95).

    Raises:
        BadInput: embeddings of the wrong length, or a class missing from the training split.
    """
    from bindscope.evaluation.stats import proportion

    if len(image_embeddings) != len(table):
        raise BadInput(f"image embeddings have {len(image_embeddings)} rows for {len(table)} samples")
    y = presence_labels(table, target)
    distractors = np.array([len(objects) - 1 for objects in table.objects], np.int64)
    part = stratified_split(list(zip(distractors.tolist(), y.tolist())), settings.fractions, settings.seed)
    train, val, test = (part == s for s in range(3))
    if len(set(y[train].tolist())) < 2 or not test.any():
        raise BadInput(f"split {table.split!r}: conjunctive search needs target-present and target-absent scenes "
                       f"in training and some test scenes; it has {int(y.sum())} present of {len(y)}")
    results = {}
    bag = bag_features(table, target_attribute(target))
    for name, x in (("probe", np.asarray(image_embeddings, np.float32)), ("bag_of_words", bag)):
        probe = fit_linear_probe(x[train], y[train], 2, x[val], y[val], settings)
        results[name] = probe.predict(x[test]) == y[test]
    by = {}
    for k in sorted(set(distractors[test].tolist())):
        rows = distractors[test] == k
        by[str(k)] = {"accuracy": proportion(int(results["probe"][rows].sum()), int(rows.sum())),
                      "bag_of_words": proportion(int(results["bag_of_words"][rows].sum()), int(rows.sum())),
                      "n_present": int(y[test][rows].sum()), "n_absent": int((1 - y[test][rows]).sum())}
    return {"target": dict(target), "n_train": int(train.sum()), "n_val": int(val.sum()), "n_test": int(test.sum()),
            "accuracy": proportion(int(results["probe"].sum()), int(test.sum())),
            "bag_of_words": proportion(int(results["bag_of_words"].sum()), int(test.sum())),
            "chance": 0.5, "by_distractors": by}


def conjunctive_search(dataset, embedder, split: str | None = None,
                       settings: ProbeSettings = ProbeSettings(), target: dict | str | None = None) -> dict:
    """Conjunctive search on one split: embeds every image (through the cached ``embedder``) and runs
    :func:`run_conjunctive_search` for ``target`` (:func:`conjunctive_target`: default the target a
    ``comco render --task conjunctive-search`` dataset names). Returns its dict plus ``split`` and
    ``bags_matched`` (:func:`bags_matched`).

    Raises:
        BadInput: no usable target, a text-only model, or too few scenes.
    """
    from bindscope.alignment.data import default_split, encode_split_images, load_table

    target = conjunctive_target(dataset, target)
    split = split or default_split(dataset)
    table = load_table(dataset, split, build_swaps=False, compose=None)
    images = encode_split_images(embedder, dataset, split, range(len(table)))
    embedder.flush()
    result = run_conjunctive_search(table, images, target, settings)
    result.update({"split": split, "bags_matched": bags_matched(dataset)})
    return result
