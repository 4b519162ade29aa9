"""An embedded passage index: documents cut into passages, in one SQLite file, ranked by BM25.

The "retrieve" half of retrieve-then-read (DrQA, Haystack). SQLite's FTS5 extension ships with
Python's standard library, needs no server, keeps the whole index in one file that can be copied
or deleted, and ranks with BM25, the baseline that DrQA's and Haystack's retrievers are measured
against. A server engine (OpenSearch, Elasticsearch) would sit behind the same interface,
``search(question, k) -> list[Hit]``, when one machine is not enough.

What is stored. ``sources`` holds one row per file (its resolved absolute path, the SHA-256 of its
bytes, its kind: ``text``, ``jsonl`` or ``squad``); ``documents`` one row per document (a text file,
a JSON-lines record, a SQuAD paragraph) with its full text; ``passages`` only character offsets,
half-open, into that text. A passage's text is therefore stored once: the view ``passage_text``
slices it out of its document, and the FTS5 table ``passages_fts`` (columns ``text``, ``title``)
is an *external-content* table over that view, keyed by passage id. Such a table keeps only the
inverted index; rows are added with ``INSERT INTO passages_fts(rowid, text, title)`` and removed
with FTS5's ``'delete'`` command given the same values, both read from the view, so the index
always holds what the view shows. ``meta`` records the schema version and ``max_words``.

A passage is at most ``max_words`` whitespace-separated words of one document: the text is split
at blank lines, consecutive paragraphs are merged while the total stays within ``max_words``, and a
longer paragraph is cut at sentence ends ("." "?" "!" then whitespace) or, for a sentence still too
long, between words. Passages never overlap, and their spans exclude the whitespace around them.

Updating. :meth:`PassageIndex.add` reads each file's bytes and compares their digest with the
stored one: an unchanged file costs a hash, a changed one has its documents and passages replaced,
a new one is added, and under each folder given, files indexed before that no longer exist (or
that are now unreadable, hence skipped) are removed. The whole call is one transaction, so an
error or Ctrl-C midway leaves the index as it was. (A folder that is moved is indexed anew under
its new path; its old entries stay until an index is rebuilt.)
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import sqlite3
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

SCHEMA_VERSION = 1
FORMAT = "rckit passage index"
READS = "reads: plain UTF-8 text, Markdown, JSON Lines {id, title, text}, SQuAD JSON"

# Words too common to help ranking; dropped from a question unless nothing else is left.
STOPWORDS = frozenset("""
a an and are as at be been but by can did do does for from had has have he her his how i if in
into is it its me my no not of on or our she so than that the their them then there these they
this those to was we were what when where which who whom whose why will with you your
""".split())

_SCHEMA = f"""
BEGIN;
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE sources (id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, digest TEXT NOT NULL,
                      kind TEXT NOT NULL);
CREATE TABLE documents (id INTEGER PRIMARY KEY, source_id INTEGER NOT NULL REFERENCES sources(id),
                        key TEXT, title TEXT NOT NULL, text TEXT NOT NULL, UNIQUE (source_id, key));
-- AUTOINCREMENT: a passage id never names two passages, even after its file is re-indexed.
CREATE TABLE passages (id INTEGER PRIMARY KEY AUTOINCREMENT,
                       document_id INTEGER NOT NULL REFERENCES documents(id),
                       ordinal INTEGER NOT NULL, start INTEGER NOT NULL, "end" INTEGER NOT NULL);
CREATE INDEX passages_by_document ON passages(document_id);
CREATE VIEW passage_text (id, document_id, text, title) AS
    SELECT p.id, p.document_id, substr(d.text, p.start + 1, p."end" - p.start), d.title
    FROM passages p JOIN documents d ON d.id = p.document_id;
CREATE VIRTUAL TABLE passages_fts USING fts5(text, title, content='passage_text', content_rowid='id',
                                              tokenize='porter unicode61 remove_diacritics 2');
-- ORDER BY rank is then BM25 with the title weighted half the text, and FTS5's fast path for LIMIT.
INSERT INTO passages_fts(passages_fts, rank) VALUES ('rank', 'bm25(1.0, 0.5)');
INSERT INTO meta VALUES ('format', '{FORMAT}'), ('schema', '{SCHEMA_VERSION}');
"""

_SEARCH = """
WITH top AS (SELECT rowid AS id, rank FROM passages_fts WHERE passages_fts MATCH ? ORDER BY rank LIMIT ?)
SELECT p.id, s.path, d.key, d.title, p.start, p."end", substr(d.text, p.start + 1, p."end" - p.start), -top.rank
FROM top JOIN passages p ON p.id = top.id JOIN documents d ON d.id = p.document_id
         JOIN sources s ON s.id = d.source_id
ORDER BY top.rank, p.id
"""


class IndexInputError(ValueError):
    """A file that cannot be indexed, or a file that is not an index. One line: the path, why,
    and for documents the formats that are read. ``path`` and ``why`` are kept for reports."""

    def __init__(self, path: str | Path, why: str, hint: str = READS):
        self.path, self.why = str(path), why
        super().__init__(f"{path}: {why}; {hint}" if hint else f"{path}: {why}")


@dataclass(frozen=True)
class Hit:
    passage_id: int
    source: str  # the file's resolved absolute path, as stored
    key: str | None  # JSON-lines id (or line number), "article/paragraph" for SQuAD, None for a text file
    title: str  # JSON-lines "title", SQuAD article title, else the file name
    start: int  # half-open character offsets into document_text(source, key)
    end: int
    text: str
    score: float  # BM25, higher is better


# ---- passages ------------------------------------------------------------------------------

_BLANK_LINE = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"[.?!]\s+")
_WORD = re.compile(r"\S+")


def _pieces(text: str, sep: re.Pattern, lo: int, hi: int, keep: int = 0):
    """Spans of text[lo:hi] between matches of ``sep`` (the first ``keep`` characters of a match
    stay with the piece before it), whitespace trimmed, empty ones dropped."""
    pos = lo
    for cut in [*((m.start() + keep, m.end()) for m in sep.finditer(text, lo, hi)), (hi, hi)]:
        piece = text[pos: cut[0]]
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
                chunk = words[i: i + max_words]
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


# ---- reading files -------------------------------------------------------------------------

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


def _storable(s: str) -> bool:
    # JSON can spell a NUL or a lone surrogate, which SQLite's text functions cannot hold.
    return "\x00" not in s and not any("\ud800" <= c <= "\udfff" for c in s)


def _read_squad(path: Path, data: bytes) -> list[tuple[str, str, str, str]]:
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
            docs.append((f"article {a} paragraph {p}", f"{a}/{p}", title, context))
    return docs


def _read_jsonl(path: Path, text: str) -> list[tuple[str, str, str, str]]:
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
        docs.append((f"line {n}", str(rid), title, rec["text"]))
    return docs


def _read_documents(path: Path, data: bytes) -> tuple[str, list[tuple[str | None, str, str]]]:
    """(kind, [(key, title, text)]) of one file's bytes; IndexInputError if it cannot be read."""
    name = path.name.lower()
    if name.endswith((".json", ".json.gz")):
        kind, found = "squad", _read_squad(path, data)
    elif name.endswith(".jsonl"):
        kind, found = "jsonl", _read_jsonl(path, _decode(path, data))
    else:
        return "text", [(None, path.name, _decode(path, data))]
    for where, key, title, text in found:
        if not (_storable(key) and _storable(title) and _storable(text)):
            raise IndexInputError(path, f"{where}: holds a NUL character or an unpaired surrogate")
    return kind, [doc[1:] for doc in found]


def _walk(folder: Path, skipped: list) -> list[Path]:
    """Regular files under ``folder``, sorted, hidden files and folders (".name") left out."""
    def unreadable(e: OSError):
        skipped.append({"path": e.filename, "why": e.strerror or str(e)})

    files = []
    for dirpath, dirnames, filenames in os.walk(folder, onerror=unreadable):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        files.extend(Path(dirpath, f) for f in filenames if not f.startswith("."))
    return sorted((f for f in files if f.is_file()), key=lambda f: f.parts)


# ---- the index -----------------------------------------------------------------------------

class PassageIndex:
    """Passages of many documents in one SQLite file (see the module docstring).

    Opens the index at ``path``, or creates it where there is no file or an empty one (its folder
    must exist); any other file that is not an index is refused with :class:`IndexInputError`.
    ``max_words`` is the passage size of a new index; an existing one keeps the value it was made with.
    """

    def __init__(self, path: str | Path, max_words: int = 200):
        self.path = Path(path)
        if self.path.is_dir():
            raise IndexInputError(self.path, "is a folder, not an index file", hint="")
        if not self.path.parent.is_dir():
            raise FileNotFoundError(f"{self.path.parent}: no such folder (an index file's folder must exist)")
        new = not self.path.exists() or self.path.stat().st_size == 0
        if new and (isinstance(max_words, bool) or not isinstance(max_words, int) or max_words < 1):
            raise ValueError(f"max_words should be a positive integer, got {max_words!r}")
        self._db = sqlite3.connect(self.path, isolation_level=None)  # transactions are explicit
        try:
            if new:
                self._db.executescript(_SCHEMA + f"INSERT INTO meta VALUES ('max_words', '{max_words}'); COMMIT;")
            try:
                meta = dict(self._db.execute("SELECT key, value FROM meta"))
            except sqlite3.DatabaseError as e:
                raise IndexInputError(self.path, f"not an rckit passage index ({e})", hint="") from None
            if meta.get("format") != FORMAT:
                raise IndexInputError(self.path, "not an rckit passage index (its meta table names no format)", hint="")
            if meta.get("schema") != str(SCHEMA_VERSION):
                raise IndexInputError(self.path, f"index schema {meta.get('schema')}, this rckit reads "
                                                 f"{SCHEMA_VERSION}; index the files again into a new file", hint="")
            self.max_words = int(meta["max_words"])
        except BaseException:
            self._db.close()
            raise

    def add(self, paths: list[str | Path], progress: bool = False) -> dict:
        """Index files and folders (recursively; a single path is taken as a list of one); index
        again to take in what changed.

        A file given by name that cannot be read raises :class:`IndexInputError`; one found in a
        folder is skipped, named on stderr and listed in the report's ``"skipped"``. Returns
        ``{"added", "updated", "unchanged", "removed"}`` (file counts), ``"skipped"``
        (``[{"path", "why"}]``) and the index's total ``"documents"`` and ``"passages"``.
        """
        if isinstance(paths, (str, Path)):
            paths = [paths]
        report = {"added": 0, "updated": 0, "unchanged": 0, "removed": 0, "skipped": []}
        files: dict[Path, bool] = {}  # path -> given by name (errors raise) rather than found in a folder
        folders = []
        own = {self.path.resolve(), Path(f"{self.path.resolve()}-journal")}  # never index the index
        for given in paths:
            if not Path(given).expanduser().exists():
                raise FileNotFoundError(f"{given}: no such file or folder")
            root = Path(given).expanduser().resolve()  # "~/notes" from Python, as a shell would have it
            if root.is_dir():
                folders.append(root)
                for f in _walk(root, report["skipped"]):
                    if f not in own:
                        files.setdefault(f, False)
            elif root.is_file():
                files[root] = True
            else:
                raise IndexInputError(root, "not a regular file")
        self._db.execute("BEGIN IMMEDIATE")
        try:
            bar = tqdm(files.items(), unit="file", desc="indexing", file=sys.stderr, disable=None if progress else True)
            for path, by_name in bar:
                self._add_file(path, by_name, report)
            for folder in folders:
                prefix = os.path.join(str(folder), "")
                for source_id, path in self._db.execute("SELECT id, path FROM sources WHERE substr(path, 1, ?) = ?",
                                                        (len(prefix), prefix)).fetchall():
                    if not os.path.exists(path):
                        self._remove(source_id, keep_source=False)
                        report["removed"] += 1
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:  # SQLite may already have rolled back (a full disk)
                self._db.execute("ROLLBACK")
            raise
        stats = self.stats()
        report["documents"], report["passages"] = stats["documents"], stats["passages"]
        return report

    def _add_file(self, path: Path, by_name: bool, report: dict) -> None:
        row = self._db.execute("SELECT id, digest FROM sources WHERE path = ?", (str(path),)).fetchone()
        try:
            data = path.read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            if row and row[1] == digest:
                report["unchanged"] += 1
                return
            kind, docs = _read_documents(path, data)
        except (OSError, IndexInputError) as e:
            if by_name:
                raise
            why = e.why if isinstance(e, IndexInputError) else e.strerror or str(e)
            report["skipped"].append({"path": str(path), "why": why})
            tqdm.write(f"rckit index: skipped {path}: {why}", file=sys.stderr)
            if row:  # its old text is no longer what the file says
                self._remove(row[0], keep_source=False)
                report["removed"] += 1
            return
        if row:
            source_id = row[0]
            self._remove(source_id, keep_source=True)
            self._db.execute("UPDATE sources SET digest = ?, kind = ? WHERE id = ?", (digest, kind, source_id))
            report["updated"] += 1
        else:
            source_id = self._db.execute("INSERT INTO sources (path, digest, kind) VALUES (?, ?, ?)",
                                         (str(path), digest, kind)).lastrowid
            report["added"] += 1
        for key, title, text in docs:
            doc_id = self._db.execute("INSERT INTO documents (source_id, key, title, text) VALUES (?, ?, ?, ?)",
                                      (source_id, key, title, text)).lastrowid
            self._db.executemany('INSERT INTO passages (document_id, ordinal, start, "end") VALUES (?, ?, ?, ?)',
                                 [(doc_id, i, s, e) for i, (s, e) in enumerate(cut_passages(text, self.max_words))])
        self._db.execute("INSERT INTO passages_fts (rowid, text, title) SELECT id, text, title FROM passage_text "
                         "WHERE document_id IN (SELECT id FROM documents WHERE source_id = ?)", (source_id,))

    def _remove(self, source_id: int, keep_source: bool) -> None:
        """Drop a source's documents and passages (and the source itself unless ``keep_source``)."""
        docs = "(SELECT id FROM documents WHERE source_id = ?)"
        # An external-content FTS5 table forgets a row only when told its old values.
        self._db.execute("INSERT INTO passages_fts (passages_fts, rowid, text, title) "
                         f"SELECT 'delete', id, text, title FROM passage_text WHERE document_id IN {docs}",
                         (source_id,))
        self._db.execute(f"DELETE FROM passages WHERE document_id IN {docs}", (source_id,))
        self._db.execute("DELETE FROM documents WHERE source_id = ?", (source_id,))
        if not keep_source:
            self._db.execute("DELETE FROM sources WHERE id = ?", (source_id,))

    def search(self, question: str, k: int = 20) -> list[Hit]:
        """The ``k`` passages that best match ``question`` by BM25, best first.

        The question's words (runs of Unicode letters and digits, lower-cased) are each quoted as
        an FTS5 string and OR-ed, so punctuation and FTS5 syntax (AND, NOT, NEAR, ``*``, quotes)
        in a question are only words. Words in :data:`STOPWORDS` are dropped unless nothing else
        is left. A question without words gives ``[]``.
        """
        words = list(dict.fromkeys(re.findall(r"[^\W_]+", question.lower())))
        words = [w for w in words if w not in STOPWORDS] or words
        if not words or k < 1:
            return []
        match = " OR ".join(f'"{w}"' for w in words)
        return [Hit(*row) for row in self._db.execute(_SEARCH, (match, k))]

    def document_text(self, source: str, key: str | None) -> str:
        """The stored text of a document, the text a :class:`Hit`'s offsets point into."""
        row = self._db.execute("SELECT d.text FROM documents d JOIN sources s ON s.id = d.source_id "
                               "WHERE s.path = ? AND d.key IS ?", (str(source), key)).fetchone()
        if row is None:
            raise KeyError(f"{source}: no document {key!r} in {self.path}")
        return row[0]

    def stats(self) -> dict:
        def count(table: str) -> int:
            return self._db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]

        return {"documents": count("documents"), "passages": count("passages"), "sources": count("sources"),
                "bytes": self.path.stat().st_size, "max_words": self.max_words}

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> PassageIndex:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
