"""Reading the documents of a file, by its format: what ``rckit index`` takes from each file.

A file's name says its format (:data:`FORMATS`, the longest ending that matches):

- ``.jsonl``: JSON Lines, one document per record ``{"id", "title", "text"}``;
- ``.json`` and ``.json.gz``: SQuAD JSON, one document per paragraph (its ``context``), titled by
  its article;
- ``.md``/``.markdown`` (Markdown), ``.rst`` (reStructuredText) and any name no format claims
  (plain text): UTF-8 text, the whole file one document titled by the file's name, its text exactly
  as in the file (a leading byte-order mark dropped), so a hit's offsets are offsets into the
  file's own text; Markdown and reStructuredText headings start sections
  (:mod:`rckit.retrieval.formats.headings`);
- ``.html``/``.htm``/``.xhtml`` and ``.epub``: the main text of a page, the chapters of a book
  (:mod:`rckit.retrieval.formats.html`); ``.docx``: a Word document (:mod:`rckit.retrieval.formats.word`);
  ``.pdf``: a PDF's text layer, page by page (:mod:`rckit.retrieval.formats.pdf`). Their text is the clean
  text these modules make, in blocks separated by blank lines; the way back to the file is its
  regions (:class:`Region`: a PDF's pages, the others' sections). ``.doc`` (old binary Word) is
  claimed only to be refused with advice;
- ``X.gz``: gzip-compressed (up to :data:`MAX_UNPACKED` bytes uncompressed), read as X's format.

These four formats need the ``documents`` extra (pypdf, python-docx, lxml, cryptography),
imported when such a file is read, never when this module is; without it such a file is refused
with the ``pip install`` line that mends it.

Each document has a ``key``, unique within its file: a JSON-lines record's ``id`` (its line number
where it has none), ``"article/paragraph"`` for SQuAD, None for a file that is one document. A file
that cannot be read raises :class:`IndexInputError`, one line naming the file, why, and, where the
file may be of a format not read, the formats read. A file is read whole or refused whole.

Adding a format is one function ``read_x(path, data) -> list[Document]`` (module-level: the store
may read files in worker processes) and one entry in :data:`FORMATS` (its ``kind``, the file name
endings it claims, and how :data:`READS` names it).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from rckit.retrieval.formats import headings, html, pdf, word


class IndexInputError(ValueError):
    """A file that cannot be indexed, or a file that is not an index. One line: the path, why,
    and for documents the formats that are read (``hint``, :data:`READS` unless given; ``""``
    for none). ``path`` and ``why`` are kept for reports."""

    def __init__(self, path: str | Path, why: str, hint: str | None = None):
        self.path, self.why = str(path), why
        self.hint = READS if hint is None else hint
        super().__init__(f"{path}: {why}; {self.hint}" if self.hint else f"{path}: {why}")

    def __reduce__(self):  # from a worker process: the default would call __init__(message)
        return type(self), (self.path, self.why, self.hint)


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


def read_markdown(path: Path, data: bytes) -> list[Document]:
    """The whole file as text, its headings' sections as regions."""
    text = _decode(path, data)
    regions = tuple(Region(start, None, heading) for start, heading in headings.markdown_sections(text))
    return [Document("text", None, path.name, text, regions)]


def read_rst(path: Path, data: bytes) -> list[Document]:
    """The whole file as text, its section titles' sections as regions."""
    text = _decode(path, data)
    regions = tuple(Region(start, None, heading) for start, heading in headings.rst_sections(text))
    return [Document("text", None, path.name, text, regions)]


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
        data = _gunzip(path, data)
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


# A bound on what a compressed file may unpack to, so that a gzip or zip bomb is refused, not read.
MAX_UNPACKED = 512 * 2**20
# The packages of the modules the documents extra installs, to name in a refusal.
_PACKAGES = {"pypdf": "pypdf", "docx": "python-docx", "lxml": "lxml", "cryptography": "cryptography"}


def _gunzip(path: Path, data: bytes) -> bytes:
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            data = f.read(MAX_UNPACKED + 1)  # streamed: never more than the bound in memory
    except (OSError, EOFError, zlib.error) as e:
        raise IndexInputError(path, f"not a readable gzip file ({e})") from None
    if len(data) > MAX_UNPACKED:
        raise IndexInputError(path, f"over {MAX_UNPACKED >> 20} MiB uncompressed (a gzip bomb?)")
    return data


def _unpacked_within_bound(path: Path, data: bytes) -> None:
    """Refuse a zip (DOCX, EPUB) whose members unpack to more than :data:`MAX_UNPACKED` bytes
    (zipfile stops reading a member at its recorded size); a broken zip is for its reader to name."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            size = sum(member.file_size for member in z.infolist())
    except (zipfile.BadZipFile, OSError, ValueError):
        return
    if size > MAX_UNPACKED:
        raise IndexInputError(path, f"over {MAX_UNPACKED >> 20} MiB uncompressed (a zip bomb?)")


def _one_document(path: Path, what: str, extract: Callable[[bytes], tuple], data: bytes) -> list[Document]:
    """The document that ``extract`` (a format module's) makes of a file: its ValueError is the
    file's refusal, its ImportError the missing extra's."""
    try:
        title, text, regions = extract(data)
    except ImportError as e:
        module = (e.name or str(e)).split(".")[0]
        raise IndexInputError(
            path, f"reading {what} needs {_PACKAGES.get(module, module)}: pip install 'rckit[documents]'", hint=""
        ) from None
    except ValueError as e:  # the format is read, this file is not: the formats read would not help
        raise IndexInputError(path, str(e), hint="") from None
    return [Document("text", None, title or path.name, text, tuple(Region(*r) for r in regions))]


def read_html(path: Path, data: bytes) -> list[Document]:
    """A page's main text (see :mod:`rckit.retrieval.formats.html`), titled by its ``<title>``."""
    return _one_document(path, "HTML", html.extract, data)


def read_epub(path: Path, data: bytes) -> list[Document]:
    """A book's chapters in reading order (see :mod:`rckit.retrieval.formats.html`), titled by its dc:title."""
    _unpacked_within_bound(path, data)
    return _one_document(path, "EPUB", html.read_epub, data)


def read_docx(path: Path, data: bytes) -> list[Document]:
    """A Word document's paragraphs and tables (see :mod:`rckit.retrieval.formats.word`)."""
    _unpacked_within_bound(path, data)
    return _one_document(path, "Word .docx", word.extract, data)


def read_doc(path: Path, data: bytes) -> list[Document]:
    """Old binary Word files are claimed only to be refused with advice."""
    raise IndexInputError(path, "old binary Word format; save it as .docx", hint="")


def read_pdf(path: Path, data: bytes) -> list[Document]:
    """A PDF's text layer, a region per page (see :mod:`rckit.retrieval.formats.pdf`)."""
    return _one_document(path, "PDF", pdf.extract, data)


def read_gzip(path: Path, data: bytes) -> list[Document]:
    """``X.gz``: the uncompressed bytes, read as X's format (``X.gz.gz`` unpacked twice)."""
    name = path.name
    while True:
        name, data = name[:-3], _gunzip(path, data)
        fmt = format_of(Path(name))
        if fmt.read is not read_gzip:
            return fmt.read(path, data)


@dataclass(frozen=True)
class Format:
    kind: str  # what the index stores as the file's kind (sources.kind)
    suffixes: tuple[str, ...]  # lower-case file name endings it claims; () for any name no other claims
    read: Callable[[Path, bytes], list[Document]]
    named: str  # how READS names it; "" for a format claimed only to be refused


FORMATS = (
    Format("text", (), read_text, "plain UTF-8 text"),
    Format("markdown", (".md", ".markdown"), read_markdown, "Markdown"),
    Format("rst", (".rst",), read_rst, "reStructuredText"),
    Format("jsonl", (".jsonl",), read_jsonl, "JSON Lines {id, title, text}"),
    Format("squad", (".json", ".json.gz"), read_squad, "SQuAD JSON"),
    Format("html", (".html", ".htm", ".xhtml"), read_html, "HTML"),
    Format("epub", (".epub",), read_epub, "EPUB"),
    Format("docx", (".docx",), read_docx, "Word .docx"),
    Format("doc", (".doc",), read_doc, ""),
    Format("pdf", (".pdf",), read_pdf, "PDF"),
    Format("gzip", (".gz",), read_gzip, "any of these gzip-compressed (.gz)"),
)
READS = "reads: " + ", ".join(f.named for f in FORMATS if f.named)


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
        if not (
            _storable(doc.key)
            and _storable(doc.title)
            and _storable(doc.text)
            and all(_storable(r.section) for r in doc.regions)
        ):
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
