"""A bindscope split as a PyTorch map-style dataset, and the collate function that batches it.

Example::

    from torch.utils.data import DataLoader
    from bindscope.format.reader import Dataset
    from bindscope.format.torchdata import collate

    split = Dataset("data/madman").split("train")
    loader = DataLoader(split.as_torch(), batch_size=32, shuffle=True, num_workers=4, collate_fn=collate)
    for batch in loader:
        batch["image"]      # (B, 3, H, W) uint8
        batch["caption"]    # list of B str

The dataset pickles without open file handles, and each process (each DataLoader worker) opens the shards
itself on first access, so it works with any ``num_workers`` and start method.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import torch
from torch.utils.data import Dataset as _TorchDataset
from torch.utils.data import default_collate

from bindscope.format.records import Sample


def sample_dict(sample: Sample, transform=None) -> dict:
    """``sample`` as tensors and plain Python values (see :class:`TorchSplit` for the keys)."""
    if transform is None:
        image = torch.from_numpy(np.ascontiguousarray(sample.image.transpose(2, 0, 1)))
    else:
        from PIL import Image

        image = transform(Image.fromarray(np.ascontiguousarray(sample.image)))
    return {"index": sample.index, "image": image, "mask": torch.from_numpy(np.ascontiguousarray(sample.mask)),
            "caption": sample.caption, "objects": [dataclasses.asdict(o) for o in sample.objects],
            "negatives": [dataclasses.asdict(n) for n in sample.negatives], "spec": sample.spec,
            "arrays": {name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in sample.arrays.items()}}


class TorchSplit(_TorchDataset):
    """One split of a finished dataset as a :class:`torch.utils.data.Dataset`; made by ``Split.as_torch()``.

    Item ``i`` (the split's sample ``i``) is a dict:

    - ``index``: int, the sample's index in the split;
    - ``image``: ``(3, H, W)`` uint8 tensor, RGB 0..255 (or whatever ``transform`` returns for the image as a
      PIL RGB image);
    - ``mask``: ``(H, W)`` uint8 tensor, 0 background, k = visible pixels of object k;
    - ``caption``: str;
    - ``objects``: list of dicts with the fields of :class:`bindscope.format.records.ObjectRecord`;
    - ``negatives``: list of dicts with the fields of :class:`bindscope.format.records.Negative`;
    - ``spec``: dict, the generator's plan of the sample;
    - ``arrays``: dict of tensors, the sample's per-sample arrays (format version 2, e.g. ComCO's ``camera_K``
      (3, 3), ``world_to_camera`` (4, 4), ``depth`` (H, W)); empty for version-1 datasets.

    Raises:
        DatasetError: a shard is missing or unreadable (on access).
    """

    def __init__(self, split, transform=None):
        self.split = split  # a bindscope.format.reader.Split (pickles without its open shards)
        self.transform = transform
        self._open: tuple[int, object] | None = None  # (process id, this process's own Split)

    def _split(self):
        if self._open is None or self._open[0] != os.getpid():  # first use in this process (or worker)
            self._open = (os.getpid(), type(self.split)(self.split.dataset, self.split.name))
        return self._open[1]

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_open": None}

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, index: int) -> dict:
        return sample_dict(self._split()[index], self.transform)


def collate(batch: list[dict]) -> dict:
    """Batch items of :class:`TorchSplit`: ``index`` becomes an int64 tensor ``(B,)``; ``image`` and ``mask``
    are stacked (``(B, 3, H, W)``, ``(B, H, W)``, or the stacked ``transform`` outputs); ``caption``,
    ``objects``, ``negatives`` and ``spec`` stay lists of length B (objects and negatives differ in number
    per sample, which :func:`torch.utils.data.default_collate` rejects); ``arrays`` becomes a dict of stacked
    tensors ``(B, *shape)`` (every sample of a dataset has the same arrays)."""
    out = {key: default_collate([item[key] for item in batch]) for key in ("index", "image", "mask", "arrays")}
    for key in ("caption", "objects", "negatives", "spec"):
        out[key] = [item[key] for item in batch]
    return out
