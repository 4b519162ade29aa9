"""Rewards for policy-gradient training of span models (DCN+'s self-critical objective).

:class:`SpanF1Reward` scores token spans by the official SQuAD v1.1 F1
(:func:`rckit.evaluation.squad_metrics.f1_score`: normalisation, token overlap, maximum over
the gold answers) of the span's text against the question's gold answer texts.

Where the gold texts come from: a prepared :class:`~rckit.data.split.SquadSplit` keeps the
contexts, token offsets and the first usable answer as a token span (``y_start``/``y_end``), not
the answer strings. By default the gold text is therefore the exact context substring of that
token span (:func:`rckit.answering.decoding.span_to_text`); on SQuAD training data (one answer
per question, almost all on token boundaries) that is the answer text up to a cut token.
``gold_texts`` (one list of strings per question row) overrides it, e.g. with every dev answer.

A span is scored as the empty answer (F1 0) when it has no text: ``start > end``, a negative
index, or a question without a gold span.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rckit.answering.decoding import span_to_text
from rckit.data.split import SquadSplit
from rckit.evaluation.squad_metrics import f1_score


class SpanF1Reward:
    def __init__(self, split: SquadSplit, gold_texts: Sequence[list[str]] | None = None):
        if gold_texts is not None and len(gold_texts) != len(split):
            raise ValueError(f"gold_texts has {len(gold_texts)} entries for {len(split)} questions")
        self.split = split
        self.gold_texts = gold_texts
        self._gold_cache: dict[int, list[str]] = {}

    def gold(self, i: int) -> list[str]:
        """Gold answer texts of question row ``i`` (empty: no gold span)."""
        if self.gold_texts is not None:
            return list(self.gold_texts[i])
        if i not in self._gold_cache:
            s, e = int(self.split.a["y_start"][i]), int(self.split.a["y_end"][i])
            context, offsets = self.split.context_of(i)
            self._gold_cache[i] = [span_to_text(context, offsets, s, e)] if 0 <= s <= e < len(offsets) else []
        return self._gold_cache[i]

    def span_text(self, i: int, start: int, end: int) -> str:
        context, offsets = self.split.context_of(i)
        if not 0 <= start <= end < len(offsets):
            return ""
        return span_to_text(context, offsets, start, end)

    def __call__(self, batch_index: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
        """``batch_index`` (B,) split rows, ``starts``/``ends`` (B, K) inclusive token spans -> F1 (B, K) float32."""
        rows = batch_index.tolist()
        s_all, e_all = starts.tolist(), ends.tolist()
        out = torch.zeros(starts.shape, dtype=torch.float32)
        for b, i in enumerate(rows):
            gold = self.gold(i)
            if not gold:
                continue
            for k, (s, e) in enumerate(zip(s_all[b], e_all[b])):
                text = self.span_text(i, s, e)
                out[b, k] = max(f1_score(text, g, "1.1") for g in gold)
        return out.to(starts.device)
