"""A planned set of questions: :class:`Job`, made by :meth:`rckit.answering.reader.Reader.plan`,
read window by window (:meth:`~rckit.answering.reader.Reader.read`), and merged into answers, best
spans, no-answer probabilities and a verifier's features. Imports no PyTorch."""

from __future__ import annotations

import math
import threading
from dataclasses import replace

import numpy as np

from rckit.answering.answer import Answer, span
from rckit.answering.decoding import abstains
from rckit.answering.reason import abstention
from rckit.answering.verifier import Verifier
from rckit.answering.verifier_features import FEATURES, ReaderEvidence, features_of


class Job:
    """Answering some ``(context, question)`` pairs: planned (tokenized, cut into windows) by
    :meth:`Reader.plan`, read a window at a time by :meth:`Reader.read` (a server interleaves
    the windows of many jobs, :mod:`rckit.serve.batcher`), merged by :meth:`answers`.

    ``windows``: the groups of items still to read, each the questions on one window of one
    context, an item ``(pair, context, lo, hi)`` indexing ``arrays``; ``work``: how many
    (question, window) items the job had in all.
    """

    def __init__(
        self,
        pairs: list[tuple[str, str]],
        top_k: int,
        max_answer_len: int,
        arrays: dict,
        windows: list[list[tuple]],
        first: int = 0,
        no_answer_threshold: float = 0.0,
        verifier: tuple[Verifier, float] | None = None,
    ):
        self.pairs, self.top_k, self.max_answer_len, self.arrays = pairs, top_k, max_answer_len, arrays
        self.windows = windows
        self.first = first  # the arrays' row of this job's first pair (jobs planned together share arrays)
        self.work = sum(len(w) for w in windows)
        self.found: list[dict[tuple[int, int], float]] = [{} for _ in pairs]
        self.no_answer_threshold = no_answer_threshold
        # The null score of each pair (a model that can abstain): the lowest over its windows, the
        # window most sure the text answers; None for a model that cannot abstain.
        self.null: list[float | None] = [None for _ in pairs]
        # (verifier, threshold on its p(no answer)), and what the reader said in the window of each
        # pair's best span: the verifier's reader evidence.
        self.verifier = None if verifier is None else verifier[0]
        self.verifier_threshold = None if verifier is None else verifier[1]
        self.evidence: list[ReaderEvidence | None] = [None for _ in pairs]
        self.wants_evidence = verifier is not None  # True: collected without a verifier, to train one
        # Whether the own reader (where the reader's verifier has one) judges each pair; rckit ask
        # judges its passages by the features and its best answers by the own reader.
        self.own = True
        self.lock = threading.Lock()  # a server may read two of its windows in two calls at once

    @property
    def threshold_in_use(self) -> float | None:
        """The threshold on this job's p(no answer): the reader's, except where the verifier's own
        reader stands aside (:attr:`own` False) and the network judges by its own."""
        if self.verifier is None or self.verifier.own is None or self.own or self.verifier_threshold == math.inf:
            return self.verifier_threshold
        return self.verifier.threshold

    @staticmethod
    def cost(items: list[tuple]) -> int:
        """Context tokens the model reads for ``items``."""
        return sum(hi - lo for _, _, lo, hi in items)

    def record(
        self,
        items: list[tuple],
        starts,
        ends,
        scores,
        nulls: list[float] | None = None,
        evidence: list[ReaderEvidence] | None = None,
    ) -> None:
        """The top spans of each item (token indices in its window), as character spans of its
        context; ``nulls``: each item's null score (a model that can abstain); ``evidence``: each
        item's window as the verifier reads it (a model with a verifier)."""
        with self.lock:
            self._record(items, starts, ends, scores, nulls, evidence)

    def _record(
        self, items: list[tuple], starts, ends, scores, nulls: list[float] | None, evidence: list[ReaderEvidence] | None
    ) -> None:
        a = self.arrays
        for b, (i, c, lo, _) in enumerate(items):
            k = i - self.first
            if nulls is not None:
                held = self.null[k]
                self.null[k] = nulls[b] if held is None else min(held, nulls[b])
            if evidence is not None and starts[b] and starts[b][0] >= 0:
                held = self.evidence[k]
                if held is None or scores[b][0] > held.span_log_p:  # the window of the best span
                    self.evidence[k] = replace(evidence[b], span_log_p=float(scores[b][0]))
            offsets = a["ctx_offsets"][a["ctx_ptr"][c] : a["ctx_ptr"][c + 1]]
            for s, e, score in zip(starts[b], ends[b], scores[b]):
                if s < 0:
                    continue
                span = (int(offsets[lo + s][0]), int(offsets[lo + e][1]))
                found = self.found[k]
                if score > found.get(span, -math.inf):  # a span two windows found counts once
                    found[span] = score

    def _ranked(self) -> list[list[tuple[tuple[int, int], float]]]:
        """Each pair's spans over all its windows, best first."""
        return [sorted(spans_of.items(), key=lambda kv: (-kv[1], kv[0])) for spans_of in self.found]

    def no_answer_probabilities(self, ranked=None) -> list[float | None]:
        """Each pair's probability that its text holds no answer: the verifier's, from its best
        span (a model with a verifier), else the null's (a model that can abstain), else None."""
        if self.verifier is None:
            return [None if null is None else math.exp(null) for null in self.null]
        ranked = self._ranked() if ranked is None else ranked
        if self.verifier.own is not None and self.own:  # the network's features only for a join
            x = self.features(ranked) if self.verifier.own.join is not None else None
            return self.verifier.judge(self.pairs, x).tolist()
        x = self.features(ranked)
        return self.verifier.probability(x).tolist() if len(x) else []

    def features(self, ranked=None) -> np.ndarray:
        """What a verifier reads of each pair, (pairs, :data:`rckit.answering.verifier.FEATURES`):
        its best span, and the reader's evidence where the job collected it (:attr:`wants_evidence`:
        a reader with a verifier, or one whose verifier is being trained)."""
        ranked = self._ranked() if ranked is None else ranked
        rows = []
        for (context, question), spans, null, evidence in zip(self.pairs, ranked, self.null, self.evidence):
            (s, e), score = spans[0] if spans else ((None, None), -math.inf)
            if evidence is not None and null is not None:
                evidence = replace(evidence, null_margin=null - score)
            rows.append(features_of(context, question, s, e, evidence))
        return np.stack(rows) if rows else np.zeros((0, len(FEATURES)), np.float32)

    def answers(self) -> list[list[Answer]]:
        """The ``top_k`` best answers of each pair, over all its windows, best first.

        Each answer carries ``no_answer_probability`` (None for a model that can neither abstain
        nor verify). Where the text holds no answer (the verifier's probability of that is above
        its threshold; for a model without a verifier, the null beats the best span by more than
        the threshold), the first answer is the abstention, ``{"answer": "", "score": p(no
        answer), "start": None, "end": None, "reason": ...}`` (its reason: the passage's sentence
        nearest to the question, :func:`rckit.answering.reason.abstention`), and the ``top_k``
        best spans follow it.
        """
        ranked = self._ranked()
        p_none = self.no_answer_probabilities(ranked)
        results = []
        for (context, question), spans, null, p_null in zip(self.pairs, ranked, self.null, p_none):
            best = spans[: self.top_k]
            answers = [span(context, s, e, math.exp(score), p_null) for (s, e), score in best]
            best_score = best[0][1] if best else -math.inf
            if self.verifier is not None:
                abstain = abstains(p_null, self.threshold_in_use)
            else:
                abstain = abstains(None if null is None else null - best_score, self.no_answer_threshold)
            if abstain:
                answers.insert(0, abstention(p_null, context, question))
            results.append(answers)
        return results

    def best_spans(self) -> list[tuple[str, float | None]]:
        """Each pair's best span over all its windows (``""`` where none was found) and its
        no-answer score, compared with a threshold: the verifier's p(no answer) for a model with
        a verifier, else for a model that can abstain its null margin (the null's score less the
        best span's, in log-probability), else None. The abstention left to the caller is what
        official evaluation scores at any threshold (:mod:`rckit.evaluation.evaluate`)."""
        ranked = self._ranked()
        verified = self.no_answer_probabilities(ranked) if self.verifier is not None else None
        best = []
        for k, ((context, _), spans, null) in enumerate(zip(self.pairs, ranked, self.null)):
            top = spans[0] if spans else None
            text = "" if top is None else context[top[0][0] : top[0][1]]
            if verified is not None:
                best.append((text, verified[k]))
            else:
                best.append((text, None if null is None else null - (-math.inf if top is None else top[1])))
        return best
