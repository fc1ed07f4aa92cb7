"""Embedding cache and de-duplicating encoder front end.

:class:`EmbeddingCache` stores embeddings on disk keyed by the adapter's ``cache_key`` (model, weights,
precision, preprocessing) and the sha256 of each input's content (the UTF-8 text, or the image's shape and raw
bytes; an image read unchanged from a verified shard by the shard file's sha256 and its place in it:
:func:`stored_image_key`). :class:`Embedder` wraps an :class:`~bindscope.encoders.interface.EncoderAdapter`: within one run each
unique text and image is encoded once, and with a cache a rerun skips the encoders entirely.

On-disk layout (default root ``$BINDSCOPE_CACHE/embeddings``, else ``$XDG_CACHE_HOME/bindscope/embeddings``, else
``~/.cache/bindscope/embeddings``; ``$BINDSCOPE_CACHE`` is bindscope's cache root, shared with other caches)::

    <root>/<sha256(cache_key)[:24]>/key.txt              the full cache_key (for people; never read back)
    <root>/<sha256(cache_key)[:24]>/c2-<binding>.npz     a chunk: hashes (N, 32) uint8 input digests,
                                                         embeddings (N, D) float32, model (32,) uint8

Chunks are written atomically (temp file, fsync, rename) and never modified, so several processes may share a
cache. An entry cannot be taken for another model's or another input's: the reader recomputes every key it
looks up from the input itself (the text, the image bytes), and a chunk is used only when

- it is a regular file holding exactly those three arrays, of those dtypes and ranks (no pickle; sizes bounded:
  :func:`~bindscope.io.cache_dir.read_npz`), D = the encoder's embedding size when known, every value finite;
- its ``model`` is the sha256 of the reader's own ``cache_key``, and its name is
  ``c2-`` + sha256(format, sha256(cache_key), hashes, embeddings) recomputed with the reader's ``cache_key``:
  the name binds each input digest to its vector and both to the model. A chunk copied from another model's
  folder, a vector moved to another input, a flipped byte, or a chunk re-named after an edit (its old
  self-checksum recomputed) all fail.

Any other ``*.npz`` in the folder is deleted where the folder allows it, its entries are encoded again, and one
:class:`~bindscope.io.cache_dir.CacheWarning` per cache says so. The checks bind without a secret: someone who can
write the cache folder and recomputes the binding with the same ``cache_key`` can still plant vectors, as they
could replace the model's weights the cache key names; an index of chunks would add nothing the names do not
bind. A cache folder that cannot be written costs one warning and the run goes on uncached.
"""

from __future__ import annotations

import hashlib
import os
import time
import warnings
from pathlib import Path
from typing import Iterable

import numpy as np
from tqdm.auto import tqdm

from bindscope.encoders.interface import EncoderAdapter
from bindscope.io.atomic import atomic_open, write_text_atomic
from bindscope.io.cache_dir import CacheWarning, EntryRefused, cache_root, cache_unusable, read_npz, writable_folder

CHUNK_FORMAT = b"bindscope-embeddings/2"
CHUNK_PREFIX = "c2-"
MAX_CHUNK_BYTES = 8 << 30  # a chunk file, and the total of its arrays


def default_cache_dir() -> Path:
    """``$BINDSCOPE_CACHE/embeddings``, else ``$XDG_CACHE_HOME/bindscope/embeddings``, else
    ``~/.cache/bindscope/embeddings``."""
    return cache_root() / "embeddings"


def open_cache(adapter: EncoderAdapter, cache_dir: str | os.PathLike | None = None,
               use_cache: bool = True) -> EmbeddingCache | None:
    """The embedding cache of ``adapter`` (its ``cache_key`` and ``embed_dim``) under ``cache_dir`` (None:
    :func:`default_cache_dir`), or None when ``use_cache`` is off: what
    :attr:`~bindscope.encoders.settings.EncoderSettings.cache_dir` and ``use_cache`` ask for."""
    return EmbeddingCache(cache_dir or default_cache_dir(), adapter.cache_key, adapter.embed_dim) if use_cache else None


def text_hash(text: str) -> bytes:
    """sha256 digest (32 bytes) of a text's UTF-8 bytes, prefixed by the modality."""
    return hashlib.sha256(b"text\0" + text.encode("utf-8")).digest()


def image_hash(image: np.ndarray) -> bytes:
    """sha256 digest (32 bytes) of an image's shape, dtype and raw bytes, prefixed by the modality."""
    image = np.ascontiguousarray(image)
    head = f"image\0{image.shape}\0{image.dtype.str}\0".encode()
    return hashlib.sha256(head + image.tobytes()).digest()


def stored_image_key(shard_sha256: str, local: int) -> bytes:
    """sha256 digest (32 bytes) naming the ``local``-th image of the shard file whose sha256 (hex) is
    ``shard_sha256``: the key of an image read unchanged from a shard the reader has verified (its bytes hashed
    and found equal to the manifest's digest), so the digest of the file stands for the image's bytes without
    hashing the pixels again. A changed image changes its shard's digest, so it never meets this key."""
    return hashlib.sha256(f"stored-image\0{shard_sha256}\0{local}".encode()).digest()


class EmbeddingCache:
    """Embeddings of one encoder (one ``cache_key``) on disk.

    Args:
        root: cache root folder (created on the first write).
        cache_key: the adapter's ``cache_key``.
        dim: the embedding size D, when known (chunks of another size are rejected).

    Attributes:
        rejected: chunk files that failed a check (see the module docstring; deleted when the folder allows).
    """

    def __init__(self, root: str | os.PathLike, cache_key: str, dim: int | None = None):
        self.folder = Path(root) / hashlib.sha256(cache_key.encode()).hexdigest()[:24]
        self.cache_key = cache_key
        self.model_digest = hashlib.sha256(cache_key.encode()).digest()
        self.dim = dim
        self.rejected = 0
        self._table: dict[bytes, np.ndarray] | None = None
        self._pending: dict[bytes, np.ndarray] = {}

    def _load(self) -> dict[bytes, np.ndarray]:
        if self._table is None:
            self._table = {}
            try:
                chunks = sorted(self.folder.glob("*.npz")) if self.folder.is_dir() else []
            except OSError:
                chunks = []
            reasons = []
            for chunk in chunks:
                arrays = self._read_chunk(chunk)
                if isinstance(arrays, str):  # only a cache miss: its entries are encoded again
                    self.rejected += 1
                    reasons.append(f"{chunk.name} {arrays}")
                    try:
                        chunk.unlink(missing_ok=True)
                    except OSError:
                        pass  # a read-only cache: left there, rejected again next time
                    continue
                for key, row in zip(*arrays):
                    self._table[key.tobytes()] = row
            if reasons:
                warnings.warn(f"embedding cache {str(self.folder)!r}: {len(reasons)} chunk(s) failed their checks "
                              f"({reasons[0]}{'; ...' if len(reasons) > 1 else ''}): not used, their embeddings are "
                              "encoded again", CacheWarning, stacklevel=4)
        return self._table

    def chunk_name(self, hashes: np.ndarray, embeddings: np.ndarray) -> str:
        """The file name binding these rows to this cache's model: ``c2-<sha256>.npz``."""
        digest = hashlib.sha256(CHUNK_FORMAT + b"\0" + self.model_digest)
        digest.update(np.ascontiguousarray(hashes, np.uint8).tobytes())
        digest.update(np.ascontiguousarray(embeddings, np.float32).tobytes())
        return f"{CHUNK_PREFIX}{digest.hexdigest()}.npz"

    def _read_chunk(self, chunk: Path) -> tuple[np.ndarray, np.ndarray] | str:
        """(hashes, embeddings) of a sound chunk file of this model, else why not."""
        if not chunk.name.startswith(CHUNK_PREFIX):
            return "is not a chunk of this cache format"
        kinds = {"hashes": (np.dtype(np.uint8).str, 2), "embeddings": (np.dtype(np.float32).str, 2),
                 "model": (np.dtype(np.uint8).str, 1)}
        try:
            data = read_npz(chunk, kinds, MAX_CHUNK_BYTES)
        except (FileNotFoundError, NotADirectoryError):
            return "vanished"
        except EntryRefused as exc:
            return str(exc)
        hashes, emb = data["hashes"], data["embeddings"]
        if hashes.shape[1:] != (32,) or len(emb) != len(hashes) or (self.dim is not None and emb.shape[1] != self.dim):
            return f"holds arrays of shapes {hashes.shape} and {emb.shape}"
        if data["model"].tobytes() != self.model_digest:
            return "was written for another model"
        if chunk.name != self.chunk_name(hashes, emb):
            return "does not match its name (its rows were changed, or it belongs to another model)"
        if not np.isfinite(emb).all():
            return "holds values that are not finite"
        return hashes, emb

    def get(self, key: bytes) -> np.ndarray | None:
        """The stored embedding (D,) float32 for a content hash, or None."""
        found = self._load().get(key)
        return found if found is not None else self._pending.get(key)

    def put(self, key: bytes, embedding: np.ndarray) -> None:
        """Remember an embedding; it reaches the disk at :meth:`flush`."""
        self._pending[key] = np.asarray(embedding, dtype=np.float32)

    def flush(self) -> None:
        """Write the remembered embeddings as one new chunk (atomic); a no-op when there are none. Where the
        folder cannot be written: one :class:`~bindscope.io.cache_dir.CacheWarning`, and they stay in memory only
        (never an error: the work is done)."""
        if not self._pending:
            return
        keys = sorted(self._pending)
        self._load().update(self._pending)
        pending, self._pending = self._pending, {}
        if not writable_folder(self.folder):
            return
        hashes = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), 32)  # not "S32": it drops NULs
        emb = np.stack([pending[k] for k in keys]).astype(np.float32)
        try:
            key_file = self.folder / "key.txt"
            if not key_file.exists():
                write_text_atomic(key_file, self.cache_key + "\n")
            with atomic_open(self.folder / self.chunk_name(hashes, emb)) as handle:
                np.savez(handle, hashes=hashes, embeddings=emb, model=np.frombuffer(self.model_digest, np.uint8))
        except OSError as exc:
            cache_unusable(self.folder, exc)


class Embedder:
    """Encode texts and images through an adapter, each unique input once, with an optional on-disk cache.

    Args:
        adapter: the encoder.
        cache: an :class:`EmbeddingCache` for ``adapter.cache_key``, or None for no disk cache (inputs are
            still de-duplicated within the run).
        chunk: number of images hashed and looked up at a time when streaming images, and of texts encoded per
            progress-bar step.
        progress: show tqdm bars (stderr) while encoding.

    Attributes:
        stats: counters: ``text_hits``/``text_misses``/``image_hits``/``image_misses`` (unique inputs found in the
            cache / encoded), ``texts_requested``/``images_requested`` (inputs asked for, duplicates included),
            ``seconds_total`` (time spent inside :meth:`texts` and :meth:`images`).
    """

    def __init__(self, adapter: EncoderAdapter, cache: EmbeddingCache | None = None, chunk: int = 256,
                 progress: bool = False):
        self.adapter = adapter
        self.cache = cache
        self.chunk = chunk
        self.progress = progress
        self._memory: dict = {}  # key (a digest, or a text when there is no disk cache) -> row in _rows
        self._rows = _RowStore()
        self.stats = {"text_hits": 0, "text_misses": 0, "image_hits": 0, "image_misses": 0,
                      "texts_requested": 0, "images_requested": 0, "seconds_total": 0.0}

    def _resolve(self, keys: list, items, encode, kind: str) -> np.ndarray:
        """Rows ``(len(keys), D)`` for ``items`` (a list, or an array indexed by position), taking each key from
        this run's rows, else the disk cache, else encoding it once (the first item with that key; the items to
        encode go to ``encode`` in input order)."""
        memory, disk = self._memory, self.cache
        if not keys:
            return np.zeros((0, self.adapter.embed_dim), np.float32)
        found = list(map(memory.get, keys))
        if None in found:
            missing = [i for i, row in enumerate(found) if row is None]
            first = dict(zip(map(keys.__getitem__, reversed(missing)), reversed(missing)))  # key -> first place
            new = sorted(first.values())  # the first place of each new key, in input order
            new_keys = list(map(keys.__getitem__, new))
            stored = [None] * len(new) if disk is None else list(map(disk.get, new_keys))
            todo = [k for k, row in enumerate(stored) if row is None]  # of new
            self.stats[f"{kind}_hits"] += len(new) - len(todo)
            self.stats[f"{kind}_misses"] += len(todo)
            block = None
            if todo:
                encoded = self._encode(items, [new[k] for k in todo], encode, kind)
                block = np.empty((len(new), encoded.shape[1]), np.float32)
                block[todo] = encoded
                if disk is not None:
                    for k, row in zip(todo, encoded):
                        disk.put(new_keys[k], row)
            for k, row in enumerate(stored):
                if row is not None:
                    if block is None:
                        block = np.empty((len(new), len(row)), np.float32)
                    block[k] = row
            start = self._rows.add(block)
            memory.update(zip(new_keys, range(start, start + len(new))))
            found = map(memory.__getitem__, keys)
        return self._rows.take(np.fromiter(found, np.int64, len(keys)))

    def _encode(self, items, positions: list[int], encode, kind: str) -> np.ndarray:
        """``encode`` of the items at ``positions`` as float32 ``(len(positions), D)`` (texts in chunks, under a
        progress bar, when there are many)."""
        if len(positions) == len(items):  # positions are distinct and increasing: every item, in order
            todo = items
        else:
            todo = items[np.asarray(positions)] if isinstance(items, np.ndarray) else [items[i] for i in positions]
        if self.progress and kind == "text" and len(todo) > self.chunk:
            parts = []
            with tqdm(total=len(todo), desc="encoding texts", unit="text", leave=False) as bar:
                for start in range(0, len(todo), self.chunk):
                    parts.append(encode(todo[start:start + self.chunk]))
                    bar.update(len(parts[-1]))
            return np.asarray(np.concatenate(parts), np.float32)
        return np.asarray(encode(todo), np.float32)

    def texts(self, texts: list[str]) -> np.ndarray:
        """Embeddings ``(len(texts), D)`` float32, unit L2 norm, in input order. With a disk cache each text is
        looked up by its sha256 (:func:`text_hash`); without one by the text itself."""
        start = time.perf_counter()
        self.stats["texts_requested"] += len(texts)
        keys = [text_hash(t) for t in texts] if self.cache is not None else list(texts)
        out = self._resolve(keys, list(texts), self.adapter.encode_texts, "text")
        self.stats["seconds_total"] += time.perf_counter() - start
        return out

    def images(self, images: Iterable[np.ndarray], total: int | None = None) -> np.ndarray:
        """Embeddings ``(N, D)`` float32 of ``(H, W, 3)`` uint8 images (any iterable, streamed in chunks), each
        keyed by the sha256 of its shape and bytes (:func:`image_hash`).

        ``total`` (optional) sizes the progress bar when ``images`` has no length.
        """
        if total is None and hasattr(images, "__len__"):
            total = len(images)

        def chunks():
            batch: list[np.ndarray] = []
            for image in images:
                batch.append(np.asarray(image))
                if len(batch) >= self.chunk:
                    yield None, np.stack(batch)
                    batch.clear()
            if batch:
                yield None, np.stack(batch)
        return self.image_batches(chunks(), total)

    def image_batches(self, batches: Iterable[tuple[list[bytes] | None, np.ndarray]],
                      total: int | None = None) -> np.ndarray:
        """Embeddings ``(N, D)`` float32 of images given as batches ``(keys, images)``: ``images`` a ``(B, H, W,
        3)`` uint8 array, ``keys`` B cache keys (32-byte digests such as :func:`stored_image_key`) or None to key
        each image by :func:`image_hash` of its pixels. Rows come out in input order.

        ``total`` (optional) sizes the progress bar.
        """
        start = time.perf_counter()
        parts = []
        with tqdm(total=total, desc="encoding images", unit="img", leave=False, disable=not self.progress) as bar:
            for keys, batch in batches:
                if keys is None:
                    keys = [image_hash(image) for image in batch]
                elif len(keys) != len(batch):
                    raise ValueError(f"{len(keys)} keys for a batch of {len(batch)} images")
                parts.append(self._resolve(list(keys), batch, self.adapter.encode_images, "image"))
                self.stats["images_requested"] += len(batch)
                bar.update(len(batch))
        self.stats["seconds_total"] += time.perf_counter() - start
        return np.concatenate(parts) if parts else np.zeros((0, self.adapter.embed_dim), np.float32)

    def flush(self) -> None:
        """Write new embeddings to the disk cache (if any)."""
        if self.cache is not None:
            self.cache.flush()


class _RowStore:
    """Float32 rows appended in blocks to one growing array (capacity doubled when full), read by row number."""

    def __init__(self):
        self.data: np.ndarray | None = None
        self.count = 0

    def add(self, block: np.ndarray) -> int:
        """Append ``block`` ``(n, D)``; return the number of its first row."""
        if self.data is None:
            self.data = np.empty((max(len(block), 1024), block.shape[1]), np.float32)
        elif block.shape[1] != self.data.shape[1]:
            raise ValueError(f"embeddings of size {block.shape[1]} after ones of size {self.data.shape[1]}")
        if self.count + len(block) > len(self.data):
            grown = np.empty((max(2 * len(self.data), self.count + len(block)), self.data.shape[1]), np.float32)
            grown[:self.count] = self.data[:self.count]
            self.data = grown
        start = self.count
        self.data[start:start + len(block)] = block
        self.count += len(block)
        return start

    def take(self, index: np.ndarray) -> np.ndarray:
        """Rows ``index`` as a new ``(len(index), D)`` array."""
        return self.data[index]
