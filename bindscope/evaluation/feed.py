"""Feeding an encoder from a dataset fast: images read a shard slice at a time (decompressed in worker processes
on large splits), each unique text sent to the embedder once.

The evaluations (:mod:`bindscope.evaluation.madman`, :mod:`bindscope.evaluation.comco`) read through these
(``benchmarks/eval_ceiling.py`` measures them); results are the same as reading sample by sample, and a shard is
refused as when opened with every check: each string column when first read, every spec before the result.

Stored images go to the embedder a batch at a time, keyed by their verified shard's sha256 and place
(:func:`~bindscope.encoders.embedding_cache.stored_image_key`), so no pixel is hashed. A MADMAN evaluation reads
every shard's tables first, then encodes the texts while a thread of this process reads the images ahead
(:func:`read_images_ahead`). What stays besides the decompression: HDF5's variable-length strings of the
captions and negatives, parsing the specs' JSON, one look-up per text, the scoring and the per-comparison rows.
Today's figures are in docs/results.md ("Evaluation feed ceiling").
"""

from __future__ import annotations

import gc
import importlib.util
import os
from contextlib import contextmanager
from typing import Iterable, Iterator

import numpy as np

from bindscope.encoders.embedding_cache import Embedder
from bindscope.io.ahead import ReadAhead

IMAGE_BATCH = 256  # images per HDF5 read (and per worker message)
READ_SLICE_BYTES = 32 << 20  # images per HDF5 read in this process (a whole number of batches, at least one)
READ_AHEAD_BYTES = 128 << 20  # images read ahead of the encoder (bindscope.io.ahead.ReadAhead)
WORKER_MIN_IMAGES = 4 * IMAGE_BATCH  # below this a worker process costs more to start than it saves
MAX_WORKERS = 8


def reader_workers(images: int, workers: int | None = None) -> int:
    """Worker processes that read and decompress ``images`` images for an evaluation.

    ``workers`` given: that number (>= 0). None (auto): none for fewer than :data:`WORKER_MIN_IMAGES` images,
    when torch is missing or on two CPUs or fewer (measured on 2 CPUs, medians of 5-7 runs: one or two workers
    gave a MADMAN evaluation of 10,000 images 0.75x and a ComCO one of 500 scenes 0.66x the rate without: the
    workers' start and the copy of their pages cost more than the decompression they take over); else one
    fewer than the CPUs (this process looks up, encodes and scores meanwhile), at most :data:`MAX_WORKERS`.

    Raises:
        ValueError: a negative ``workers``.
    """
    if workers is not None:
        if workers < 0:
            raise ValueError(f"workers must be >= 0, got {workers}")
        return workers
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if images < WORKER_MIN_IMAGES or cpus <= 2 or importlib.util.find_spec("torch") is None:
        return 0
    return min(MAX_WORKERS, cpus - 1)


def read_images_ahead(split, workers: int) -> ReadAhead:
    """The images of ``split`` in index order, read (``split.image_batches``) in a thread started at once, up to
    :data:`READ_AHEAD_BYTES` ahead of the consumer: ``(index of the first, (B, H, W, 3) uint8)`` pieces of a
    shard. With ``workers`` 0 each piece is one HDF5 read of up to :data:`READ_SLICE_BYTES` (a whole number of
    :data:`IMAGE_BATCH` batches: fewer Python calls and hand-overs between the threads per image); with worker
    processes, one batch. Cut the pieces with :func:`batches_of`. Close the result when done (``with``).

    The thread does nothing but read images (h5py, which lets one thread at a time into HDF5, holds the other
    threads back meanwhile): open the shards and check their specs (:meth:`ShardReader.check_specs`) before,
    and leave h5py alone while it runs."""
    height, width = split.image_size
    batch_bytes = IMAGE_BATCH * height * width * 3
    per_read = IMAGE_BATCH * (1 if workers > 0 else max(1, READ_SLICE_BYTES // batch_bytes))
    depth = max(1, READ_AHEAD_BYTES // (per_read // IMAGE_BATCH * batch_bytes))
    return ReadAhead(split.image_batches(per_read, workers), depth)


def batches_of(pieces: Iterable[tuple[int, np.ndarray]], size: int = IMAGE_BATCH) -> Iterator[tuple[int, np.ndarray]]:
    """``(first index, images)`` pieces cut into batches of at most ``size`` (views, in order)."""
    for first, images in pieces:
        for start in range(0, len(images), size):
            yield first + start, images[start:start + size]


def embed_texts(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """``embedder.texts(texts)`` with each distinct text passed once: ``(len(texts), D)`` float32 in input order.

    The embedder's counters come out as if ``texts`` had been passed whole (``texts_requested`` counts every
    text; hits and misses count distinct texts, as the embedder does).
    """
    unique = list(dict.fromkeys(texts))
    position = dict(zip(unique, range(len(unique))))
    inverse = np.fromiter(map(position.__getitem__, texts), np.int64, len(texts))
    emb = embedder.texts(unique)
    embedder.stats["texts_requested"] += len(texts) - len(unique)
    return emb[inverse]


@contextmanager
def paused_gc():
    """Run a block with the cyclic garbage collector off (restored after): building ~10^5 small dicts or lists
    otherwise triggers full collections that rescan every live object, several times (no cycles are made)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
