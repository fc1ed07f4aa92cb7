"""``comco preview``: a grid of a ComCO dataset's images with mask outlines, object names and mention order."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from bindscope.atomic import save_figure
from bindscope.errors import BadInput

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


def preview_grid(directory: str | os.PathLike, out: str | os.PathLike, split: str = "scenes", count: int = 12,
                 cols: int = 4) -> Path:
    """Write a PNG grid of the first ``count`` samples of ``split`` of the dataset at ``directory``.

    Each tile: the image with each object's visible-mask outline in its own colour, a label per object
    "#mention name" at the top-left corner of its visible bbox (mention position 0 = not mentioned), and the
    caption as the tile title. Written through a temp file and renamed.

    Raises:
        BadInput / DatasetError: bad ``count``/``cols``, missing or non-ComCO dataset, unknown split, or an
            output path whose folder does not exist.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgb

    from bindscope.dataset.reader import Dataset

    if count < 1 or cols < 1:
        raise BadInput(f"-n and --cols must be at least 1, got {count} and {cols}")
    out = Path(out)
    if not out.parent.is_dir():
        raise BadInput(f"--out {str(out)!r}: folder {str(out.parent)!r} does not exist")
    if out.suffix.lower() != ".png":
        raise BadInput(f"--out {str(out)!r}: must end in .png")
    colours = [tuple(int(round(255 * v)) for v in to_rgb(c)) for c in OUTLINE_COLOURS]
    with Dataset(directory) as ds:
        ds.require_generator("comco")
        data = ds.split(split)
        samples = [data[i] for i in range(min(count, len(data)))]
    if not samples:
        raise BadInput(f"split {split!r} of {str(directory)!r} is empty")
    rows = (len(samples) + cols - 1) // cols
    ncols = min(cols, len(samples))
    fig, axes = plt.subplots(rows, ncols, figsize=(3.2 * ncols, 3.5 * rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, sample in zip(axes.flat, samples):
        ax.imshow(outlined(sample.image, sample.mask, colours), interpolation="nearest")
        for obj in sample.objects:
            x0, y0 = obj.bbox[0], obj.bbox[1]
            colour = OUTLINE_COLOURS[(obj.index - 1) % len(OUTLINE_COLOURS)]
            ax.text(x0, max(0, y0 - 1), f"#{obj.mention_position} {obj.category}", fontsize=6, color="white",
                    va="bottom", bbox={"facecolor": colour, "alpha": 0.75, "pad": 1, "linewidth": 0})
        ax.set_title(sample.caption, fontsize=7, wrap=True)
    fig.tight_layout()
    return save_figure(fig, out, dpi=120)
