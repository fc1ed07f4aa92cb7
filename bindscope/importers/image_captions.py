"""Image-caption pairs without annotations, in the layouts img2dataset writes (https://github.com/rom1504/img2dataset):

- ``webdataset``: tar shards (``00000.tar``, ...) whose members are grouped by key, ``<key>.jpg`` (or ``.jpeg``,
  ``.png``, ``.webp``) with ``<key>.txt`` (the caption) and ``<key>.json`` (metadata, not read); a folder of such
  shards or one shard. The ``.parquet`` files img2dataset writes beside them hold metadata only and are not read.
- ``parquet``: Parquet files whose rows hold the caption (column ``caption``) and the image's encoded bytes
  (column ``jpg``, ``jpeg``, ``png``, ``webp`` or ``image``; img2dataset's ``--output_format parquet``); rows
  without image bytes (a failed download) are skipped and counted. A folder of such files or one file.
- ``folder``: image files anywhere under a folder, each with its caption in the ``.txt`` file of the same stem
  beside it (img2dataset's ``--output_format files``); images without one are skipped and counted.

:func:`open_pairs` decides the layout from what the path holds (a folder with tar shards is ``webdataset``; else
with Parquet files ``parquet``; else ``folder``) and :meth:`PairSource.pairs` yields ``(key, image, caption)`` in a
fixed order (files sorted by name, members and rows in file order). Tar members are read, never extracted; a member
that is not a regular file, or larger than :data:`MAX_MEMBER_BYTES`, is skipped. Images are decoded with
:func:`bindscope.io.image_input.read_rgb` (a declared size beyond its limit is refused as a decompression bomb);
an image that cannot be decoded is skipped and counted (web data holds some), never fatal.
"""

from __future__ import annotations

import io
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from bindscope.errors import BadInput

IMAGE_SUFFIXES = ("jpg", "jpeg", "png", "webp")
IMAGE_COLUMNS = (*IMAGE_SUFFIXES, "image")
LAYOUTS = ("webdataset", "parquet", "folder")
MAX_MEMBER_BYTES = 256 << 20  # one tar member (an image or caption); larger ones are skipped
MAX_CAPTION_CHARS = 100_000  # longer captions are cut


class _Named(io.BytesIO):
    """Encoded image bytes that messages name by where they came from (``shard.tar:000001.jpg``)."""

    def __init__(self, data: bytes, name: str):
        super().__init__(data)
        self.label = name

    def __str__(self) -> str:
        return self.label


def decode(data: bytes, name: str) -> np.ndarray:
    """``(H, W, 3)`` uint8 RGB of encoded image bytes (``name`` for messages).

    Raises:
        BadInput: not a readable image, or one declaring more pixels than the reader allows.
    """
    from bindscope.io.image_input import read_rgb

    return np.array(read_rgb(_Named(data, name), "image"))


def _caption(data: bytes | str) -> str:
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else str(data)
    return " ".join(text.split())[:MAX_CAPTION_CHARS]


@dataclass
class PairSource:
    """Image-caption pairs of one path (see the module docstring).

    Attributes:
        path: the folder or file given. layout: ``webdataset``, ``parquet`` or ``folder``. files: the shards, Parquet
            files or image files read, in order. skipped: counts of what was passed over while reading
            (``unreadable_images``, ``pairs_without_image``, ``images_without_caption``).
    """

    path: Path
    layout: str
    files: list[Path]
    skipped: dict[str, int] = field(default_factory=lambda: {"unreadable_images": 0, "pairs_without_image": 0,
                                                             "images_without_caption": 0})

    def info(self) -> dict:
        """The ``dataset`` block of a result: path, layout, files read."""
        return {"path": str(self.path), "layout": self.layout, "files": len(self.files)}

    def pairs(self, limit: int | None = None) -> Iterator[tuple[str, np.ndarray, str]]:
        """``(key, image, caption)`` in order, at most ``limit`` (None: all); images ``(H, W, 3)`` uint8."""
        reader = {"webdataset": self._tar_pairs, "parquet": self._parquet_pairs, "folder": self._folder_pairs}
        made = 0
        for key, data, caption in reader[self.layout]():
            if limit is not None and made >= limit:
                return
            if data is None:
                self.skipped["pairs_without_image"] += 1
                continue
            try:
                image = decode(data, key)
            except BadInput:
                self.skipped["unreadable_images"] += 1
                continue
            made += 1
            yield key, image, caption

    def _tar_pairs(self):
        for shard in self.files:
            with tarfile.open(shard, "r:*") as archive:
                group: dict[str, bytes] = {}
                current = None
                for member in archive:
                    if not member.isfile() or member.size > MAX_MEMBER_BYTES:
                        continue
                    folder, _, base = member.name.rpartition("/")
                    stem, _, ext = base.partition(".")
                    key = f"{folder}/{stem}" if folder else stem
                    if key != current and group:
                        yield from self._tar_group(shard, current, group)
                        group = {}
                    current = key
                    if ext.lower() in (*IMAGE_SUFFIXES, "txt"):
                        handle = archive.extractfile(member)
                        group[ext.lower()] = handle.read() if handle is not None else b""
                if group:
                    yield from self._tar_group(shard, current, group)

    def _tar_group(self, shard: Path, key: str, group: dict[str, bytes]):
        image = next((group[s] for s in IMAGE_SUFFIXES if s in group), None)
        if image is not None and "txt" not in group:
            self.skipped["images_without_caption"] += 1
            return
        if "txt" in group:
            yield f"{shard.name}:{key}", image, _caption(group["txt"])

    def _parquet_pairs(self):
        import pyarrow.parquet as pq

        for path in self.files:
            table = pq.ParquetFile(path)
            names = table.schema_arrow.names
            column = next(c for c in IMAGE_COLUMNS if c in names)
            keys = "key" if "key" in names else None
            row = 0
            for batch in table.iter_batches(batch_size=256, columns=[c for c in ("caption", column, keys) if c]):
                data = batch.to_pydict()
                for k in range(batch.num_rows):
                    key = f"{path.name}:{data[keys][k] if keys else row}"
                    row += 1
                    yield key, data[column][k] or None, _caption(data["caption"][k] or "")

    def _folder_pairs(self):
        for path in self.files:
            text = path.with_suffix(".txt")
            if not text.is_file():
                self.skipped["images_without_caption"] += 1
                continue
            yield (path.relative_to(self.path).as_posix(), path.read_bytes(),
                   _caption(text.read_bytes()[:MAX_MEMBER_BYTES]))


def _parquet_files(paths: list[Path]) -> list[Path]:
    """``paths`` after checking that each is a Parquet file with a caption and an image column."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise BadInput("data: reading Parquet files needs pyarrow: pip install 'bindscope[t2i]'", param="data") from None
    for path in paths:
        try:
            names = pq.ParquetFile(path).schema_arrow.names
        except Exception as exc:  # pyarrow raises its own error types for a file that is not Parquet
            raise BadInput(f"data {str(path)!r} is not a readable Parquet file ({type(exc).__name__})",
                           param="data") from None
        if "caption" not in names or not any(c in names for c in IMAGE_COLUMNS):
            raise BadInput(f"data {str(path)!r}: a Parquet file needs a 'caption' column and the image bytes in one "
                           f"of {', '.join(IMAGE_COLUMNS)} (it has {', '.join(names[:12])}); img2dataset's webdataset "
                           "output keeps the images in its tar shards: give those", param="data")
    return paths


def open_pairs(path: str | os.PathLike) -> PairSource:
    """The image-caption pairs at ``path`` (a folder, a ``.tar`` shard or a ``.parquet`` file; see the module
    docstring for the layouts).

    Raises:
        BadInput: a path that does not exist or holds no pairs of a known layout, a Parquet file without a caption
            or image column.
    """
    path = Path(path)
    if path.is_file():
        if path.suffix == ".tar":
            return PairSource(path, "webdataset", [path])
        if path.suffix == ".parquet":
            return PairSource(path, "parquet", _parquet_files([path]))
        raise BadInput(f"data {str(path)!r} is a file that is neither a .tar shard nor a .parquet file",
                       param="data")
    if not path.is_dir():
        raise BadInput(f"data {str(path)!r} does not exist", param="data")
    tars = sorted(path.glob("*.tar"))
    if tars:
        return PairSource(path, "webdataset", tars)
    parquets = sorted(path.glob("*.parquet"))
    if parquets:
        return PairSource(path, "parquet", _parquet_files(parquets))
    images = sorted(p for p in path.rglob("*") if p.suffix.lower().lstrip(".") in IMAGE_SUFFIXES and p.is_file()
                    and not any(part.startswith(".") for part in p.relative_to(path).parts))
    if not images:
        raise BadInput(f"data {str(path)!r} holds no bindscope dataset (manifest.json) and no image-caption pairs: "
                       "give tar shards (<key>.jpg + <key>.txt), Parquet files with caption and image columns, or "
                       "image files with a .txt caption each", param="data")
    return PairSource(path, "folder", images)
