"""The encoder reader's scores to answers: the best spans over every window, and "no answer".

For a pair read in windows (:mod:`rckit.data.pair_windows`), each window ``w`` gives start and end
scores ``s^w``, ``e^w`` over its positions (:mod:`rckit.models.encoder_reader`). As BERT's SQuAD
2.0 reader (Devlin et al. 2019, section 4.3)::

    span score      S(i, j) = s^w_i + e^w_j     i <= j < i + max_answer, both passage pieces,
                                                i answering from w (it stands furthest from w's edges)
    null score      N = min_w (s^w_0 + e^w_0)   the window least sure there is no answer
    margin          m = N - max_(i, j) S(i, j)

``m`` grows with the reader's belief that the passage does not answer; ``p(no answer) =
sigmoid(a m + b)`` with ``a``, ``b`` fitted on held-out questions (:func:`no_answer_probability`).
A span's ``probability`` is ``softmax(s^w)_i softmax(e^w)_j`` in its window, [CLS] among the
positions, so a passage without the answer gives its best span a low one.

A span's characters run from its first piece's start to its last piece's end, widened to whole
words where a piece continues a word (``##ing``): the answer never ends inside a word.

NumPy only: the Reader answers with it on either backend.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rckit.data.pair_windows import PairWindows

MAX_ANSWER = 30  # pieces in an answer at most (BERT's max_answer_length)


@dataclass(frozen=True)
class Span:
    """A span of the passage's pieces ``first..last`` (inclusive) and its characters ``[start, end)``."""

    score: float  # s_i + e_j
    probability: float  # softmax(s)_i * softmax(e)_j in its window
    first: int
    last: int
    start: int
    end: int


@dataclass(frozen=True)
class Pointed:
    spans: list[Span]  # best first
    null: float  # N
    margin: float  # N - the best span's score (+inf where the passage has no piece)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def point(
    windows: PairWindows,
    start: list[np.ndarray],
    end: list[np.ndarray],
    continues: np.ndarray,
    top_k: int = 1,
    max_answer: int = MAX_ANSWER,
) -> Pointed:
    """The best ``top_k`` spans and the null of one pair (module docstring). ``start[w]``/``end[w]``:
    window ``w``'s scores over at least its real positions; ``continues`` (vocabulary,) True where a
    piece continues a word."""
    found: list[tuple[float, float, int, int]] = []
    nulls = []
    for w, (lo, hi) in enumerate(windows.spans):
        size = len(windows.ids[w])
        allowed = windows.allowed(w)
        s, e = np.asarray(start[w][:size], np.float64), np.asarray(end[w][:size], np.float64)
        nulls.append(s[0] + e[0])
        log_s, log_e = _log_softmax(s[allowed]), _log_softmax(e[allowed])
        n = hi - lo
        if n == 0:
            continue
        ps, pe = s[windows.first : windows.first + n], e[windows.first : windows.first + n]  # (n,)
        lps, lpe = log_s[1 : 1 + n], log_e[1 : 1 + n]  # the passage's, after [CLS]
        # Only the band j = i + d, 0 <= d < max_answer, is scored: (n, D) rather than every (i, j).
        D = min(max_answer, n)
        j = np.arange(n)[:, None] + np.arange(D)[None, :]  # (n, D)
        valid = (j < n) & (windows.owner[lo:hi] == w)[:, None]
        score = np.where(valid, ps[:, None] + pe[np.minimum(j, n - 1)], -np.inf)  # (n, D): S(i, i + d)
        flat = score.ravel()
        keep = min(top_k, flat.size)
        best = np.argpartition(-flat, keep - 1)[:keep]
        for k in best[np.lexsort((best, -flat[best]))]:  # by score, then (i, j) in order, as a stable sort
            a, d = divmod(int(k), D)
            if np.isfinite(flat[k]):
                found.append((float(flat[k]), float(np.exp(lps[a] + lpe[a + d])), lo + a, lo + a + d))
    found.sort(key=lambda t: -t[0])
    spans = [Span(sc, p, a, b, *_characters(windows, a, b, continues)) for sc, p, a, b in found[:top_k]]
    null = float(min(nulls))
    margin = null - spans[0].score if spans else float("inf")
    return Pointed(spans, null, margin)


def _characters(windows: PairWindows, first: int, last: int, continues: np.ndarray) -> tuple[int, int]:
    """The characters of pieces ``first..last``, widened to whole words."""
    pieces = windows.pieces
    while first > 0 and continues[pieces[first]]:
        first -= 1
    while last + 1 < len(pieces) and continues[pieces[last + 1]]:
        last += 1
    return int(windows.offsets[first, 0]), int(windows.offsets[last, 1])


def no_answer_probability(margin: float | np.ndarray, scale: float, bias: float) -> np.ndarray:
    """``sigmoid(scale * margin + bias)``: the margin calibrated (module docstring)."""
    z = np.clip(scale * np.asarray(margin, np.float64) + bias, -60.0, 60.0)
    return 1.0 / (1.0 + np.exp(-z))
