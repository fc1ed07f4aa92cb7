"""MADMAN captions: the grammar, its parser, and the recognition / binding negatives.

Grammar (one caption)::

    caption      := description ( " and " description )?
    description  := ( value " " )* digit          # values in the caption order, then the digit "0".."9"

The values of one description are written in the caption order (default: size, colour, thickness,
rotation, swelling, fracture), so ``describe([(7, {"colour": "yellow", "size": "small"}),
(4, {"size": "large", "colour": "blue"})])`` is ``"small yellow 7 and large blue 4"``. A digit described
with no attribute is the bare digit (``"7"``).

Negatives follow the MADMAN evaluation (Gurung et al., GCPR 2025, section on evaluation): *recognition*
replaces one attribute value of one digit by another value of the same attribute; *binding* swaps one
attribute's values between the two digits (only when the two values differ, so a negative never equals the
caption).
"""

from __future__ import annotations

from typing import Callable, Sequence

from bindscope.errors import BadInput
from bindscope.format.records import Negative
from bindscope.generators.madman.attributes import ATTRIBUTES, CAPTION_ORDER, DEFAULT_VALUES, value_owner

Description = tuple[int, dict[str, str]]


def describe_one(digit: int, attributes: dict[str, str], order: Sequence[str] = CAPTION_ORDER) -> str:
    """One digit's description: its mentioned attribute values in ``order``, then the digit.

    Raises:
        BadInput: an attribute not in ``order``.
    """
    unknown = set(attributes) - set(order)
    if unknown:
        raise BadInput(f"cannot describe attribute(s) {sorted(unknown)}; known: {', '.join(order)}")
    return " ".join([attributes[a] for a in order if a in attributes] + [str(digit)])


def describe(descriptions: Sequence[Description], order: Sequence[str] = CAPTION_ORDER) -> str:
    """Caption from ``(digit, {attribute: value})`` pairs in mention order, joined with ``" and "``.

    Example: ``describe([(7, {"size": "small", "colour": "yellow"}), (4, {"size": "large"})])`` ->
    ``"small yellow 7 and large 4"``.
    """
    return " and ".join(describe_one(d, attrs, order) for d, attrs in descriptions)


def parse_caption(caption: str, values: dict[str, dict] | None = None) -> list[Description]:
    """Parse a caption back into ``(digit, {attribute: value})`` pairs in mention order.

    Args:
        caption: a caption written by :func:`describe`.
        values: the value sets (attribute -> {value name: parameter}) the caption was written with; the
            defaults of :mod:`bindscope.generators.madman.attributes` if None (a dataset's are in its
            manifest under ``config["attributes"]``).

    Raises:
        BadInput: a word that is no known value, a description without a final digit, or an attribute
            given twice for one digit.
    """
    owner = value_owner(values if values is not None else DEFAULT_VALUES)
    out: list[Description] = []
    for part in caption.split(" and "):
        words = part.split()
        if not words or not (len(words[-1]) == 1 and words[-1].isdigit()):
            raise BadInput(f"caption {caption!r}: description {part!r} does not end in a digit 0..9")
        attrs: dict[str, str] = {}
        for word in words[:-1]:
            if word not in owner:
                raise BadInput(f"caption {caption!r}: {word!r} is not a known attribute value")
            if owner[word] in attrs:
                raise BadInput(f"caption {caption!r}: attribute {owner[word]!r} given twice for one digit")
            attrs[owner[word]] = word
        out.append((int(words[-1]), attrs))
    return out


def make_negatives(descriptions: Sequence[tuple[int, int, dict[str, str]]], values: dict[str, dict],
                   uniform: Callable[[], float], order: Sequence[str] = CAPTION_ORDER) -> list[Negative]:
    """Recognition and binding negatives of a caption that describes two digits.

    Args:
        descriptions: ``(object index, digit, {attribute: value})`` per described digit, in mention order;
            negatives are made only when exactly two digits are described.
        values: the value sets; a replacement is drawn among the attribute's other values.
        uniform: a seeded source of floats in [0, 1) (one draw per recognition negative).
        order: the caption order.

    Returns:
        For each attribute in :data:`ATTRIBUTES` order mentioned for both digits: one ``"recognition"``
        negative per digit (objects ``(k,)``, original the digit's value, replacement another value; skipped
        when the attribute has a single value) and, if the two values differ, one ``"binding"`` negative
        (objects ``(1, 2)``, original ``"v1|v2"``, replacement ``"v2|v1"``, values of objects 1 and 2).
    """
    if len(descriptions) != 2:
        return []
    by_index = {index: attrs for index, _, attrs in descriptions}

    def caption_with(changes: dict[int, tuple[str, str]]) -> str:
        parts = []
        for index, digit, attrs in descriptions:
            attrs = dict(attrs)
            if index in changes:
                attribute, value = changes[index]
                attrs[attribute] = value
            parts.append((digit, attrs))
        return describe(parts, order)

    negatives: list[Negative] = []
    for attribute in ATTRIBUTES:
        if not all(attribute in attrs for attrs in by_index.values()):
            continue
        for index in sorted(by_index):
            old = by_index[index][attribute]
            others = [v for v in values[attribute] if v != old]
            if not others:
                continue
            new = others[int(uniform() * len(others))]
            negatives.append(Negative("recognition", caption_with({index: (attribute, new)}), attribute,
                                      (index,), old, new))
        v1, v2 = by_index[1][attribute], by_index[2][attribute]
        if v1 != v2:
            negatives.append(Negative("binding", caption_with({1: (attribute, v2), 2: (attribute, v1)}),
                                      attribute, (1, 2), f"{v1}|{v2}", f"{v2}|{v1}"))
    return negatives
