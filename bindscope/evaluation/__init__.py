"""Evaluations: recognition and binding (MADMAN), TOR / IOR / I2TOR / matching and attention (ComCO), the
legibility audit, caption bias, ARO / SugarCrepe, and the tables of results (docs/evaluation.md)."""

AUDIT_SHIFT = 3
"""Default largest random offset (pixels) of a legibility-audit training crop (docs/madman.md); here, in the
package that imports nothing, so that ``madman audit --help`` shows it without loading the audit."""
