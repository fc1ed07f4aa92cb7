"""TOC and IOC: which object at which position can a linear head read from a frozen embedding?

Protocol of the ComCO/SimCO authors' classification experiments (repository ``clip-oscope/clip-oscope``, files
``Text_Encoder_Experiments/TOC_*.py`` for text, ``Image_Encoder_Experiments/IOC.py`` for images; Abbasi et al.,
CVPR 2025): one linear layer per object position, ``torch.nn.Linear(D, classes)``, trained with cross-entropy
and Adam on frozen embeddings to predict the category of the object at that position; accuracy per position on
held-out queries. TOC reads caption embeddings (position = mention order), IOC scene image embeddings
(position = the order standing in for the authors' file name,
:func:`bindscope.evaluation.clip_oscope.ordered_objects`).

The project's choices (docs/clip-oscope.md): queries are grouped by their number of objects and each group has
its own heads; the classes are the whole vocabulary (as ``IOC.py``); the split is seeded and made over *units*
(distinct caption texts for TOC, scenes for IOC), so one caption text or scene never lands on both sides; train
accuracy is measured after the last epoch (the scripts average it during the last epoch); every head is seeded
from ``(seed, n, position)`` and trained on CPU, so the same embeddings and settings give the same figures.
Accuracies carry Wilson 95% intervals (:func:`bindscope.evaluation.stats.proportion`), and the majority
baseline (the most frequent training label, predicted for every test query) is reported beside them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from bindscope.errors import BadInput, check_int, check_number
from bindscope.evaluation.stats import proportion
from bindscope.limits import MAX_BATCH, MAX_EPOCHS, MAX_SEED

TOC_SOURCE = "clip-oscope/clip-oscope: Text_Encoder_Experiments/TOC_ComCO_CLIP.py (and TOC_SimCO_*.py)"
IOC_SOURCE = "clip-oscope/clip-oscope: Image_Encoder_Experiments/IOC.py"


@dataclass(frozen=True)
class HeadSettings:
    """Training of the position heads.

    Attributes:
        epochs: passes over the training queries, >= 1 (``IOC.py``: 25; ``TOC_*.py``: 10 or 20).
        lr: Adam learning rate, > 0 (both scripts: 1e-3).
        batch_size: queries per step, >= 1 (``TOC_*.py``: 32; ``IOC.py``: 8).
        test_fraction: share of units held out, in (0, 1) (``IOC.py``: 0.2; ``TOC_*.py``: 0.15, plus 0.1
            validation).
        seed: seed of the split, the initial weights and the batch order, >= 0.
    """

    epochs: int = 25
    lr: float = 1e-3
    batch_size: int = 32
    test_fraction: float = 0.2
    seed: int = 0

    def check(self) -> HeadSettings:
        """Self, after BadInput for any value out of its range (the message names the field)."""
        check_int("head_epochs", self.epochs, 1, MAX_EPOCHS)
        check_number("head_lr", self.lr)
        check_int("head_batch_size", self.batch_size, 1, MAX_BATCH)
        fraction = check_number("head_test_fraction", self.test_fraction)
        if not fraction < 1:
            raise BadInput(f"head_test_fraction {self.test_fraction!r} is not allowed; use a number in (0, 1)",
                           param="head_test_fraction")
        check_int("seed", self.seed, 0, MAX_SEED)
        return self

    def to_dict(self) -> dict:
        return asdict(self)


def split_units(units: list, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded train/test split of queries by unit (queries of one unit stay together).

    Args:
        units: (N,) hashable unit of each query (its caption text, its scene index).
        test_fraction: share of the distinct units held out, in (0, 1); at least one unit each side when there
            are two or more units. seed: numpy seed.

    Returns:
        ``(train, test)`` sorted int64 query indices; with fewer than two units everything is training.
    """
    distinct = list(dict.fromkeys(units))
    if len(distinct) < 2:
        return np.arange(len(units), dtype=np.int64), np.zeros(0, np.int64)
    held = min(len(distinct) - 1, max(1, int(round(test_fraction * len(distinct)))))
    order = np.random.default_rng(seed).permutation(len(distinct))
    test_units = {distinct[i] for i in order[:held]}
    test = np.array([i for i, u in enumerate(units) if u in test_units], np.int64)
    train = np.array([i for i, u in enumerate(units) if u not in test_units], np.int64)
    return train, test


def train_head(x: np.ndarray, y: np.ndarray, classes: int, settings: HeadSettings, seed: int):
    """One ``torch.nn.Linear(D, classes)`` trained with cross-entropy and Adam on (x, y).

    Args:
        x: (M, D) float32 embeddings. y: (M,) int64 labels in 0..classes-1. classes: >= 1.
        settings: epochs, lr, batch size. seed: seed of the initial weights and the batch order.

    Returns:
        The trained head (torch module, CPU, eval mode), trained on one CPU thread (restored after).
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a (D, C) layer gains nothing from threads, and one thread keeps it exact
    try:
        generator = torch.Generator().manual_seed(int(seed))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            head = torch.nn.Linear(x.shape[1], classes)
        optimiser = torch.optim.Adam(head.parameters(), lr=settings.lr)
        features = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
        labels = torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64))
        head.train()
        for _ in range(settings.epochs):
            perm = torch.randperm(len(labels), generator=generator)
            for start in range(0, len(labels), settings.batch_size):
                batch = perm[start:start + settings.batch_size]
                loss = torch.nn.functional.cross_entropy(head(features[batch]), labels[batch])
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
    finally:
        torch.set_num_threads(threads)
    return head.eval()


def _predict(head, x: np.ndarray) -> np.ndarray:
    import torch

    if len(x) == 0:
        return np.zeros(0, np.int64)
    with torch.no_grad():
        return head(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))).argmax(dim=1).numpy()


def position_classification(embeddings: np.ndarray, objects: list[list[str]], class_names: list[str],
                            units: list, settings: HeadSettings | None = None, source: str = "",
                            ordered_by: str = "") -> dict:
    """TOC / IOC: per number of objects n and per position k, a linear head predicting the k-th object.

    Args:
        embeddings: (N, D) frozen query embeddings (float, unit-norm as the encoders give them).
        objects: per query its object names in position order; every name must be in ``class_names``.
        class_names: the C classes (the vocabulary), C >= 2.
        units: (N,) split unit per query (caption text for TOC, scene index for IOC); see :func:`split_units`.
        settings: :class:`HeadSettings` (default values when None).
        source / ordered_by: labels written into the result.

    Returns:
        ``{"source", "ordered_by", "classes", "settings", "split_by_units": true, "by_num_objects": {"<n>":
        {"queries", "train", "test", "train_units", "test_units", "positions": [{"position", "test", "train",
        "majority_baseline"}, ...]}}}``; ``test`` / ``train`` / ``majority_baseline`` are
        :func:`~bindscope.evaluation.stats.proportion` dicts (accuracy in [0, 1], Wilson ci95; accuracy None
        when there is no test query).

    Raises:
        BadInput: shape mismatch, fewer than 2 classes, an object that is not a class (named), bad settings.
    """
    settings = (settings or HeadSettings()).check()
    x = np.asarray(embeddings, dtype=np.float32)
    if x.ndim != 2 or len(x) != len(objects) or len(units) != len(objects):
        raise BadInput(f"embeddings of shape {x.shape}, {len(objects)} object lists and {len(units)} units "
                       "must agree in length")
    if len(class_names) < 2:
        raise BadInput(f"position heads need at least 2 classes, got {len(class_names)}")
    index = {name: j for j, name in enumerate(class_names)}
    for names in objects:
        for name in names:
            if name not in index:
                raise BadInput(f"object {name!r} is not one of the {len(class_names)} classes "
                               f"(e.g. {', '.join(class_names[:5])})")
    groups: dict[int, list[int]] = {}
    for q, names in enumerate(objects):
        if names:
            groups.setdefault(len(names), []).append(q)
    out = {}
    for n in sorted(groups):
        members = np.array(groups[n], np.int64)
        seed = int(np.random.SeedSequence([settings.seed, n]).generate_state(1)[0])
        train, test = split_units([units[q] for q in members], settings.test_fraction, seed)
        train, test = members[train], members[test]
        labels = np.array([[index[name] for name in objects[q]] for q in members.tolist()], np.int64)
        row = {int(q): i for i, q in enumerate(members.tolist())}
        positions = []
        for k in range(n):
            y = labels[:, k]
            y_train = y[[row[int(q)] for q in train]]
            y_test = y[[row[int(q)] for q in test]]
            head_seed = int(np.random.SeedSequence([settings.seed, n, k + 1]).generate_state(1)[0])
            head = train_head(x[train], y_train, len(class_names), settings, head_seed)
            majority = int(np.bincount(y_train, minlength=len(class_names)).argmax())
            positions.append({"position": k + 1,
                              "test": proportion(int((_predict(head, x[test]) == y_test).sum()), len(test)),
                              "train": proportion(int((_predict(head, x[train]) == y_train).sum()), len(train)),
                              "majority_baseline": proportion(int((y_test == majority).sum()), len(test))})
        out[str(n)] = {"queries": len(members), "train": len(train), "test": len(test),
                       "train_units": len({units[q] for q in train.tolist()}),
                       "test_units": len({units[q] for q in test.tolist()}), "positions": positions}
    return {"source": source, "ordered_by": ordered_by, "classes": len(class_names), "settings": settings.to_dict(),
            "split_by_units": True, "by_num_objects": out}


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}"


def format_heads(metrics: dict) -> list[str]:
    """Terminal lines of the ``toc`` / ``ioc`` blocks of ``metrics``: test and train accuracy (%) per position,
    Wilson 95% CI, the majority baseline. Empty when there is none."""
    lines: list[str] = []
    for task in ("toc", "ioc"):
        if task not in metrics:
            continue
        block = metrics[task]
        lines.append(f"{task.upper()} ({block['source']}): one linear head per position, {block['classes']} classes, "
                     f"objects by {block['ordered_by']}")
        for n, g in block["by_num_objects"].items():
            lines.append(f"  {n} objects: {g['train']} train / {g['test']} test queries "
                         f"({g['train_units']} / {g['test_units']} units)")
            for p in g["positions"]:
                t, r, m = p["test"], p["train"], p["majority_baseline"]
                ci = "" if t["ci95"] is None else f" [{100 * t['ci95'][0]:.1f}, {100 * t['ci95'][1]:.1f}]"
                lines.append(f"    Object {p['position']}: test {_pct(t['accuracy'])} %{ci}  train "
                             f"{_pct(r['accuracy'])} %  majority baseline {_pct(m['accuracy'])} %")
        lines.append("")
    return lines
