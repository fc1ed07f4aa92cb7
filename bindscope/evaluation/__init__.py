"""Evaluations: recognition and binding (MADMAN), TOR / IOR / I2TOR / matching and attention (ComCO), the
legibility audit, caption bias, ARO / SugarCrepe, and the tables of results (docs/evaluation.md)."""

AUDIT_SHIFT = 3
"""Default largest random offset (pixels) of a legibility-audit training crop (docs/madman.md); here, in the
package that imports nothing, so that ``madman audit --help`` shows it without loading the audit."""
DETECTION_THRESHOLD = 0.1
"""Default score (0..1) from which an open-vocabulary detector's object counts as found (``comco t2i-score``,
``bindscope caption-bias`` on image-caption pairs): the value of the transformers OWLv2 examples
(:mod:`bindscope.evaluation.detection`)."""
