"""The torch-ready reader: ``Split.as_torch()`` in a DataLoader with worker processes and PyTorch's default
collate, ``Split.shards()``, a bound on the shards held open, and pickling a split that has been read from (open
HDF5 handles)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from tiny_madman import tiny_madman
from torch.utils.data import DataLoader

from bindscope.build.builder import build_dataset
from bindscope.format.reader import Dataset
from bindscope.errors import DatasetError
from bindscope.format.torchdata import DEFAULT_FIELDS, FIELDS


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A real MADMAN dataset: train 10 samples in 3 shards (4, 4, 2)."""
    out = tmp_path_factory.mktemp("torch") / "d"
    build_dataset(tiny_madman(splits={"train": 10, "test": 3, "ood": 2}, shard_size=4), out, progress=False)
    return out


def test_shards_cover_the_split_in_order(data):
    with Dataset(data) as ds:
        split = ds.split("train")
        shards = list(split.shards())
        assert [(r.first_index, r.count) for r in shards] == [(0, 4), (4, 4), (8, 2)]
        assert [c for r in shards for c in r.captions] == [s.caption for s in split]


def test_a_plain_dataloader_batches_the_default_fields(data):
    """``DataLoader(split.as_torch(), batch_size=B, num_workers=2)``, PyTorch's default collate: the fields of
    the same size in every sample."""
    with Dataset(data) as ds:
        expected = list(ds.split("train"))
        batches = list(DataLoader(ds.split("train").as_torch(), batch_size=4, num_workers=2))
    assert [sorted(b) for b in batches] == [sorted(DEFAULT_FIELDS)] * 3
    assert [b["image"].shape for b in batches] == [(4, 3, 96, 96), (4, 3, 96, 96), (2, 3, 96, 96)]
    assert batches[2]["index"].tolist() == [8, 9] and batches[2]["caption"] == [s.caption for s in expected[8:]]
    assert batches[1]["mask"].shape == (4, 96, 96) and batches[0]["arrays"] == {}


def test_dataloader_with_two_workers_yields_the_sequential_samples(data):
    """Every field, variable-size ones included, through PyTorch's default collate: lists of B values."""
    with Dataset(data) as ds:
        expected = list(ds.split("train"))
        torch_split = ds.split("train").as_torch(fields=FIELDS)
    loader = DataLoader(torch_split, batch_size=3, num_workers=2)
    batches = list(loader)
    assert [len(b["caption"]) for b in batches] == [3, 3, 3, 1]
    assert batches[0]["image"].shape == (3, 3, 96, 96) and batches[0]["image"].dtype == torch.uint8
    assert batches[0]["mask"].shape == (3, 96, 96) and batches[0]["mask"].dtype == torch.uint8
    got = [(int(i), img, m, c, o, n, s) for b in batches
           for i, img, m, c, o, n, s in zip(b["index"], b["image"], b["mask"], b["caption"], b["objects"],
                                              b["negatives"], b["spec"])]
    assert [g[0] for g in got] == list(range(10))
    for (index, image, mask, caption, objects, negatives, spec), sample in zip(got, expected):
        assert index == sample.index
        assert np.array_equal(image.permute(1, 2, 0).numpy(), sample.image)
        assert np.array_equal(mask.numpy(), sample.mask)
        assert caption == sample.caption and spec == sample.spec
        assert [(o["index"], o["category"], o["attributes"], tuple(o["bbox"]), o["area"]) for o in objects] == \
               [(o.index, o.category, o.attributes, o.bbox, o.area) for o in sample.objects]
        assert [n["caption"] for n in negatives] == [n.caption for n in sample.negatives]
        assert all(type(o) is dict for o in objects)


def test_variable_size_fields_stay_per_sample_lists_in_the_default_collate(data):
    """Objects and negatives are lists of different lengths (and, of equal lengths, would be transposed by the
    default collate's own rule for lists): each batch holds them as one list per sample."""
    with Dataset(data) as ds:
        expected = list(ds.split("train"))
        batch = next(iter(DataLoader(ds.split("train").as_torch(fields=("negatives", "objects")), batch_size=10)))
    assert [len(n) for n in batch["negatives"]] == [len(s.negatives) for s in expected]
    assert len({len(n) for n in batch["negatives"]}) > 1  # the case the default rule for lists refuses
    assert [[o["category"] for o in objects] for objects in batch["objects"]] == \
           [[o.category for o in s.objects] for s in expected]


def test_a_bound_on_open_shards_closes_the_least_recently_used(data, tmp_path):
    """``max_open_shards=1`` over three shards in a random order: the same items, one shard open at a time; a
    closed shard opened again is checked again once its file changed."""
    import shutil

    with Dataset(data) as ds:
        expected = {i: (s.caption, s.image) for i, s in enumerate(ds.split("train"))}
    copy = tmp_path / "d"
    shutil.copytree(data, copy)
    with Dataset(copy) as ds:
        bounded = ds.split("train").as_torch(fields=("index", "image", "caption"), max_open_shards=1)
        order = [9, 0, 5, 1, 8, 4, 2, 9]
        for index in order:
            item = bounded[index]
            assert item["caption"] == expected[index][0]
            assert np.array_equal(item["image"].permute(1, 2, 0).numpy(), expected[index][1])
            assert len(bounded.opened()._readers) == 1
        shard = copy / "shards" / "train-00000.h5"
        shard.write_bytes(shard.read_bytes()[:-1] + bytes([shard.read_bytes()[-1] ^ 1]))
        with pytest.raises(DatasetError, match="train-00000.h5: sha256 differs from the manifest"):
            bounded[0]


def test_a_worker_takes_its_parents_check_of_a_shard_only_while_the_file_is_unchanged(data, tmp_path):
    import shutil

    copy = tmp_path / "d"
    shutil.copytree(data, copy)
    with Dataset(copy) as ds:
        split = ds.split("train")
        assert [r.count for r in split.shards()] == [4, 4, 2]  # this process checks every shard
        indices = split.as_torch(fields=("index",))
        assert [b["index"].tolist() for b in DataLoader(indices, batch_size=5, num_workers=1)] == \
               [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
        shard = copy / "shards" / "train-00002.h5"
        shard.write_bytes(shard.read_bytes()[:-1] + bytes([shard.read_bytes()[-1] ^ 1]))
        with pytest.raises(DatasetError, match="train-00002.h5: sha256 differs from the manifest"):
            list(DataLoader(indices, batch_size=5, num_workers=1))


def test_transform_gets_a_pil_image(data):
    from PIL import Image

    seen = []

    def transform(image):
        seen.append(image)
        return torch.zeros(1)

    item = Dataset(data).split("test").as_torch(transform)[2]
    assert isinstance(seen[0], Image.Image) and seen[0].size == (96, 96) and seen[0].mode == "RGB"
    assert item["image"].tolist() == [0.0] and item["index"] == 2


def test_a_split_read_from_still_pickles(data):
    ds = Dataset(data)
    split = ds.split("train")
    first = split[5]  # opens shard 1 (an h5py handle)
    copy = pickle.loads(pickle.dumps(split))
    assert copy[5].caption == first.caption and np.array_equal(copy[5].image, first.image)
    ds.close()
    copy.dataset.close()
