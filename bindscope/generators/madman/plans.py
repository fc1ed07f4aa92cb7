"""Checks of a stored MADMAN plan (a sample's ``spec``, see :mod:`~bindscope.generators.madman.planning`) before
anything draws from it: the plan of a crafted or damaged shard is reported by ``bindscope verify`` and refused by
the large-object evaluation (which redraws digits from it) instead of failing inside the renderer."""

from __future__ import annotations

import math

from bindscope.generators.madman.attributes import ATTRIBUTES


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    """A finite number (an int of any size, a float that is not NaN or infinite), not a bool."""
    return _integer(value) or (isinstance(value, float) and math.isfinite(value))


def _digit_problem(config: dict, digit, sources: int | None) -> str | None:
    if not isinstance(digit, dict):
        return f"is {type(digit).__name__}, not an object"
    if not _integer(digit.get("digit")) or not 0 <= digit["digit"] <= 9:
        return f"has digit {digit.get('digit')!r}, not an integer 0..9"
    alternates = digit.get("alternates", [])
    if not isinstance(alternates, list):
        return f"has alternates {alternates!r}, not a list"
    for source in [digit.get("source"), *alternates]:
        if not _integer(source) or source < 0 or (sources is not None and source >= sources):
            allowed = "a non-negative integer" if sources is None else f"an integer 0..{sources - 1:,}"
            return f"has source {source!r}, not {allowed} (an index of the digit source)"
    attributes = digit.get("attributes")
    if not isinstance(attributes, dict):
        return f"has attributes {attributes!r}, not an object"
    for name in ATTRIBUTES:
        values = config["attributes"][name]
        if not isinstance(attributes.get(name), str) or attributes[name] not in values:
            return f"has {name} {attributes.get(name)!r}, not one of {', '.join(sorted(values))}"
    if not _number(digit.get("swell")) or not 0 <= digit["swell"] <= 1:
        return f"has swell {digit.get('swell')!r}, not a number 0..1"
    cuts = digit.get("cuts")
    wanted = config["attributes"]["fracture"][attributes["fracture"]]
    if not isinstance(cuts, list) or len(cuts) != wanted or not all(_number(c) and 0 <= c <= 1 for c in cuts):
        return f"has cuts {cuts!r}, not a list of {wanted} number(s) 0..1 (its fracture)"
    return None


def plan_problem(config: dict, spec, sources: int | None = None, objects: list | None = None) -> str | None:
    """What makes the plan ``spec`` unusable, as a phrase (e.g. ``"digit 2 has source 99999, not an integer
    0..4,999 (an index of the digit source)"``), or None for a plan the renderer can draw.

    Checked: ``spec`` is an object; ``digits`` a list of 1 or 2 objects, each with ``digit`` an integer 0..9,
    ``source`` and every entry of ``alternates`` an integer ``0 .. sources - 1`` (any non-negative integer when
    ``sources`` is None), ``attributes`` naming a value of ``config`` for every attribute, ``swell`` a number
    0..1 and ``cuts`` as many numbers 0..1 as its fracture value says; ``layout`` an object with ``jitter`` two
    numbers within ± the config's ``layout.centre_jitter`` (pixels) and ``direction`` a finite number (radians); ``mentions`` a list of objects, each naming a
    digit (``index`` 1..number of digits) and a list of attribute names; ``placements``, where stored, one object
    per digit whose ``source`` is one of that digit's candidates (``source`` or an alternate). With ``objects``
    (the sample's :class:`~bindscope.format.records.ObjectRecord` list), one digit per object, of its class.

    Args:
        config: the dataset's resolved MADMAN config (``manifest["config"]``).
        spec: the stored plan (parsed JSON: any type).
        sources: the number of digits in the digit source, or None when unknown.
        objects: the sample's objects from the shard's object table, or None.
    """
    if not isinstance(spec, dict):
        return f"is {type(spec).__name__}, not an object"
    digits = spec.get("digits")
    if not isinstance(digits, list) or len(digits) not in (1, 2):
        return f"has digits {str(digits)[:80]}, not a list of 1 or 2 digits"
    for k, digit in enumerate(digits, start=1):
        problem = _digit_problem(config, digit, sources)
        if problem:
            return f"digit {k} {problem}"
    layout = spec.get("layout")
    reach = config["layout"].get("centre_jitter", math.inf)
    if (not isinstance(layout, dict) or not isinstance(layout.get("jitter"), list) or len(layout["jitter"]) != 2
            or not all(_number(j) and abs(j) <= reach for j in layout["jitter"])
            or not _number(layout.get("direction"))):
        return (f"has layout {str(layout)[:80]}, not {{'jitter': [2 numbers within ±{reach} pixels], "
                "'direction': a number}")
    mentions = spec.get("mentions")
    if not isinstance(mentions, list) or not all(
            isinstance(m, dict) and _integer(m.get("index")) and 1 <= m["index"] <= len(digits)
            and isinstance(m.get("attributes"), list) and all(a in ATTRIBUTES for a in m["attributes"])
            for m in mentions):
        return f"has mentions {str(mentions)[:80]}, not a list of {{'index': 1..{len(digits)}, 'attributes': [...]}}"
    placements = spec.get("placements")
    if placements is not None:
        if not isinstance(placements, list) or len(placements) != len(digits):
            return f"has placements {str(placements)[:80]}, not a list of one per digit"
        for k, (placement, digit) in enumerate(zip(placements, digits), start=1):
            if not isinstance(placement, dict) or placement.get("source") not in [digit["source"],
                                                                                  *digit.get("alternates", [])]:
                return f"placement {k} is {str(placement)[:80]}: its source is not one of digit {k}'s candidates"
    if objects is not None:
        if len(objects) != len(digits):
            return f"has {len(digits)} digit(s) for the sample's {len(objects)} object(s)"
        for k, (digit, record) in enumerate(zip(digits, objects), start=1):
            if digit["digit"] != record.category_id:
                return f"digit {k} is a {digit['digit']}, the object table's object {k} a {record.category_id}"
    return None
