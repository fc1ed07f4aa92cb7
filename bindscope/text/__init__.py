"""Pure-Python caption text tools (no torch): hard-negative captions made by perturbing a caption's words
(:mod:`bindscope.text.negatives`)."""
