"""``madman preview``: a grid of samples with their captions and mask outlines (matplotlib, Agg backend)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import numpy as np

from bindscope.publish.preview import preview_grid

OUTLINE_COLOURS = ("white", "cyan")  # object 1 (salient, centred), object 2


def _tile(ax, sample) -> None:
    ax.imshow(sample.image, interpolation="nearest")
    for obj in sample.objects:
        region = (sample.mask == obj.index).astype(np.float32)
        if region.any():
            ax.contour(region, levels=[0.5], colors=OUTLINE_COLOURS[(obj.index - 1) % 2], linewidths=0.8)
    ax.set_title("\n".join(textwrap.wrap(f"{sample.index}: {sample.caption}", 30)), fontsize=7)


def write_preview(directory: str | os.PathLike, out: str | os.PathLike, split: str | None = None, count: int = 16,
                 cols: int = 4, overwrite: bool = False) -> Path:
    """Write a PNG grid of the first ``count`` samples of ``split`` (default: test if present, else the first) of
    the dataset in ``directory``.

    Each panel shows the image (nearest-neighbour upscaled), the outline of every object's mask (object 1
    white, object 2 cyan) and the caption. The file is written atomically (temp file, then rename); missing
    parent folders are created; an existing ``out`` is replaced only with ``overwrite``.

    Raises:
        BadInput / DatasetError: not a finished MADMAN dataset (a ComCO one is refused before ``out`` is
            written), unknown split, ``count`` or ``cols`` < 1, an ``out`` that is not a ``.png``, cannot be
            created or exists without ``overwrite``.
    """
    return preview_grid(
        directory, out, split, count, cols, _tile, (2.6, 3.0), generators=("madman",),
        default_split=lambda names: "test" if "test" in names else names[0],
        title=lambda split: f"{Path(directory).name} / {split}  (outlines: object 1 = centred, white; object 2 cyan)",
        overwrite=overwrite, dpi=110, facecolor="#404040")
