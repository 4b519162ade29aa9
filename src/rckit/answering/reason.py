"""Why a reader abstains, in a form a person can check: the passage's sentence nearest to the question.

Where a reader says the text holds no answer, the person asking wants to see where the text comes
nearest, to check that it does not say. :func:`nearest_sentence` gives the sentence of the passage
(:func:`rckit.data.near_miss.sentence_spans`, the one sentence rule) that shares most of the
question's content with it, each shared word weighted by how few of the passage's sentences hold
it (``log(1 + n / df)``: a word every sentence holds tells nothing), ties to the earlier sentence;
None where no sentence shares a content word with the question. Words are met by their crude
stems, stopwords left out (:func:`rckit.answering.verifier_features.content`). NumPy-free.
"""

from __future__ import annotations

import math
from collections import Counter

from rckit.answering.answer import Answer, Reason, no_answer
from rckit.answering.verifier_features import content, words
from rckit.data.near_miss import sentence_spans


def nearest_sentence(context: str, question: str) -> Reason | None:
    """The sentence of ``context`` nearest to ``question`` (module docstring), without the
    whitespace around it, or None."""
    wanted = content(words(question))
    if not wanted:
        return None
    spans = sentence_spans(context)
    held = [content(words(context[a:b])) & wanted for a, b in spans]
    df = Counter(s for shared in held for s in shared)
    weight = [sum(math.log(1 + len(spans) / df[s]) for s in shared) for shared in held]
    best = max(range(len(spans)), key=lambda i: (weight[i], -i))
    if weight[best] == 0:
        return None
    a, b = spans[best]
    text = context[a:b]
    start = a + len(text) - len(text.lstrip())
    end = a + len(text.rstrip())
    return {"text": context[start:end], "start": start, "end": end}


def abstention(p_null: float | None, context: str, question: str) -> Answer:
    """A reader's abstention on ``question`` about ``context``: :func:`~rckit.answering.answer.no_answer`
    with its ``reason``, the nearest sentence (None where there is none)."""
    return {**no_answer(p_null), "reason": nearest_sentence(context, question)}
