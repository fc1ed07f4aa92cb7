"""The COCO mention matcher: exact mentions of hand-made captions, the same answers as the plain longest-match
search it replaces, and time linear in the caption and the category names (a 1 MB caption, a 2,000-word name)."""

from __future__ import annotations

import random

from bindscope.importers.mentions import MentionFinder, mention_table, words


def reference_find(finder: MentionFinder, text: str) -> list[tuple[str, str]]:
    """The plain search: at each word try every phrase length from the longest down (quadratic, kept as the
    specification)."""
    phrases = finder._phrases
    longest = max((len(k) for k in phrases), default=1)
    tokens = words(text)
    out, i = [], 0
    while i < len(tokens):
        for n in range(min(longest, len(tokens) - i), 0, -1):
            category = phrases.get(tuple(tokens[i:i + n]))
            if category is not None:
                out.append((category, " ".join(tokens[i:i + n])))
                i += n
                break
        else:
            i += 1
    return out


def test_exact_mentions_of_a_hand_made_caption():
    finder = MentionFinder(list(mention_table()))
    caption = ("Two men's hot dogs, a hotdog stand? No: a teddy bear, three TVs and a television; a dog near "
               "the dining table, a cell phone and a man riding a motorbike past a fire hydrant.")
    assert finder.find(caption) == [
        ("person", "men"), ("hot dog", "hot dogs"), ("hot dog", "hotdog"), ("teddy bear", "teddy bear"), ("tv", "tvs"),
        ("tv", "television"), ("dog", "dog"), ("dining table", "dining table"), ("cell phone", "cell phone"),
        ("person", "man"), ("motorcycle", "motorbike"), ("fire hydrant", "fire hydrant")]
    positions, phrases, unmatched = finder.positions(caption, {"dog", "person", "tv"})
    assert positions == {"person": 1, "tv": 2, "dog": 3}
    assert phrases == {"person": "men", "tv": "tvs", "dog": "dog"}
    assert unmatched == [["hot dog", "hot dogs"], ["hot dog", "hotdog"], ["teddy bear", "teddy bear"], ["dining table", "dining table"],
                         ["cell phone", "cell phone"], ["motorcycle", "motorbike"], ["fire hydrant", "fire hydrant"]]


def test_overlapping_phrases_longest_first_then_consumed():
    table = {"a": ["x"], "ab": ["x y"], "abc": ["x y z"], "b": ["y z w"], "c": ["z"]}
    finder = MentionFinder(list(table), table=table)
    # "x y z w": "x y z" wins at the first word (longest), then "w" alone mentions nothing.
    assert finder.find("x y z w") == [("abc", "x y z")]
    # "x y q": the three-word phrase fails at q, the two-word one is taken.
    assert finder.find("x y q z") == [("ab", "x y"), ("c", "z")]
    assert finder.find("q y z w x") == [("b", "y z w"), ("a", "x")]
    assert finder.find("") == [] and finder.find("...") == []


def test_same_answers_as_the_plain_search():
    rng = random.Random(7)
    vocabulary = ["a", "b", "c", "d", "e"]
    for trial in range(300):
        table = {f"k{k}": [" ".join(rng.choices(vocabulary, k=rng.randint(1, 5))) for _ in range(rng.randint(1, 3))]
                 for k in range(rng.randint(1, 8))}
        finder = MentionFinder(list(table), table=table)
        text = " ".join(rng.choices(vocabulary, k=rng.randint(0, 60)))
        assert finder.find(text) == reference_find(finder, text), (table, text)
    finder = MentionFinder(list(mention_table()))
    names = [w for forms in mention_table().values() for form in forms for w in form.split()]
    for trial in range(100):
        text = " ".join(rng.choices(names + ["the", "and", "a"], k=40))
        assert finder.find(text) == reference_find(finder, text)


def test_linear_in_caption_and_category_name():
    # A 2,000-word category name whose every prefix appears in the caption: the plain search would try 2,000
    # lengths at each of the caption's ~200,000 words.
    long_name = " ".join(["big"] * 1999 + ["cat"])
    finder = MentionFinder(["dog", long_name], table={})
    caption = ("big " * 200_000 + "dog ") * 1 + "big " * 1999 + "cat."
    assert len(caption) > 800_000
    found = finder.find(caption)
    assert found == [("dog", "dog"), (long_name, long_name)]
    # A 1 MB caption of ordinary words against the whole table.
    finder = MentionFinder(list(mention_table()))
    caption = "A man walks his dog past a hot dog stand and a teddy bear. " * 17_500
    assert len(caption) > 1_000_000
    found = finder.find(caption)
    assert len(found) == 4 * 17_500 and found[:4] == [("person", "man"), ("dog", "dog"), ("hot dog", "hot dog"),
                                                    ("teddy bear", "teddy bear")]
