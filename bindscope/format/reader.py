"""Read a bindscope dataset directory as plain Python/numpy objects.

Example::

    ds = Dataset("data/madman")
    test = ds.split("test")
    sample = test[0]            # bindscope.format.records.Sample
    sample.image.shape          # (H, W, 3) uint8
    for shard in test.shards():  # ShardReader objects, in index order (whole-column access)
        shard.captions

    # PyTorch: a map-style torch Dataset of tensors and plain dicts (see bindscope.format.torchdata)
    loader = torch.utils.data.DataLoader(test.as_torch(), batch_size=32, num_workers=2,
                                         collate_fn=bindscope.format.torchdata.collate)

A :class:`Dataset` or :class:`Split` can be pickled (open HDF5 handles are dropped; shards reopen on use).
"""

from __future__ import annotations

import bisect
import os
from pathlib import Path
from typing import Iterator

from bindscope.errors import DatasetError
from bindscope.format.manifest import load_manifest
from bindscope.format.records import Sample
from bindscope.format.shard import ShardReader
from bindscope.io.canonical import sha256_file
from bindscope.io.inside import file_inside


def shard_mismatch(reader: ShardReader, entry: dict, split: str, manifest: dict) -> str | None:
    """What in an opened shard contradicts its manifest entry (count, first index, object count) or the
    manifest (split, image size); ``None`` when they agree."""
    attrs = reader.attrs
    if attrs.get("split") not in (None, split):
        return f"attribute split is {attrs.get('split')!r}, the manifest lists it under {split!r}"
    if reader.count != entry["count"]:
        return f"holds {reader.count} samples, the manifest says {entry['count']}"
    if reader.first_index != entry["first_index"]:
        return f"starts at sample {reader.first_index}, the manifest says {entry['first_index']}"
    if reader.num_objects != entry["num_objects"]:
        return f"holds {reader.num_objects} objects, the manifest says {entry['num_objects']}"
    size = list(reader.images.shape[1:3])
    if size != list(manifest["image_size"]):
        return f"images: {size[0]}x{size[1]} pixels, the manifest says {manifest['image_size'][0]}x" \
               f"{manifest['image_size'][1]}"
    return None


class Split:
    """The samples of one split, indexable 0..len-1 and iterable. Shards are opened on first use.

    Picklable: open shard handles are not pickled (the copy reopens shards on use).
    """

    def __init__(self, dataset: "Dataset", name: str):
        self.dataset = dataset
        self.name = name
        info = dataset.manifest["splits"][name]
        self._entries = info["shards"]
        self._starts = [e["first_index"] for e in self._entries]
        self._readers: dict[int, ShardReader] = {}
        self._len = info["num_samples"]

    def __len__(self) -> int:
        return self._len

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_readers": {}}

    @property
    def num_shards(self) -> int:
        return len(self._entries)

    def shards(self) -> Iterator[ShardReader]:
        """The split's shard readers in index order (each covers samples ``first_index .. first_index+count-1``).

        Raises:
            DatasetError: a shard file is missing or not a readable bindscope shard.
        """
        for number in range(len(self._entries)):
            yield self.shard(number)

    def as_torch(self, transform=None):
        """This split as a :class:`torch.utils.data.Dataset` (map-style) of tensors and plain dicts.

        Args:
            transform: optional callable applied to the image as a :class:`PIL.Image.Image` (e.g. a
                torchvision or open_clip preprocess); its result becomes ``item["image"]``.

        Returns:
            A :class:`bindscope.format.torchdata.TorchSplit` (picklable; each DataLoader worker opens the
            shards itself). Batch it with :func:`bindscope.format.torchdata.collate`.
        """
        from bindscope.format.torchdata import TorchSplit

        return TorchSplit(self, transform)

    def shard(self, number: int) -> ShardReader:
        """The reader of this split's ``number``-th shard, opened once its bytes match the manifest's sha256
        (one read of the file) and its structure and header match the manifest.

        Raises:
            DatasetError: the shard file is missing, changed or corrupt, or not a bindscope shard of this
                dataset; the message names the file.
        """
        if number not in self._readers:
            entry = self._entries[number]
            path = file_inside(self.dataset.path, entry["file"], "shard", DatasetError)
            if sha256_file(path) != entry["sha256"]:
                raise DatasetError(f"{path}: sha256 differs from the manifest (changed or corrupt); "
                                   "`bindscope verify` lists the details")
            reader = ShardReader(path, self.dataset.attribute_names, self.dataset.extra_names)
            problem = shard_mismatch(reader, entry, self.name, self.dataset.manifest)
            if problem:
                reader.close()
                raise DatasetError(f"{path}: {problem}")
            self._readers[number] = reader
        return self._readers[number]

    def __getitem__(self, index: int) -> Sample:
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(f"sample {index} out of range for split {self.name!r} of {self._len} samples")
        number = bisect.bisect_right(self._starts, index) - 1
        return self.shard(number).sample(index - self._starts[number])

    def __iter__(self) -> Iterator[Sample]:
        for reader in self.shards():
            for local in range(reader.count):
                yield reader.sample(local)

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()


class Dataset:
    """A finished bindscope dataset directory (see docs/dataset-format.md).

    Attributes:
        path: the folder.
        manifest: the validated manifest dict.
        generator: ``"madman"`` or ``"comco"``.
        attribute_names / extra_names: the per-object attribute and numeric extra columns.

    Raises:
        DatasetError: the folder is missing, unfinished, or its manifest is invalid.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.manifest = load_manifest(self.path)
        self.generator: str = self.manifest["generator"]["name"]
        self.attribute_names: list[str] = self.manifest["object_attributes"]
        self.extra_names: list[str] = self.manifest["object_extras"]
        self._splits: dict[str, Split] = {}

    @property
    def split_names(self) -> list[str]:
        return list(self.manifest["splits"])

    def split(self, name: str) -> Split:
        """The split ``name``. Raises DatasetError naming the available splits if it does not exist."""
        if name not in self.manifest["splits"]:
            raise DatasetError(f"dataset {str(self.path)!r} has no split {name!r}; "
                               f"it has: {', '.join(self.split_names)}")
        if name not in self._splits:
            self._splits[name] = Split(self, name)
        return self._splits[name]

    def check(self, splits: list[str] | None = None) -> None:
        """Open every shard of ``splits`` (default: all) as :meth:`Split.shard` does, so that a changed,
        corrupt or inconsistent shard is refused before a long job writes anything.

        Raises:
            DatasetError: the first bad shard, named (or an unknown split).
        """
        for name in self.split_names if splits is None else splits:
            for _ in self.split(name).shards():
                pass

    def require_generator(self, *names: str) -> None:
        """Raise DatasetError unless the dataset was made by one of ``names`` (e.g. ``"comco"``)."""
        if self.generator not in names:
            raise DatasetError(f"dataset {str(self.path)!r} was made by {self.generator!r}; "
                               f"this task needs a {' or '.join(names)} dataset")

    def close(self) -> None:
        for split in self._splits.values():
            split.close()

    def __enter__(self) -> "Dataset":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
