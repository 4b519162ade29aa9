"""Text to the encoder's pieces and back to rckit's tokens, in NumPy.

- :class:`PieceTokenizer`: WordPiece pieces of a text with half-open character offsets into it
  (the encoder's own ``tokenizer.json``, read by :mod:`rckit.contextual.wordpiece` as the
  ``tokenizers`` library reads it; no truncation or padding, the special tokens added by
  :func:`piece_windows`' caller).
- :func:`piece_windows`: a text longer than the encoder's window (``max_pieces``, with [CLS] and
  [SEP]) is read in windows half a window apart; each piece takes its state from the window in
  which it stands furthest from an edge, so it is read with context on both sides.
- :func:`pool`: each rckit token's state is the mean of the states of the pieces that overlap its
  characters (``reading`` -> ``read ##ing``; ``U.S.`` -> ``u . s .``); a token no piece touches
  (characters the tokenizer drops) gets zeros. Text the tokenizer cannot spell (emoji, scripts
  outside its vocabulary) becomes ``[UNK]`` pieces, which still carry their position and
  neighbours: such a text is read, not refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rckit.contextual.wordpiece import WordPiece


class PieceTokenizer:
    """The encoder's tokenizer (``tokenizer.json``'s path or content): texts -> (piece ids (P,)
    int64, offsets (P, 2) int64)."""

    def __init__(self, path: str | Path | dict):
        self.tok = WordPiece(path)
        self.cls = self._special("[CLS]")
        self.sep = self._special("[SEP]")
        size = max([*self.tok.vocab.values(), *self.tok.special.values()], default=-1) + 1
        self.continues = np.zeros(size, bool)  # (vocabulary,) True where a piece continues a word (##ing)
        for piece, i in self.tok.vocab.items():
            self.continues[i] = piece.startswith(self.tok.prefix)

    def _special(self, piece: str) -> int:
        i = self.tok.token_to_id(piece)
        if i is None:
            raise ValueError(f"the encoder's tokenizer has no {piece} piece")
        return int(i)

    def pieces(self, texts: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        for text in texts:
            ids, offsets = self.tok.encode(text)
            out.append((np.asarray(ids, np.int64), np.asarray(offsets, np.int64).reshape(-1, 2)))
        return out


def piece_windows(n: int, size: int) -> list[tuple[int, int]]:
    """Half-open piece ranges of at most ``size`` pieces, ``size // 2`` apart, covering ``n`` pieces
    (one range, possibly empty, when they fit)."""
    if n <= size:
        return [(0, n)]
    stride = max(1, size // 2)
    starts = list(range(0, n - size, stride)) + [n - size]
    return [(lo, lo + size) for lo in starts]


def owners(n: int, windows: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``n`` pieces, the window it takes its state from (the one where it stands
    furthest from an edge; the first such on ties) and its position in that window."""
    best = np.full(n, -1, np.int64)
    where = np.zeros(n, np.int64)
    margin = np.full(n, -1, np.int64)
    for w, (lo, hi) in enumerate(windows):
        at = np.arange(lo, hi)
        m = np.minimum(at - lo, hi - 1 - at)
        better = m > margin[lo:hi]
        best[lo:hi][better], where[lo:hi][better], margin[lo:hi][better] = w, (at - lo)[better], m[better]
    return best, where


def pool(states: np.ndarray, piece_offsets: np.ndarray, token_offsets: np.ndarray) -> np.ndarray:
    """(T, ...) states of ``token_offsets`` (T, 2): the mean over the pieces (rows of ``states``,
    (P, ...), character spans ``piece_offsets`` (P, 2)) that overlap each token (:func:`token_pieces`);
    zeros where none."""
    T = len(token_offsets)
    out_shape = (T,) + states.shape[1:]
    if T == 0 or len(piece_offsets) == 0:
        return np.zeros(out_shape, np.float32)
    lo, hi = token_pieces(piece_offsets, token_offsets)
    flat = states.reshape(len(states), -1).astype(np.float64)
    sums = np.concatenate([np.zeros((1, flat.shape[1])), np.cumsum(flat, axis=0)])  # (P + 1, K*D)
    mean = (sums[hi] - sums[lo]) / np.maximum(hi - lo, 1)[:, None]
    return mean.astype(np.float32).reshape(out_shape)


def token_pieces(piece_offsets: np.ndarray, token_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each token ``[s, e)`` of ``token_offsets`` (T, 2), the half-open run ``[lo, hi)`` of the
    pieces (character spans ``piece_offsets`` (P, 2)) that overlap it; ``lo == hi`` where none does.

    Both offset lists run in text order, so the run goes from the first piece ending after ``s``
    to the last starting before ``e``.
    """
    token_offsets = np.asarray(token_offsets, np.int64).reshape(-1, 2)
    piece_offsets = np.asarray(piece_offsets, np.int64).reshape(-1, 2)
    p_start, p_end = piece_offsets[:, 0], piece_offsets[:, 1]
    # A piece's end is at least its start, and pieces do not run backwards: p_end's running maximum is sorted.
    lo = np.searchsorted(np.maximum.accumulate(p_end), token_offsets[:, 0], side="right")  # (T,)
    hi = np.searchsorted(p_start, token_offsets[:, 1], side="left")  # (T,)
    return lo, np.maximum(hi, lo)
