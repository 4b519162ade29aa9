"""Cutting a document into passages, the units the retriever ranks and the reader reads.

A passage is at most ``max_words`` whitespace-separated words of one document: the text is split
at blank lines, consecutive paragraphs are merged while the total stays within ``max_words``, and a
longer paragraph is cut at sentence ends ("." "?" "!" then whitespace) or, for a sentence still too
long, between words. Passages never overlap, and their spans (half-open character offsets into the
document's text) exclude the whitespace around them.
"""

from __future__ import annotations

import re

_BLANK_LINE = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"[.?!]\s+")
_WORD = re.compile(r"\S+")


def _pieces(text: str, sep: re.Pattern, lo: int, hi: int, keep: int = 0):
    """Spans of text[lo:hi] between matches of ``sep`` (the first ``keep`` characters of a match
    stay with the piece before it), whitespace trimmed, empty ones dropped."""
    pos = lo
    for cut in [*((m.start() + keep, m.end()) for m in sep.finditer(text, lo, hi)), (hi, hi)]:
        piece = text[pos : cut[0]]
        start = pos + len(piece) - len(piece.lstrip())
        end = pos + len(piece.rstrip())
        if start < end:
            yield start, end
        pos = cut[1]


def cut_passages(text: str, max_words: int) -> list[tuple[int, int]]:
    """Half-open spans of at most ``max_words`` words each, in order, not overlapping (see the
    module docstring). Whitespace-only text gives none."""
    units = []  # (start, end, words), each within max_words
    for p_start, p_end in _pieces(text, _BLANK_LINE, 0, len(text)):
        n = len(text[p_start:p_end].split())
        if n <= max_words:
            units.append((p_start, p_end, n))
            continue
        for s_start, s_end in _pieces(text, _SENTENCE_END, p_start, p_end, keep=1):
            words = list(_WORD.finditer(text, s_start, s_end))
            for i in range(0, len(words), max_words):
                chunk = words[i : i + max_words]
                units.append((chunk[0].start(), chunk[-1].end(), len(chunk)))
    spans: list[tuple[int, int]] = []
    total = 0
    for start, end, n in units:  # greedy merge: a sentence-cut paragraph's pieces merge back too
        if spans and total + n <= max_words:
            spans[-1] = (spans[-1][0], end)
            total += n
        else:
            spans.append((start, end))
            total = n
    return spans
