"""What the two drawings of a span reader's explanation share: the PNG figure (:mod:`.png`) and the
HTML page (:mod:`.page`), written by the file's suffix in :mod:`.write`.

What is drawn is what ``Reader.explain`` returns (:mod:`rckit.answering.explanation`), or that same
JSON read back from a file: these modules need neither torch nor the model, so an explanation saved as
JSON can be drawn later and elsewhere. Both drawings hold the same four views, each left out where the
explanation has nothing for it:

- the passage (the window explained), each word shaded by the model's start probability (blue, upper
  half) and end probability (orange, lower half), the answer boxed;
- the attention between question and passage as a heat map with the words on its axes: QANet's
  context-query attention (S_bar and S_bbar, Yu et al. 2018, eqs. 1-2), DCN's coattention (A^D and A^Q,
  Xiong et al. 2017, eq. 2). A long passage shows the passage words around the answer and says so;
- DCN's dynamic decoder, one row for the start and one for the end estimate of every iteration, the word
  each picks outlined, as in Figure 3 of Xiong et al. (2017);
- the saliency of each word for the chosen span's score, signed (green raises it, pink lowers it):
  integrated gradients in the PNG, a switch between gradient x input and integrated gradients in HTML.

Shades are relative: each view scales its colour to its own largest value, which its legend gives, so a
flat distribution still shows where its mass is; probabilities of the passage and the decoder are shaded
by the square root of that share, so that the runners-up of a peaked distribution show too. This module
holds what both work out once: the record's keys and its check, the words as written, the passage words
a heat map shows, the shading, the lines of text both print, and the colours.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rckit.answering.explanation import Explanation

# Every field of the record, in its order: an explanation lacking one is refused, and the API's
# schema lists the same fields (tests/serve/test_explain_api.py).
KEYS = tuple(Explanation.__annotations__)
FOCUS = 60  # the most passage words a heat map shows at once

MODEL_NAMES = {"qanet": "QANet", "dcn": "DCN", "dcn_plus": "DCN+", "deep_lstm_reader": "Deep LSTM Reader"}
# RGB, shared by both drawings: blue/orange and green/pink stay apart for colour-blind readers.
START, END = (31, 119, 180), (255, 127, 14)
POSITIVE, NEGATIVE = (27, 120, 55), (197, 27, 125)
ATTENTION = (84, 39, 143)


def checked(explanation: Mapping[str, Any]) -> Mapping[str, Any]:
    """``explanation``, if it has every field of the record; else a ValueError naming those it lacks."""
    missing = [k for k in KEYS if k not in explanation]
    if missing:
        raise ValueError(f"not an explanation (what Reader.explain returns): it lacks {', '.join(missing)}")
    return explanation


def write_atomically(path: Path, write: Callable[[Path], Any]) -> None:
    # A half-written file is never left under the name asked for (a figure watched while it is redrawn).
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


@dataclass
class Word:
    """One token as the user wrote it: its text, what separates it from the token before ("" when they
    touch, " " for a space, "\\n" for a paragraph break) and its index in its token list."""

    text: str
    sep: str
    index: int


def words(text: str, tokens: Sequence[str], offsets: Sequence[Sequence[int]]) -> list[Word]:
    """The tokens as written in ``text`` (the offsets index it), with what separates them; the token's
    own string where its offsets do not fit the text."""
    out, previous = [], None
    for i, token in enumerate(tokens):
        start, end = offsets[i] if i < len(offsets) else (-1, -1)
        valid = 0 <= start < end <= len(text)
        shown = " ".join(text[start:end].split()) if valid else str(token)
        gap = text[previous:start] if valid and previous is not None and previous <= start else " "
        sep = "" if previous is None or gap == "" else "\n" if gap.count("\n") >= 2 else " "
        out.append(Word(shown or str(token), sep, i))
        previous = end if valid else None
    return out


def answer_tokens(ex: Mapping[str, Any]) -> tuple[int, int] | None:
    span = ex.get("answer_tokens")
    return (int(span[0]), int(span[1])) if span else None


def focus(ex: Mapping[str, Any], limit: int = FOCUS) -> tuple[int, int]:
    """The passage tokens ``[lo, hi)`` a heat map shows: all of them when there are at most ``limit``,
    else ``limit`` around the answer (and the decoder's estimates when they fit beside it)."""
    n = len(ex["context_tokens"])
    if n <= limit:
        return 0, n
    span = answer_tokens(ex) or (_argmax(ex["start_probs"]), _argmax(ex["end_probs"]))
    first, last = min(span), max(span)
    # A decoder step that points at the null (-1) has no place among the words.
    points = [first, last] + [int(it[k]) for it in ex.get("decoder") or () for k in ("start", "end") if it[k] >= 0]
    if max(points) - min(points) < limit:
        first, last = min(points), max(points)
    lo = (first + last + 1) // 2 - limit // 2
    lo = max(0, min(lo, n - limit))
    return lo, lo + limit


def _argmax(values: Sequence[float]) -> int:
    return max(range(len(values)), key=lambda i: values[i]) if values else 0


def scale(values: Sequence[float]) -> float:
    """The largest magnitude of ``values``, what their shading is relative to (1 when all are 0)."""
    top = max((abs(float(v)) for v in values if v is not None and math.isfinite(float(v))), default=0.0)
    return top if top > 0 else 1.0


def fraction(value: float | None, top: float) -> float:
    """``|value| / top`` in [0, 1]; 0 for a missing value."""
    if value is None or not math.isfinite(float(value)):
        return 0.0
    return min(1.0, abs(float(value)) / top)


def shade(probability: float | None, top: float) -> float:
    """How dark a probability of the passage or the decoder is drawn: the square root of its share of
    the largest, so that the runners-up of a peaked distribution still show. The attention (with its
    colour bar) and the saliency (signed, less peaked) are drawn linear."""
    return math.sqrt(fraction(probability, top))


def number(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{float(value):.{digits}g}"


def picked(ws: list[Word], index: int) -> str:
    """The word a decoder step picks, with its number; the null (-1) is no answer."""
    if 0 <= index < len(ws):
        return f"\u201c{ws[index].text}\u201d (word {index + 1})"
    return "no answer" if index < 0 else f"word {index + 1}"


def model_name(ex: Mapping[str, Any]) -> str:
    return MODEL_NAMES.get(str(ex["model"]), str(ex["model"]))


def answer_line(ex: Mapping[str, Any]) -> str:
    a = ex["answer"]
    text = f"\u201c{a['answer']}\u201d" if a["answer"] else "no answer (the model says the passage holds none)"
    line = f"{text} \u00b7 p = {number(a.get('score'))}"
    if a.get("no_answer_probability") is not None:
        line += f" \u00b7 p(no answer) = {number(a['no_answer_probability'])}"
    return line


def window_line(ex: Mapping[str, Any]) -> str:
    w, n = ex["window"], len(ex["context"])
    part = (
        "the whole context"
        if (w["start"], w["end"]) == (0, n)
        else f"the window of characters {w['start']}\u2013{w['end']} of {n}, where the answer was read"
    )
    return f"model {model_name(ex)} \u00b7 explained: {part}, {len(ex['context_tokens'])} words"


def attention_titles(ex: Mapping[str, Any]) -> tuple[str, str, str]:
    """The heat maps' name, and what each of its two matrices is."""
    if ex["attention"]["kind"] == "coattention":
        return (
            f"{model_name(ex)}'s coattention",
            "passage \u2192 question: each passage word's weights over the question words (A^D; a column "
            "sums to 1, less what goes to the sentinel)",
            "question \u2192 passage: each question word's weights over the passage words (A^Q; a row sums "
            "to 1 over the whole window, less what goes to the sentinel)",
        )
    return (
        f"{model_name(ex)}'s context-query attention",
        "passage \u2192 question: each passage word's weights over the question words (S_bar; a column sums to 1)",
        "question \u2192 passage: each question word's weights over the passage words (S_bbar; a row sums to 1 "
        "over the whole window)",
    )


def focus_line(ex: Mapping[str, Any], lo: int, hi: int) -> str:
    n = len(ex["context_tokens"])
    return "" if (lo, hi) == (0, n) else f"passage words {lo + 1}\u2013{hi} of {n}, around the answer"
