"""External single-object reference images for IOR (e.g. DomainNet), read from a folder.

Layout (DomainNet's: ``<domain>/<class>/<image>.jpg``; give the domain folder)::

    DIR/<category>/<any name>.jpg|.jpeg|.png|.bmp|.webp

A dataset category ``c`` uses the subfolder named by the category map (a JSON or YAML file ``{"tv":
"television", ...}``) if it maps ``c``, else ``c`` itself if it exists, else ``c`` with spaces replaced by ``_``
(DomainNet writes ``hot_dog``, ``wine_glass``). Categories without a subfolder are not candidates (listed in the
result); subfolders no category uses are ignored. The first ``per_category`` images (by file name) of each folder
are letterboxed to the dataset's image size like a COCO import (:func:`bindscope.importers.coco.letterbox_image`).

A category's candidate embedding is its *prototype*: the mean of its images' L2-normalised embeddings,
re-normalised. One candidate per category, as the ComCO ``references`` split has; averaging several photos is this
project's choice for DomainNet-style folders (the paper does not say how it used several references per class).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bindscope.encoders.embedding_cache import Embedder
from bindscope.errors import BadInput, check_text
from bindscope.io.image_input import image_size
from bindscope.io.json_input import load_json

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


@dataclass
class ReferenceSet:
    """Reference images per dataset category (build it with :func:`load_references`).

    Attributes:
        root: the folder. files: category -> image files used (sorted by name). size: stored image side, pixels.
        folders: category -> subfolder name used. missing: dataset categories without a subfolder (or images).
    """

    root: Path
    files: dict[str, list[Path]]
    size: int
    folders: dict[str, str]
    missing: list[str] = field(default_factory=list)

    def describe(self) -> dict:
        """The ``settings.references`` block of a result."""
        return {"path": str(self.root), "categories": len(self.files),
                "images": sum(len(f) for f in self.files.values()), "folders": dict(self.folders),
                "categories_without_references": list(self.missing),
                "candidate": "per category: mean of its images' L2-normalised embeddings, re-normalised",
                "preprocessing": f"letterboxed to {self.size}x{self.size} px (longer side scaled, black padding)"}

    def prototypes(self, embedder: Embedder) -> tuple[list[str], np.ndarray]:
        """``(category names, (C, D) unit-norm prototype embeddings)`` in sorted category order.

        Raises:
            BadInput: an image file cannot be read or declares more pixels than
                :data:`bindscope.io.image_input.MAX_IMAGE_PIXELS` (the message names it).
        """
        from bindscope.importers.coco import letterbox_image

        names = sorted(self.files)
        paths = [p for n in names for p in self.files[n]]

        def read():
            for path in paths:
                yield letterbox_image(path, self.size, what="reference image")

        emb = embedder.images(read(), total=len(paths))
        bounds = np.cumsum([0] + [len(self.files[n]) for n in names])
        proto = np.stack([emb[bounds[k]:bounds[k + 1]].mean(axis=0) for k in range(len(names))])
        return names, (proto / np.linalg.norm(proto, axis=1, keepdims=True).clip(min=1e-12)).astype(np.float32)


def read_category_map(path: str | os.PathLike | None) -> dict[str, str]:
    """The category map file (JSON, or YAML read with :func:`bindscope.config.load_yaml`): dataset category ->
    folder name.

    Raises:
        BadInput: unreadable file (for JSON see :func:`bindscope.io.json_input.load_json`), not a mapping of
            strings to strings, a name with a control character (the bad entry is named).
    """
    if path is None:
        return {}
    from bindscope.config import load_yaml

    path = Path(path)
    if not path.is_file():
        raise BadInput(f"category_map {str(path)!r} does not exist or is not a file", param="category_map")
    if path.suffix.lower() == ".json":
        data = load_json(path, "category_map", param="category_map")
    else:
        try:
            data = load_yaml(path.read_text(encoding="utf-8"), f"category_map {str(path)!r}")
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInput(f"category_map {str(path)!r} is not valid YAML ({exc})", param="category_map") from None
    if not isinstance(data, dict):
        raise BadInput(f"category_map {str(path)!r} must map category names to folder names",
                       param="category_map")
    for key, value in data.items():
        if not isinstance(key, str) or not isinstance(value, str) or not value:
            raise BadInput(f"category_map {str(path)!r}: entry {key!r}: {value!r} must map a category name to "
                           "a folder name (both strings)", param="category_map")
        check_text(f"category_map {str(path)!r}: key {key!r}", key, name=True, param="category_map")
        check_text(f"category_map {str(path)!r}: entry {key!r}", value, name=True, param="category_map")
    return data


def load_references(root: str | os.PathLike, categories: list[str], size: int,
                    category_map: str | os.PathLike | dict[str, str] | None = None,
                    per_category: int = 10) -> ReferenceSet:
    """Find the reference images of ``categories`` under ``root`` (see the module docstring).

    Args:
        root: the reference folder (one subfolder per category). categories: the dataset's category names.
        size: side (pixels) the images are letterboxed to: the dataset's image size.
        category_map: a map file path, a dict, or None. per_category: images per category (>= 1).

    Raises:
        BadInput: ``root`` is not a folder; a mapped folder is missing or outside ``root``; bad map file;
            ``per_category`` < 1; no category has a reference image; an image used is unreadable or declares
            more pixels than :data:`bindscope.io.image_input.MAX_IMAGE_PIXELS`.
    """
    root = Path(root)
    if not root.is_dir():
        raise BadInput(f"references {str(root)!r} is not a folder (expected one subfolder of images per category)",
                       param="references")
    if per_category < 1:
        raise BadInput(f"references_per_category {per_category} is not allowed; use an integer >= 1",
                       param="references_per_category")
    mapping = category_map if isinstance(category_map, dict) else read_category_map(category_map)
    real_root = root.resolve()
    files, folders, missing = {}, {}, []
    for category in categories:
        if category in mapping:
            candidates = [mapping[category]]
        else:
            candidates = [category, category.replace(" ", "_")]
        chosen = None
        for name in candidates:
            folder = (root / name).resolve()
            if real_root not in folder.parents:
                raise BadInput(f"category_map: folder {name!r} of category {category!r} is outside references "
                               f"{str(root)!r}", param="category_map")
            if folder.is_dir():
                chosen = name
                break
        if chosen is None:
            if category in mapping:
                raise BadInput(f"category_map maps {category!r} to {mapping[category]!r}, but references "
                               f"{str(root)!r} has no such subfolder", param="category_map")
            missing.append(category)
            continue
        images = sorted(p for p in (root / chosen).iterdir()
                        if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)[:per_category]
        if not images:
            missing.append(category)
            continue
        for image in images:  # the header only: a decompression bomb is refused before any model is loaded
            image_size(image, "reference image", param="references")
        files[category], folders[category] = images, chosen
    if not files:
        raise BadInput(f"references {str(root)!r} has no image folder for any of the dataset's categories "
                       f"({', '.join(categories[:8])}{', ...' if len(categories) > 8 else ''}); name subfolders after "
                       "the categories or give category_map", param="references")
    return ReferenceSet(root, files, size, folders, missing)
