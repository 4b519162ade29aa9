"""The symbolic baselines of Hermann et al. (2015, section 4.1) for cloze examples.

* **Maximum frequency**: the entity mentioned most often in the document.
* **Exclusive frequency**: the entity mentioned most often in the document among those not
  in the query (all candidates in the query: fall back to maximum frequency).
* **Word distance**: align the placeholder with each mention of each candidate and sum, over
  the other query words, the distance to the nearest matching document word, capped at
  ``max_penalty`` (the paper's m = 8, tuned there on validation data). Query word ``i`` with
  the placeholder at ``j``, aligned with a mention at document position ``p``, is expected at
  ``p + (i - j)``; its cost is ``min(m, |t - (p + i - j)|)`` over document positions ``t``
  holding the same word (lower-cased; entity markers match only themselves), ``m`` if none
  lies within ``m`` positions. A candidate's score is its best mention's; the lowest score wins.
  The paper also aligns words through its coreference system; here only identical words
  align. SQuAD-cloze queries have no ``@placeholder``: the first wh-word (what, who, whom,
  whose, when, where, which, how, why) stands at its position, else the first query token.

Ties (equal counts or equal distances) go to the candidate mentioned first in the document,
so every baseline is deterministic. Accuracy is over every example given, in percent.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Sequence

from rckit.data.cloze.examples import ENTITY_RE, PLACEHOLDER, ClozeExample

WH_WORDS = ("what", "who", "whom", "whose", "when", "where", "which", "how", "why")


def _ordered_candidates(ex: ClozeExample) -> list[str]:
    """Candidates sorted by first mention in the document (absent ones last, in given order)."""
    first = {}
    for i, t in enumerate(ex.document):
        first.setdefault(t, i)
    n = len(ex.document)
    return sorted(ex.candidates, key=lambda c: first.get(c, n))


def _most_frequent(ex: ClozeExample, cands: Sequence[str]) -> str | None:
    counts = Counter(t for t in ex.document if ENTITY_RE.match(t))
    best, best_n = None, -1
    for c in cands:  # in first-mention order, so ``>`` keeps the earliest of a tie
        if counts[c] > best_n:
            best, best_n = c, counts[c]
    return best


def maximum_frequency(ex: ClozeExample) -> str | None:
    return _most_frequent(ex, _ordered_candidates(ex))


def exclusive_frequency(ex: ClozeExample) -> str | None:
    cands = _ordered_candidates(ex)
    in_query = set(ex.query)
    outside = [c for c in cands if c not in in_query]
    return _most_frequent(ex, outside or cands)


def placeholder_position(query: Sequence[str]) -> int:
    """Index of ``@placeholder``, else of the first wh-word, else 0."""
    if PLACEHOLDER in query:
        return list(query).index(PLACEHOLDER)
    for i, t in enumerate(query):
        if t.lower() in WH_WORDS:
            return i
    return 0


def word_distance(ex: ClozeExample, max_penalty: int = 8) -> str | None:
    cands = _ordered_candidates(ex)
    if not cands:
        return None
    doc = [t.lower() for t in ex.document]
    positions: dict[str, list[int]] = {}
    for t_i, w in enumerate(doc):
        positions.setdefault(w, []).append(t_i)
    j = placeholder_position(ex.query)
    words = [(i - j, w.lower()) for i, w in enumerate(ex.query) if i != j]
    best, best_score = None, None
    for c in cands:
        score = None
        for p in positions.get(c.lower(), ()):
            total = 0
            for shift, w in words:
                where = positions.get(w)
                cost = max_penalty
                if where:
                    target = p + shift
                    k = bisect_left(where, target)
                    for t in where[max(k - 1, 0) : k + 1]:  # the nearest match is one of these
                        cost = min(cost, abs(t - target))
                total += cost
            if score is None or total < score:
                score = total
        if score is not None and (best_score is None or score < best_score):
            best, best_score = c, score
    return best if best is not None else cands[0]


BASELINES = {
    "maximum_frequency": maximum_frequency,
    "exclusive_frequency": exclusive_frequency,
    "word_distance": word_distance,
}


def score_baselines(examples: Iterable[ClozeExample], max_penalty: int = 8) -> dict:
    """Accuracy (%) of each baseline over every example, and the example count."""
    examples = list(examples)
    hits = Counter()
    for ex in examples:
        hits["maximum_frequency"] += maximum_frequency(ex) == ex.answer
        hits["exclusive_frequency"] += exclusive_frequency(ex) == ex.answer
        hits["word_distance"] += word_distance(ex, max_penalty) == ex.answer
    n = len(examples)
    out: dict = {"examples": n}
    for name in BASELINES:
        out[name] = round(100.0 * hits[name] / n, 2) if n else 0.0
    return out
