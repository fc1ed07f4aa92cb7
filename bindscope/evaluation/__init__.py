"""Evaluations: recognition and binding (MADMAN), TOR / IOR / I2TOR / matching and attention (ComCO), the
legibility audit, caption bias, ARO / SugarCrepe, and the tables of results (docs/evaluation.md)."""

from bindscope.limits import MAX_BATCH, MAX_COUNT, MAX_LR, MAX_SEED

AUDIT_SHIFT = 3
"""Default largest random offset (pixels) of a legibility-audit training crop (docs/madman.md); here, in the
package that imports nothing, so that ``madman audit --help`` shows it without loading the audit."""
AUDIT_RANGES = {"epochs": (1, 1000), "batch_size": (2, MAX_BATCH), "lr": (0.0, MAX_LR), "width": (1, 256),
                "seed": (0, MAX_SEED), "threads": (1, 256), "shift": (0, 16),
                "max_train_objects": (1, MAX_COUNT), "max_test_objects": (1, MAX_COUNT)}
"""The allowed ``(low, high)`` of every numeric setting of the legibility audit (``lr``: low excluded), the one
place both :func:`bindscope.evaluation.audit.audit_madman` and ``madman audit`` read."""
