"""Importers of published data (COCO, CLEVR, PUG:SPAR): they write the same dataset format as the generators (same
layer as :mod:`bindscope.generators`; they read annotation files instead of planning scenes)."""
