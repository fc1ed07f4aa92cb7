"""The one preview-grid helper: a PNG grid of a dataset's first samples, each tile drawn by a generator's
function (``madman preview``, ``comco preview``). matplotlib with the Agg backend, written atomically."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from bindscope.errors import BadInput, check_int
from bindscope.format.records import Sample
from bindscope.io.atomic import save_figure
from bindscope.io.ownership import check_output_location
from bindscope.limits import MAX_COLS, MAX_TILES


def preview_grid(directory: str | os.PathLike, out: str | os.PathLike, split: str | None, count: int, cols: int,
                 draw_tile: Callable[[object, Sample], None], tile_inches: tuple[float, float],
                 generators: tuple[str, ...] = (), default_split: Callable[[list[str]], str] | None = None,
                 title: Callable[[str], str] | None = None, overwrite: bool = False, **save_options) -> Path:
    """Write a grid of the first ``count`` samples of ``split`` of the dataset at ``directory`` to ``out``.

    Args:
        directory: a finished dataset. out: the PNG file (missing parent folders are created).
        split: the split (None: ``default_split(split names)``). count / cols: samples and grid columns (1..:data:`~bindscope.limits.MAX_TILES`, 1..:data:`~bindscope.limits.MAX_COLS`).
        draw_tile: ``draw_tile(ax, sample)`` draws one tile on a matplotlib Axes (axis already off).
        tile_inches: (width, height) of one tile in inches.
        generators: when given, the dataset must have been made by one of them.
        title: ``title(split) -> str`` for a figure title, or None. overwrite: replace an existing ``out``.
        **save_options: passed to :func:`bindscope.io.atomic.save_figure` (``dpi``, ``facecolor``, ...).

    Raises:
        BadInput / DatasetError: ``count`` or ``cols`` out of range, ``out`` not a ``.png``, an existing ``out`` without
            ``overwrite``, an unwritable location, not a finished dataset (or of another generator), an unknown
            or empty split.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bindscope.format.reader import Dataset

    for name, value, high in (("count", count, MAX_TILES), ("cols", cols, MAX_COLS)):
        check_int(name, value, 1, high)
    out = Path(out)
    if out.suffix.lower() != ".png":
        raise BadInput(f"out {str(out)!r} must end in .png", param="out")
    check_output_location("out", out)
    if out.exists() and not overwrite:
        raise BadInput(f"out {str(out)!r} already exists; pass overwrite=True to replace it, or choose another "
                       "file", param="out")
    with Dataset(directory) as ds:
        if generators:
            ds.require_generator(*generators)
        if split is None:
            split = default_split(ds.split_names) if default_split else ds.split_names[0]
        data = ds.split(split)
        samples = [data[i] for i in range(min(count, len(data)))]
    if not samples:
        raise BadInput(f"split {split!r} of {str(directory)!r} has no samples")
    cols = min(cols, len(samples))
    rows = (len(samples) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(tile_inches[0] * cols, tile_inches[1] * rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, sample in zip(axes.flat, samples):
        draw_tile(ax, sample)
    if title is not None:
        fig.suptitle(title(split), fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, out, **save_options)
