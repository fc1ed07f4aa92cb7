"""The one reader of image files from the user's folders (COCO images, ARO/SugarCrepe images, IOR references).

An image file declares its width and height in a header of a few bytes; decoding allocates what it declares,
so a small file can claim 60,000 x 60,000 pixels and take gigabytes once read (a *decompression bomb*).
:func:`open_image` reads the header only and refuses, with one :class:`~bindscope.errors.BadInput` naming the
file, its declared size and the limit, any image of more than :data:`MAX_IMAGE_PIXELS` pixels, whatever PIL's
own (global, changeable) ``Image.MAX_IMAGE_PIXELS`` says; PIL's ``DecompressionBombError`` and
``DecompressionBombWarning`` never reach the user. Unreadable files, and a decoder's failure on a file whose
header looked fine, are :class:`~bindscope.errors.BadInput` too.

An image may also arrive as bytes (a cell of a Parquet file: the ``bytes`` of a Hugging Face ``Image`` feature);
every function takes them in place of a path, with ``name`` saying where they come from in messages.
"""

from __future__ import annotations

import io
import os
import struct
import warnings
from contextlib import contextmanager
from typing import Iterator, Union

from bindscope.errors import BadInput

MAX_IMAGE_PIXELS = 1024 * 1024 * 1024 // 4 // 3
"""89,478,485 pixels (PIL's default limit: a quarter GiB of 24-bit pixels; 9,459 x 9,459). COCO, Visual Genome,
Flickr30k and DomainNet images are below 1.5 megapixels."""

Source = Union[str, os.PathLike, bytes]
"""An image file's path, or the image file's bytes."""

_DECODE_ERRORS = (OSError, ValueError, EOFError, SyntaxError, struct.error, IndexError, TypeError)
"""What PIL's plugins raise on a malformed file (OSError covers ``UnidentifiedImageError`` and truncation)."""


def _opened(source: Source):
    """A binary file object on ``source``: the file at a path, or the bytes themselves."""
    return io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb")


def _shown(source: Source, name: str | None) -> str:
    """How messages name ``source``: ``name`` if given, else the quoted path (bytes without a name: ``<bytes>``)."""
    return name if name is not None else "<bytes>" if isinstance(source, bytes) else repr(str(source))


def _declared_size(path: Source) -> tuple[int, int] | None:
    """Width and height in the header of an image PIL refused to open as a decompression bomb, read by the
    format plugin that recognises it (PIL's registry, without ``Image.open``'s size check); None if none
    does."""
    from PIL import Image

    Image.init()
    try:
        with _opened(path) as handle:
            prefix = handle.read(16)
            for name in Image.ID:
                factory, accept = Image.OPEN[name]
                if accept is not None and accept(prefix) is not True:
                    continue
                handle.seek(0)
                try:
                    size = factory(handle, None if isinstance(path, bytes) else os.fspath(path)).size
                except _DECODE_ERRORS:
                    continue
                return int(size[0]), int(size[1])
    except (OSError, KeyError, TypeError):
        return None
    return None


def _too_large(what: str, shown: str, size: tuple[int, int] | None, pixels: int | None,
               param: str | None) -> BadInput:
    if size is not None:
        declared = f"{size[0]}x{size[1]} pixels ({size[0] * size[1]:,})"
    elif pixels:
        declared = f"{pixels:,} pixels"
    else:
        declared = f"more than {MAX_IMAGE_PIXELS:,} pixels"
    return BadInput(f"{what} {shown} declares {declared}; at most {MAX_IMAGE_PIXELS:,} pixels are allowed "
                    "(an image this large is refused as a possible decompression bomb)", param=param)


@contextmanager
def open_image(path: Source, what: str = "image", param: str | None = None, name: str | None = None) -> Iterator:
    """The image file ``path`` opened lazily (a :class:`PIL.Image.Image` of which only the header is read),
    after checking its declared size; closed on leaving the block.

    Args:
        path: the file, or its bytes. what: how messages name it, followed by the path (``"image"``,
            ``"reference image"``, ``"images: image id 7:"``). param: the parameter at fault (the CLI shows its
            flag). name: what messages show instead of the path (e.g. ``"data/train-00000.parquet row 7"`` for
            bytes).

    Raises:
        BadInput: the file is not a readable image, or declares more than :data:`MAX_IMAGE_PIXELS` pixels
            (the message names the file, its width x height and the limit).
    """
    from PIL import Image

    shown = _shown(path, name)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the size is checked below
            handle = Image.open(io.BytesIO(path) if isinstance(path, bytes) else path)
    except Image.DecompressionBombError as exc:
        digits = "".join(c for c in str(exc).split("pixels")[0] if c.isdigit())
        raise _too_large(what, shown, _declared_size(path), int(digits) if digits else None, param) from None
    except _DECODE_ERRORS as exc:
        raise BadInput(f"{what} {shown} is not a readable image ({_reason(exc)})", param=param) from None
    with handle:
        width, height = handle.size
        if width * height > MAX_IMAGE_PIXELS:
            raise _too_large(what, shown, (width, height), None, param)
        yield handle


def _reason(exc: BaseException) -> str:
    import re

    text = re.sub(r" ?<_io\.BytesIO object at 0x[0-9a-f]+>", "", " ".join(str(exc).split())) or type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "..."


def image_size(path: Source, what: str = "image", param: str | None = None,
               name: str | None = None) -> tuple[int, int]:
    """``(width, height)`` the image file ``path`` declares, checked as :func:`open_image` does (header only).

    Raises:
        BadInput: see :func:`open_image`.
    """
    with open_image(path, what, param, name) as handle:
        return handle.size


def read_rgb(path: Source, what: str = "image", param: str | None = None, name: str | None = None):
    """The image file ``path`` decoded as an RGB :class:`PIL.Image.Image` (the first frame), after
    :func:`open_image`'s checks.

    Raises:
        BadInput: see :func:`open_image`; also a file whose pixel data cannot be decoded (truncated, corrupt).
    """
    from PIL import Image

    with open_image(path, what, param, name) as handle:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                return handle.convert("RGB")
        except Image.DecompressionBombError:  # a frame larger than the header said (e.g. ICO, GIF)
            raise _too_large(what, _shown(path, name), None, None, param) from None
        except _DECODE_ERRORS as exc:
            raise BadInput(f"{what} {_shown(path, name)} is not a readable image ({_reason(exc)})",
                           param=param) from None
