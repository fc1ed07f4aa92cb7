"""The objects a caption names, as spaCy's noun chunks (an optional dependency: ``pip install 'bindscope[text]' &&
python -m spacy download en_core_web_sm``).

A noun chunk is a base noun phrase found by spaCy's dependency parser ("a large brown dog" in "a large brown dog on
a sofa"); its object name is the lower-cased lemma of the chunk's root ("dog"). Chunks without letters (a number, a
pronoun such as "it") name nothing and are left out. The ComCO paper extracts a caption's objects with a language
model; noun chunks are the offline stand-in, and they also return scene words ("a photo", "the view") that a
detector then rarely finds.
"""

from __future__ import annotations

import re
from functools import lru_cache

from bindscope.errors import BadInput
from bindscope.text.negatives import SPACY_INSTALL

PRONOUNS = frozenset({"it", "they", "them", "this", "that", "these", "those", "he", "she", "we", "you", "i", "one",
                      "him", "her", "us", "me", "itself", "something", "someone", "what", "which", "who"})


@lru_cache(maxsize=4)
def spacy_parser(model: str = "en_core_web_sm"):
    """spaCy's pipeline ``model`` with its parser (noun chunks need it), without the entity recogniser (loaded once
    per process).

    Raises:
        BadInput (``param="caption_objects"``): spaCy is not installed, or it is and the model is not (the message
            says how to install them).
    """
    try:
        import spacy
    except ImportError:
        raise BadInput(f"caption_objects 'spacy' needs spaCy and its English model: {SPACY_INSTALL}",
                       param="caption_objects") from None
    try:
        return spacy.load(model, disable=["ner"])
    except OSError:
        raise BadInput(f"caption_objects 'spacy': spaCy model {model!r} is not installed: python -m spacy download "
                       f"{model}", param="caption_objects") from None


def noun_chunks(nlp, caption: str) -> list[tuple[str, str]]:
    """``[(object name, chunk text), ...]`` of ``caption`` in reading order, each name once (its first chunk).

    Args:
        nlp: a spaCy pipeline with a parser (:func:`spacy_parser`), or any callable returning a spaCy ``Doc`` whose
            ``noun_chunks`` work.
    """
    out: dict[str, str] = {}
    for chunk in nlp(caption).noun_chunks:
        root = chunk.root
        name = (root.lemma_ or root.text).lower().strip()
        if re.search(r"[a-z]", name) and name not in PRONOUNS:
            out.setdefault(name, chunk.text)
    return list(out.items())
