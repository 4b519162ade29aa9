"""BERT's WordPiece tokenizer, read from the encoder's ``tokenizer.json``, in plain Python.

What the ``tokenizers`` library does with a ``BertNormalizer`` + ``BertPreTokenizer`` + ``WordPiece``
file, piece for piece and offset for offset (tests/contextual/test_wordpiece.py compares the two
on every SQuAD v1.1 dev paragraph and question): rckit reads its encoders without that library,
whose dependencies (huggingface-hub and what it pulls) were a tenth of the light install.

A text is read in four steps, each character of the text it makes remembering the character of
the original it came from, so that every piece has half-open character offsets into the text as
given:

1. **Special tokens** (``added_tokens``, matched on the raw text): ``[CLS]`` written in a text is
   that piece, as in the library.
2. **Normalizing** (``BertNormalizer``): characters 0, U+FFFD and other control/format characters
   (Unicode category C, tab and line breaks excepted) dropped, white space made a space, each
   CJK ideograph set apart by spaces, accents stripped (NFD, then non-spacing marks dropped;
   done whenever the file lowercases and says nothing else, as BERT does) and each character
   lowercased on its own.
3. **Words** (``BertPreTokenizer``): split at white space, each punctuation character (Unicode
   category P, or ASCII punctuation such as ``$`` and ``+``) a word of its own.
4. **Pieces** (``WordPiece``): the longest vocabulary entry from the word's start, then the
   longest ``##``-entry from where it ended, and so on; a word with a part no entry matches, or
   longer than ``max_input_chars_per_word`` characters, is one ``[UNK]``.
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
from pathlib import Path

# Rust's char::is_whitespace (Unicode White_Space), which the library uses; Python's isspace differs.
WHITE_SPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
ASCII_PUNCTUATION = frozenset(string.punctuation)
# ASCII characters normalizing drops (controls other than tab and line breaks) or makes a space.
ASCII_DROPPED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
ASCII_SPACE = str.maketrans("\t\n\r", "   ")
WORDS = re.compile("[^ ]+")  # after clean_text every white space character is a space
ANY_WORDS = re.compile("[^" + "".join(sorted(WHITE_SPACE)) + "]+")  # runs without Rust's white space
WORDS_KEPT = 200_000  # words whose pieces are remembered
CJK = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def is_white_space(c: str) -> bool:
    return c in WHITE_SPACE


def is_control(c: str) -> bool:
    return c not in "\t\n\r" and unicodedata.category(c)[0] == "C"


def is_cjk(c: str) -> bool:
    o = ord(c)
    return any(lo <= o <= hi for lo, hi in CJK)


def is_punctuation(c: str) -> bool:
    return c in ASCII_PUNCTUATION or unicodedata.category(c)[0] == "P"


class WordPiece:
    """The tokenizer of a ``tokenizer.json`` (its path, or its content as a dict): :meth:`encode`
    gives a text's piece ids and their (start, end) character offsets into it. Refuses, naming the
    field, a file of another kind."""

    def __init__(self, path: str | Path | dict):
        if isinstance(path, dict):  # the file's content, as a model file carries it
            spec, path = path, "the tokenizer"
        else:
            path = Path(path)
            try:
                spec = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise ValueError(f"{path}: not a readable tokenizer file ({e})") from None
        model, norm, pre = spec.get("model") or {}, spec.get("normalizer") or {}, spec.get("pre_tokenizer") or {}
        for field, got, want in (
            ("model.type", model.get("type"), "WordPiece"),
            ("normalizer.type", norm.get("type"), "BertNormalizer"),
            ("pre_tokenizer.type", pre.get("type"), "BertPreTokenizer"),
        ):
            if got != want:
                raise ValueError(f"{path}: {field} is {got!r}; rckit reads BERT WordPiece tokenizers ({want})")
        self.vocab: dict[str, int] = model["vocab"]
        self.unk = self.vocab[model.get("unk_token", "[UNK]")]
        self.prefix = model.get("continuing_subword_prefix", "##")
        self.longest = int(model.get("max_input_chars_per_word", 100))
        self.clean = bool(norm.get("clean_text", True))
        self.chinese = bool(norm.get("handle_chinese_chars", True))
        self.lowercase = bool(norm.get("lowercase", True))
        accents = norm.get("strip_accents")
        self.strip_accents = self.lowercase if accents is None else bool(accents)
        self._chars: dict[str, str] = {}
        self._memo: dict[str, list[tuple[int, int, int]]] = {}
        self.special = {t["content"]: int(t["id"]) for t in spec.get("added_tokens", [])}
        self.special_re = (
            re.compile("|".join(re.escape(s) for s in sorted(self.special, key=len, reverse=True)))
            if self.special
            else None
        )

    def token_to_id(self, piece: str) -> int | None:
        if piece in self.special:
            return self.special[piece]
        return self.vocab.get(piece)

    def encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """The piece ids of ``text`` and each piece's half-open character span in it."""
        ids: list[int] = []
        offsets: list[tuple[int, int]] = []
        at = 0
        for m in self.special_re.finditer(text) if self.special_re else ():
            self._encode_plain(text, at, m.start(), ids, offsets)
            ids.append(self.special[m.group()])
            offsets.append(m.span())
            at = m.end()
        self._encode_plain(text, at, len(text), ids, offsets)
        return ids, offsets

    def _char(self, c: str) -> str:
        """What normalizing makes of one character ("" where it is dropped), kept once worked out."""
        out = self._chars.get(c)
        if out is None:
            out = c
            if self.clean:
                if c == "\0" or c == "\ufffd" or is_control(c):
                    out = ""
                elif is_white_space(c):
                    out = " "
            if self.chinese and out and is_cjk(out):
                out = f" {out} "
            if self.strip_accents:
                out = "".join(d for d in unicodedata.normalize("NFD", out) if unicodedata.category(d) != "Mn")
            if self.lowercase:
                out = out.lower()
            self._chars[c] = out
        return out

    def _normalized(self, text: str, lo: int, hi: int) -> tuple[str, list[int] | None]:
        """``text[lo:hi]`` normalized, and for each of its characters the original's index (None:
        the same as its own index plus ``lo``, the usual case of plain ASCII)."""
        part = text[lo:hi]
        if part.isascii() and not ASCII_DROPPED.search(part):
            part = part.translate(ASCII_SPACE) if self.clean else part
            return (part.lower() if self.lowercase else part), None
        chars: list[str] = []
        origin: list[int] = []
        for i in range(lo, hi):
            out = self._char(text[i])
            if out:
                chars.append(out)
                origin.extend([i] * len(out))
        return "".join(chars), origin

    def _encode_plain(self, text: str, lo: int, hi: int, ids: list[int], offsets: list[tuple[int, int]]) -> None:
        norm, origin = self._normalized(text, lo, hi)
        for m in (WORDS if self.clean else ANY_WORDS).finditer(norm):
            a, b = m.span()
            word = m.group()
            if word.isalnum():
                self._word(word, a, lo, origin, ids, offsets)
                continue
            start = None
            for j in range(a, b + 1):
                c = norm[j] if j < b else " "
                if j == b or is_white_space(c) or is_punctuation(c):
                    if start is not None:
                        self._word(norm[start:j], start, lo, origin, ids, offsets)
                        start = None
                    if j < b and not is_white_space(c):
                        self._word(c, j, lo, origin, ids, offsets)
                elif start is None:
                    start = j

    def _word(
        self, word: str, at: int, lo: int, origin: list[int] | None, ids: list[int], offsets: list[tuple[int, int]]
    ) -> None:
        """The pieces of ``word`` (at ``at`` in the normalized text), appended with their offsets."""
        for i, a, b in self._pieces(word):
            ids.append(i)
            a, b = a + at, b + at
            offsets.append((a + lo, b + lo) if origin is None else (origin[a], origin[b - 1] + 1))

    def _pieces(self, word: str) -> list[tuple[int, int, int]]:
        """(id, start, end) of each piece of ``word``, ends relative to it; kept once worked out
        (up to :data:`WORDS_KEPT` words)."""
        got = self._memo.get(word)
        if got is not None:
            return got
        got = []
        n = len(word)
        start = 0
        while start < n and n <= self.longest:
            end = n
            while end > start:
                i = self.vocab.get(word[start:end] if start == 0 else self.prefix + word[start:end])
                if i is not None:
                    got.append((i, start, end))
                    break
                end -= 1
            if end == start:  # no entry matches this part
                break
            start = end
        if start < n:  # the whole word is unknown
            got = [(self.unk, 0, n)]
        if len(self._memo) >= WORDS_KEPT:
            self._memo.clear()
        self._memo[word] = got
        return got
