"""MADMAN: real MNIST digits with attributes (Gurung et al., GCPR 2025). Public call: :func:`generate`."""

from bindscope.generators.madman.api import generate

__all__ = ["generate"]
