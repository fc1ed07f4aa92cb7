"""``madman preview``: a grid of samples with their captions and mask outlines (matplotlib, Agg backend)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import numpy as np

from bindscope.atomic import save_figure
from bindscope.errors import BadInput

OUTLINE_COLOURS = ("white", "cyan")  # object 1 (salient, centred), object 2


def draw_preview(directory: str | os.PathLike, out: str | os.PathLike, split: str | None = None, num: int = 16,
                 cols: int = 4) -> Path:
    """Write a PNG grid of the first ``num`` samples of ``split`` of the dataset in ``directory``.

    Each panel shows the image (nearest-neighbour upscaled), the outline of every object's mask (object 1
    white, object 2 cyan) and the caption. The file is written atomically (temp file, then rename).

    Raises:
        BadInput / DatasetError: not a finished dataset, unknown split, ``num`` or ``cols`` < 1, or an output
            path whose folder does not exist or that is not a ``.png``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bindscope.dataset.reader import Dataset

    out = Path(out)
    if num < 1 or cols < 1:
        raise BadInput(f"-n/--num and --cols must be at least 1, got {num} and {cols}")
    if out.suffix.lower() != ".png":
        raise BadInput(f"--out {str(out)!r} must end in .png")
    if not out.parent.is_dir():
        raise BadInput(f"--out {str(out)!r}: folder {str(out.parent)!r} does not exist")
    with Dataset(directory) as ds:
        if split is None:
            split = "test" if "test" in ds.split_names else ds.split_names[0]
        data = ds.split(split)
        samples = [data[i] for i in range(min(num, len(data)))]
    if not samples:
        raise BadInput(f"split {split!r} of {str(directory)!r} has no samples")
    cols = min(cols, len(samples))
    rows = (len(samples) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols, 3.0 * rows), squeeze=False)
    for ax in axes.ravel():
        ax.axis("off")
    for ax, sample in zip(axes.ravel(), samples):
        ax.imshow(sample.image, interpolation="nearest")
        for obj in sample.objects:
            region = (sample.mask == obj.index).astype(np.float32)
            if region.any():
                ax.contour(region, levels=[0.5], colors=OUTLINE_COLOURS[(obj.index - 1) % 2], linewidths=0.8)
        ax.set_title("\n".join(textwrap.wrap(f"{sample.index}: {sample.caption}", 30)), fontsize=7)
    fig.suptitle(f"{Path(directory).name} / {split}  (outlines: object 1 = centred, white; object 2 cyan)",
                 fontsize=8)
    fig.tight_layout()
    return save_figure(fig, out, dpi=110, facecolor="#404040")
