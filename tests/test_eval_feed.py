"""Feeding encoders fast without changing what they are fed: contiguous and grouped reads of a split, lazily
checked string columns, the torch batches of one HDF5 read, the shard batch sampler, the vectorised MADMAN scoring
against the per-comparison rules, the cluster bootstrap over distinct pairs, on-device preprocessing against
open_clip's PIL preprocessing, worker processes, and the embedding cache after one image changed."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections import defaultdict
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from eval_fakes import comco_fixture, madman_fixture
from tiny_madman import tiny_madman

from bindscope.build.builder import build_dataset
from bindscope.encoders.embedding_cache import Embedder, EmbeddingCache, image_hash, stored_image_key, text_hash
from bindscope.encoders.interface import device_preprocess
from bindscope.errors import DatasetError
from bindscope.evaluation.comco import evaluate_comco
from bindscope.evaluation.madman import evaluate_madman, score_split
from bindscope.evaluation.stats import _distinct_pairs, averages, cluster_bootstrap, cluster_codes, clustered_proportion
from bindscope.format.reader import Dataset
from bindscope.format.records import Negative
from bindscope.format.torchdata import FIELDS, ShardBatchSampler, collate, loader, sample_dict
from bindscope.io.ahead import ReadAhead
from bindscope.io.canonical import canonical_json, sha256_file


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A real MADMAN dataset: train 10 samples in shards of 4, 4, 2; test 3; ood 2."""
    out = tmp_path_factory.mktemp("feed") / "d"
    build_dataset(tiny_madman(splits={"train": 10, "test": 3, "ood": 2}, shard_size=4), out, progress=False)
    return out


def rehash(folder: Path) -> None:
    """Record every shard's sha256 in the manifest again (after a shard was changed on purpose)."""
    manifest = json.loads((folder / "manifest.json").read_text())
    for info in manifest["splits"].values():
        for entry in info["shards"]:
            entry["sha256"] = sha256_file(folder / entry["file"])
    (folder / "manifest.json").write_text(canonical_json(manifest))


# ------------------------------------------------------------------------------------------------ reading

def test_grouped_and_contiguous_reads_give_the_samples_images(data):
    with Dataset(data) as ds:
        split = ds.split("train")
        single = [split[i].image for i in range(10)]
        order = [9, 0, 1, 2, 5, 5, -1, 3]
        got = split.read_images(order)
        assert got.shape == (8, 96, 96, 3) and got.dtype == np.uint8
        assert all(np.array_equal(g, single[i]) for g, i in zip(got, order))
        assert split.read_images([]).shape == (0, 96, 96, 3)
        with pytest.raises(IndexError):
            split.read_images([10])
        assert split.slices(3) == [(0, 0, 3), (0, 3, 4), (1, 0, 3), (1, 3, 4), (2, 0, 2)]
        assert split.slices(3, 2, 7) == [(0, 2, 4), (1, 0, 3)]
        for workers in (0, 1):
            batches = list(split.image_batches(3, workers))
            assert [first for first, _ in batches] == [0, 3, 4, 7, 8]
            flat = np.concatenate([b for _, b in batches])
            assert all(np.array_equal(a, b) for a, b in zip(flat, single))
        for sample, index in zip(split, range(10)):  # iteration reads in slices: the same samples
            other = split[index]
            assert (sample.index, sample.caption, sample.objects, sample.negatives, sample.spec) == \
                (other.index, other.caption, other.objects, other.negatives, other.spec)
            assert np.array_equal(sample.image, other.image) and np.array_equal(sample.mask, other.mask)
        assert len(list(split)) == 10
        reader = split.shard(1)
        assert np.array_equal(reader.read_images(1, 3), np.stack(single[5:7]))
        assert np.array_equal(reader.read_masks(0, 2), np.stack([split[4].mask, split[5].mask]))
        with pytest.raises(IndexError):
            reader.read_images(2, 5)


def test_unvalidated_shards_read_the_same_tables_and_check_each_column_on_first_use(data, tmp_path):
    full, lazy = Dataset(data), Dataset(data, validate=False)
    a, b = full.split("train").shard(0), lazy.split("train").shard(0)
    assert not b._strings_read  # nothing but metadata and numbers read on open
    assert [b.objects(i) for i in range(4)] == [a.objects(i) for i in range(4)] == b.all_objects()
    assert [b.negatives(i) for i in range(4)] == [a.negatives(i) for i in range(4)] == b.all_negatives()
    assert b.object_dicts(1, 3) == [[dataclasses.asdict(o) for o in a.objects(i)] for i in (1, 2)]
    assert b.negative_dicts(0, 2) == [[dataclasses.asdict(n) for n in a.negatives(i)] for i in (0, 1)]
    assert b.negative_column("objects") == [n.objects for i in range(4) for n in a.negatives(i)]
    for x, y in ((b.sample(i), a.sample(i)) for i in range(4)):
        assert (x.index, x.caption, x.objects, x.negatives, x.spec) == (y.index, y.caption, y.objects, y.negatives,
                                                                         y.spec)
        assert np.array_equal(x.image, y.image) and np.array_equal(x.mask, y.mask)
    with pytest.raises(KeyError):
        b.negative_column("colour")
    full.close()
    lazy.close()
    # a spec that is not JSON: refused on open when validating, else when a spec is first read
    bad = tmp_path / "bad"
    shutil.copytree(data, bad)
    with h5py.File(bad / "shards" / "train-00000.h5", "a") as f:
        specs = f["specs"][()]
        specs[2] = b"{not json"
        del f["specs"]
        f.create_dataset("specs", data=specs.astype(object), dtype=h5py.string_dtype("utf-8"))
    rehash(bad)
    with pytest.raises(DatasetError, match="train-00000.h5: specs: sample 2 is not JSON"):
        Dataset(bad).split("train").shard(0)
    reader = Dataset(bad, validate=False).split("train").shard(0)
    assert reader.captions[2] == a.captions[2]
    with pytest.raises(DatasetError, match="train-00000.h5: specs: sample 2 is not JSON"):
        reader.spec(0)
    for workers in (0, 1):  # images read with their specs checked, here or in a worker: the same one-line error
        with pytest.raises(DatasetError, match=r"^\S*train-00000.h5: specs: sample 2 is not JSON \(.*\)$"):
            list(Dataset(bad, validate=False).split("train").image_batches(4, workers, check_specs=True))


# ------------------------------------------------------------------------------------------------ torch

def test_torch_batches_equal_the_per_sample_items(data):
    with Dataset(data) as ds:
        split = ds.split("train")
        expected = [sample_dict(split[i]) for i in range(10)]
        torch_split = split.as_torch(fields=FIELDS)
    for workers in (0, 2):
        batches = list(loader(torch_split, batch_size=4, num_workers=workers))
        assert [len(b["caption"]) for b in batches] == [4, 4, 2]
        assert batches[0]["image"].shape == (4, 3, 96, 96) and batches[0]["image"].dtype == torch.uint8
        assert batches[0]["image"].is_contiguous(memory_format=torch.channels_last)
        assert batches[0]["index"].tolist() == [0, 1, 2, 3] and batches[0]["index"].dtype == torch.int64
        for k, item in enumerate(expected):
            b, j = batches[k // 4], k % 4
            assert torch.equal(b["image"][j], item["image"]) and torch.equal(b["mask"][j], item["mask"])
            for key in ("caption", "objects", "negatives", "spec"):
                assert b[key][j] == item[key]
            assert all(type(o) is dict for o in b["objects"][j])
        # with workers the pixels travel through the loader's reused shared-memory ring and are copied out of
        # it into ordinary memory; a fresh shared-memory block per batch would arrive shared
        assert not any(b["image"].is_shared() or b["mask"].is_shared() for b in batches)
    # the item path and a plain DataLoader with the documented collate agree with the batches
    assert torch_split[5]["objects"] == expected[5]["objects"]
    plain = list(torch.utils.data.DataLoader(torch_split, batch_size=4, collate_fn=collate))
    assert plain[1]["caption"] == [e["caption"] for e in expected[4:8]]
    assert torch.equal(plain[1]["image"], torch.stack([e["image"] for e in expected[4:8]]))
    few = split.as_torch(fields=("index", "caption"))
    assert list(few[3]) == ["index", "caption"]
    assert list(loader(few, batch_size=10))[0]["caption"] == [e["caption"] for e in expected]
    with pytest.raises(ValueError, match="unknown"):
        split.as_torch(fields=("image", "pixels"))


def test_shard_batch_sampler_orders(data):
    with Dataset(data) as ds:
        split = ds.split("train")
        assert list(ShardBatchSampler(split, 4)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
        assert len(ShardBatchSampler(split, 4, drop_last=True)) == 2
        sampler = ShardBatchSampler(split, 4, shuffle=True, seed=3, run_length=2, buffer=4)
        first, second = list(sampler), list(sampler)
        for epoch in (first, second):
            flat = [i for b in epoch for i in b]
            assert sorted(flat) == list(range(10)) and [len(b) for b in epoch] == [4, 4, 2]
            for b in epoch:  # runs of 2 consecutive samples of one shard: at most 3 runs per batch of 4
                runs = 1 + sum(1 for x, y in zip(b, b[1:]) if y != x + 1 or x // 4 != y // 4)
                assert runs <= 3
        assert first != second  # each pass is the next epoch
        sampler.set_epoch(0)
        assert list(sampler) == first == list(ShardBatchSampler(split, 4, shuffle=True, seed=3, run_length=2,
                                                                buffer=4))
        with pytest.raises(ValueError):
            ShardBatchSampler(split, 4, run_length=8, buffer=4)


def test_device_preprocessing_matches_open_clip_pil_preprocessing(data):
    import open_clip
    from PIL import Image

    mean, std = open_clip.OPENAI_DATASET_MEAN, open_clip.OPENAI_DATASET_STD
    transform = open_clip.image_transform(224, is_train=False, mean=mean, std=std, interpolation="bicubic")
    with Dataset(data) as ds:
        images = ds.split("train").read_images(range(4))
    ref = torch.stack([transform(Image.fromarray(a)) for a in images])
    got = device_preprocess(torch.from_numpy(images), 224, mean, std)
    assert got.shape == ref.shape == (4, 3, 224, 224) and got.dtype == torch.float32
    assert torch.equal(got, device_preprocess(torch.from_numpy(images).permute(0, 3, 1, 2), 224, mean, std))
    diff = (ref - got).abs()  # the documented agreement (device_preprocess docstring)
    assert float(diff.mean()) < 1e-3 and float(diff.max()) < 0.3
    assert float((diff > 0.02).float().mean()) < 2e-3
    big = np.repeat(np.repeat(images, 3, axis=1), 3, axis=2)[:, 32:256, 32:256]  # 224 px: no resize
    assert torch.equal(torch.stack([transform(Image.fromarray(np.ascontiguousarray(a))) for a in big]),
                       device_preprocess(torch.from_numpy(np.ascontiguousarray(big)), 224, mean, std))
    with pytest.raises(ValueError):
        device_preprocess(torch.zeros(1, 4, 8, 8, dtype=torch.uint8), 224, mean, std)


# ------------------------------------------------------------------------------------------------ scoring

def reference_score_split(image_emb, caption_emb, negatives, negative_emb, attributes, sample_ids, rows, seed=0):
    """The MADMAN scoring rules written out comparison by comparison (the protocol as the docs state it)."""
    rec, bind, bind_all = defaultdict(list), defaultdict(list), defaultdict(list)
    excluded = defaultdict(int)
    for i, negs in enumerate(negatives):
        if not negs:
            continue
        sid = sample_ids[i]
        positive = float(image_emb[i] @ caption_emb[i])
        scores = [float(v) for v in negative_emb[i] @ image_emb[i]]
        passed = [positive > v for v in scores]
        rec_ok = defaultdict(list)
        for neg, ok in zip(negs, passed):
            if neg.kind == "recognition":
                rec[neg.attribute].append((sid, ok))
                for o in neg.objects:
                    rec_ok[(neg.attribute, o)].append(ok)
        for neg, ok, score in zip(negs, passed, scores):
            counted = None
            if neg.kind == "binding":
                bind_all[neg.attribute].append((sid, ok))
                counted = all(rec_ok.get((neg.attribute, o)) and all(rec_ok[(neg.attribute, o)]) for o in neg.objects)
                (bind[neg.attribute].append((sid, ok)) if counted else excluded.__setitem__(
                    neg.attribute, excluded[neg.attribute] + 1))
            rows.append({"sample": sid, "task": neg.kind, "attribute": neg.attribute, "objects": list(neg.objects),
                         "negative": neg.caption, "caption_similarity": positive, "negative_similarity": score,
                         "passed": ok, "counted_in_binding": counted})

    def clustered(pairs):
        return clustered_proportion([ok for _, ok in pairs], [s for s, _ in pairs], seed=seed)

    def block(outcomes):
        names = [a for a in attributes if a in outcomes] + sorted(set(outcomes) - set(attributes))
        per = {a: clustered(outcomes[a]) for a in names}
        return {"per_attribute": per, "average": averages(per, clustered([p for a in names for p in outcomes[a]]))}

    binding = block(bind)
    names = [a for a in attributes if a in bind_all] + sorted(set(bind_all) - set(attributes))
    binding["excluded"] = {a: int(excluded.get(a, 0)) for a in names}
    for a in names:
        binding["per_attribute"].setdefault(a, clustered([]))
    return {"recognition": block(rec), "binding": binding, "binding_unconditional": block(bind_all)}


@pytest.mark.parametrize("seed", range(6))
def test_vectorised_scoring_follows_the_per_comparison_rules(seed):
    rng = np.random.default_rng(seed)
    n, d = 40, 4
    image = rng.integers(-2, 3, (n, d)).astype(np.float32)  # coarse values: many exact ties
    caption = rng.integers(-2, 3, (n, d)).astype(np.float64 if seed % 2 else np.float32)
    negatives, negative_emb = [], []
    for i in range(n):
        negs = []
        for _ in range(int(rng.integers(0, 7))):
            kind = str(rng.choice(["recognition", "recognition", "binding", "matching-1"]))
            objects = tuple(int(o) for o in rng.choice([1, 2, 3], size=int(rng.integers(0, 3)), replace=False))
            negs.append(Negative(kind, f"caption {i} {len(negs)}", str(rng.choice(["colour", "size", "zz"])),
                                 objects))
        negatives.append(negs)
        negative_emb.append(rng.integers(-2, 3, (len(negs), d)).astype(np.float32))
    ids = [100 + 2 * i for i in range(n)]
    expected_rows, rows = [], []
    expected = reference_score_split(image, caption, negatives, negative_emb, ["size", "colour"], ids, expected_rows)
    got = score_split(image, caption, negatives, negative_emb, ["size", "colour"], ids, rows)
    assert got == expected
    assert rows == expected_rows and len(rows) == sum(map(len, negatives))
    assert [type(r["passed"]) for r in rows] == [bool] * len(rows)
    prefixed: list = []
    score_split(image, caption, negatives, negative_emb, ["size", "colour"], ids, prefixed, row_fields={"split": "x"})
    assert prefixed == [{"split": "x", **r} for r in expected_rows] and list(prefixed[0])[0] == "split"


def test_cluster_codes_and_distinct_pairs_by_counting_equal_numpy_unique():
    rng = np.random.default_rng(3)
    labels = [np.array([7, 3, 3, 9, 7]), rng.integers(0, 50, 300), rng.integers(0, 10**9, 40), np.array([-2, 5, -2]),
              np.array(["b", "a", "b"]), np.array([4, 4], np.uint8), np.zeros(0, np.int64)]
    for label in labels:
        codes, count = cluster_codes(label)
        uniq, inverse = np.unique(label, return_inverse=True)
        assert codes.tolist() == inverse.reshape(-1).tolist() and count == len(uniq)
    assert cluster_codes(np.array([7, 3, 3, 9, 7]))[0].tolist() == [1, 0, 0, 2, 1]
    pairs = [(np.array([1.0, 0.0, 1.0, 2.0]), np.array([2.0, 1.0, 2.0, 2.0])),  # counts of comparisons: counted
             (rng.integers(0, 4, 500).astype(float), rng.integers(1, 6, 500).astype(float)),
             (np.array([0.5, 0.25, 0.5]), np.ones(3)), (np.array([5000.0, 1.0]), np.array([1.0, 1.0]))]  # sorted
    for num, den in pairs:
        got, sizes = _distinct_pairs(num, den)
        expected, expected_sizes = np.unique(np.stack([num, den], axis=1), axis=0, return_counts=True)
        assert got.tolist() == expected.tolist() and sizes.tolist() == expected_sizes.tolist()
    assert _distinct_pairs(*pairs[0])[0].tolist() == [[0.0, 1.0], [1.0, 2.0], [2.0, 2.0]]
    assert _distinct_pairs(*pairs[0])[1].tolist() == [1, 2, 1]


def test_cluster_bootstrap_over_distinct_pairs_has_the_distribution_over_clusters():
    rng = np.random.default_rng(5)
    clusters = np.repeat(np.arange(400), rng.integers(1, 4, 400))
    outcomes = (rng.random(clusters.size) < 0.7).astype(float)
    got = cluster_bootstrap(outcomes, np.ones(outcomes.size), clusters, resamples=4000, seed=1)
    assert got == cluster_bootstrap(outcomes, np.ones(outcomes.size), clusters, resamples=4000, seed=1)
    # the textbook form: multinomial counts over the clusters themselves
    num = np.bincount(clusters, weights=outcomes)
    den = np.bincount(clusters).astype(float)
    counts = np.random.default_rng(2).multinomial(400, np.full(400, 1 / 400), size=4000)
    brute = np.quantile((counts @ num) / (counts @ den), [0.025, 0.975])
    assert got == pytest.approx(brute, abs=0.01)


# ------------------------------------------------------------------------------------------------ end to end

def test_reading_in_worker_processes_changes_no_result(tmp_path):
    path, encoder = madman_fixture(tmp_path)
    rows0: list = []
    rows1: list = []
    alone = evaluate_madman(path, encoder, progress=False, rows=rows0, workers=0)
    helped = evaluate_madman(path, encoder, progress=False, rows=rows1, workers=1)
    assert helped["metrics"] == alone["metrics"] and rows1 == rows0 and helped["counts"] == alone["counts"]


class _Counting:
    """An adapter whose text vector is (len, first letter code, 1) and image vector (pixel [0, 0, 0], 0, 1)."""

    embed_dim = 3

    def __init__(self):
        self.texts, self.images = [], []

    def encode_texts(self, texts):
        self.texts.append(list(texts))
        return np.array([[len(t), ord(t[0]), 1] for t in texts], np.float32)

    def encode_images(self, images):
        self.images.append(len(images))
        return np.array([[im[0, 0, 0], 0, 1] for im in images], np.float32)


@pytest.mark.parametrize("disk", [False, True])
def test_the_embedder_encodes_each_new_key_once_and_takes_the_rest_from_memory_or_disk(tmp_path, disk):
    adapter = _Counting()
    cache = EmbeddingCache(tmp_path, "counting") if disk else None
    if disk:
        cache.put(text_hash("bb"), np.array([7, 7, 7], np.float32))  # a stored vector wins over encoding
    embedder = Embedder(adapter, cache)
    out = embedder.texts(["a", "bb", "a", "ccc"])
    expected_bb = [7, 7, 7] if disk else [2, 98, 1]
    assert out.tolist() == [[1, 97, 1], expected_bb, [1, 97, 1], [3, 99, 1]]
    assert adapter.texts == ([["a", "ccc"]] if disk else [["a", "bb", "ccc"]])
    assert (embedder.stats["text_hits"], embedder.stats["text_misses"]) == ((1, 2) if disk else (0, 3))
    again = embedder.texts(["ccc", "dd"])  # "ccc" from this run's memory
    assert again.tolist() == [[3, 99, 1], [2, 100, 1]] and adapter.texts[-1] == ["dd"]
    out[0, 0] = -5  # the caller owns the rows it gets
    assert embedder.texts(["a"]).tolist() == [[1, 97, 1]]

    images = np.zeros((3, 2, 2, 3), np.uint8)
    images[:, 0, 0, 0] = [10, 20, 10]
    keys = [stored_image_key("ab" * 32, i) for i in range(3)]
    rows = embedder.image_batches([(keys, images), (None, images[:2])])
    assert rows[:, 0].tolist() == [10, 20, 10, 10, 20]
    assert adapter.images == [3, 2]  # keyed by place, then by pixels: images 0 and 2 are two keys each time
    assert embedder.stats["images_requested"] == 5 and embedder.stats["image_misses"] == 5
    assert embedder.images([images[0], images[2]])[:, 0].tolist() == [10, 10] and adapter.images == [3, 2]
    assert image_hash(images[0]) == image_hash(images[2]) and len(set(keys)) == 3
    with pytest.raises(ValueError, match="2 keys for a batch of 3 images"):
        embedder.image_batches([(keys[:2], images)])


def test_a_changed_image_is_encoded_again_with_its_shard_and_the_other_shards_come_from_the_cache(tmp_path):
    """Stored images are keyed by their verified shard's sha256 and place: a changed image changes its shard's
    digest, so every image of that shard misses the cache and the other shard's images hit it."""
    path, encoder = madman_fixture(tmp_path)
    cache_dir = tmp_path / "cache"
    first = evaluate_madman(path, encoder, cache=EmbeddingCache(cache_dir, encoder.cache_key), progress=False)
    assert sorted(encoder.image_calls) == [1, 2, 3, 5]  # the images with negatives, by their id pixel
    changed = tmp_path / "changed"
    shutil.copytree(path, changed)
    with h5py.File(changed / "shards" / "test-00000.h5", "a") as f:
        image = f["images"][1]
        image[5, 5] = (9, 9, 9)  # other pixels of image 2 (its id pixel, which picks its vector, stays)
        f["images"][1] = image
    rehash(changed)
    encoder.image_calls.clear()
    encoder.text_calls.clear()
    second = evaluate_madman(changed, encoder, cache=EmbeddingCache(cache_dir, encoder.cache_key), progress=False)
    assert sorted(encoder.image_calls) == [1, 2, 3] and encoder.text_calls == []  # test-00000 holds 1, 2, 3
    assert (second["counts"]["images_encoded"], second["counts"]["image_cache_hits"]) == (3, 1)
    assert second["metrics"] == first["metrics"]
    encoder.image_calls.clear()
    again = evaluate_madman(changed, encoder, cache=EmbeddingCache(cache_dir, encoder.cache_key), progress=False)
    assert encoder.image_calls == [] and again["counts"]["image_cache_hits"] == 4


def test_a_changed_scene_is_encoded_again_with_its_shard_and_the_references_come_from_the_cache(tmp_path):
    """ComCO scenes and references are keyed by their verified shard's sha256 and place, as MADMAN's images."""
    path, encoder = comco_fixture(tmp_path)
    cache_dir = tmp_path / "cache"
    first = evaluate_comco(path, encoder, tasks="ior,i2tor", cache=EmbeddingCache(cache_dir, encoder.cache_key),
                           progress=False)
    assert sorted(encoder.image_calls) == [10, 11, 12, 13, 14, 100, 101, 102, 103]
    changed = tmp_path / "changed"
    shutil.copytree(path, changed)
    with h5py.File(changed / "shards" / "scenes-00000.h5", "a") as f:
        image = f["images"][1]
        image[5, 5] = (9, 9, 9)  # not the id pixel, which picks the scene's vector
        f["images"][1] = image
    rehash(changed)
    encoder.image_calls.clear()
    second = evaluate_comco(changed, encoder, tasks="ior,i2tor", cache=EmbeddingCache(cache_dir, encoder.cache_key),
                            progress=False)
    assert sorted(encoder.image_calls) == [10, 11, 12]  # every scene of the changed shard (scenes-00000 holds 3)
    assert (second["counts"]["images_encoded"], second["counts"]["image_cache_hits"]) == (3, 6)
    assert second["metrics"] == first["metrics"]


@pytest.mark.parametrize("workers", [0, 1])
def test_an_evaluation_refuses_a_shard_whose_specs_are_not_json_and_stops_its_reader(tmp_path, workers):
    import threading

    path, encoder = madman_fixture(tmp_path)
    with h5py.File(Path(path) / "shards" / "ood-00000.h5", "a") as f:
        specs = f["specs"][()]
        specs[0] = b"{not json"
        del f["specs"]
        f.create_dataset("specs", data=specs.astype(object), dtype=h5py.string_dtype("utf-8"))
    rehash(Path(path))
    with pytest.raises(DatasetError, match=r"ood-00000.h5: specs: sample 0 is not JSON"):
        evaluate_madman(path, encoder, progress=False, workers=workers)
    assert not [t for t in threading.enumerate() if t.name == "bindscope-read-ahead"]


def test_read_ahead_keeps_order_raises_where_the_item_failed_and_stops_when_closed():
    assert list(ReadAhead(range(50), 3)) == list(range(50))
    assert list(ReadAhead([], 1)) == []

    def failing():
        yield 1
        yield 2
        raise DatasetError("shard x: broken")

    got = []
    with pytest.raises(DatasetError, match="^shard x: broken$"):
        for item in ReadAhead(failing(), 5):
            got.append(item)
    assert got == [1, 2]
    produced, closed = [], []

    def endless():
        try:
            for i in range(10**9):
                produced.append(i)
                yield i
        finally:
            closed.append(True)

    with ReadAhead(endless(), 2) as ahead:
        assert [next(ahead) for _ in range(3)] == [0, 1, 2]
    assert closed == [True] and not ahead._thread.is_alive()
    assert len(produced) <= 3 + 2 + 1  # taken, held in the queue, the one being offered
    with pytest.raises(StopIteration):
        next(ahead)
    with pytest.raises(ValueError, match="depth must be >= 1"):
        ReadAhead([1], 0)


def test_specs_are_checked_by_the_scanner_as_json_loads_would(data, tmp_path):
    """The fast check accepts what json.loads accepts (spaces around a value included) and refuses the rest with
    the same message."""
    from bindscope.format.shard import _is_bare_json

    assert _is_bare_json('{"a": [1, 2.5, "x"]}') and _is_bare_json("[]") and _is_bare_json("3")
    assert not _is_bare_json(' {"a": 1}') and not _is_bare_json('{"a": 1} ') and not _is_bare_json("{} {}")
    assert not _is_bare_json("{not json") and not _is_bare_json("") and not _is_bare_json("[1,]")
    spaced = tmp_path / "spaced"
    shutil.copytree(data, spaced)
    with h5py.File(spaced / "shards" / "train-00000.h5", "a") as f:
        specs = f["specs"][()]
        specs[1] = b"  " + specs[1] + b"\n"  # still JSON
        del f["specs"]
        f.create_dataset("specs", data=specs.astype(object), dtype=h5py.string_dtype("utf-8"))
    rehash(spaced)
    with Dataset(data) as ds, Dataset(spaced) as other:
        assert other.split("train")[1].spec == ds.split("train")[1].spec


def test_precision_and_the_batch_size_by_device_reach_the_encoder(tmp_path):
    from click.testing import CliRunner

    import bindscope
    from bindscope.cli.main import madman
    from bindscope.encoders import registry
    from bindscope.encoders.interface import default_batch_size

    path, encoder = madman_fixture(tmp_path)
    seen = []
    kind = registry.register_encoder(registry.EncoderKind(
        "opts:", lambda m: m.startswith("opts:"), lambda m, p, **o: seen.append(o) or encoder))
    try:
        bindscope.evaluate(path, bindscope.EncoderSettings("opts:a", device="cpu", precision="bf16", use_cache=False),
                           out=False, progress=False)
        result = CliRunner().invoke(madman, ["eval", path, "--model", "opts:b", "--device", "cpu", "--precision",
                                             "fp16", "--batch-size", "8", "--no-cache", "--quiet", "--out",
                                             str(tmp_path / "r.json")])
        assert result.exit_code == 0, result.output
    finally:
        registry._REGISTERED.remove(kind)
    assert [(o["precision"], o["batch_size"]) for o in seen] == [("bf16", 64), ("fp16", 8)]
    assert (default_batch_size("cpu"), default_batch_size("cuda"), default_batch_size("cuda:1")) == (64, 512, 512)


def test_open_clip_preprocessing_is_the_device_rule():
    from bindscope.encoders.interface import square_resize
    from bindscope.encoders.open_clip import OpenCLIPAdapter

    adapter = OpenCLIPAdapter.__new__(OpenCLIPAdapter)  # the preprocessing needs no weights
    adapter.device, adapter.image_size, adapter.interpolation = "cpu", 224, "bicubic"
    adapter._mean = torch.tensor([0.48, 0.46, 0.41]).view(1, 3, 1, 1)
    adapter._std = torch.tensor([0.27, 0.26, 0.28]).view(1, 3, 1, 1)
    adapter._input_dtype = torch.bfloat16
    images = np.random.default_rng(0).integers(0, 256, (3, 96, 80, 3), dtype=np.uint8)  # not square: padded
    x = square_resize(torch.from_numpy(images).permute(0, 3, 1, 2).float().div_(255.0), 224, "bicubic")
    expected = ((x.clamp_(0.0, 1.0) - adapter._mean) / adapter._std).to(torch.bfloat16)
    assert torch.equal(adapter.preprocess_images(images), expected)
