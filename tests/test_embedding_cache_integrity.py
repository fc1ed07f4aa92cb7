"""Embedding cache chunks are bound to their model and inputs: a chunk moved from another model, a vector moved
to another input, an edited chunk re-named with its old self-checksum, a flipped byte or a link is not used; the
rerun re-encodes those inputs and gives the results of an uncached run."""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
import zipfile

import numpy as np
import pytest
from click.testing import CliRunner
from eval_fakes import FakeEncoder, madman_fixture

from bindscope.encoders.embedding_cache import EmbeddingCache
from bindscope.evaluation.madman import evaluate_madman
from bindscope.io.cache_dir import CacheWarning


def _caught(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = call()
    return out, [w for w in caught if issubclass(w.category, CacheWarning)]


def _chunks(cache: EmbeddingCache) -> list:
    return sorted(cache.folder.glob("*.npz"))


def _read(chunk) -> dict:
    with np.load(chunk) as data:
        return {k: data[k].copy() for k in data.files}


def _old_self_checksum(arrays: dict) -> str:
    """The name a chunk had when it was checked against itself only: sha256(hashes, embeddings)."""
    return hashlib.sha256(arrays["hashes"].tobytes() + arrays["embeddings"].tobytes()).hexdigest()


def _swap_rows(folder, chunk, arrays, other):
    """Two inputs' vectors exchanged, then named with the old self-checksum (it holds: only its own content)."""
    arrays["embeddings"][[0, 1]] = arrays["embeddings"][[1, 0]]
    chunk.unlink()
    np.savez(folder / f"{_old_self_checksum(arrays)}.npz", **arrays)


def _swap_rows_keeping_the_name(folder, chunk, arrays, other):
    arrays["embeddings"][[0, 1]] = arrays["embeddings"][[1, 0]]
    np.savez(chunk, **arrays)


def _swap_rows_with_a_self_checksum_name(folder, chunk, arrays, other):
    arrays["embeddings"][[0, 1]] = arrays["embeddings"][[1, 0]]
    chunk.unlink()
    np.savez(folder / f"c2-{_old_self_checksum(arrays)}.npz", **arrays)


def _another_models_chunk(folder, chunk, arrays, other):
    """A sound chunk of another model (same inputs, its own vectors) copied into this model's folder."""
    chunk.unlink()
    for theirs in other:
        shutil.copy(theirs, folder / theirs.name)


def _another_models_chunk_claiming_ours(folder, chunk, arrays, other):
    chunk.unlink()
    for theirs in other:
        data = _read(theirs)
        data["model"] = arrays["model"]
        np.savez(folder / theirs.name, **data)


def _flipped_byte(folder, chunk, arrays, other):
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x01
    chunk.write_bytes(bytes(data))


def _link(folder, chunk, arrays, other):
    target = folder.parent / "elsewhere.npz"
    chunk.rename(target)
    chunk.symlink_to(target)


@pytest.mark.parametrize("poison, why", [
    (_swap_rows, "is not a chunk of this cache format"),
    (_swap_rows_keeping_the_name, "does not match its name"),
    (_swap_rows_with_a_self_checksum_name, "does not match its name"),
    (_another_models_chunk, "was written for another model"),
    (_another_models_chunk_claiming_ours, "does not match its name"),
    (_flipped_byte, "is not a sound .npz file"),
    (_link, "cannot be opened"),
])
def test_a_poisoned_chunk_is_not_used_and_the_rerun_equals_an_uncached_run(tmp_path, poison, why):
    path, enc = madman_fixture(tmp_path)
    root = tmp_path / "cache"
    uncached = evaluate_madman(path, enc, progress=False)
    first = evaluate_madman(path, enc, cache=EmbeddingCache(root, enc.cache_key), progress=False)
    assert first["metrics"] == uncached["metrics"]
    # another model on the same inputs: every text vector negated (its scores are the opposite of ours)
    other = FakeEncoder(enc.embed_dim, {t: -v for t, v in enc.text_vectors.items()}, enc.image_vectors,
                        key="another-model")
    theirs = evaluate_madman(path, other, cache=EmbeddingCache(root, other.cache_key), progress=False)
    assert theirs["metrics"] != uncached["metrics"]
    cache = EmbeddingCache(root, enc.cache_key)
    chunk, = _chunks(cache)
    arrays = _read(chunk)
    assert sorted(arrays) == ["embeddings", "hashes", "model"] and len(arrays["hashes"]) == 4 + 22
    poison(cache.folder, chunk, arrays, _chunks(EmbeddingCache(root, other.cache_key)))
    enc.text_calls.clear(), enc.image_calls.clear()
    cache = EmbeddingCache(root, enc.cache_key)
    again, caught = _caught(lambda: evaluate_madman(path, enc, cache=cache, progress=False))
    assert again["metrics"] == uncached["metrics"]
    assert len(caught) == 1 and why in str(caught[0].message) and "encoded again" in str(caught[0].message)
    assert cache.rejected >= 1
    assert again["counts"]["images_encoded"] == 4 and again["counts"]["texts_encoded"] == 22  # all re-encoded
    assert sorted(enc.image_calls) == [1, 2, 3, 5]  # the image ids of the fixture
    # the rebuilt chunk is sound: a third run reads everything from it
    enc.text_calls.clear(), enc.image_calls.clear()
    third, caught = _caught(lambda: evaluate_madman(path, enc, cache=EmbeddingCache(root, enc.cache_key),
                                                    progress=False))
    assert caught == [] and enc.text_calls == [] and enc.image_calls == []
    assert third["metrics"] == uncached["metrics"] and third["counts"]["image_cache_hits"] == 4


def test_entries_are_keyed_by_the_inputs_the_reader_hashes(tmp_path):
    """The same image bytes under another shape, or another text, is another entry."""
    from bindscope.encoders.embedding_cache import image_hash, text_hash

    image = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    assert image_hash(image) != image_hash(image.reshape(1, 4, 3)) and image_hash(image) == image_hash(image.copy())
    assert text_hash("a red 7") != text_hash("a red 7 ") and len(text_hash("x")) == 32
    cache = EmbeddingCache(tmp_path, "model-a", dim=3)
    cache.put(text_hash("a red 7"), np.array([1, 0, 0], np.float32))
    cache.flush()
    chunk, = _chunks(cache)
    assert chunk.name == cache.chunk_name(np.frombuffer(text_hash("a red 7"), np.uint8).reshape(1, 32),
                                          np.array([[1, 0, 0]], np.float32))
    assert EmbeddingCache(tmp_path, "model-a", dim=3).get(text_hash("a red 7")).tolist() == [1, 0, 0]
    assert EmbeddingCache(tmp_path, "model-a", dim=3).get(text_hash("a red 7 ")) is None
    assert EmbeddingCache(tmp_path, "model-b", dim=3).get(text_hash("a red 7")) is None
    # a header claiming a huge array (in a well-formed archive, its CRCs right) is refused before anything that
    # size is allocated
    with zipfile.ZipFile(chunk) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    header, huge = b"'shape': (1, 3), }", b"'shape': (99999999999, 3), }"
    npy = members["embeddings.npy"]
    at = npy.index(header)
    assert npy[at + len(header):at + len(huge)] == b" " * (len(huge) - len(header))  # the header's padding
    members["embeddings.npy"] = npy[:at] + huge + npy[at + len(huge):]
    with zipfile.ZipFile(chunk, "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    fresh = EmbeddingCache(tmp_path, "model-a", dim=3)
    got, caught = _caught(lambda: fresh.get(text_hash("a red 7")))
    assert got is None and fresh.rejected == 1 and len(caught) == 1
    assert "embeddings.npy: its header claims more data than it holds" in str(caught[0].message)


def test_comco_tor_with_a_real_text_model_after_poisoning_equals_an_uncached_run(tmp_path):
    from bindscope.cli.main import comco

    base = ["eval", "--tasks", "tor", "--objects", "3", "--vocab", "simco18", "-n", "12", "--model",
            "sentence-transformers/all-MiniLM-L6-v2", "--device", "cpu", "--quiet", "--overwrite"]
    cache_dir = tmp_path / "emb"

    def run(name, *extra):
        result = CliRunner().invoke(comco, base + ["--out", str(tmp_path / name), *extra], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return json.loads((tmp_path / name).read_text())

    uncached = run("none.json", "--no-cache")
    first = run("first.json", "--cache-dir", str(cache_dir))
    assert first["metrics"] == uncached["metrics"] and first["counts"]["texts_encoded"] > 12
    folder, = [p for p in cache_dir.iterdir() if p.is_dir()]
    chunk, = folder.glob("*.npz")
    arrays = _read(chunk)
    arrays["embeddings"] = arrays["embeddings"][::-1].copy()  # every text gets another text's vector
    chunk.unlink()
    np.savez(folder / f"{_old_self_checksum(arrays)}.npz", **arrays)
    with pytest.warns(CacheWarning, match="1 chunk.s. failed their checks .* is not a chunk of this cache format"):
        again = run("again.json", "--cache-dir", str(cache_dir))
    assert again["metrics"] == uncached["metrics"]
    assert again["counts"]["texts_encoded"] == first["counts"]["texts_encoded"]
    third = run("third.json", "--cache-dir", str(cache_dir))
    assert third["metrics"] == uncached["metrics"] and third["counts"]["texts_encoded"] == 0
