"""A (passage, question) pair as the encoder reader reads it: windows of one sequence each.

The fine-tuned encoder reader (:mod:`rckit.models.encoder_reader`) reads, as BERT's SQuAD readers
do (Devlin et al. 2019, section 4.2-4.3)::

    [CLS] question [SEP] passage window [SEP]
      0      0       0        1           1      segment (E_type)

The question keeps at most :data:`MAX_QUESTION` pieces; a passage longer than the room left is cut
into windows of that many pieces, ``stride`` apart (half the room unless set), so every piece is
read with context on both sides in some window. Each passage piece takes its answer from the
window where it stands furthest from an edge (:func:`rckit.contextual.pieces.owners`), as BERT's
"max context" rule does, so a span is proposed by one window only.

**Targets.** An answer (half-open characters ``[s, e)``) becomes the first piece ending after ``s``
and the last piece starting before ``e``; in a window that does not hold both, and for a question
the passage does not answer, both point at [CLS] (position 0): "no answer" is learnt as a span of
its own, against the answer-finding itself.

Everything here is NumPy; the pieces come from the encoder's own tokenizer
(:class:`rckit.contextual.pieces.PieceTokenizer`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rckit.contextual.pieces import owners

MAX_QUESTION = 64  # a question's pieces kept (SQuAD's longest run to about 40)


@dataclass(frozen=True)
class PairWindows:
    """The windows of one pair, each ``[CLS] q [SEP] window [SEP]``, and where the passage stands in them."""

    ids: list[np.ndarray]  # a window's pieces (P_w,) int64
    q_len: int  # the question's pieces kept; the passage starts at position q_len + 2
    spans: list[tuple[int, int]]  # each window's passage pieces, half-open, into the passage's pieces
    owner: np.ndarray  # (N,) the window each passage piece answers from
    pieces: np.ndarray  # (N,) the passage's pieces
    offsets: np.ndarray  # (N, 2) each passage piece's characters, half-open

    @property
    def first(self) -> int:
        """The position of a window's first passage piece."""
        return self.q_len + 2

    def types(self, w: int) -> np.ndarray:
        """(P_w,) the segments of window ``w``: 0 up to the first [SEP], 1 after."""
        t = np.zeros(len(self.ids[w]), np.int64)
        t[self.first :] = 1
        return t

    def allowed(self, w: int) -> np.ndarray:
        """(P_w,) where window ``w``'s pointers may stand: [CLS] and its passage pieces."""
        a = np.zeros(len(self.ids[w]), bool)
        a[0] = True
        a[self.first : len(self.ids[w]) - 1] = True
        return a

    def targets(self, start: int | None, end: int | None) -> np.ndarray:
        """(W, 2) each window's start and end positions for the answer ``[start, end)`` in
        characters (None: the passage does not answer): the answer's first and last pieces where
        the window holds both, else [CLS] (0, 0)."""
        out = np.zeros((len(self.ids), 2), np.int64)
        if start is None or end is None or not len(self.offsets):
            return out
        inside = np.flatnonzero((self.offsets[:, 1] > start) & (self.offsets[:, 0] < end))
        if not len(inside):
            return out
        i, j = int(inside[0]), int(inside[-1])
        for w, (lo, hi) in enumerate(self.spans):
            if lo <= i and j < hi:
                out[w] = (self.first + i - lo, self.first + j - lo)
        return out


def pair_windows(
    question: np.ndarray,
    passage: tuple[np.ndarray, np.ndarray],
    cls: int,
    sep: int,
    max_pieces: int,
    stride: int | None = None,
) -> PairWindows:
    """The windows of a pair (module docstring): ``question`` its pieces (Q,), ``passage`` its
    pieces (N,) and their offsets (N, 2); ``max_pieces`` the whole window, special pieces included."""
    q = np.asarray(question, np.int64)[:MAX_QUESTION]
    ids, offsets = passage
    room = max_pieces - 3 - len(q)
    if room < 8:
        raise ValueError(f"max_pieces {max_pieces} leaves {room} pieces for the passage beside the question")
    n = len(ids)
    step = stride or max(1, room // 2)
    if n <= room:
        spans = [(0, n)]
    else:
        spans = [(lo, lo + room) for lo in range(0, n - room, step)] + [(n - room, n)]
    owner, _ = owners(n, spans)
    head = np.concatenate([[cls], q, [sep]]).astype(np.int64)
    windows = [np.concatenate([head, ids[lo:hi], [sep]]).astype(np.int64) for lo, hi in spans]
    offsets = np.asarray(offsets, np.int64).reshape(-1, 2)
    return PairWindows(windows, len(q), spans, owner, np.asarray(ids, np.int64), offsets)


def padded(rows: list[np.ndarray], q_lens: list[int], length: int | None = None) -> dict[str, np.ndarray]:
    """Windows of several pairs as one batch: ``ids`` (B, P) int64, ``mask`` (B, P) bool (True on
    real pieces), ``types`` (B, P) int64 and ``allowed`` (B, P) bool (:meth:`PairWindows.allowed`),
    P the longest (or ``length``); ``q_lens`` each row's question pieces."""
    P = max([len(r) for r in rows] + [length or 0])
    out = {
        "ids": np.zeros((len(rows), P), np.int64),
        "mask": np.zeros((len(rows), P), bool),
        "types": np.zeros((len(rows), P), np.int64),
        "allowed": np.zeros((len(rows), P), bool),
    }
    for b, (row, q_len) in enumerate(zip(rows, q_lens)):
        n = len(row)
        out["ids"][b, :n] = row
        out["mask"][b, :n] = True
        out["types"][b, q_len + 2 : n] = 1
        out["allowed"][b, 0] = True
        out["allowed"][b, q_len + 2 : n - 1] = True
    return out
