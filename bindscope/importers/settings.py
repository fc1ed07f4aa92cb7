"""The settings every importer shares (:class:`ImportSettings`): the stored image size, how many scenes, the seed of
the negatives, the shard size and the worker processes. ``bindscope import coco|clevr|pug`` make it with one click
decorator generated from its fields (:func:`bindscope.cli.options.settings_options`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from bindscope.errors import BadInput, check_int
from bindscope.limits import IMPORT_IMAGE_SIZE, MAX_COUNT, MAX_JOBS, MAX_SEED


@dataclass(frozen=True)
class ImportSettings:
    """How much of a source is imported, and how (:func:`bindscope.importers.coco.import_coco`,
    :func:`bindscope.importers.clevr.import_clevr`, :func:`bindscope.importers.pug.import_pug`).

    Attributes:
        image_size: side of the stored square (letterboxed) images in pixels, 32..2048.
        limit: import only the first ``limit`` selected scenes (>= 1; None: all).
        seed: of the recognition negatives' replacement values (0..2**32-1); COCO imports store no negatives and
            do not read it.
        shard_size: images per shard, 1..10,000,000.
        jobs: worker processes, 1..256.

    Raises:
        BadInput: a value outside its range (``param`` names the field), at construction.
    """

    image_size: int = field(default=224, metadata={
        "flag": "--image-size", "range": IMPORT_IMAGE_SIZE, "help": "Side of the stored square (letterboxed) images, "
        "pixels."})
    limit: int | None = field(default=None, metadata={
        "flag": "--limit", "range": (1, MAX_COUNT), "help": "Import only the first N scenes."})
    seed: int = field(default=0, metadata={
        "flag": "--seed", "range": (0, MAX_SEED), "help": "Seed of the recognition negatives' replacement values."})
    shard_size: int = field(default=256, metadata={
        "flag": "--shard-size", "range": (1, MAX_COUNT), "help": "Images per shard."})
    jobs: int = field(default=1, metadata={"flag": "--jobs", "range": (1, MAX_JOBS), "help": "Worker processes."})

    def __post_init__(self):
        low, high = IMPORT_IMAGE_SIZE
        if isinstance(self.image_size, bool) or not isinstance(self.image_size, int) \
                or not low <= self.image_size <= high:
            raise BadInput(f"image_size {self.image_size!r} is not allowed; use {low}..{high} pixels",
                           param="image_size")
        if self.limit is not None:
            check_int("limit", self.limit, 1)
        check_int("seed", self.seed, 0, MAX_SEED)
        check_int("shard_size", self.shard_size, 1, MAX_COUNT, what="images")
        check_int("jobs", self.jobs, 1, MAX_JOBS, what="worker processes")
