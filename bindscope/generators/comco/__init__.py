"""ComCO / SimCO: Blender-rendered multi-object scenes (Abbasi et al., CVPR 2025). Public calls: :func:`render`,
:func:`import_assets` and :func:`fetch_assets` (asset sets of real 3D models)."""

from bindscope.generators.comco.api import render
from bindscope.generators.comco.asset_api import fetch_assets, import_assets

__all__ = ["render", "import_assets", "fetch_assets"]
