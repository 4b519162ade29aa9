"""Adversarial filtering of the unanswerable questions made by rule (:mod:`rckit.data.unanswerable`).

SQuAD 2.0's writers aimed for unanswerable questions with a plausible answer, ones a reader would
be fooled by. The rules cannot aim; a reader can judge afterwards: each made question is read by a
frozen span reader (always answering), and kept when its best span's probability is at least
``min_confidence`` -- the questions the reader still answers with confidence, the ones a verifier
has to learn to doubt. The reading goes through the verifier's feature cache
(:class:`rckit.training.verifier.FeatureCache`), so training the verifier on the kept questions
afterwards does not read them again.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rckit.answering.verifier_features import READER_FEATURES
from rckit.training.verifier import FeatureCache, Pair, read_features

if TYPE_CHECKING:
    from collections.abc import Callable

    from rckit.answering.reader import Reader
    from rckit.data.unanswerable import MadeSet

SPAN_LOG_P = READER_FEATURES.index("span_log_p")


def reader_confidences(
    reader: Reader, made: MadeSet, cache: str | Path | None = None, progress: Callable[[int], object] | None = None
) -> np.ndarray:
    """The probability of the reader's best span on each made question, in ``made.made``'s order."""
    pairs = [Pair(m.context, m.question, True, f"made_{m.rule}", m.qid) for m in made.made]
    if cache is None:
        x, _ = read_features(reader, pairs, progress)
    else:
        x, _ = FeatureCache(Path(cache), reader).features(pairs, progress)
    return np.exp(x[:, SPAN_LOG_P]) if len(pairs) else np.zeros(0)


def adversarial_filter(made: MadeSet, confidence: np.ndarray, min_confidence: float, reader_name: str) -> dict:
    """Keep in ``made`` the questions whose reader ``confidence`` is at least ``min_confidence``
    (each kept one carries it); returns what was filtered, per rule: made, kept, and the quartiles
    of the confidence over all made (for the data card)."""
    if len(confidence) != len(made.made):
        raise ValueError(f"{len(confidence)} confidences for {len(made.made)} made questions")
    per_rule: dict[str, dict] = {}
    kept = []
    for m, c in zip(made.made, confidence):
        c = float(c)
        row = per_rule.setdefault(m.rule, {"made": 0, "kept": 0, "confidences": []})
        row["made"] += 1
        row["confidences"].append(c)
        if c >= min_confidence and math.isfinite(c):
            m.confidence = round(c, 4)
            kept.append(m)
            row["kept"] += 1
    for row in per_rule.values():
        q = np.quantile(row.pop("confidences"), [0.25, 0.5, 0.75])
        row["confidence_quartiles"] = [round(float(v), 3) for v in q]
    made.made = kept
    return {"reader": reader_name, "min_confidence": min_confidence, "per_rule": per_rule}
