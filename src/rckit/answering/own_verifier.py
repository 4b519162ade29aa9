"""Whether the text answers, judged by rckit's own reader: the verifier beside a span reader.

rckit's own reader (docs/own-reader.md, :mod:`rckit.answering.pointer_reader`) was fine-tuned end
to end to point at the answer or at ``[CLS]``, so it reads the question and the passage together
and learnt "no answer" against the answer-finding itself. Beside a span reader it judges each
(passage, question) pair in place of the feature network (:mod:`rckit.answering.verifier`):

- **alone**: ``p(no answer)`` is the own reader's, calibrated on the tuning quarter;
- **joined** with the feature network: ``p = sigmoid(a . logit p_features + b . logit p_own + c)``,
  ``(a, b, c)`` fitted on the tuning quarter by logistic regression
  (:func:`rckit.training.own_verifier.install_own_verifier`).

The span reader's answers are unchanged; only the decision to give one is the verifier's. The own
reader's file travels beside the model file, named in its verifier's metadata (``own``: the
file's name and SHA-256, the threshold, the join), and is checked when it is read: a missing or
damaged file is refused in one line. It answers on PyTorch or, where that is not installed, on
onnxruntime (the light install).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rckit.data.prepare import file_digest

EPS = 1e-6  # probabilities are kept this far from 0 and 1 before their logits are taken


def logit(p) -> np.ndarray:
    p = np.clip(np.asarray(p, np.float64), EPS, 1 - EPS)
    return np.log(p / (1 - p))


def joined(p_features, p_own, weights: tuple[float, float, float]) -> np.ndarray:
    """``sigmoid(a . logit p_features + b . logit p_own + c)`` of each pair, ``weights = (a, b, c)``."""
    a, b, c = weights
    z = np.clip(a * logit(p_features) + b * logit(p_own) + c, -60.0, 60.0)
    return 1.0 / (1.0 + np.exp(-z))


class OwnVerifier:
    """``p(no answer)`` of (passage, question) pairs from rckit's own reader (``reader``, a
    :class:`rckit.answering.pointer_reader.PointerReader`), joined with the feature network's where
    ``meta`` gives the join's weights. ``meta``: what the model file says of it (:meth:`to_json`):
    ``threshold`` (abstain above it), ``join`` (``[a, b, c]`` or absent), ``file``, ``sha256``."""

    def __init__(self, reader, meta: dict):
        self.reader = reader
        self.meta = dict(meta)
        self.threshold = float(self.meta.get("threshold", 0.5))
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"a verifier's threshold is a probability, got {self.threshold}")
        join = self.meta.get("join")
        if join is not None and (len(join) != 3 or not all(np.isfinite(float(w)) for w in join)):
            raise ValueError(f"a joined verifier's weights are three numbers, got {join!r}")
        self.join: tuple[float, float, float] | None = None if join is None else tuple(float(w) for w in join)

    def own_probability(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        """The own reader's ``p(no answer)`` of each pair, each distinct pair read once."""
        distinct = list(dict.fromkeys(pairs))
        read = dict(zip(distinct, (p for _, p in self.reader.best_spans(distinct)))) if distinct else {}
        return np.asarray([read[pair] for pair in pairs], np.float64)

    def probability(self, pairs: list[tuple[str, str]], p_features=None) -> np.ndarray:
        """``p(no answer)`` of each pair: the own reader's, or joined with ``p_features`` (the
        feature network's of the same pairs) where the verifier is a join."""
        p_own = self.own_probability(pairs)
        if self.join is None:
            return p_own
        if p_features is None:
            raise ValueError("a joined verifier reads the feature network's p(no answer) beside its own")
        return joined(p_features, p_own, self.join)

    def to_json(self) -> dict:
        return dict(self.meta)

    @classmethod
    def from_json(cls, d: dict, where: str | Path, threads: int | None = None) -> OwnVerifier:
        """The verifier the model file ``where`` names in ``d``: the own reader's file beside it
        (``file``), checked by ``sha256``. A missing or damaged file is refused in one line."""
        from rckit.answering.pointer_reader import PointerReader

        for key in ("file", "sha256", "threshold"):
            if key not in d:
                raise ValueError(f"{where}: damaged own-reader verifier in its metadata (no {key!r})")
        path = Path(where).parent / str(d["file"])
        if not path.is_file():
            raise ValueError(
                f"{where}: its verifier's reader {path} is missing (rckit verifier --remove --into FILE takes the "
                "verifier out)"
            )
        if file_digest(path) != d["sha256"]:
            raise ValueError(f"{path}: damaged (its SHA-256 differs from the one {Path(where).name} names)")
        return cls(PointerReader.load(path, always_answer=True, threads=threads), d)
