"""ROC AUC (:mod:`rckit.evaluation.auc`) against its definition: the share of (positive, negative)
pairs ranked right, a tie counting half."""

import numpy as np
import pytest

from rckit.evaluation.auc import auc


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auc_is_the_share_of_pairs_ranked_right(seed):
    rng = np.random.default_rng(seed)
    scores, positive = rng.normal(size=40).round(1), rng.random(40) < 0.4  # rounded: many ties
    pairs = [(a, b) for a, pa in zip(scores, positive) for b, pb in zip(scores, positive) if pa and not pb]
    brute = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in pairs) / len(pairs)
    assert auc(scores, positive) == pytest.approx(brute)


def test_auc_at_its_ends_and_without_one_side():
    assert auc([0.1, 0.2, 0.8, 0.9], [False, False, True, True]) == 1.0
    assert auc([0.9, 0.8, 0.2, 0.1], [False, False, True, True]) == 0.0
    assert auc([0.5, 0.5], [True, False]) == 0.5
    assert np.isnan(auc([0.1, 0.2], [True, True]))
