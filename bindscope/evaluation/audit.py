"""Attribute-legibility audit of a MADMAN dataset: can a supervised model see every attribute and the digit?

The MADMAN study (Gurung, Hoffmann, Brox, GCPR 2025) assumes that every attribute named in a caption is
plainly visible in the image. :func:`audit_madman` measures it with a supervised *oracle*: a small CNN trained
on the objects of one split (default ``train``) and tested on the objects of another (default ``test``).

Each object is isolated by its own instance mask (pixels of other objects and the background are black) and cut
out as a ``crop`` × ``crop`` window centred on its visible bounding box, at the canvas scale (never resized, so
size stays absolute); ``crop`` is the largest visible bounding-box side over both splits, rounded up to a
multiple of 8 (at least 16, at most the canvas side rounded up; zero-padded at the border). Objects with no
visible pixel are skipped.

One network with a shared trunk and one linear head per attribute (those with at least two values in the
config) and one for the digit identity is trained with the sum of the heads' cross-entropy losses (Adam,
one-cycle learning rate, seeded; no augmentation). Figures per head, on the test split (the sampling unit is
the object):

- ``accuracy``: correct / all test objects = trace / sum of the confusion matrix (micro), with a Wilson 95 %
  interval (:mod:`bindscope.evaluation.stats`);
- ``per_class``: per true class, correct / objects of that class = diagonal / row sum (a recall); ``macro`` is
  their unweighted mean over classes present in the test split;
- ``confusion``: ``confusion[i][j]`` = test objects of true class ``classes[i]`` predicted as ``classes[j]``;
- ``by_size``: the same figures over the test objects of each size level.

An attribute with a single value in the config is reported as ``{"trained": false, "classes": [value]}``: there
is nothing to tell apart.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bindscope.encoders.interface import torch_threads
from bindscope.errors import BadInput, DatasetError
from bindscope.evaluation import AuditSettings
from bindscope.evaluation.results import dataset_info, open_dataset, versions
from bindscope.evaluation.stats import wilson_interval
from bindscope.format.reader import Dataset
from bindscope.io.atomic import save_figure
from bindscope.schemas import validate

SCHEMA_VERSION = 1
DIGIT = "digit"
SIZE = "size"
CROP_MULTIPLE = 8


@dataclass
class ObjectCrops:
    """The isolated objects of one split.

    Attributes:
        images: ``(M, crop, crop, 3)`` uint8 RGB, the object's own mask pixels, black elsewhere.
        labels: per head (each attribute, and ``"digit"``), ``(M,)`` int64 indices into the head's classes.
        split: the split name; skipped: objects with no visible pixel (not in ``images``).
    """

    images: np.ndarray
    labels: dict[str, np.ndarray]
    split: str
    skipped: int


def class_lists(ds: Dataset) -> dict[str, list[str]]:
    """Class names per head: each attribute's values in the order of their numeric parameter (size fraction,
    degrees, ...; the names in sorted order where the parameter is not a number, e.g. colours), then the digits
    "0".."9"."""
    values = ds.manifest["config"]["attributes"]
    classes = {}
    for a in ds.attribute_names:
        table = values[a]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in table.values())
        classes[a] = sorted(table, key=lambda name: (table[name], name) if numeric else name)
    classes[DIGIT] = [str(d) for d in range(10)]
    return classes


def _max_side(ds: Dataset, split: str) -> int:
    """Largest visible bbox side (pixels) over the objects of ``split``, read from the object tables only."""
    part = ds.split(split)
    side = 0
    for number in range(len(ds.manifest["splits"][split]["shards"])):
        reader = part.shard(number)
        for local in range(reader.count):
            for o in reader.objects(local):
                side = max(side, o.bbox[2] - o.bbox[0], o.bbox[3] - o.bbox[1])
    return side


def crop_side(ds: Dataset, splits: list[str]) -> int:
    """Side in pixels of the oracle's square crops: the largest visible bbox side over the objects of ``splits``,
    rounded up to a multiple of ``CROP_MULTIPLE`` (8), at most the canvas side rounded up likewise, at least 16."""
    side = max(_max_side(ds, split) for split in splits)
    canvas = int(ds.manifest["image_size"][0])
    return max(2 * CROP_MULTIPLE, min(-(-side // CROP_MULTIPLE), -(-canvas // CROP_MULTIPLE)) * CROP_MULTIPLE)


def isolate_objects(ds: Dataset, split: str, crop: int, classes: dict[str, list[str]],
                    limit: int | None = None) -> ObjectCrops:
    """Cut every visible object of ``split`` out of its image by its instance mask (see the module docstring).

    Args:
        ds: an open MADMAN dataset.
        split: split name.
        crop: window side in pixels (>= every visible bbox side, else the object is cut).
        classes: class names per head (:func:`class_lists`).
        limit: keep only the first ``limit`` objects of the split (in sample order); None keeps all.

    Raises:
        DatasetError: an object's attribute value or digit is not one of the config's classes.
    """
    part = ds.split(split)
    index = {head: {name: k for k, name in enumerate(names)} for head, names in classes.items()}
    crops, labels, skipped = [], {head: [] for head in classes}, 0
    half = crop // 2
    for number in range(len(ds.manifest["splits"][split]["shards"])):
        if limit is not None and len(crops) >= limit:
            break
        reader = part.shard(number)
        images, masks = reader.images[()], reader.masks[()]
        for local in range(reader.count):
            for o in reader.objects(local):
                if limit is not None and len(crops) >= limit:
                    break
                if o.area == 0:
                    skipped += 1
                    continue
                x0, y0, x1, y1 = o.bbox
                cy, cx = (y0 + y1) // 2 - half, (x0 + x1) // 2 - half
                window = np.zeros((crop, crop, 3), np.uint8)
                ty0, tx0 = max(cy, 0), max(cx, 0)
                ty1, tx1 = min(cy + crop, images.shape[1]), min(cx + crop, images.shape[2])
                inside = masks[local, ty0:ty1, tx0:tx1] == o.index
                window[ty0 - cy:ty1 - cy, tx0 - cx:tx1 - cx] = images[local, ty0:ty1, tx0:tx1] * inside[..., None]
                crops.append(window)
                values = dict(o.attributes, **{DIGIT: o.category})
                for head in classes:
                    try:
                        labels[head].append(index[head][values[head]])
                    except KeyError:
                        raise DatasetError(f"dataset {str(ds.path)!r}, split {split!r}, sample "
                                           f"{reader.first_index + local}: {head} {values[head]!r} is not one of "
                                           f"the config's values ({', '.join(classes[head])})") from None
    images = np.stack(crops) if crops else np.zeros((0, crop, crop, 3), np.uint8)
    return ObjectCrops(images, {h: np.asarray(v, np.int64) for h, v in labels.items()}, split, skipped)


def _build_oracle(crop: int, heads: dict[str, int], width: int):
    """The oracle CNN: four stages (conv 3×3, batch norm, ReLU, max-pool 2) of ``width``, 2·, 4· and 8·``width``
    channels, a 256-unit hidden layer and one linear head per entry of ``heads`` (name -> number of classes).
    Input ``(B, 3, crop, crop)`` float32 in [0, 1], ``crop`` >= 16; output: logits per head, ``(B, classes)``."""
    import torch
    from torch import nn

    layers, channels = [], 3
    for k in range(4):
        layers += [nn.Conv2d(channels, width << k, 3, padding=1, bias=False), nn.BatchNorm2d(width << k),
                   nn.ReLU(inplace=True), nn.MaxPool2d(2)]
        channels = width << k
    side = crop // 16

    class Oracle(nn.Module):
        def __init__(self):
            super().__init__()
            self.trunk = nn.Sequential(*layers, nn.Flatten(), nn.Linear(channels * side * side, 256),
                                       nn.ReLU(inplace=True))
            self.heads = nn.ModuleDict({h: nn.Linear(256, n) for h, n in heads.items()})

        def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
            z = self.trunk(x)
            return {h: head(z) for h, head in self.heads.items()}

    return Oracle()


def _to_input(images):
    """``(B, crop, crop, 3)`` uint8 tensor -> the oracle's ``(B, 3, crop, crop)`` float32 input in [0, 1]."""
    return images.permute(0, 3, 1, 2).float().div_(255.0)


def _shifted(images, shift: int, generator):
    """``(B, crop, crop, 3)`` uint8 crops each moved by its own whole-pixel offset in ``[-shift, shift]`` along
    both axes (drawn from ``generator``), black where the window leaves the crop."""
    import torch

    crop = images.shape[1]
    padded = torch.nn.functional.pad(images, (0, 0, shift, shift, shift, shift))
    offsets = torch.randint(0, 2 * shift + 1, (len(images), 2), generator=generator).tolist()
    return torch.stack([padded[i, dy:dy + crop, dx:dx + crop] for i, (dy, dx) in enumerate(offsets)])


def train_oracle(train: ObjectCrops, heads: dict[str, int], epochs: int, batch_size: int, lr: float, width: int,
                 seed: int, progress: bool = False, shift: int = 0):
    """Train the oracle on ``train`` (see the module docstring); returns the model in eval mode.

    ``shift`` (pixels, >= 0): each training crop is moved by a random whole-pixel offset of at most ``shift``
    along each axis in every epoch (augmentation that changes no attribute; 0 = none).

    Deterministic: the weights come from ``torch.manual_seed(seed)`` inside :func:`torch.random.fork_rng` (the
    caller's global RNG is untouched) and epoch ``e`` visits the objects in ``torch.randperm`` order of a
    generator seeded with ``(seed, e)``, which then draws the shifts; the same inputs and seed give the same
    model on the same machine and thread count.
    """
    import torch
    from torch import nn
    from tqdm.auto import tqdm

    crop = train.images.shape[1]
    n = len(train.images)
    steps_per_epoch = max(1, -(-n // batch_size))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _build_oracle(crop, heads, width)
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=lr, total_steps=epochs * steps_per_epoch)
    x_all = torch.from_numpy(train.images)
    y_all = {h: torch.from_numpy(train.labels[h]) for h in heads}
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    bar = tqdm(total=epochs * steps_per_epoch, desc="audit: training the oracle", disable=not progress,
               unit="step")
    for epoch in range(epochs):
        generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, batch_size):
            rows = order[start:start + batch_size]
            if len(rows) < 2:  # batch norm needs two samples
                continue
            x = _shifted(x_all[rows], shift, generator) if shift else x_all[rows]
            out = model(_to_input(x))
            loss = sum(loss_fn(out[h], y_all[h][rows]) for h in heads)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            schedule.step()
            bar.update(1)
    bar.close()
    model.eval()
    return model


def predict(model, images: np.ndarray, heads: list[str], batch_size: int = 512) -> dict[str, np.ndarray]:
    """Predicted class index per head, ``(M,)`` int64, for ``(M, crop, crop, 3)`` uint8 object crops."""
    import torch

    out = {h: [] for h in heads}
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            logits = model(_to_input(torch.from_numpy(images[start:start + batch_size])))
            for h in heads:
                out[h].append(logits[h].argmax(dim=1).numpy())
    return {h: np.concatenate(v) if v else np.zeros(0, np.int64) for h, v in out.items()}


def confusion_figures(truth: np.ndarray, predicted: np.ndarray, classes: list[str]) -> dict:
    """Accuracy, per-class accuracy and the confusion matrix of ``predicted`` against ``truth`` (class indices).

    Returns ``{"n", "correct", "accuracy", "ci95", "macro", "per_class", "confusion", "classes"}``:
    ``confusion[i][j]`` counts objects of true class i predicted as j; ``accuracy`` = trace / sum (None when
    there is no object), ``ci95`` its Wilson interval; ``per_class[c]`` = diagonal / row sum (None for a class
    with no object); ``macro`` = mean of the per-class accuracies that exist.
    """
    k = len(classes)
    confusion = np.bincount(truth * k + predicted, minlength=k * k).reshape(k, k)
    n, correct = int(confusion.sum()), int(np.trace(confusion))
    rows = confusion.sum(axis=1)
    per_class = {c: (float(confusion[i, i] / rows[i]) if rows[i] else None) for i, c in enumerate(classes)}
    present = [v for v in per_class.values() if v is not None]
    return {"n": n, "correct": correct, "accuracy": correct / n if n else None, "ci95": wilson_interval(correct, n),
            "macro": float(np.mean(present)) if present else None, "per_class": per_class,
            "confusion": confusion.tolist(), "classes": list(classes)}


def audit_madman(dataset: str | os.PathLike | Dataset, settings: AuditSettings | None = None, *,
                 progress: bool = False, **changes) -> dict:
    """Train the oracle CNN on the isolated objects of ``settings.train_split`` and score it on
    ``settings.test_split``.

    Args:
        dataset: a MADMAN dataset folder (or an open :class:`Dataset`).
        settings: the splits, the training and the sample limits, an :class:`~bindscope.evaluation.AuditSettings`
            (default: its defaults).
        progress: show a progress bar.
        **changes: fields of :class:`~bindscope.evaluation.AuditSettings` in place of those of ``settings``
            (``epochs=30``, ``seed=3``, ...).

    Returns:
        A dict validated by ``bindscope/schemas/audit_result.json``: ``attributes`` (per attribute:
        :func:`confusion_figures` plus ``"trained": true``, or ``{"trained": false, "classes": [value]}`` for
        a single-valued attribute), ``digit`` (the digit identity, same figures), ``by_size`` (per size level:
        ``{"attributes": ..., "digit": ...}`` over the test objects of that size), ``settings``, ``counts``,
        ``dataset`` and ``versions``. Holds no timings, so the same data, settings and seed give the same dict
        on the same machine.

    Raises:
        DatasetError: missing or unfinished folder, not a MADMAN dataset, unknown split, corrupt shard.
        BadInput: equal splits, a value out of range, an unknown keyword, a split without visible objects.
    """
    from bindscope.errors import with_changes

    settings = with_changes(settings or AuditSettings(), changes, "an audit option")
    train_split, test_split = settings.train_split, settings.test_split
    ds = open_dataset(dataset)
    values = ds.manifest.get("config", {}).get("attributes")
    if not isinstance(values, dict) or any(not isinstance(values.get(a), dict) for a in ds.attribute_names):
        raise DatasetError(f"madman audit needs a dataset whose config.attributes maps every object attribute "
                           f"({', '.join(ds.attribute_names) or 'none'}) to its values (as MADMAN's does); "
                           f"{str(ds.path)!r}'s does not")
    if train_split == test_split:
        raise BadInput(f"the train and test splits are both {train_split!r}; the oracle must be tested on objects "
                       f"it was not trained on (splits: {', '.join(ds.split_names)})")
    for split in (train_split, test_split):
        ds.split(split)
    ds.check([train_split, test_split])
    classes = class_lists(ds)
    crop = crop_side(ds, [train_split, test_split])
    train = isolate_objects(ds, train_split, crop, classes, settings.max_train_objects)
    test = isolate_objects(ds, test_split, crop, classes, settings.max_test_objects)
    for part in (train, test):
        if not len(part.images):
            raise BadInput(f"split {part.split!r} of {str(ds.path)!r} has no visible object to "
                           f"{'train' if part is train else 'test'} on")
    heads = {h: len(c) for h, c in classes.items() if len(c) > 1}
    with torch_threads(settings.threads):
        model = train_oracle(train, heads, settings.epochs, settings.batch_size, settings.lr, settings.width,
                             settings.seed, progress, settings.shift)
        predicted = predict(model, test.images, list(heads))

    def figures(rows: np.ndarray) -> dict:
        block = {}
        for head in ds.attribute_names:
            if head in heads:
                block[head] = {"trained": True, **confusion_figures(test.labels[head][rows], predicted[head][rows],
                                                                    classes[head])}
            else:
                block[head] = {"trained": False, "classes": classes[head]}
        return {"attributes": block, DIGIT: confusion_figures(test.labels[DIGIT][rows], predicted[DIGIT][rows],
                                                             classes[DIGIT])}

    everything = figures(np.arange(len(test.images)))
    by_size = {}
    if SIZE in classes:
        for k, level in enumerate(classes[SIZE]):
            by_size[level] = figures(np.flatnonzero(test.labels[SIZE] == k))
    result = {"schema_version": SCHEMA_VERSION, "kind": "madman-audit",
              "dataset": dataset_info(ds, [train_split, test_split]),
              "settings": {"train_split": train_split, "test_split": test_split, "epochs": settings.epochs,
                           "batch_size": settings.batch_size, "lr": settings.lr, "width": settings.width,
                           "seed": settings.seed, "threads": settings.threads, "crop": crop, "shift": settings.shift,
                           "max_train_objects": settings.max_train_objects,
                           "max_test_objects": settings.max_test_objects,
                           "model": "oracle CNN (4 conv stages, one head per attribute and the digit)",
                           "confusion": "rows = true class, columns = predicted class"},
              "counts": {"train_objects": len(train.images), "test_objects": len(test.images),
                         "train_skipped_invisible": train.skipped, "test_skipped_invisible": test.skipped},
              **everything, "by_size": by_size, "versions": versions()}
    validate(result, "audit_result", "audit result (internal error)", error=RuntimeError)
    return result


def _heads(result: dict) -> list[tuple[str, dict]]:
    """(name, block) of every head of ``result`` or of a ``by_size`` entry: the attributes, then the digit."""
    return list(result["attributes"].items()) + [(DIGIT, result[DIGIT])]


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}"


def format_audit(result: dict) -> str:
    """The terminal table of an audit result: per head accuracy (%), Wilson 95 % CI, macro and per-class
    accuracy; then accuracy per size level."""
    s, c = result["settings"], result["counts"]
    lines = [f"oracle CNN trained on split {s['train_split']!r} ({c['train_objects']} objects), tested on split "
             f"{s['test_split']!r} ({c['test_objects']} objects) of {result['dataset']['path']}",
             f"  seed {s['seed']}, {s['epochs']} epochs, batch {s['batch_size']}, lr {s['lr']}, width "
             f"{s['width']}, crop {s['crop']} px", "",
             f"{'':<10} {'accuracy %':>10} {'95% CI':>15} {'macro %':>8}   per class % (true class: diagonal / "
             "row sum)"]
    for name, block in _heads(result):
        if not block.get("trained", True):
            lines.append(f"{name:<10} single value {block['classes'][0]!r} in the config: not trained")
            continue
        ci = "" if block["ci95"] is None else f"[{100 * block['ci95'][0]:.1f}, {100 * block['ci95'][1]:.1f}]"
        per_class = ", ".join(f"{k} {_pct(block['per_class'][k])}" for k in block["classes"])
        lines.append(f"{name:<10} {_pct(block['accuracy']):>10} {ci:>15} {_pct(block['macro']):>8}   {per_class}")
    if result["by_size"]:
        size = result["attributes"].get(SIZE, {})
        levels = [lv for lv in size.get("classes", []) if lv in result["by_size"]] or list(result["by_size"])
        lines += ["", "accuracy % by size level (objects: " + ", ".join(
            f"{lv} {result['by_size'][lv][DIGIT]['n']}" for lv in levels) + ")",
            f"{'':<10} " + " ".join(f"{lv:>10}" for lv in levels)]
        for name, block in _heads(result):
            if block.get("trained", True):
                cells = [result["by_size"][lv]["attributes"].get(name, result["by_size"][lv].get(name))
                         for lv in levels]
                lines.append(f"{name:<10} " + " ".join(f"{_pct(cell['accuracy']):>10}" for cell in cells))
    return "\n".join(lines)


def plot_audit(result: dict, path: str | os.PathLike) -> Path:
    """Confusion matrices of every trained head (rows = true class, normalised to 1; cell text = count) on the
    test split, one panel each; written atomically (format from the suffix: .png, .pdf, .svg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(name, block) for name, block in _heads(result) if block.get("trained", True)]
    cols = min(4, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 3.3 * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, (name, block) in zip(axes.flat, panels):
        counts = np.asarray(block["confusion"], dtype=float)
        share = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
        ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
        k = len(block["classes"])
        ax.set_xticks(range(k), block["classes"], rotation=60 if k > 3 else 0, fontsize=7, ha="right" if k > 3
                      else "center")
        ax.set_yticks(range(k), block["classes"], fontsize=7)
        for i in range(k):
            for j in range(k):
                if counts[i, j]:
                    ax.text(j, i, f"{int(counts[i, j])}", ha="center", va="center", fontsize=6 if k > 8 else 7,
                            color="white" if share[i, j] > 0.5 else "black")
        ax.set_title(f"{name}: {_pct(block['accuracy'])} %", fontsize=9)
        ax.set_xlabel("predicted", fontsize=7)
        ax.set_ylabel("true", fontsize=7)
    s = result["settings"]
    fig.suptitle(f"madman audit: oracle trained on {s['train_split']}, tested on {s['test_split']} "
                 f"({result['counts']['test_objects']} objects)", fontsize=9)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, path, dpi=120)
