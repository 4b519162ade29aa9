"""Reading the documents of a file, by its format: what ``rckit index`` takes from each file.

A file's name says its format (:data:`FORMATS`): ``.jsonl`` is JSON Lines, one document per
record ``{"id", "title", "text"}``; ``.json`` and ``.json.gz`` are SQuAD JSON, one document per
paragraph (its ``context``), titled by its article; any other name is UTF-8 text (plain text,
Markdown), the whole file one document titled by the file's name. Text is kept exactly as in the
file (a leading byte-order mark dropped), so a hit's offsets into a text file's document are
offsets into the file's own text.

Each document has a ``key``, unique within its file: a JSON-lines record's ``id`` (its line number
where it has none), ``"article/paragraph"`` for SQuAD, None for a text file. A file that cannot be
read raises :class:`IndexInputError`, one line naming the file, why, and the formats read.

Adding a format is one function ``read_x(path, data) -> list[Document]`` and one entry in
:data:`FORMATS` (its ``kind``, the file name endings it claims, and how :data:`READS` names it).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple


class IndexInputError(ValueError):
    """A file that cannot be indexed, or a file that is not an index. One line: the path, why,
    and for documents the formats that are read (``hint``, :data:`READS` unless given; ``""``
    for none). ``path`` and ``why`` are kept for reports."""

    def __init__(self, path: str | Path, why: str, hint: str | None = None):
        self.path, self.why = str(path), why
        hint = READS if hint is None else hint
        super().__init__(f"{path}: {why}; {hint}" if hint else f"{path}: {why}")


class Region(NamedTuple):
    """Where a stretch of a document's text comes from: from ``start`` (a character offset into the
    document's text) to the next region's start, the text is on ``page`` (1-based, PDF) and under
    the heading ``section`` (HTML, Markdown, reStructuredText, Word, EPUB); None where the format
    has no such thing."""

    start: int
    page: int | None = None
    section: str | None = None


class Document(NamedTuple):
    where: str  # where it is in its file, for messages: "line 3", "article 0 paragraph 2"
    key: str | None  # unique within its file (see the module docstring); None for a whole text file
    title: str
    text: str
    regions: tuple[Region, ...] = ()  # in order of start; none for a format without pages or sections


def _decode(path: Path, data: bytes) -> str:
    """UTF-8 text exactly as in the file, except that a leading byte-order mark is dropped."""
    nul = data.find(b"\x00")
    if nul >= 0:
        raise IndexInputError(path, f"binary (a NUL byte at offset {nul})")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise IndexInputError(path, f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") from None
    return text[1:] if text.startswith("\ufeff") else text


# JSON can spell a NUL or a lone surrogate, which SQLite's text functions cannot hold.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _storable(s: str | None) -> bool:
    return s is None or _UNSTORABLE.search(s) is None


def read_text(path: Path, data: bytes) -> list[Document]:
    """The whole file, one document titled by the file's name."""
    return [Document("text", None, path.name, _decode(path, data))]


def read_jsonl(path: Path, data: bytes) -> list[Document]:
    """One document per non-blank line, an object with a ``"text"`` string (``"id"``, ``"title"``
    optional: the line number, the file's name)."""
    text = _decode(path, data)
    docs, keys = [], set()
    for n, line in enumerate(text.split("\n"), 1):  # not splitlines(): U+2028 may sit inside a string
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise IndexInputError(path, f"line {n}: not valid JSON ({e.msg}, column {e.colno})") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("text"), str):
            raise IndexInputError(path, f'line {n}: expected an object with a "text" string')
        rid = n if rec.get("id") is None else rec["id"]
        if isinstance(rid, bool) or not isinstance(rid, (str, int)):
            raise IndexInputError(path, f'line {n}: "id" should be a string or an integer')
        title = path.name if rec.get("title") is None else rec["title"]
        if not isinstance(title, str):
            raise IndexInputError(path, f'line {n}: "title" should be a string')
        if str(rid) in keys:
            raise IndexInputError(path, f"line {n}: id {str(rid)!r} is used twice in this file")
        keys.add(str(rid))
        docs.append(Document(f"line {n}", str(rid), title, rec["text"]))
    return docs


def read_squad(path: Path, data: bytes) -> list[Document]:
    """One document per paragraph of a SQuAD file (gzip-compressed or not), titled by its article."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise IndexInputError(path, f"not a readable gzip file ({e})") from None
    try:
        raw = json.loads(_decode(path, data))
    except json.JSONDecodeError as e:
        raise IndexInputError(path, f"not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("data"), list):
        raise IndexInputError(path, 'JSON but not SQuAD (no top-level "data" list of articles)')
    docs = []
    for a, article in enumerate(raw["data"]):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise IndexInputError(path, f'SQuAD article {a}: no "paragraphs" list')
        title = article.get("title")
        title = title if isinstance(title, str) else path.name
        for p, para in enumerate(paragraphs):
            context = para.get("context") if isinstance(para, dict) else None
            if not isinstance(context, str):
                raise IndexInputError(path, f'SQuAD article {a} paragraph {p}: no "context" string')
            docs.append(Document(f"article {a} paragraph {p}", f"{a}/{p}", title, context))
    return docs


@dataclass(frozen=True)
class Format:
    kind: str  # what the index stores as the file's kind (sources.kind)
    suffixes: tuple[str, ...]  # lower-case file name endings it claims; () for any name no other claims
    read: Callable[[Path, bytes], list[Document]]
    named: str  # how READS names it


FORMATS = (
    Format("text", (), read_text, "plain UTF-8 text, Markdown"),
    Format("jsonl", (".jsonl",), read_jsonl, "JSON Lines {id, title, text}"),
    Format("squad", (".json", ".json.gz"), read_squad, "SQuAD JSON"),
)
READS = "reads: " + ", ".join(f.named for f in FORMATS)


def format_of(path: Path) -> Format:
    """The format whose ending the file's name has (the longest such ending), else text."""
    name = path.name.lower()
    claims = [(len(s), f) for f in FORMATS for s in f.suffixes if name.endswith(s)]
    return max(claims, key=lambda c: c[0])[1] if claims else next(f for f in FORMATS if not f.suffixes)


def read_documents(path: Path, data: bytes) -> tuple[str, list[Document]]:
    """(kind, documents) of one file's bytes; :class:`IndexInputError` if it cannot be read."""
    fmt = format_of(path)
    docs = fmt.read(path, data)
    for doc in docs:
        if not (_storable(doc.key) and _storable(doc.title) and _storable(doc.text)
                and all(_storable(r.section) for r in doc.regions)):
            raise IndexInputError(path, f"{doc.where}: holds a NUL character or an unpaired surrogate")
    return fmt.kind, docs


def walk(folder: Path, skipped: list) -> list[Path]:
    """Regular files under ``folder``, sorted, hidden files and folders (".name") left out; a
    folder that cannot be listed is added to ``skipped`` as ``{"path", "why"}``."""
    def unreadable(e: OSError):
        skipped.append({"path": e.filename, "why": e.strerror or str(e)})

    files = []
    for dirpath, dirnames, filenames in os.walk(folder, onerror=unreadable):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        files.extend(Path(dirpath, f) for f in filenames if not f.startswith("."))
    return sorted((f for f in files if f.is_file()), key=lambda f: f.parts)
