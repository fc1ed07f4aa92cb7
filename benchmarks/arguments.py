"""argparse types shared by the benchmark scripts: bounded integers and seed lists with the library's bounds
(:mod:`bindscope.limits`), so that a bad value is one usage error naming it (exit status 2) before any work."""

from __future__ import annotations

import argparse

from bindscope.limits import MAX_SEED


def bounded_int(low: int, high: int):
    """An argparse ``type`` accepting an integer in ``low..high``; anything else is an ``ArgumentTypeError`` naming
    the value and the range."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} is not allowed; use an integer in {low}..{high}")
        return value

    return parse


def seed_list(text: str) -> list[int]:
    """An argparse ``type``: comma-separated distinct seeds in ``0..MAX_SEED`` (``"0,1,2"`` -> ``[0, 1, 2]``)."""
    parse = bounded_int(0, MAX_SEED)
    try:
        seeds = [parse(part.strip()) for part in text.split(",") if part.strip()]
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}" if "," in text else str(error)) from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; use distinct comma-separated seeds, e.g. 0,1,2")
    return seeds
