"""The sections of a Markdown or reStructuredText file: where each heading starts, and its text.

Both formats are indexed as their text exactly as in the file (offsets into a document are offsets
into the file), so only the headings are found here, by their lines, without a full parser.

Markdown (CommonMark's rules, the parts that matter for headings): an ATX heading is a line of one
to six ``#`` then a space (up to three spaces of indent; a closing run of ``#`` is not part of the
text); a setext heading is a paragraph's text underlined by a line of ``=`` or ``-``. A ``---``
line after a blank line is a thematic break, not an underline, and nothing inside a fenced code
block (```` ``` ```` or ``~~~``) is a heading. A YAML front matter block (``---`` on the first
line up to the next ``---`` or ``...``) is skipped, so its last key is not taken for a heading.

reStructuredText: a section title is a line of text, not indented, after a blank line (or at the
start), underlined by one punctuation character repeated at least as long as the title, and
optionally overlined by the same line (then the title may be indented).

Each section starts at its heading's first line, ``#`` or overline included.
"""

from __future__ import annotations

import re

_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*")
_BREAK = re.compile(r" {0,3}(?:(?:-[ \t]*){3,}|(?:\*[ \t]*){3,}|(?:_[ \t]*){3,})")
_LIST_OR_QUOTE = re.compile(r" {0,3}(?:[-+*][ \t]|\d{1,9}[.)][ \t]|>)")  # no setext heading under these
_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def _lines(text: str) -> list[tuple[int, str]]:
    """(offset of the line in ``text``, the line without its line end), for each line."""
    lines, pos = [], 0
    for line in text.split("\n"):
        lines.append((pos, line.rstrip("\r")))
        pos += len(line) + 1
    return lines


def markdown_sections(text: str) -> list[tuple[int, str]]:
    """(start, heading text) of each Markdown heading, in order (see the module docstring)."""
    lines = _lines(text)
    sections = []
    fence = None  # the opening fence's character and length, inside a fenced code block
    paragraph: list[tuple[int, str]] = []  # the lines of the paragraph being read
    i = 0
    if lines and lines[0][1].rstrip() == "---":  # front matter
        ends = [n for n in range(1, len(lines)) if lines[n][1].rstrip() in ("---", "...")]
        if ends:
            i = ends[0] + 1
    for start, line in lines[i:]:
        if fence:
            m = _FENCE.fullmatch(line)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2).strip():
                fence = None
            continue
        m = _FENCE.fullmatch(line)
        if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
            fence, paragraph = m.group(1), []
            continue
        if not line.strip():
            paragraph = []
            continue
        m = _ATX.fullmatch(line)
        if m:
            heading = (m.group(2) or "").strip()
            if heading:
                sections.append((start, heading))
            paragraph = []
            continue
        if paragraph and _SETEXT.fullmatch(line) and not _LIST_OR_QUOTE.match(paragraph[0][1]):
            heading = " ".join(part.strip() for _, part in paragraph)
            sections.append((paragraph[0][0], heading))
            paragraph = []
            continue
        if _BREAK.fullmatch(line):
            paragraph = []
            continue
        if not paragraph and len(line) - len(line.lstrip(" ")) >= 4:  # indented code
            continue
        paragraph.append((start, line))
    return sections


def _adornment(line: str) -> str | None:
    """The character of a reStructuredText title's underline or overline, or None."""
    s = line.rstrip()
    if s and s[0] in _PUNCTUATION and s == s[0] * len(s):
        return s[0]
    return None


def rst_sections(text: str) -> list[tuple[int, str]]:
    """(start, title) of each reStructuredText section title, in order (see the module docstring)."""
    lines = _lines(text)
    sections = []
    n = 0
    while n + 1 < len(lines):
        start, line = lines[n]
        under = _adornment(lines[n + 1][1])
        blank_before = n == 0 or not lines[n - 1][1].strip()
        over = _adornment(line)
        if over and n + 2 < len(lines) and blank_before:  # an overline, a title, an underline
            title = lines[n + 1][1]
            if (
                title.strip()
                and _adornment(title) is None
                and lines[n + 2][1].rstrip() == line.rstrip()
                and len(line.rstrip()) >= len(title.rstrip())
            ):
                sections.append((start, title.strip()))
                n += 3
                continue
        if (
            under
            and blank_before
            and line.strip()
            and line == line.lstrip()
            and over is None
            and len(lines[n + 1][1].rstrip()) >= len(line.rstrip())
        ):
            sections.append((start, line.strip()))
            n += 2
            continue
        n += 1
    return sections
