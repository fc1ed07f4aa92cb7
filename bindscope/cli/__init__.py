"""The command line: one module per command group; shared options in :mod:`bindscope.cli.options`."""
