"""``comco preview``: a grid of a ComCO dataset's images with mask outlines, object names and mention order."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from bindscope.publish.preview import preview_grid

OUTLINE_COLOURS = ["#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#bfef45"]


def outlined(image: np.ndarray, mask: np.ndarray, colours: list[tuple[int, int, int]]) -> np.ndarray:
    """``image`` (H, W, 3) uint8 with the inner boundary pixels of each mask id k drawn in ``colours[k-1]``
    (skimage.segmentation.find_boundaries, mode "inner"); returns a new (H, W, 3) uint8 array."""
    from skimage.segmentation import find_boundaries

    out = image.copy()
    for k in np.unique(mask):
        if k == 0:
            continue
        edge = find_boundaries(mask == k, mode="inner")
        out[edge] = colours[(int(k) - 1) % len(colours)]
    return out


def _tile(ax, sample, colours) -> None:
    ax.imshow(outlined(sample.image, sample.mask, colours), interpolation="nearest")
    for obj in sample.objects:
        x0, y0 = obj.bbox[0], obj.bbox[1]
        colour = OUTLINE_COLOURS[(obj.index - 1) % len(OUTLINE_COLOURS)]
        ax.text(x0, max(0, y0 - 1), f"#{obj.mention_position} {obj.category}", fontsize=6, color="white",
                va="bottom", bbox={"facecolor": colour, "alpha": 0.75, "pad": 1, "linewidth": 0})
    ax.set_title(sample.caption, fontsize=7, wrap=True)


def write_preview(directory: str | os.PathLike, out: str | os.PathLike, split: str = "scenes", count: int = 16,
                 cols: int = 4, overwrite: bool = False) -> Path:
    """Write a PNG grid of the first ``count`` samples of ``split`` of the dataset at ``directory``.

    Each tile: the image with each object's visible-mask outline in its own colour, a label per object
    "#mention name" at the top-left corner of its visible bbox (mention position 0 = not mentioned), and the
    caption as the tile title. Written through a temp file and renamed; missing parent folders are created; an
    existing ``out`` is replaced only with ``overwrite``.

    Raises:
        BadInput / DatasetError: bad ``count``/``cols``, missing or non-ComCO dataset, unknown split, an output
            path that cannot be created or exists without ``overwrite``.
    """
    from matplotlib.colors import to_rgb

    colours = [tuple(int(round(255 * v)) for v in to_rgb(c)) for c in OUTLINE_COLOURS]
    return preview_grid(directory, out, split, count, cols, lambda ax, sample: _tile(ax, sample, colours), (3.2, 3.5),
                generators=("comco",), overwrite=overwrite, dpi=120)
