"""ComCO / SimCO: Blender-rendered multi-object scenes (Abbasi et al., CVPR 2025). Public call: :func:`render`."""

from bindscope.generators.comco.api import render

__all__ = ["render"]
