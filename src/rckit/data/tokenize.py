"""A fast rule-based tokenizer that keeps character offsets, and span conversions.

Rules, tried in order at each position (one regular expression, so it runs at C speed):

0. a character of a CJK script (Han, Hiragana, Katakana, Bopomofo, Hangul syllables, CJK
   symbols and punctuation, fullwidth and halfwidth forms) is a token on its own, with any
   kana voicing mark after it: these scripts write words without spaces, so one character is
   the smallest unit an answer span can start or end on (``北京在2008年`` -> ``北 京 在 2008 年``);
1. numbers with inner separators stay whole: ``1,000.5``, ``3.14`` (but ``2010.`` splits off
   the full stop, and ``1990s`` is a word);
2. a word followed by the clitic ``n't`` splits Penn-Treebank style: ``don't -> do n't``;
3. the clitics ``n't 's 're 've 'll 'd 'm`` are tokens (straight or curly apostrophe);
4. a run of letters and digits is a word;
5. any other non-space character is a token on its own (``-``, ``$``, ``%``, ``(`` ...).

This is close to the tokenization GloVe was trained on (PTB-style clitics), and splitting
every punctuation mark makes answer boundaries line up: nearly every SQuAD gold answer starts
and ends on token boundaries (the counts: docs/data.md, "Tokenization"; ``rckit prepare``
reports them); the rest start or end inside a word in the annotation itself, such as ``8``
inside ``20-18``. Offsets are half-open character spans into the original string, so any
token span maps back to the exact text.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence

# Part of the prepared-data cache key: 2 splits CJK text per character (rule 0); Latin text
# tokenizes as in 1, but some SQuAD paragraphs hold CJK names, so caches rebuild.
TOKENIZER_VERSION = "ptb-regex-2"

_CJK = (
    "\u2e80-\u2fdf"  # CJK and Kangxi radicals
    "\u3001-\u303f"  # CJK symbols and punctuation (not U+3000, the ideographic space)
    "\u3040-\u33ff"  # Hiragana, Katakana, Bopomofo, Hangul compatibility jamo, enclosed CJK, ...
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Han: extension A, unified, compatibility
    "\uac00-\ud7af"  # Hangul syllables
    "\ufe30-\ufe4f"  # CJK compatibility forms
    "\uff01-\uffef"  # fullwidth and halfwidth forms
    "\U0001b000-\U0001b16f"  # kana supplement and extension A
    "\U00020000-\U0003134f"  # Han extensions B-G and compatibility supplement
)

_TOKEN_RE = re.compile(
    rf"[{_CJK}][\u3099\u309a]?"  # 0 (combining voicing marks stay with their kana)
    rf"|\d+(?:[.,]\d+)*(?![^\W_{_CJK}])"  # 1
    rf"|[^\W_{_CJK}]+?(?=n['\u2019]t\b)"  # 2
    r"|n['\u2019]t\b|['\u2019](?:s|re|ve|ll|d|m)\b"  # 3
    rf"|[^\W_{_CJK}]+"  # 4
    r"|[^\w\s]|_",  # 5
    re.IGNORECASE,
)


def tokenize(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    """Split ``text`` into tokens and their half-open character spans."""
    tokens: list[str] = []
    offsets: list[tuple[int, int]] = []
    for m in _TOKEN_RE.finditer(text):
        tokens.append(m.group())
        offsets.append(m.span())
    return tokens, offsets


def char_to_token_span(offsets: Sequence[tuple[int, int]], start: int, end: int) -> tuple[int, int, bool] | None:
    """Map a half-open character span to the inclusive token span covering it.

    Returns ``(first, last, exact)`` where ``exact`` says the span starts on a token's first
    character and ends on a token's last one, ignoring surrounding whitespace; ``None`` if no
    token overlaps the span.
    """
    starts = [s for s, _ in offsets]
    ends = [e for _, e in offsets]
    return char_to_token_span_fast(starts, ends, start, end)


def char_to_token_span_fast(starts: Sequence[int], ends: Sequence[int], start: int, end: int):
    """:func:`char_to_token_span` with the offsets pre-split into two sorted lists."""
    first = bisect_right(ends, start)  # first token ending after the span starts
    last = bisect_left(starts, end) - 1  # last token starting before the span ends
    if first >= len(starts) or last < first:
        return None
    # Exact means no token is cut: the span neither starts nor ends inside a token.
    exact = starts[first] >= start and ends[last] <= end
    return first, last, exact


def token_to_char_span(offsets: Sequence[tuple[int, int]], first: int, last: int) -> tuple[int, int]:
    """Half-open character span from the first character of ``first`` to the end of ``last``."""
    return offsets[first][0], offsets[last][1]
