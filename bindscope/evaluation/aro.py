"""ARO's own macro averages of VG-Relation and VG-Attribution, as its released code defines them, beside bindscope's.

Source: the repository ``mertyg/vision-language-models-are-bows`` (Yuksekgonul et al., ICLR 2023) at commit
:data:`ARO_COMMIT`. Its ``dataset_zoo/aro_datasets.py`` scores an item with ``numpy.argmax`` over the scores of
``[false_caption, true_caption]``: a tie picks the false caption, so a tie is wrong there as in bindscope, and the
per-group accuracies (``groups`` of a bench result) are the same. The averages differ:

- **VG-Relation**: ``VG_Relation.evaluate_scores`` gives one accuracy per relation, for every relation; the notebook
  ``notebooks/Replicate ARO! VG-Relation, VG-Attribution.ipynb`` then drops the relations of its list ``symmetric``
  (157 names, :data:`bindscope/assets/aro_excluded_relations.json <excluded_relations>`; not all of them are
  symmetric relations, e.g. ``bigger than``) and prints the unweighted mean of the other relations' accuracies as
  "VG-Relation Macro Accuracy".
- **VG-Attribution**: ``VG_Attribution.evaluate_scores`` keeps only the attribute pairs with at least
  :data:`MIN_ATTRIBUTE_ITEMS` items (``if attr_mask.sum() < 25: continue``); the notebook prints the unweighted mean
  of the kept pairs' accuracies as "VG-Attribution Macro Accuracy".

bindscope's ``group_average.macro`` is the unweighted mean over every group; :func:`aro_macro` gives ARO's, with the
groups it averages and each group it leaves out with the reason. The order subsets report one accuracy (ARO's
"Precision@1"), the same in both.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

ARO_REPOSITORY = "mertyg/vision-language-models-are-bows"
ARO_COMMIT = "81fdd20dc5b6f434aa5a4a971717bc80d1cedb0d"
MIN_ATTRIBUTE_ITEMS = 25
DEFINITIONS = {
    "vg_relation": "ARO's definition: unweighted mean of the per-relation accuracies, leaving out the relations of "
                   "the notebook's list 'symmetric' (notebooks/Replicate ARO! VG-Relation, VG-Attribution.ipynb)",
    "vg_attribution": "ARO's definition: unweighted mean of the per-attribute-pair accuracies of the pairs with at "
                      f"least {MIN_ATTRIBUTE_ITEMS} items (dataset_zoo/aro_datasets.py, "
                      "VG_Attribution.evaluate_scores)",
}


@cache
def excluded_relations() -> frozenset[str]:
    """The relation names ARO's VG-Relation macro leaves out (``bindscope/assets/aro_excluded_relations.json``)."""
    text = resources.files("bindscope.assets").joinpath("aro_excluded_relations.json").read_text(encoding="utf-8")
    return frozenset(json.loads(text)["relations"])


def aro_macro(subset: str, groups: dict[str, dict]) -> dict | None:
    """ARO's macro average of one VG subset's groups (see the module docstring).

    Args:
        subset: ``"vg_relation"`` or ``"vg_attribution"`` (any other subset: None).
        groups: group name -> proportion (``correct``, ``total``, ``accuracy``), as in a bench result.

    Returns:
        ``{"macro": mean accuracy of the kept groups in [0, 1] (None when none is kept), "over": [kept groups],
        "excluded": {group: reason}, "definition": text}``, or None for a subset without ARO groups.
    """
    if subset not in DEFINITIONS:
        return None
    kept, excluded = [], {}
    for name, p in groups.items():
        if subset == "vg_relation" and name in excluded_relations():
            excluded[name] = "in ARO's list 'symmetric'"
        elif subset == "vg_attribution" and p["total"] < MIN_ATTRIBUTE_ITEMS:
            excluded[name] = f"{p['total']} items, fewer than {MIN_ATTRIBUTE_ITEMS}"
        elif p["total"]:
            kept.append(name)
    macro = sum(groups[g]["accuracy"] for g in kept) / len(kept) if kept else None
    return {"macro": macro, "over": kept, "excluded": excluded, "definition": DEFINITIONS[subset]}


TAGGERS = ("spacy", "lexicon")


class OrderTagger:
    """The noun/adjective tagger of the order perturbations (``tagger(words) -> [is noun or adjective]``), resolved
    at its first call, so that reading only the VG subsets never loads spaCy.

    ``name``: ``"spacy"`` (:func:`bindscope.text.negatives.spacy_tagger`, Penn Treebank tags NN* and JJ* as ARO's
    ``TextShuffler`` uses them; an error when spaCy or ``en_core_web_sm`` is missing), ``"lexicon"`` (the word-list
    tagger of ``labclip fit``, :func:`bindscope.text.negatives.lexicon_tagger`: nouns = every phrase of the COCO
    mention table, adjectives = :data:`bindscope.text.negatives.COMMON_ADJECTIVES`; a multi-word noun's words all
    count as nouns), or None: spaCy where it and its model are installed, else the word-list tagger, and
    :attr:`fallback` says why. After the first call :attr:`label` names the tagger used.

    Raises:
        BadInput: an unknown name (at construction); ``"spacy"`` without spaCy or its model (at the first call).
    """

    def __init__(self, name: str | None = None):
        from bindscope.errors import BadInput

        if name is not None and name not in TAGGERS:
            raise BadInput(f"tagger {name!r} is not allowed; allowed: {', '.join(TAGGERS)}", param="tagger")
        self.requested = name
        self.label: str | None = None
        self.fallback: str | None = None
        self._tag = None

    def _resolve(self):
        from bindscope.errors import BadInput
        from bindscope.text.negatives import spacy_tagger

        if self.requested != "lexicon":
            try:
                self.label = "spacy"
                return spacy_tagger()
            except BadInput as exc:
                if self.requested == "spacy":
                    raise BadInput(f"aro coco_order/flickr_order need a part-of-speech tagger; {exc} (or choose the "
                                   "subsets vg_relation,vg_attribution, or tagger='lexicon')", param="tagger") from None
                self.fallback = f"{exc}; the word-list tagger was used instead"
        self.label = "lexicon"
        return _word_list_tagger()

    def __call__(self, words: list[str]) -> list[bool]:
        from bindscope.text.negatives import CONTINUES, SHUFFLED_TAGS

        if self._tag is None:
            self._tag = self._resolve()
        flags: list[bool] = []
        for tag in self._tag(list(words)):
            flags.append(flags[-1] if tag == CONTINUES and flags else tag in SHUFFLED_TAGS)
        return flags


def _word_list_tagger():
    from bindscope.importers.mentions import mention_table
    from bindscope.text.negatives import COMMON_ADJECTIVES, lexicon_tagger

    nouns = sorted({phrase for phrases in mention_table().values() for phrase in phrases})
    return lexicon_tagger(nouns, sorted(set(COMMON_ADJECTIVES) - set(nouns)))
