"""Putting rckit's own reader beside a span reader as its verifier (:mod:`rckit.answering.own_verifier`).

Nothing is trained here but, for a join, three weights: the span reader reads the tuning quarter of
SQuAD v2.0 dev (its best spans, and its feature network's ``p(no answer)``), the own reader reads
the same questions (its calibrated ``p(no answer)``), and

- a **join** (the default) is the logistic regression of "no answer" on the two logits, fitted by
  Newton's method (:func:`fit_logistic`);
- **alone**, the own reader's probability judges by itself.

The threshold is the lowest that keeps ``keep`` of the answers' F1 on the quarter (as the feature
verifier's, :func:`rckit.training.verifier.keeping`), or one the caller gives. The own reader's
file is copied beside the model file and named in it by SHA-256. The evaluation half (odd
articles) is never read here: ``benchmarks/own_reader_join.py`` judges on it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rckit.answering.own_verifier import joined, logit
from rckit.answering.reader import Reader
from rckit.answering.verifier import Net
from rckit.data.prepare import file_digest
from rckit.data.squad import load_json
from rckit.evaluation.auc import auc
from rckit.training.verifier import KEEP, curve, keeping, read_features, tuned, tuning_pairs

KEEPS = (KEEP, 0.95, 0.92, 0.9)  # shares of the answers' F1 kept, whose thresholds are recorded


def fit_logistic(x: np.ndarray, y: np.ndarray, steps: int = 50, ridge: float = 1e-3) -> np.ndarray:
    """The weights (the last one the bias) of the logistic regression of ``y`` (0/1) on the rows of
    ``x``, by Newton's method with a small ridge (so separable data stays finite)."""
    X = np.hstack([np.asarray(x, np.float64), np.ones((len(x), 1))])
    y = np.asarray(y, np.float64)
    w = np.zeros(X.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(X @ w, -60.0, 60.0)))
        grad = X.T @ (p - y) + ridge * w
        hess = (X * (p * (1.0 - p))[:, None]).T @ X + ridge * np.eye(len(w))
        w -= np.linalg.solve(hess, grad)
    return w


def install_own_verifier(
    own_file: str | Path,
    reader: Reader,
    network: Net,
    v2_dev: str | Path,
    into: Path,
    join: bool = True,
    keep: float = KEEP,
    threshold: float | None = None,
    log: Callable[[str], object] = print,
) -> dict:
    """The ``own`` entry of a model file's verifier (module docstring): ``own_file`` (a file of
    rckit's own reader) copied beside ``into``, judged with ``reader`` (the span reader) and
    ``network`` (the feature verifier the file carries) on ``v2_dev``'s tuning quarter; its tuning
    figures kept with it."""
    from rckit.answering.pointer_reader import PointerReader
    from rckit.model_files.reader_file import is_reader_file

    if not is_reader_file(own_file):
        raise ValueError(f"{own_file}: not a file of rckit's own reader (rckit finetune, then its export)")
    pairs, raw = tuning_pairs(load_json(v2_dev))
    x, texts = read_features(reader, pairs)
    p_features = network.probability(x)
    log(f"the span reader read the tuning quarter ({len(pairs)} questions)")
    own = PointerReader.load(own_file, always_answer=True)
    p_own = np.asarray([p for _, p in own.best_spans([(q.context, q.question) for q in pairs])], np.float64)
    log("the own reader read it")
    y = np.asarray([q.unanswerable for q in pairs], np.float64)
    weights = fit_logistic(np.stack([logit(p_features), logit(p_own)], axis=1), y) if join else None
    p = joined(p_features, p_own, tuple(weights)) if join else p_own
    kept = [{"keep": k, "threshold": keeping(p, texts, pairs, raw, k)} for k in sorted({*KEEPS, keep}, reverse=True)]
    chosen = threshold if threshold is not None else next(row["threshold"] for row in kept if row["keep"] == keep)
    name = f"{into.name.split('.')[0]}.own-reader.safetensors"
    if Path(own_file).resolve() != (into.parent / name).resolve():
        shutil.copyfile(own_file, into.parent / name)
    return {
        "file": name,
        "sha256": file_digest(into.parent / name),
        "threshold": float(chosen),
        **({"join": [float(w) for w in weights]} if join else {}),
        "tuning": {
            "questions": len(pairs),
            "auc": auc(p, y.astype(bool)),
            "auc_features": auc(p_features, y.astype(bool)),
            "auc_own": auc(p_own, y.astype(bool)),
            "at_threshold": tuned(p, texts, pairs, raw, float(chosen)),
            "best": tuned(p, texts, pairs, raw),
            "kept": kept,
            "curve": curve(p, texts, pairs, raw, (float(chosen),)),
            "rule": f"threshold {threshold}" if threshold is not None else f"keeps {keep} of the answers' F1",
        },
    }
