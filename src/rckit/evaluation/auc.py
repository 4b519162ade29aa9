"""ROC AUC: how well a score ranks the questions a text does not answer above those it does."""

from __future__ import annotations

import numpy as np


def auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """ROC AUC of ``scores`` for the ``positive`` rows by the rank-sum rule (Mann-Whitney U over
    ``n_pos * n_neg``), tied scores given their mean rank (a tie counts half); NaN where one side
    is empty."""
    scores, positive = np.asarray(scores, np.float64), np.asarray(positive, bool)
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if not n_pos or not n_neg:
        return float("nan")
    values, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    below = np.cumsum(counts) - counts  # rows with a smaller score
    ranks = (below + (counts + 1) / 2)[inverse]  # 1-based, ties at their mean rank
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
