"""MADMAN attributes: names, default value sets, caption order, and look-ups.

Each of the six attributes maps value names (the words used in captions) to the parameter that realises them.
Every level is absolute: digits are normalised first (deslanted, fixed height, one canonical stroke; see
:mod:`bindscope.generators.madman.morpho`), so a level means the same thing for every source digit.

==========  ===============================================  =============================================
attribute   parameter of a value                             default values
==========  ===============================================  =============================================
colour      ``[r, g, b]`` sRGB, 0..255 (ink colour on black) red, green, blue, yellow, cyan, magenta,
                                                             orange, white
size        ink height of the upright glyph, as a fraction   small 0.2, medium 0.29, large 0.41
            of the canvas side (0.05..1); no glyph wider
            in any direction than 1.25 times that
thickness   stroke width ÷ glyph height (0.02..0.4)          thin 0.07, regular 0.12, thick 0.18
rotation    degrees, counter-clockwise as seen, from         upright 0, tilted-left 45, tilted-right -45
            the deslanted upright glyph
swelling    width of the local bulge ÷ glyph height (0 =     unswollen 0, swollen 0.2
            none; at least 2 stroke widths)
fracture    number of cuts across the stroke (0 = none),     intact 0, fractured 2
            each >= ``morpho.fracture_min_gap`` pixels wide
==========  ===============================================  =============================================

The value sets are project choices (the MADMAN paper, Gurung et al. GCPR 2025, does not publish its own);
a config file may replace any attribute's value set wholesale (see docs/madman.md).
"""

from __future__ import annotations

import re

from bindscope.errors import BadInput

#: The per-object attribute columns of a MADMAN dataset (the manifest's ``object_attributes``), in this order.
ATTRIBUTES: tuple[str, ...] = ("colour", "size", "thickness", "rotation", "swelling", "fracture")

#: Default order of attribute words within one digit's description ("small yellow thick 7").
CAPTION_ORDER: tuple[str, ...] = ("size", "colour", "thickness", "rotation", "swelling", "fracture")

DEFAULT_VALUES: dict[str, dict] = {
    "colour": {"red": [255, 0, 0], "green": [0, 200, 0], "blue": [40, 80, 255], "yellow": [255, 230, 0],
               "cyan": [0, 230, 230], "magenta": [230, 0, 230], "orange": [255, 140, 0],
               "white": [255, 255, 255]},
    "size": {"small": 0.2, "medium": 0.29, "large": 0.41},
    "thickness": {"thin": 0.07, "regular": 0.12, "thick": 0.18},
    "rotation": {"upright": 0, "tilted-left": 45, "tilted-right": -45},
    "swelling": {"unswollen": 0.0, "swollen": 0.2},
    "fracture": {"intact": 0, "fractured": 2},
}

_WORD = re.compile(r"^[a-z][a-z-]*$")


def check_value_sets(values: dict[str, dict]) -> None:
    """Check a resolved ``attributes`` mapping (attribute -> {value name: parameter}).

    Raises:
        BadInput: an unknown attribute, an empty value set, a value name that is not a lowercase word
            (letters and ``-``), equals ``"and"``, or is used by two attributes (captions must parse back).
    """
    owner: dict[str, str] = {}
    for attribute, table in values.items():
        if attribute not in ATTRIBUTES:
            raise BadInput(f"unknown attribute {attribute!r}; allowed: {', '.join(ATTRIBUTES)}")
        if not table:
            raise BadInput(f"attribute {attribute!r} needs at least one value")
        for name in table:
            if not _WORD.match(name) or name == "and":
                raise BadInput(f"attribute {attribute!r}: value name {name!r} must be a lowercase word "
                               "(letters and '-') other than 'and'")
            if name in owner:
                raise BadInput(f"value name {name!r} is used by both {owner[name]!r} and {attribute!r}; "
                               "value names must be unique so captions parse back")
            owner[name] = attribute


def value_owner(values: dict[str, dict]) -> dict[str, str]:
    """Map every value name to its attribute, e.g. ``{"red": "colour", "small": "size", ...}``."""
    return {name: attribute for attribute, table in values.items() for name in table}


def parse_holdout(spec: str, values: dict[str, dict]) -> tuple[int, str, str]:
    """Parse an OOD hold-out combination ``"DIGIT:ATTRIBUTE=VALUE"`` (e.g. ``"7:colour=red"``).

    Returns:
        ``(digit, attribute, value)``.

    Raises:
        BadInput: malformed text, a digit outside 0..9, an unknown attribute or value (the message lists the
            allowed ones).
    """
    match = re.fullmatch(r"\s*(\d+)\s*:\s*([a-z_-]+)\s*=\s*([a-z-]+)\s*", spec)
    if not match:
        raise BadInput(f"hold-out {spec!r} is not of the form DIGIT:ATTRIBUTE=VALUE (e.g. '7:colour=red')")
    digit, attribute, value = int(match.group(1)), match.group(2), match.group(3)
    if not 0 <= digit <= 9:
        raise BadInput(f"hold-out {spec!r}: digit {digit} is not in 0..9")
    if attribute not in values:
        raise BadInput(f"hold-out {spec!r}: unknown attribute {attribute!r}; allowed: {', '.join(ATTRIBUTES)}")
    if value not in values[attribute]:
        raise BadInput(f"hold-out {spec!r}: unknown {attribute} value {value!r}; "
                       f"allowed: {', '.join(values[attribute])}")
    return digit, attribute, value
