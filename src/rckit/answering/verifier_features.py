"""What the verifiers read (:mod:`rckit.answering.verifier`): the features of an answer and of a
question asked of a collection, computed in plain Python and NumPy so that an ONNX reader stays
PyTorch-free.

The passage verifier reads :data:`FEATURES` of one (context, question, best span) triple:

- **from the reader** (the window its best span came from): the span's log-probability, the
  largest start and end log-probabilities, the entropies of the start and end distributions
  (over the window's tokens, divided by the log of their count), the window's length, and the
  null's margin over the span for a reader that has a null;
- **lexical evidence**, which a span softmax never sees: the question's content words, names
  (capitalised words) and numbers missing from the text and from the answer's sentence, the
  share of the question's word pairs found in the text, a negation in the question but not in
  the answer's sentence, the question word (what, who, when, ...) and the answer's form (digits,
  a year, a month, capitals, length), and their disagreements (a *when* question answered
  without a date, *how many* without a number, *who* without a name).

The collection verifier reads :data:`COLLECTION_FEATURES` of the passages retrieved and read
for a question (:func:`collection_features`). A feature computed otherwise under the same name
raises :data:`FEATURES_VERSION`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

STOPWORDS = frozenset(
    """
a about above after again against all also am an and any are as at be because been before being below
between both but by can could did do does doing down during each else ever few for from further had has
have having he her here hers herself him himself his i if in into is it its itself just like many may
me might more most much must my myself no nor not now of off on once only or other our ours ourselves
out over own same shall she should so some such than that the their theirs them themselves then there
these they this those through to too under until up upon us very was we were what when where which while
who whom whose why will with would you your yours yourself yourselves how s t one ones name named
called type kind year years time times
""".split()
)
QUESTION_WORDS = ("what", "which", "who", "when", "where", "why", "how many", "how much", "how")
NEGATIONS = frozenset(
    (
        "not",
        "never",
        "no",
        "none",
        "nobody",
        "nothing",
        "neither",
        "nor",
        "without",
        "n't",
        "cannot",
        "didn't",
        "doesn't",
        "don't",
        "isn't",
        "wasn't",
        "weren't",
        "aren't",
        "won't",
    )
)
MONTHS = frozenset(
    (
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    )
)
TIME_WORDS = frozenset(
    (
        "century",
        "centuries",
        "decade",
        "decades",
        "year",
        "years",
        "bc",
        "ad",
        "bce",
        "ce",
        "age",
        "era",
        "period",
        "dynasty",
        "war",
        "season",
        "day",
        "days",
        "week",
        "weeks",
        "month",
        "months",
        "morning",
        "evening",
        "night",
        "spring",
        "summer",
        "autumn",
        "winter",
        "fall",
        "after",
        "before",
        "during",
        "until",
        "since",
    )
)
NUMBER_WORDS = frozenset(
    (
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "dozen",
        "dozens",
        "hundred",
        "hundreds",
        "thousand",
        "thousands",
        "million",
        "millions",
        "billion",
        "billions",
        "half",
        "several",
        "few",
        "many",
        "no",
        "zero",
        "twenty",
        "thirty",
        "forty",
        "fifty",
        "sixty",
        "seventy",
        "eighty",
        "ninety",
        "percent",
    )
)

READER_FEATURES = (
    "span_log_p",
    "start_log_p_max",
    "end_log_p_max",
    "start_entropy",
    "end_entropy",
    "window_tokens_log",
    "null_margin",
)
LEXICAL_FEATURES = (
    "q_content_words_log",
    "q_missing_text",
    "q_missing_sentence",
    "q_missing_text_count",
    "q_names_missing_text",
    "q_names_missing_sentence",
    "q_numbers_missing_text",
    "q_any_name_missing_text",
    "q_pairs_in_text",
    "q_pairs_in_sentence",
    "q_negation",
    "q_negation_not_in_sentence",
    *(f"q_{w.replace(' ', '_')}" for w in QUESTION_WORDS),
    "q_other",
    "a_tokens_log",
    "a_digit",
    "a_year",
    "a_month",
    "a_capital",
    "a_lower",
    "a_in_question",
    "when_not_date",
    "how_many_not_number",
    "who_not_name",
    "where_not_name",
)
FEATURES = READER_FEATURES + LEXICAL_FEATURES
# Raised whenever a feature is computed otherwise under the same name: a verifier trained on the
# old computation is refused, and the training cache of read features (keyed on it) is not reused.
FEATURES_VERSION = 2

_WORD = re.compile(r"[A-Za-z0-9]+(?:'[a-z]+)?|n't")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_YEAR = re.compile(r"^(1[0-9]{3}|20[0-9]{2})s?$")


def words(text: str) -> list[str]:
    """The words of ``text`` as written (letters, digits, an apostrophe's ending)."""
    return _WORD.findall(text)


def stem(word: str) -> str:
    """A crude stem, so that *designed* meets *design* and *towers* *tower*: lower case, at most
    six letters (numbers whole)."""
    w = word.lower()
    return w if w[:1].isdigit() else w[:6]


def content(ws: list[str]) -> set[str]:
    """The stems of the words in ``ws`` that carry content (not stopwords, not one letter)."""
    return {stem(w) for w in ws if w.lower() not in STOPWORDS and len(w) > 1}


def names(question_words: list[str]) -> set[str]:
    """Capitalised words of a question after its first word, and its numbers, lower-cased: the
    names, dates and figures it asks about."""
    return {
        w.lower()
        for i, w in enumerate(question_words)
        if (i > 0 and w[:1].isupper() and w.lower() not in STOPWORDS) or w[:1].isdigit()
    }


def sentence_around(context: str, start: int, end: int) -> str:
    """The sentence of ``context`` holding the characters ``[start, end)`` (several where the span
    crosses a sentence end)."""
    lo = 0
    for m in _SENTENCE_END.finditer(context):  # the whole text: a sentence end looks at what follows it
        if m.end() > start:
            break
        lo = m.end()
    m = _SENTENCE_END.search(context, end)
    return context[lo : m.start() if m else len(context)]


def question_word(question: str) -> str:
    """Which of :data:`QUESTION_WORDS` the question asks with (the first found), or ``other``."""
    q = " " + " ".join(w.lower() for w in words(question)) + " "
    found = [(q.find(f" {w} "), -len(w), w) for w in QUESTION_WORDS if f" {w} " in q]
    return min(found)[2] if found else "other"


def _share_missing(wanted: set[str], have: set[str]) -> float:
    return len(wanted - have) / len(wanted) if wanted else 0.0


def _pairs(ws: list[str]) -> set[tuple[str, str]]:
    kept = [stem(w) for w in ws if w.lower() not in STOPWORDS]
    return set(zip(kept, kept[1:]))


def lexical_features(context: str, question: str, start: int | None, end: int | None) -> list[float]:
    """:data:`LEXICAL_FEATURES` of a question, its context and the answer ``context[start:end]``
    (None: no span, then the answer's sentence is the whole context)."""
    q_words = words(question)
    text_words = words(context)
    if start is None or end is None:
        start = end = 0
        sentence, answer = context, ""
    else:
        sentence, answer = sentence_around(context, start, end), context[start:end]
    s_words, a_words = words(sentence), words(answer)
    q_content, text_content, s_content = content(q_words), content(text_words), content(s_words)
    text_lower, s_lower = {w.lower() for w in text_words}, {w.lower() for w in s_words}
    q_names = names(q_words)
    q_numbers = {w for w in q_names if w[:1].isdigit()}
    q_pairs = _pairs(q_words)
    negated = any(w.lower() in NEGATIONS for w in q_words)
    kind = question_word(question)
    a_lower = [w.lower() for w in a_words]
    digit = any(w[:1].isdigit() for w in a_words)
    year = any(_YEAR.match(w) for w in a_lower)
    month = any(w in MONTHS for w in a_lower)
    capital = any(w[:1].isupper() for w in a_words)
    number = digit or any(w in NUMBER_WORDS for w in a_lower)
    dated = digit or month or any(w in TIME_WORDS for w in a_lower)
    q_lower = {w.lower() for w in q_words}
    return [
        math.log1p(len(q_content)),
        _share_missing(q_content, text_content),
        _share_missing(q_content, s_content),
        min(len(q_content - text_content), 5) / 5,
        _share_missing(q_names, text_lower),
        _share_missing(q_names, s_lower),
        float(bool(q_numbers - text_lower)),
        float(bool(q_names - text_lower)),
        len(q_pairs & _pairs(text_words)) / len(q_pairs) if q_pairs else 1.0,
        len(q_pairs & _pairs(s_words)) / len(q_pairs) if q_pairs else 1.0,
        float(negated),
        float(negated and not any(w.lower() in NEGATIONS for w in s_words)),
        *(float(kind == w) for w in QUESTION_WORDS),
        float(kind == "other"),
        math.log1p(len(a_words)),
        float(digit),
        float(year),
        float(month),
        float(capital),
        float(bool(a_words) and not capital and not digit),
        sum(w in q_lower for w in a_lower) / len(a_lower) if a_lower else 0.0,
        float(kind == "when" and not dated),
        float(kind in ("how many", "how much") and not number),
        float(kind == "who" and not capital),
        float(kind == "where" and not capital),
    ]


@dataclass(frozen=True)
class ReaderEvidence:
    """What the reader says of its best span, in the window it came from (log-probabilities over
    that window's tokens): see the module docstring."""

    span_log_p: float
    start_log_p_max: float
    end_log_p_max: float
    start_entropy: float  # divided by log(window tokens): 0 (sure) .. 1 (uniform)
    end_entropy: float
    window_tokens: int
    null_margin: float = 0.0  # the null's score less the span's, for a reader with a null; else 0

    def features(self) -> list[float]:
        return [
            max(self.span_log_p, -30.0),
            max(self.start_log_p_max, -30.0),
            max(self.end_log_p_max, -30.0),
            self.start_entropy,
            self.end_entropy,
            math.log1p(self.window_tokens),
            float(np.clip(self.null_margin, -30.0, 30.0)),
        ]


def window_evidence(
    start_logits: np.ndarray, end_logits: np.ndarray, mask: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row (B,): the largest start and end log-probabilities and the start and end entropies
    (normalised by the log of the row's token count) of a batch of windows."""
    n = np.log(np.maximum(mask.sum(axis=1), 2))

    def one(logits):
        x = np.where(mask, logits, -np.inf).astype(np.float32)
        x -= x.max(axis=1, keepdims=True)
        e = np.exp(x)  # 0 at padding
        z = e.sum(axis=1)
        log_p_max = -np.log(z)  # the largest logit less the log-normaliser
        # entropy = log z - sum(e * x) / z, over real tokens (x is -inf where e is 0)
        ex = np.where(mask, e * np.where(mask, x, 0.0), 0.0).sum(axis=1)
        return log_p_max, (np.log(z) - ex / z) / n

    (s_max, s_h), (e_max, e_h) = one(start_logits), one(end_logits)
    return s_max, e_max, s_h, e_h


def features_of(
    context: str, question: str, start: int | None, end: int | None, evidence: ReaderEvidence | None
) -> np.ndarray:
    """The verifier's input (:data:`FEATURES`), float32."""
    reader = evidence.features() if evidence is not None else [-30.0, -30.0, -30.0, 1.0, 1.0, 0.0, 0.0]
    return np.asarray(reader + lexical_features(context, question, start, end), np.float32)


COLLECTION_FEATURES = (
    "p_min",
    "p_low3_mean",
    "share_p_below_half",
    "best_p",
    "best_span_log_p",
    "best_bm25_of_top",
    "second_bm25_of_top",
    "q_names_missing_all",
    "q_content_missing_all",
    "q_names_missing_best",
    "q_content_missing_best",
    "q_pairs_in_best",
    "q_content_words_log",
    "answer_passages_share",
    "answer_span_mass",
)


def collection_features(
    question: str,
    read: list[tuple[float, str, float | None, float | None, str | None]],
    best: int | None,
    answer: str | None = None,
) -> np.ndarray:
    """:data:`COLLECTION_FEATURES` of a question asked of a collection: ``read`` holds each passage
    read (its BM25 score, its text, the reader's best span's probability and text or None, the
    passage verifier's p(no answer)), ``best`` the passage of the answer ranked first (None: none)
    and ``answer`` its text.

    Nothing here depends on the collection's size: BM25 scores only as shares of the top one (a
    term's weight depends on how many documents there are), how many passages were read only
    through the share of them the passage verifier trusts, so that the verifier trained on a
    large collection judges a folder of four files alike. The last two are the passages' agreement
    (as open-domain readers aggregate evidence, Wang et al. 2018): the share of the passages read
    whose best span says the first-ranked answer (its words, lower-cased), and those spans' share
    of all the best spans' probability."""
    q_words = words(question)
    q_content, q_names, q_pairs = content(q_words), names(q_words), _pairs(q_words)
    ps = sorted(p for _, _, _, p, _ in read if p is not None) or [1.0]
    bm25 = sorted((b for b, _, _, _, _ in read), reverse=True) or [0.0]
    top = bm25[0] if bm25[0] > 0 else 1.0
    all_words = [w for _, text, _, _, _ in read for w in words(text)]
    all_lower = {w.lower() for w in all_words}
    agree_share = agree_mass = 0.0
    if best is None:
        best_p, best_span, best_share, best_words = 1.0, -30.0, 0.0, []
    else:
        b, text, span_p, p, span_text = read[best]
        best_p = 1.0 if p is None else p
        best_span = max(math.log(span_p), -30.0) if span_p else -30.0
        best_share, best_words = b / top, words(text)
        said = _said(answer if answer is not None else span_text)
        same = [r for r in read if r[4] is not None and _said(r[4]) == said]
        total = sum(r[2] or 0.0 for r in read)
        agree_share = len(same) / len(read)
        agree_mass = sum(r[2] or 0.0 for r in same) / total if total > 0 else 0.0
    best_lower = {w.lower() for w in best_words}
    return np.asarray(
        [
            ps[0],
            float(np.mean(ps[:3])),
            sum(p < 0.5 for p in ps) / len(ps),
            best_p,
            best_span,
            best_share,
            (bm25[1] / top) if len(bm25) > 1 else 0.0,
            _share_missing(q_names, all_lower),
            _share_missing(q_content, content(all_words)),
            _share_missing(q_names, best_lower),
            _share_missing(q_content, content(best_words)),
            len(q_pairs & _pairs(best_words)) / len(q_pairs) if q_pairs else 1.0,
            math.log1p(len(q_content)),
            agree_share,
            agree_mass,
        ],
        np.float32,
    )


def _said(answer: str | None) -> tuple[str, ...]:
    """An answer's words, lower-cased: two spans that say the same thing compare equal."""
    return tuple(w.lower() for w in words(answer or ""))
