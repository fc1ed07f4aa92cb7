"""Hard-negative captions: the caption's nouns shuffled among themselves and its adjectives among themselves.

The recipe is NegCLIP's / ARO's ``shuffle_nouns_and_adj`` perturbation (Yuksekgonul et al., ICLR 2023, "When and
why vision-language models behave like bags-of-words, and what to do about it", section 3 and the released
``dataset_zoo/perturbations.py``), which the LABCLIP paper (Koishigarina, Uselis, Oh, "CLIP behaves like a
bag-of-words model cross-modally but not uni-modally", see docs/alignment.md) uses for its COCO negatives: the
positions of the nouns and of the adjectives stay where they are; the words occupying them move. ``"a red car
next to a white dog"`` may become ``"a white dog next to a red car"``.

The caption is split into *words* (runs of letters and digits, joined inside a word by ``'`` ``’`` or ``-``:
``"don't"``, ``"t-shirt"``) and the text between them (spaces, punctuation), which stays in place byte for byte.
A *tagger* gives each word a universal POS tag (https://universaldependencies.org/u/pos/): ``"NOUN"`` and
``"ADJ"`` words are shuffled, every other tag stays. A word tagged :data:`CONTINUES` belongs to the unit of the
word before it: a multi-word name (``"traffic light"``, ``"hair drier"``) moves as one unit, with the text
between its words. Words move as written (their case too), so the negative holds exactly the caption's
multiset of words and the same punctuation; nothing is lower-cased or re-tokenised.

Taggers (``tagger(words: list[str]) -> list[str]``, one tag per word):

* :func:`lexicon_tagger` (nouns and adjectives from known vocabularies: the object names and attribute words of
  bindscope's own datasets, the COCO mention table for COCO captions);
* :func:`spacy_tagger` (spaCy's English pipeline, the published recipe; an optional dependency:
  ``pip install 'bindscope[text]' && python -m spacy download en_core_web_sm``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache

import numpy as np

from bindscope.errors import BadInput

#: Tag of a word that continues the unit (multi-word name) of the word before it.
CONTINUES = "+"
#: The tags whose units are shuffled, each among its own kind.
SHUFFLED_TAGS = ("NOUN", "ADJ")
#: Random permutations tried before falling back to a swap of two different units (the result is then still
#: seeded and still different from the caption).
TRIES = 32
#: Adjectives of colour, size, age and material that natural captions use (COCO: "a red car", "a small dog"): the
#: lexicon tagger's adjectives for a dataset whose own vocabulary has none (a project choice, see
#: docs/alignment.md; the published recipe tags adjectives with spaCy instead).
COMMON_ADJECTIVES = (
    "black", "white", "red", "green", "blue", "yellow", "orange", "brown", "pink", "purple", "gray", "grey",
    "silver", "golden", "gold", "dark", "bright", "colorful", "colourful",
    "big", "small", "large", "little", "tiny", "huge", "giant", "tall", "short", "long", "young", "old",
    "wooden", "metal", "plastic",
)
SPACY_INSTALL = "pip install 'bindscope[text]' && python -m spacy download en_core_web_sm"

Tagger = Callable[[list[str]], list[str]]

_WORD = re.compile(r"[^\W_]+(?:['’\-][^\W_]+)*")


def split_words(caption: str) -> list[tuple[int, int]]:
    """The ``(start, end)`` character spans of the words of ``caption`` (see the module docstring), in order."""
    return [m.span() for m in _WORD.finditer(caption)]


def _vocabulary(param: str, names) -> dict[tuple[str, ...], None]:
    if names is None:
        return {}
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise BadInput(f"{param} must be a list of words or phrases, got {names!r}", param=param)
    out = {}
    for name in names:
        if not isinstance(name, str):
            raise BadInput(f"{param} must hold strings, got {name!r}", param=param)
        key = tuple(w.lower() for w in _WORD.findall(name))
        if key:
            out[key] = None
    return out


def lexicon_tagger(nouns: Iterable[str] = (), adjectives: Iterable[str] = ()) -> Tagger:
    """A tagger from known vocabularies: a word sequence equal (case-insensitively) to one of ``nouns`` is
    ``"NOUN"``, to one of ``adjectives`` ``"ADJ"``; the longest name starting at a word wins, its later words
    are tagged :data:`CONTINUES` (``"hair drier"`` -> ``["NOUN", "+"]``); every other word is ``"X"``.
    A name in both lists counts as a noun.

    Args:
        nouns, adjectives: words or phrases (e.g. a dataset's object names and attribute words; list every form
            that should match: ``"dog"`` and ``"dogs"``).

    Raises:
        BadInput: a vocabulary that is not a list of strings.
    """
    table = {key: "ADJ" for key in _vocabulary("adjectives", adjectives)}
    table.update({key: "NOUN" for key in _vocabulary("nouns", nouns)})
    longest = max((len(k) for k in table), default=0)

    def tag(words: list[str]) -> list[str]:
        low = [w.lower() for w in words]
        tags, i = [], 0
        while i < len(low):
            for n in range(min(longest, len(low) - i), 0, -1):
                kind = table.get(tuple(low[i:i + n]))
                if kind is not None:
                    tags += [kind] + [CONTINUES] * (n - 1)
                    i += n
                    break
            else:
                tags.append("X")
                i += 1
        return tags

    return tag


@lru_cache(maxsize=4)
def spacy_pipeline(model: str = "en_core_web_sm"):
    """spaCy's pipeline ``model`` without parser, entity recogniser and lemmatiser (loaded once per process).

    Raises:
        BadInput (``param="tagger"``): spaCy is not installed (the message gives :data:`SPACY_INSTALL`), or it is
            and the model is not (the message gives ``python -m spacy download <model>``).
    """
    try:
        import spacy
    except ImportError:
        raise BadInput(f"the spaCy tagger needs spaCy and its English model: {SPACY_INSTALL}",
                       param="tagger") from None
    try:
        return spacy.load(model, disable=["parser", "ner", "lemmatizer"])
    except OSError:
        raise BadInput(f"spaCy model {model!r} is not installed: python -m spacy download {model}",
                       param="tagger") from None


PTB_NOUNS = ("NN", "NNS", "NNP", "NNPS")
PTB_ADJECTIVES = ("JJ", "JJR", "JJS")


def _ptb_tag(tag: str, pos: str) -> str:
    if tag in PTB_NOUNS:
        return "NOUN"
    if tag in PTB_ADJECTIVES:
        return "ADJ"
    return "X" if pos in SHUFFLED_TAGS else pos


def spacy_tagger(model: str = "en_core_web_sm") -> Tagger:
    """A tagger that runs spaCy's pipeline ``model`` on the given words (our word split is kept: spaCy sees a
    ``Doc`` of exactly those words). As ARO's ``shuffle_nouns_and_adj`` does, a word is ``"NOUN"`` when its Penn
    Treebank tag (``token.tag_``) is NN, NNS, NNP or NNPS (proper nouns included) and ``"ADJ"`` when it is JJ,
    JJR or JJS; any other word gets its universal tag (``token.pos_``), or ``"X"`` where that would be NOUN or
    ADJ. Every word is its own unit, as in the published recipe.

    Raises:
        BadInput: spaCy is not installed (the message gives ``pip install 'bindscope[text]' && python -m spacy
            download en_core_web_sm``) or ``model`` is not installed.
    """
    nlp = spacy_pipeline(model)

    def tag(words: list[str]) -> list[str]:
        from spacy.tokens import Doc

        return [_ptb_tag(token.tag_, token.pos_) for token in nlp(Doc(nlp.vocab, words=list(words)))] \
            if words else []

    return tag


ARO_CAPTION_MARKS = re.compile(r'[.!"()*#:;~]')


def aro_caption(caption: str, max_words: int = 40) -> str:
    """ARO's caption normalisation (``pre_caption`` of its ``dataset_zoo/retrieval.py``), which the LABCLIP authors
    apply to COCO captions before making their negatives: lower case; each of ``. ! " ( ) * # : ; ~`` replaced by a
    space; every run of two or more whitespace characters made one space; surrounding spaces and newlines removed;
    at most ``max_words`` space-separated words. Commas and apostrophes stay."""
    text = re.sub(r"\s{2,}", " ", ARO_CAPTION_MARKS.sub(" ", caption.lower())).rstrip("\n").strip(" ")
    words = text.split(" ")
    return " ".join(words[:max_words]) if len(words) > max_words else text


def _units(caption: str, tagger: Tagger) -> list[tuple[int, int, str]]:
    """``(start, end, tag)`` of each unit: a word, or a multi-word name with the text between its words."""
    spans = split_words(caption)
    tags = list(tagger([caption[a:b] for a, b in spans]))
    if len(tags) != len(spans) or not all(isinstance(t, str) for t in tags):
        raise BadInput(f"tagger must return one tag (a string) per word: {len(spans)} words, got {tags!r}",
                       param="tagger")
    units: list[tuple[int, int, str]] = []
    for (a, b), t in zip(spans, tags):
        if t == CONTINUES and units:
            units[-1] = (units[-1][0], b, units[-1][2])
        else:
            units.append((a, b, t))
    return units


def _rng(seed) -> np.random.Generator:
    values = [seed] if not isinstance(seed, Sequence) or isinstance(seed, str) else list(seed)
    if not values or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0
                             for v in values):
        raise BadInput(f"seed must be a non-negative integer or a non-empty sequence of them, got {seed!r}",
                       param="seed")
    return np.random.default_rng([int(v) for v in values] if isinstance(seed, Sequence) else int(seed))


def shuffled_negative(caption: str, seed, *, tagger: Tagger | None = None, nouns: Iterable[str] | None = None,
                      adjectives: Iterable[str] | None = None) -> str | None:
    """The caption with its nouns shuffled among themselves and its adjectives among themselves (NegCLIP's
    ``shuffle_nouns_and_adj``; see the module docstring), or None when no different caption can be made
    (fewer than two nouns and fewer than two adjectives, or all nouns alike and all adjectives alike; words
    that differ only in case are alike).

    Each kind is permuted with ``numpy.random.default_rng(seed)`` (nouns first, then adjectives); up to
    :data:`TRIES` permutations are drawn until the caption changes in more than case, then the first two
    different units of the first kind that has them are swapped. The result is a function of ``caption``,
    ``seed`` and the tagger only.

    Args:
        caption: the caption (any text).
        seed: a non-negative int or a non-empty sequence of them (e.g. ``(run_seed, sample_index)``).
        tagger: ``tagger(words) -> tags`` (universal POS tags, :data:`CONTINUES` for a multi-word name's later
            words). Default: :func:`lexicon_tagger` of ``nouns`` / ``adjectives`` when either is given, else
            :func:`spacy_tagger`.
        nouns, adjectives: vocabularies for the lexicon tagger (not together with ``tagger``).

    Returns:
        a string with the same words (as a multiset, case kept) and the same text between them, different from
        ``caption``; or None.

    Raises:
        BadInput: a bad ``seed``, ``caption`` or vocabulary; ``tagger`` together with ``nouns`` /
            ``adjectives``; a tagger returning the wrong number of tags; spaCy missing (default tagger).
    """
    if not isinstance(caption, str):
        raise BadInput(f"caption must be a string, got {caption!r}", param="caption")
    rng = _rng(seed)
    if tagger is not None and (nouns is not None or adjectives is not None):
        raise BadInput("tagger: give a tagger or nouns/adjectives for the lexicon tagger, not both", param="tagger")
    if tagger is None:
        tagger = lexicon_tagger(nouns or (), adjectives or ()) if (nouns is not None or adjectives is not None) \
            else spacy_tagger()
    units = _units(caption, tagger)
    texts = [caption[a:b] for a, b, _ in units]
    alike = [t.casefold() for t in texts]  # units differing only in case count as the same word
    kinds = [[i for i, u in enumerate(units) if u[2] == kind] for kind in SHUFFLED_TAGS]
    movable = [slots for slots in kinds if len({alike[i] for i in slots}) > 1]
    if not movable:
        return None
    for _ in range(TRIES):
        order = list(range(len(units)))
        for slots in kinds:
            for slot, source in zip(slots, rng.permutation(len(slots))):
                order[slot] = slots[source]
        if any(alike[order[i]] != alike[i] for i in range(len(units))):
            break
    else:
        order = list(range(len(units)))
        slots = movable[0]
        other = next(i for i in slots if alike[i] != alike[slots[0]])
        order[slots[0]], order[other] = other, slots[0]
    pieces, at = [], 0
    for (a, b, _), source in zip(units, order):
        pieces += [caption[at:a], texts[source]]
        at = b
    return "".join(pieces) + caption[at:]
