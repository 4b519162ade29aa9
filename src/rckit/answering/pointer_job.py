"""A planned set of questions for rckit's own reader: :class:`PointerJob`.

Made by :meth:`rckit.answering.pointer_reader.PointerReader.plan_many`, read a window at a time by
:meth:`~rckit.answering.pointer_reader.PointerReader.read` (a server interleaves the windows of many
jobs, :mod:`rckit.serve.batcher`, as it does :class:`rckit.answering.job.Job`'s), and merged into
each pair's best spans and no-answer margin (:func:`rckit.answering.pointer.point`) once every
window is read. Imports no PyTorch.

An item is ``(pair, window)``: the question read beside one window of its passage, a sequence of
its own (``[CLS] question [SEP] passage window [SEP]``). Each item is a group of its own in
:attr:`PointerJob.windows`, longest first, so a call takes windows of like length.
"""

from __future__ import annotations

import threading

import numpy as np

from rckit.answering.answer import Answer, span
from rckit.answering.pointer import Pointed, no_answer_probability, point
from rckit.answering.reason import abstention
from rckit.data.pair_windows import PairWindows

Item = tuple[int, int]  # (pair, window)


class PointerJob:
    """Answering some ``(context, question)`` pairs with the encoder reader.

    ``pair_windows``: each pair's windows (:func:`rckit.data.pair_windows.pair_windows`);
    ``continues``: the tokenizer's pieces that continue a word (spans widen to whole words);
    ``calibration``: ``(a, b)`` of ``p(no answer) = sigmoid(a m + b)``; ``threshold``: abstain
    where that probability is above it (None: always answer, the abstention's probability still said).
    """

    def __init__(
        self,
        pairs: list[tuple[str, str]],
        top_k: int,
        max_answer: int,
        pair_windows: list[PairWindows],
        continues: np.ndarray,
        calibration: tuple[float, float],
        threshold: float | None,
    ):
        self.pairs, self.top_k, self.max_answer = pairs, top_k, max_answer
        self.pair_windows = pair_windows
        self.continues, self.calibration, self.threshold = continues, calibration, threshold
        items = [(p, w) for p, win in enumerate(pair_windows) for w in range(len(win.ids))]
        items.sort(key=lambda it: (-len(pair_windows[it[0]].ids[it[1]]), it))
        self.windows: list[list[Item]] = [[it] for it in items]  # the groups still to read (the batcher pops them)
        self.work = len(items)
        self.own = True  # the span readers' (their verifier's own reader); nothing here
        self.scores: dict[Item, tuple[np.ndarray, np.ndarray]] = {}
        self.lock = threading.Lock()  # a server may read two of its windows in two calls at once

    def cost(self, items: list[Item]) -> int:
        """Pieces the model reads for ``items``."""
        return sum(len(self.pair_windows[p].ids[w]) for p, w in items)

    def record(self, items: list[Item], start: list[np.ndarray], end: list[np.ndarray]) -> None:
        """Each item's start and end scores over (at least) its window's positions."""
        with self.lock:
            for item, s, e in zip(items, start, end):
                self.scores[item] = (s, e)

    def pointed(self) -> list[Pointed]:
        """Each pair's best ``top_k`` spans and no-answer margin over all its windows."""
        out = []
        for p, win in enumerate(self.pair_windows):
            start, end = zip(*(self.scores[(p, w)] for w in range(len(win.ids))))
            out.append(point(win, list(start), list(end), self.continues, self.top_k, self.max_answer))
        return out

    def no_answer_probabilities(self, pointed: list[Pointed]) -> list[float]:
        return [float(no_answer_probability(r.margin, *self.calibration)) for r in pointed]

    def answers(self) -> list[list[Answer]]:
        """The ``top_k`` best answers of each pair, best first, each with ``no_answer_probability``;
        where that is above the threshold the abstention (``""``, with the passage's sentence nearest
        to the question as its ``reason``) comes first and the spans follow."""
        pointed = self.pointed()
        out = []
        for (context, question), got, p_null in zip(self.pairs, pointed, self.no_answer_probabilities(pointed)):
            answers = [span(context, s.start, s.end, s.probability, p_null) for s in got.spans]
            if not answers or self.threshold is not None and p_null > self.threshold:
                answers = [abstention(p_null, context, question), *answers][: self.top_k]
            out.append(answers)
        return out

    def best_spans(self) -> list[tuple[str, float]]:
        """Each pair's best span as text (``""`` where the passage has no piece) and its p(no answer)."""
        pointed = self.pointed()
        return [
            (context[r.spans[0].start : r.spans[0].end] if r.spans else "", p)
            for (context, _), r, p in zip(self.pairs, pointed, self.no_answer_probabilities(pointed))
        ]
