"""ComCO / SimCO: Blender-rendered multi-object scenes (Abbasi et al., CVPR 2025). Public calls: :func:`render`,
:func:`import_assets` and :func:`fetch_assets` (asset sets of real 3D models), and :func:`t2i` (ComCO prompts rendered
by a text-to-image pipeline, :mod:`bindscope.generators.t2i`)."""

from bindscope.generators.comco.api import render
from bindscope.generators.comco.asset_api import fetch_assets, import_assets
from bindscope.generators.t2i.api import t2i

__all__ = ["render", "import_assets", "fetch_assets", "t2i"]
