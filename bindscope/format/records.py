"""Plain-Python records for one dataset sample, shared by every generator and every reader.

A :class:`Sample` is what generators produce and what :class:`bindscope.format.reader.Dataset` returns:
numpy arrays for pixels, Python scalars and strings for everything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bindscope.errors import BadInput


@dataclass
class ObjectRecord:
    """One object (a MADMAN digit or a ComCO model) in a sample.

    Attributes:
        index: 1-based object id; the sample's mask has value ``index`` on this object's visible pixels.
        category: category name, e.g. ``"7"`` (MADMAN) or ``"pizza"`` (ComCO).
        category_id: integer id of the category (the digit for MADMAN, the COCO id for ComCO-72,
            the shape index for SimCO-18).
        attributes: attribute name -> value, e.g. ``{"colour": "yellow", "size": "small"}``. Every object of a
            dataset has every name listed in the manifest's ``object_attributes`` ("" where not applicable).
        bbox: visible bounding box ``(x0, y0, x1, y1)`` in pixels, half-open (x1, y1 exclusive);
            ``(0, 0, 0, 0)`` for an object with no visible pixel.
        area: visible pixel count (number of mask pixels equal to ``index``).
        size_rank: 1 for the largest visible area in the sample, 2 for the next, ... (ties broken by index).
        salient: True for the sample's salient object (MADMAN: the centred digit; ComCO: the large one in
            ``one-large`` mode, else the object of size rank 1; with ``saliency`` the object it names).
        mention_position: 1-based position of the object's mention in the caption, 0 if not mentioned.
        extras: generator-specific numeric columns (e.g. ``{"occlusion": 0.1}``), float32 on disk; the
            names are listed in the manifest's ``object_extras``.
    """

    index: int
    category: str
    category_id: int
    attributes: dict[str, str]
    bbox: tuple[int, int, int, int]
    area: int
    size_rank: int
    salient: bool
    mention_position: int
    extras: dict[str, float] = field(default_factory=dict)


@dataclass
class Negative:
    """A wrong caption for a sample (an evaluation negative).

    Attributes:
        kind: ``"recognition"`` (one attribute value of one object replaced by another value),
            ``"binding"`` (one attribute's values swapped between two objects), or a generator-specific
            kind such as ``"matching-1"``/``"matching-2"`` (ComCO image-text matching scenarios).
        caption: the negative caption text; never equal to the true caption.
        attribute: the attribute changed (``""`` when no attribute is involved).
        objects: the 1-based indices of the objects whose description changed.
        original: the original value(s), ``"|"``-joined when several objects are involved.
        replacement: the replacing value(s), ``"|"``-joined in the same order.
    """

    kind: str
    caption: str
    attribute: str = ""
    objects: tuple[int, ...] = ()
    original: str = ""
    replacement: str = ""


@dataclass
class Sample:
    """One dataset sample.

    Attributes:
        index: global 0-based index of the sample within its split.
        image: ``(H, W, 3)`` uint8 RGB.
        mask: ``(H, W)`` uint8 instance mask: 0 background, k = visible pixels of object k.
        caption: the caption text.
        objects: one :class:`ObjectRecord` per object, ordered by ``index`` (1, 2, ...).
        negatives: evaluation negatives (may be empty, e.g. for training splits).
        spec: the JSON-serialisable plan the sample was realised from (generator-specific).
        arrays: per-sample numeric arrays of a fixed shape and dtype per dataset (format version 2), e.g.
            ComCO's ``camera_K`` (3, 3) float32, ``world_to_camera`` (4, 4) float32 and ``depth`` (H, W)
            float16; listed in the manifest's ``sample_arrays``. Empty for format version 1 datasets.
    """

    index: int
    image: np.ndarray
    mask: np.ndarray
    caption: str
    objects: list[ObjectRecord]
    negatives: list[Negative] = field(default_factory=list)
    spec: dict = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def mask_bbox_area(mask: np.ndarray, index: int) -> tuple[tuple[int, int, int, int], int]:
    """Return ``((x0, y0, x1, y1), area)`` of the pixels of ``mask`` equal to ``index`` (half-open bbox, pixels).

    Returns ``((0, 0, 0, 0), 0)`` when no pixel has that value.
    """
    ys, xs = np.nonzero(mask == index)
    if len(xs) == 0:
        return (0, 0, 0, 0), 0
    return (int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1), int(len(xs))


def size_ranks(areas: list[int]) -> list[int]:
    """1-based rank of each area, largest first; equal areas keep their list order. ``[5, 9, 5] -> [2, 1, 3]``."""
    order = sorted(range(len(areas)), key=lambda i: (-areas[i], i))
    ranks = [0] * len(areas)
    for rank, i in enumerate(order, start=1):
        ranks[i] = rank
    return ranks


def crowded_pairs(masks: list[np.ndarray], gap: int) -> list[tuple[int, int]]:
    """The pairs ``(i, j)`` (positions in ``masks``, i < j) of pixel sets that are fewer than ``gap`` pixels apart.

    Two sets are ``gap`` pixels apart when every pixel of one is more than ``gap`` pixels from every pixel of the
    other along rows, columns and diagonals (Chebyshev distance ``max(|dy|, |dx|) > gap``): at least ``gap`` empty
    pixels lie between them in every direction. ``gap`` 0: the sets share no pixel; 1: nor do they touch (not even
    corner to corner). Sets with no pixel are apart from everything.

    Args:
        masks: boolean ``(H, W)`` arrays of one image (e.g. ``mask == k`` per object, or where a digit has ink).
        gap: pixels, >= 0.
    """
    from scipy import ndimage

    boxes = []
    for m in masks:
        ys, xs = np.nonzero(m)
        boxes.append((ys.min(), xs.min(), ys.max(), xs.max()) if len(ys) else None)
    pairs = []
    for i, j in ((i, j) for i in range(len(masks)) for j in range(i + 1, len(masks))):
        a, b = boxes[i], boxes[j]
        if a is None or b is None or b[0] - a[2] > gap or a[0] - b[2] > gap or b[1] - a[3] > gap or a[1] - b[3] > gap:
            continue  # the bounding boxes alone keep them apart
        # j grown by gap pixels in every direction (within j's box grown by gap, outside which j has no pixel)
        y0, x0, y1, x1 = max(b[0] - gap, 0), max(b[1] - gap, 0), b[2] + gap + 1, b[3] + gap + 1
        grown = ndimage.maximum_filter(masks[j][y0:y1, x0:x1], size=2 * gap + 1, mode="constant", cval=False)
        if (grown & masks[i][y0:y1, x0:x1]).any():
            pairs.append((i, j))
    return pairs


OBJECT_ORDERS = ("mention", "size")


def ordered_objects(objects: list, order: str = "mention") -> list:
    """A scene's objects in the order that stands in for the ComCO authors' file name (``obj1_..._objn.png``).

    Args:
        objects: :class:`ObjectRecord` of one scene.
        order: ``"mention"``: caption mention order, unmentioned objects last by index; ``"size"``: size rank
            (1 = largest visible area), ties by index.

    Raises:
        BadInput: another ``order``.
    """
    if order == "mention":
        return sorted(objects, key=lambda o: (o.mention_position == 0, o.mention_position, o.index))
    if order == "size":
        return sorted(objects, key=lambda o: (o.size_rank, o.index))
    raise BadInput(f"object_order {order!r} is not allowed; use {' or '.join(OBJECT_ORDERS)}", param="object_order")
