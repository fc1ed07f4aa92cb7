"""Shuffled-noun/adjective negatives (bindscope.text.negatives): hand-checked outputs for fixed seeds, the word
multiset and the text between words kept, never the caption itself, None when no different caption exists,
multi-word names moving as one unit, and the spaCy-missing message."""

from __future__ import annotations

import builtins
from collections import Counter

import numpy as np
import pytest

from bindscope.errors import BadInput
from bindscope.text import negatives
from bindscope.text.negatives import CONTINUES, lexicon_tagger, shuffled_negative, spacy_tagger, split_words

NOUNS = ["car", "dog", "traffic light", "hair drier"]
ADJECTIVES = ["red", "white", "big"]
CAPTION = "A red car next to a white dog, under a big traffic light."


def _words(text):
    return Counter(text[a:b] for a, b in split_words(text))


def test_hand_checked_outputs_for_fixed_seeds():
    tagger = lexicon_tagger(NOUNS, ADJECTIVES)
    # seed 0: default_rng(0) draws the noun permutation [2, 0, 1] (car, dog, traffic light -> traffic light,
    # car, dog) and then the adjective permutation [2, 1, 0] (red, white, big -> big, white, red)
    assert [list(p) for p in (lambda r: (r.permutation(3), r.permutation(3)))(np.random.default_rng(0))] == \
        [[2, 0, 1], [2, 1, 0]]
    assert shuffled_negative(CAPTION, 0, tagger=tagger) == "A big traffic light next to a white car, under a red dog."
    # seed 1: nouns [0, 1, 2] (unchanged), adjectives [2, 0, 1] (big, red, white)
    assert shuffled_negative(CAPTION, 1, tagger=tagger) == "A big car next to a red dog, under a white traffic light."
    # a sequence seed, and the lexicon tagger built from nouns= / adjectives=
    assert shuffled_negative(CAPTION, (7, 3), nouns=NOUNS, adjectives=ADJECTIVES) == \
        "A big car next to a red dog, under a white traffic light."


@pytest.mark.parametrize("seed", range(40))
def test_words_punctuation_kept_and_caption_changed(seed):
    caption = "Two big dogs, a white Cat and one red hair drier; the cat's bowl is red."
    tagger = lexicon_tagger(["dogs", "cat", "hair drier", "bowl"], ["big", "white", "red"])
    out = shuffled_negative(caption, seed, tagger=tagger)
    assert out is not None and out.casefold() != caption.casefold()
    assert _words(out) == _words(caption)
    # the text between words is unchanged, in place
    gaps = lambda s: [s[b:a] for (_, b), (a, _) in zip(split_words(s), split_words(s)[1:])]  # noqa: E731
    assert [g for g in gaps(out) if g != " "] == [g for g in gaps(caption) if g != " "]
    assert out.endswith(".") and out.startswith("Two ")  # "Two" is no noun nor adjective: it stays first
    assert shuffled_negative(caption, seed, tagger=tagger) == out  # deterministic for a seed


def test_multi_word_names_move_as_one_unit():
    tagger = lexicon_tagger(NOUNS, ())
    assert tagger(["A", "hair", "drier", "and", "a", "Traffic", "light", "light"]) == \
        ["X", "NOUN", CONTINUES, "X", "X", "NOUN", CONTINUES, "X"]  # "light" alone is no name
    caption = "a hair  drier beside a traffic light"
    assert shuffled_negative(caption, 0, tagger=tagger) == "a traffic light beside a hair  drier"


def test_none_when_no_different_caption_exists():
    tagger = lexicon_tagger(NOUNS, ADJECTIVES)
    assert shuffled_negative("a dog on the grass", 0, tagger=tagger) is None  # one noun, no adjective
    assert shuffled_negative("a red dog", 0, tagger=tagger) is None  # one of each
    assert shuffled_negative("a dog and a Dog and a DOG", 3, tagger=tagger) is None  # alike but for case
    assert shuffled_negative("a red dog and a red dog", 3, tagger=tagger) is None
    assert shuffled_negative("", 0, tagger=tagger) is None


def test_only_one_kind_can_move():
    tagger = lexicon_tagger(NOUNS, ADJECTIVES)
    # the nouns are alike; only the adjectives can change the caption, so every seed swaps them
    outs = {shuffled_negative("a red dog and a white dog", s, tagger=tagger) for s in range(20)}
    assert outs == {"a white dog and a red dog"}


def test_fallback_swap_when_permutations_keep_the_caption(monkeypatch):
    monkeypatch.setattr(negatives, "TRIES", 0)
    out = shuffled_negative("a dog, a dog and a car", 0, tagger=lexicon_tagger(NOUNS, ()))
    assert out == "a car, a dog and a dog"  # the first two different nouns swapped


def test_bad_input():
    tagger = lexicon_tagger(NOUNS, ADJECTIVES)
    for seed in (-1, 1.5, True, "3", [], [1, -2]):
        with pytest.raises(BadInput, match="seed"):
            shuffled_negative(CAPTION, seed, tagger=tagger)
    with pytest.raises(BadInput, match="not both"):
        shuffled_negative(CAPTION, 0, tagger=tagger, nouns=["dog"])
    with pytest.raises(BadInput, match="one tag"):
        shuffled_negative(CAPTION, 0, tagger=lambda words: ["NOUN"])
    with pytest.raises(BadInput, match="nouns"):
        lexicon_tagger("dog")


def test_spacy_missing_names_the_install_command(monkeypatch):
    real_import = builtins.__import__

    def no_spacy(name, *args, **kwargs):
        if name == "spacy" or name.startswith("spacy."):
            raise ImportError("No module named 'spacy'")
        return real_import(name, *args, **kwargs)

    negatives.spacy_pipeline.cache_clear()
    monkeypatch.setattr(builtins, "__import__", no_spacy)
    expected = "pip install 'bindscope\\[text\\]' && python -m spacy download en_core_web_sm"
    with pytest.raises(BadInput, match=expected) as info:
        spacy_tagger()
    assert info.value.param == "tagger"
    with pytest.raises(BadInput, match=expected):
        shuffled_negative(CAPTION, 0)  # the default tagger is spaCy's
    negatives.spacy_pipeline.cache_clear()


def test_penn_treebank_tags_as_aro_reads_them():
    from bindscope.text.negatives import _ptb_tag

    assert [_ptb_tag(t, p) for t, p in (("NN", "NOUN"), ("NNPS", "PROPN"), ("JJR", "ADJ"), ("VBZ", "VERB"),
                                         ("CD", "NOUN"), ("DT", "DET"))] == ["NOUN", "NOUN", "ADJ", "VERB", "X", "DET"]
