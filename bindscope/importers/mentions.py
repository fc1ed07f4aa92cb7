"""Find the COCO categories a caption mentions, and in which order.

The table ``bindscope/assets/coco_mentions.json`` lists, for each of the 80 COCO instance categories, the lower-case
words and phrases (singular and plural, common synonyms: "man"/"woman"/"people" -> person, "tv"/"television" ->
tv, "sofa" -> couch) that count as a mention. It is a project choice, documented in docs/real-data.md; COCO itself
defines no such table. A category missing from the table (a custom instances file) is matched by its own name and
that name + "s".

Matching: the caption is lower-cased and split into words (``[a-z]+``, apostrophes dropped); at each word the
longest phrase of the table that starts there wins and its words are consumed ("hot dog" is a hot dog, never a
dog; "teddy bear" never a bear). The mention position of a category is the rank (1, 2, ...) of its first mention
among the categories that are both mentioned and annotated in the image; mentions of categories that are not
annotated in the image are *unmatched* (counted, given no position).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

_WORD = re.compile(r"[a-z]+")


@lru_cache(maxsize=1)
def mention_table() -> dict[str, list[str]]:
    """COCO category name -> the words/phrases that mention it (from ``assets/coco_mentions.json``)."""
    text = resources.files("bindscope.assets").joinpath("coco_mentions.json").read_text(encoding="utf-8")
    return json.loads(text)["categories"]


def words(text: str) -> list[str]:
    """Lower-case words of ``text``: runs of a-z (``"A man's dog."`` -> ``["a", "man", "s", "dog"]``)."""
    return _WORD.findall(text.lower())


@dataclass
class MentionFinder:
    """Phrase matcher for a set of category names (see the module docstring).

    Args:
        categories: the category names to look for (e.g. every category of an instances file).
        table: category -> words/phrases; default :func:`mention_table`.
    """

    categories: list[str]
    table: dict[str, list[str]] | None = None
    _phrases: dict[tuple[str, ...], str] = field(init=False, repr=False)
    _longest: int = field(init=False, repr=False)

    def __post_init__(self):
        table = self.table if self.table is not None else mention_table()
        self._phrases = {}
        for category in self.categories:
            forms = table.get(category) or [category, category + "s"]
            for form in forms:
                self._phrases.setdefault(tuple(words(form)), category)
        self._longest = max((len(k) for k in self._phrases), default=1)

    def find(self, text: str) -> list[tuple[str, str]]:
        """Every mention in ``text`` in reading order: ``[(category, matched phrase), ...]``."""
        tokens = words(text)
        out, i = [], 0
        while i < len(tokens):
            for n in range(min(self._longest, len(tokens) - i), 0, -1):
                category = self._phrases.get(tuple(tokens[i:i + n]))
                if category is not None:
                    out.append((category, " ".join(tokens[i:i + n])))
                    i += n
                    break
            else:
                i += 1
        return out

    def positions(self, text: str, annotated: set[str]) -> tuple[dict[str, int], dict[str, str], list[list[str]]]:
        """Mention positions of the ``annotated`` categories in ``text``.

        Returns:
            ``(positions, phrases, unmatched)``: category -> 1-based rank of its first mention among the annotated
            categories mentioned; category -> the phrase of that first mention; and ``[[category, phrase], ...]``
            for every mention of a category not in ``annotated``, in reading order.
        """
        positions: dict[str, int] = {}
        phrases: dict[str, str] = {}
        unmatched: list[list[str]] = []
        for category, phrase in self.find(text):
            if category not in annotated:
                unmatched.append([category, phrase])
            elif category not in positions:
                positions[category] = len(positions) + 1
                phrases[category] = phrase
        return positions, phrases, unmatched
