"""The values of the ComCO ``saliency`` key and the default ``saliency_bias`` (pure Python, no numpy: the
command line reads them for its help). What they do is in :mod:`bindscope.generators.comco.captions`."""

from __future__ import annotations

SALIENCY = {"size": "the object planned largest (one-large: the large object; random: the largest planned scale)",
            "position": "the leftmost object; with saliency_bias the caption names the objects left to right"}
"""``saliency``: which object the caption names first with probability ``saliency_bias``. Absent from a config
(or ``none``): uniformly random mention order, as before the key existed (same config hash, same bytes)."""
DEFAULT_SALIENCY_BIAS = 1.0
"""``saliency_bias`` when ``saliency`` is given without it: captions always in the saliency order."""
