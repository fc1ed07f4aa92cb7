"""Find the COCO categories a caption mentions, and in which order.

The table ``bindscope/assets/coco_mentions.json`` lists, for each of the 80 COCO instance categories, the lower-case
words and phrases (singular and plural, common synonyms: "man"/"woman"/"people" -> person, "tv"/"television" ->
tv, "sofa" -> couch) that count as a mention. It is a project choice, documented in docs/real-data.md; COCO itself
defines no such table. A category missing from the table (a custom instances file) is matched by its own name and
that name + "s".

Matching: the caption is lower-cased and split into words (``[a-z]+``, apostrophes dropped); at each word the
longest phrase of the table that starts there wins and its words are consumed ("hot dog" is a hot dog, never a
dog; "teddy bear" never a bear). The matcher takes time linear in the caption's words and the phrases' words
together (an Aho-Corasick automaton over the reversed phrases gives, for every word, the longest phrase starting
there), so a caption of a megabyte or a category name of thousands of words costs no more than reading them. The mention position of a category is the rank (1, 2, ...) of its first mention
among the categories that are both mentioned and annotated in the image; mentions of categories that are not
annotated in the image are *unmatched* (counted, given no position).
"""

from __future__ import annotations

import json
import re
from collections import deque
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
    _next: list[dict[str, int]] = field(init=False, repr=False)  # trie of the reversed phrases: node -> word -> node
    _fail: list[int] = field(init=False, repr=False)  # node -> the longest proper suffix of its words that is a node
    _best: list[int] = field(init=False, repr=False)  # node -> its longest suffix that is a whole phrase (0: none)
    _depth: list[int] = field(init=False, repr=False)  # node -> its number of words
    _category: dict[int, str] = field(init=False, repr=False)  # node of a whole phrase -> its category

    def __post_init__(self):
        table = self.table if self.table is not None else mention_table()
        self._phrases = {}
        for category in self.categories:
            forms = table.get(category) or [category, category + "s"]
            for form in forms:
                self._phrases.setdefault(tuple(words(form)), category)
        self._next, self._depth, self._category = [{}], [0], {}
        for phrase, category in self._phrases.items():
            if not phrase:  # a form without letters mentions nothing
                continue
            node = 0
            for word in reversed(phrase):
                child = self._next[node].get(word)
                if child is None:
                    child = len(self._next)
                    self._next[node][word] = child
                    self._next.append({})
                    self._depth.append(self._depth[node] + 1)
                node = child
            self._category[node] = category
        self._fail, self._best = [0] * len(self._next), [0] * len(self._next)
        queue = deque([0])
        while queue:  # breadth first: a node's failure link is shallower, so it is done before the node
            node = queue.popleft()
            for word, child in self._next[node].items():
                link = self._fail[node]
                while link and word not in self._next[link]:
                    link = self._fail[link]
                target = self._next[link].get(word, 0) if node else 0
                self._fail[child] = target
                self._best[child] = child if child in self._category else self._best[target]
                queue.append(child)

    def _longest_from(self, tokens: list[str]) -> list[int]:
        """For each word of ``tokens``, the node of the longest phrase starting there (0: none): the automaton
        reads the words backwards, so its state after word ``i`` holds every phrase that starts at ``i``."""
        best = [0] * len(tokens)
        node = 0
        for i in range(len(tokens) - 1, -1, -1):
            word = tokens[i]
            while node and word not in self._next[node]:
                node = self._fail[node]
            node = self._next[node].get(word, 0)
            best[i] = self._best[node]
        return best

    def find(self, text: str) -> list[tuple[str, str]]:
        """Every mention in ``text`` in reading order: ``[(category, matched phrase), ...]``."""
        tokens = words(text)
        longest = self._longest_from(tokens)
        out, i = [], 0
        while i < len(tokens):
            node = longest[i]
            if node:
                n = self._depth[node]
                out.append((self._category[node], " ".join(tokens[i:i + n])))
                i += n
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
