"""``madman`` commands: generate, preview (this module is filled by the MADMAN generator work)."""

import click


def register(group: click.Group) -> None:
    """Add the MADMAN commands to the ``madman`` group."""
