"""Splits held out by attribute–object combination (pure Python/numpy, no torch).

Two kinds of hold-out are used by :mod:`bindscope.alignment` (see docs/alignment.md):

* :func:`split_by_combination` — every sample carries one *combination key*; each distinct key goes wholly
  into one split, so no key is ever in two splits. The linear probe of a target category uses the
  **distractor combination** (:func:`distractor_combination`): the sorted ``(category, value)`` pairs of the
  sample's other objects, e.g. ``(("4", "blue"),)`` for a probe of digit 7's colour beside a blue 4. A test
  sample therefore pairs the target with an attribute–object combination the probe never saw beside it in
  training, so the whole scene is new; the target's own value classes still occur in training (a classifier
  needs them). Holding out the *scene* combination (:func:`scene_combination`, target included) instead
  would make the training data anti-correlate target and distractor values exactly where the test data
  lie, pushing any probe that reads the distractor below chance. The LABCLIP authors' protocol holds out the
  scene with its attribute-swapped twin nonetheless (:func:`swap_combination`).
* :func:`hold_out_triples` — LABCLIP's held-out combinations: a seeded share of the
  ``(category, attribute, value)`` triples described in the captions is held out; a sample that describes
  any held-out triple is a held-out (evaluation) sample, every other sample may be used for fitting. No
  held-out triple occurs in a fitting sample (the sense of "object–attribute combinations held out of
  training" in the MADMAN paper, Gurung et al. 2025; docs/papers.md section 2).
"""

from __future__ import annotations

from collections import Counter
from typing import Hashable, Sequence

import numpy as np

from bindscope.alignment.protocols import fraction_shares
from bindscope.errors import BadInput
from bindscope.format.records import ObjectRecord

SPLIT_NAMES = ("train", "val", "test")


def scene_combination(objects: Sequence[ObjectRecord], attribute: str) -> tuple[tuple[str, str], ...]:
    """The scene combination of ``attribute``: sorted ``((category, value), ...)`` over ``objects``.

    Example: digits 7 (red) and 4 (blue) give ``(("4", "blue"), ("7", "red"))`` for ``"colour"``.
    Objects whose value is ``""`` (attribute not applicable) take part with the value ``""``.
    """
    return tuple(sorted((o.category, o.attributes.get(attribute, "")) for o in objects))


def distractor_combination(objects: Sequence[ObjectRecord], target: int,
                           attribute: str) -> tuple[tuple[str, str], ...]:
    """The distractor combination of ``attribute`` for the object with index ``target``: sorted
    ``((category, value), ...)`` of every *other* object of the sample.

    Example: target digit 7 (red) beside digit 4 (blue) gives ``(("4", "blue"),)`` for ``"colour"``.
    """
    return tuple(sorted((o.category, o.attributes.get(attribute, "")) for o in objects if o.index != target))


def swap_combination(objects: Sequence[ObjectRecord], attribute: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The scene combination of ``attribute`` up to swapping values between objects: ``(sorted categories, sorted
    values)``. A scene and its attribute-swapped twin share it: red cube with blue sphere, and blue cube with red
    sphere, both give ``(("cube", "sphere"), ("blue", "red"))``. The LABCLIP authors' probes hold out a scene
    combination together with that twin (their ``train_val_test_split``, written for two objects; with more objects
    this key holds every arrangement of the values among the objects).
    """
    return (tuple(sorted(o.category for o in objects)),
            tuple(sorted(o.attributes.get(attribute, "") for o in objects)))


def check_fractions(fractions: Sequence[float]) -> np.ndarray:
    """``fractions`` as a float64 ``(3,)`` array of (train, val, test) shares
    (:func:`bindscope.alignment.protocols.fraction_shares`).

    Raises:
        BadInput: not three numbers >= 0 summing to 1 with train > 0 and test > 0.
    """
    return np.asarray(fraction_shares(fractions), dtype=float)


def split_by_combination(keys: Sequence[Hashable], fractions: Sequence[float] = (0.6, 0.2, 0.2),
                         seed: int = 0) -> np.ndarray:
    """Assign each sample to train (0), val (1) or test (2) so that no combination key is in two splits.

    The distinct keys are ordered by ``repr`` (so the result does not depend on input order beyond the keys),
    shuffled with ``numpy.random.default_rng(seed)``, and dealt out in that order: a key goes to the first
    split whose target share of *samples* (``fractions``) is not yet reached. Shares are therefore met as
    closely as whole keys allow.

    Args:
        keys: one hashable combination key per sample (e.g. :func:`scene_combination`).
        fractions: target sample shares of (train, val, test); val may be 0.
        seed: shuffling seed.

    Returns:
        ``(len(keys),)`` int8 array of split ids 0/1/2 (names in :data:`SPLIT_NAMES`).

    Raises:
        BadInput: fractions are malformed, or there are fewer distinct keys than non-empty splits.
    """
    shares = check_fractions(fractions)
    counts = Counter(keys)
    distinct = sorted(counts, key=repr)
    needed = int(np.count_nonzero(shares))
    if len(distinct) < needed:
        raise BadInput(f"only {len(distinct)} distinct attribute-object combination(s); "
                       f"a hold-out split into {needed} parts needs at least {needed}")
    order = np.random.default_rng(seed).permutation(len(distinct))
    total = len(keys)
    bounds = np.cumsum(shares) * total
    assignment: dict[Hashable, int] = {}
    placed = 0
    nonzero = [s for s in range(3) if shares[s] > 0]
    for rank, position in enumerate(order):
        key = distinct[position]
        remaining_keys = len(distinct) - rank
        split = next(s for s in range(3) if placed < bounds[s] or s == 2)
        # keep at least one key for every later non-empty split
        later = [s for s in nonzero if s > split and s not in assignment.values()]
        if remaining_keys <= len(later):
            split = later[0]
        assignment[key] = split
        placed += counts[key]
    return np.array([assignment[k] for k in keys], dtype=np.int8)


def hold_out_triples(triples: Sequence[set], fraction: float = 0.1,
                     seed: int = 0) -> tuple[set, np.ndarray]:
    """Hold out a seeded share of ``(category, attribute, value)`` combinations (LABCLIP evaluation).

    Args:
        triples: per sample, the set of ``(category, attribute, value)`` triples its caption describes.
        fraction: share of the distinct triples to hold out, in (0, 1).
        seed: choice seed (``numpy.random.default_rng(seed)`` over the ``repr``-sorted distinct triples).

    Returns:
        ``(held_out, is_held_out)``: the set of held-out triples, and a ``(len(triples),)`` bool array that
        is True for samples describing at least one held-out triple. Samples with False never describe a
        held-out triple.

    Raises:
        BadInput: ``fraction`` is outside (0, 1) or there are no triples at all.
    """
    if not 0.0 < fraction < 1.0:
        raise BadInput(f"hold-out fraction {fraction!r}: must be between 0 and 1 (exclusive)")
    distinct = sorted(set().union(*triples) if triples else set(), key=repr)
    if not distinct:
        raise BadInput("no described attribute-object combinations to hold out")
    count = max(1, int(round(fraction * len(distinct))))
    chosen = np.random.default_rng(seed).choice(len(distinct), size=count, replace=False)
    held_out = {distinct[i] for i in chosen}
    is_held_out = np.array([bool(held_out & set(t)) for t in triples], dtype=bool)
    return held_out, is_held_out
