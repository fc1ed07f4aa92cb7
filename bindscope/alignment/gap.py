"""The modality gap (numpy only).

Definition (Liang et al., "Mind the Gap", NeurIPS 2022; used by Koishigarina et al. for LABCLIP):
the Euclidean distance between the mean image embedding and the mean text embedding, both computed on
**L2-normalised** embeddings::

    gap = || mean_i x_i / ||x_i||  -  mean_j y_j / ||y_j|| ||_2

It lies in [0, 2]; 0 when both centroids coincide.
"""

from __future__ import annotations

import numpy as np

from bindscope.encoders.interface import l2_normalise
from bindscope.errors import BadInput


def modality_gap(image_embeddings: np.ndarray, text_embeddings: np.ndarray) -> float:
    """Distance between the centroids of L2-normalised image and text embeddings (unitless, in [0, 2]).

    Args:
        image_embeddings: ``(N, D)`` float array (rows are normalised here; need not be unit-norm).
        text_embeddings: ``(M, D)`` float array, same ``D``.

    Raises:
        BadInput: empty input or mismatched dimensions.
    """
    x = np.asarray(image_embeddings, dtype=np.float64)
    y = np.asarray(text_embeddings, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1] or not len(x) or not len(y):
        raise BadInput(f"modality gap needs two non-empty (N, D) arrays of one D; got {x.shape} and {y.shape}")
    x, y = l2_normalise(x), l2_normalise(y)
    return float(np.linalg.norm(x.mean(axis=0) - y.mean(axis=0)))
