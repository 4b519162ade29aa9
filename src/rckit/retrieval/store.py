"""The passage store: documents cut into passages, in one SQLite file, ranked by BM25.

The "retrieve" half of retrieve-then-read (DrQA, Haystack). SQLite's FTS5 extension ships with
Python's standard library, needs no server, keeps the whole store in one file (the "index" that
``rckit index`` writes) that can be copied or deleted, and ranks with BM25, the baseline that
DrQA's and Haystack's retrievers are measured against. A server engine (OpenSearch,
Elasticsearch) would sit behind the same interface, ``search(question, k) -> list[Hit]``, when one
machine is not enough. Files are read by :mod:`rckit.retrieval.documents` and their documents cut
into passages by :mod:`rckit.retrieval.passages`.

What is stored. ``sources`` holds one row per file (its resolved absolute path, the SHA-256 of its
bytes, its kind: the format's name of :data:`rckit.retrieval.documents.FORMATS`); ``documents``
one row per document (a file, a JSON-lines record, a SQuAD paragraph) with its full text (for
PDF, HTML, Word and EPUB the clean text rckit made of it); ``regions`` where the pages and
sections of a document's text begin; ``passages`` only character offsets, half-open, into that
text. A passage's text is therefore stored once: the view ``passage_text`` slices it out of its
document, and the FTS5 table ``passages_fts`` (columns ``text``, ``title``) is an
*external-content* table over that view, keyed by passage id. Such a table keeps only the
inverted index; rows are added with ``INSERT INTO passages_fts(rowid, text, title)`` and removed
with FTS5's ``'delete'`` command given the same values, both read from the view, so the index
always holds what the view shows. ``meta`` records the schema version and ``max_words``.

Updating. :meth:`PassageStore.add` reads each file's bytes (in worker processes for a large
collection) and compares their digest with the stored one: an unchanged file costs a hash, a
changed one has its documents and passages replaced, a new one is added, and under each folder
given, files indexed before that no longer exist (or that are now unreadable, hence skipped) are
removed. Files are committed every few seconds of work, each file whole, so an error or Ctrl-C
keeps the files committed so far and never part of one. The file keeps a write-ahead log: a
server reading the index is never blocked by a writer and sees each commit whole. (A folder that
is moved is indexed anew under its new path; its old entries stay until the store is rebuilt.)
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import re
import sqlite3
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

from tqdm import tqdm

from rckit.retrieval.documents import Document, IndexInputError, Region, read_documents, walk
from rckit.retrieval.passages import cut_passages

SCHEMA_VERSION = 2
FORMAT = "rckit passage index"

# Beyond this many passages holding a question's words, search ranks only those holding its rarer
# words (PassageStore.search); chosen by measurement (BENCHMARKS.md, "Asking a collection at scale").
RANKED_PASSAGES = 20_000

# rckit index reads files in worker processes when they come to this many bytes (PassageStore.add).
PARALLEL_BYTES = 16 * 2**20
# ... and commits what it wrote every this many seconds of work, so a killed run keeps its work.
COMMIT_SECONDS = 5.0

# Words too common to help ranking; dropped from a question unless nothing else is left.
STOPWORDS = frozenset(
    """
a an and are as at be been but by can did do does for from had has have he her his how i if in
into is it its me my no not of on or our she so than that the their them then there these they
this those to was we were what when where which who whom whose why will with you your
""".split()
)

# Schema 2 added the table of regions (pages, sections); a schema-1 index gains it when opened.
_REGIONS = """
CREATE TABLE regions (document_id INTEGER NOT NULL REFERENCES documents(id), start INTEGER NOT NULL,
                      page INTEGER, section TEXT, PRIMARY KEY (document_id, start)) WITHOUT ROWID;
"""

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
{_REGIONS}
CREATE VIEW passage_text (id, document_id, text, title) AS
    SELECT p.id, p.document_id, substr(d.text, p.start + 1, p."end" - p.start), d.title
    FROM passages p JOIN documents d ON d.id = p.document_id;
CREATE VIRTUAL TABLE passages_fts USING fts5(text, title, content='passage_text', content_rowid='id',
                                              tokenize='porter unicode61 remove_diacritics 2');
-- ORDER BY rank is then BM25 with the title weighted half the text, and FTS5's fast path for LIMIT.
INSERT INTO passages_fts(passages_fts, rank) VALUES ('rank', 'bm25(1.0, 0.5)');
INSERT INTO meta VALUES ('format', '{FORMAT}'), ('schema', '{SCHEMA_VERSION}');
"""

# The best passages by BM25 (FTS5's rank, higher is better negated), two ways (see PassageStore.search):
# every passage holding any of the question's words ranked, or only those holding one of its rarer
# words. For the latter FTS5 scores "(rare) AND (all)" -- each rare word counted twice -- and the
# score of "rare" alone, read off the same rows, is subtracted: BM25 is a sum over the query's words.
_RANK_ALL = "SELECT rowid AS id, rank FROM passages_fts WHERE passages_fts MATCH ?1 ORDER BY rank LIMIT ?3"
_RANK_SOME = """
WITH twice(id, s) AS MATERIALIZED (SELECT rowid, bm25(passages_fts, 1.0, 0.5) FROM passages_fts
                                   WHERE passages_fts MATCH '(' || ?2 || ') AND (' || ?1 || ')'),
     once(id, s) AS MATERIALIZED (SELECT rowid, bm25(passages_fts, 1.0, 0.5) FROM passages_fts
                                  WHERE passages_fts MATCH ?2)
SELECT twice.id AS id, twice.s - once.s AS rank FROM twice JOIN once ON once.id = twice.id
ORDER BY rank, id LIMIT ?3
"""
_SEARCH = """
WITH top AS ({rank})
SELECT p.id, s.path, d.key, d.title, p.start, p."end", substr(d.text, p.start + 1, p."end" - p.start), -top.rank,
       p.document_id, EXISTS (SELECT 1 FROM regions r WHERE r.document_id = p.document_id)
FROM top JOIN passages p ON p.id = top.id JOIN documents d ON d.id = p.document_id
         JOIN sources s ON s.id = d.source_id
ORDER BY top.rank, p.id
"""
SEARCH_ALL, SEARCH_SOME = _SEARCH.format(rank=_RANK_ALL), _SEARCH.format(rank=_RANK_SOME)

# The regions a passage's text lies in: the one in force at its start, and those starting inside it.
_REGIONS_OF = """
SELECT start, page, section FROM regions WHERE document_id = ?1 AND start < ?3 AND start >= coalesce(
    (SELECT max(start) FROM regions WHERE document_id = ?1 AND start <= ?2), 0) ORDER BY start
"""


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
    regions: tuple[Region, ...] = ()  # the pages/sections the passage lies in (see Hit.region_at)

    def region_at(self, offset: int) -> Region | None:
        """The page and section of the document's text at ``offset`` (within this passage), or
        None for a document without them."""
        found = None
        for r in self.regions:
            if r.start > offset:
                break
            found = r
        return found


class PassageStore:
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
        # Transactions are explicit; a reader waits up to 30 s for a writer's lock instead of failing.
        self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
        try:
            if new:
                # Write-ahead logging: a server reading the index is never blocked by `rckit index`
                # writing to it, and sees its changes whole once they commit.
                self._db.execute("PRAGMA journal_mode = WAL")
                self._db.executescript(_SCHEMA + f"INSERT INTO meta VALUES ('max_words', '{max_words}'); COMMIT;")
            try:
                meta = dict(self._db.execute("SELECT key, value FROM meta"))
            except sqlite3.DatabaseError as e:
                raise IndexInputError(self.path, f"not an rckit passage index ({e})", hint="") from None
            if meta.get("format") != FORMAT:
                raise IndexInputError(self.path, "not an rckit passage index (its meta table names no format)", hint="")
            if meta.get("schema") == "1":  # schema 1 lacked regions: nothing stored changes meaning
                self._db.execute("PRAGMA journal_mode = WAL")
                self._db.executescript(
                    f"BEGIN IMMEDIATE; {_REGIONS} UPDATE meta SET value = '{SCHEMA_VERSION}' "
                    "WHERE key = 'schema'; COMMIT;"
                )
                meta["schema"] = str(SCHEMA_VERSION)
            if meta.get("schema") != str(SCHEMA_VERSION):
                raise IndexInputError(
                    self.path,
                    f"index schema {meta.get('schema')}, this rckit reads "
                    f"{SCHEMA_VERSION}; index the files again into a new file",
                    hint="",
                )
            self.max_words = int(meta["max_words"])
            self.ranked_passages: int | None = RANKED_PASSAGES
            self._counted: dict[str, int] = {}  # word -> passages holding it (search)
            self._counted_version = None
            self.commit_seconds = COMMIT_SECONDS
            self._written = 0  # passages written by this object, for the progress bar
        except BaseException:
            self._db.close()
            raise

    def add(
        self,
        paths: list[str | Path],
        progress: bool = False,
        jobs: int | None = None,
        read_files: Callable[[list[Path], dict[str, str], int], Iterator[FileRead]] | None = None,
    ) -> dict:
        """Index files and folders (recursively; a single path is taken as a list of one); index
        again to take in what changed.

        A file given by name that cannot be read raises :class:`IndexInputError`; one found in a
        folder is skipped, named on stderr and listed in the report's ``"skipped"``. Returns
        ``{"added", "updated", "unchanged", "removed"}`` (file counts), ``"skipped"``
        (``[{"path", "why"}]``) and the index's total ``"documents"`` and ``"passages"``.

        Files are read (hashed, parsed, cut into passages) by ``jobs`` worker processes while
        this one writes what they read; 0 reads here. None (the default) takes one worker per
        core but one, up to four, when the files come to :data:`PARALLEL_BYTES` or more, and
        none below that, where starting a worker costs more than it saves. A few files are read
        ahead of the writer, never all: memory stays bounded by the largest files, whatever the
        collection's size. Written files are committed every :attr:`commit_seconds` of work,
        each file whole: Ctrl-C or an error keeps the files committed so far (indexing again
        goes on from there, as they are unchanged) and never a part of one. ``read_files``: who
        reads them instead (``(paths, known digests by path, max_words)`` to each file's
        :func:`read_data`, in order; ``rckit index --ray``: :mod:`rckit.cluster.indexing`).
        """
        if isinstance(paths, (str, Path)):
            paths = [paths]
        report = {"added": 0, "updated": 0, "unchanged": 0, "removed": 0, "skipped": []}
        files, folders = self._files_of(paths, report["skipped"])
        sizes = {f: _size(f) for f in files}
        if jobs is None:
            jobs = min(4, (os.cpu_count() or 1) - 1) if sum(sizes.values()) >= PARALLEL_BYTES else 0
        known = dict(self._db.execute("SELECT path, digest FROM sources").fetchall())
        bar = _progress_bar(sum(sizes.values()), progress)
        try:
            self._db.execute("BEGIN IMMEDIATE")
            self._write_files(files, sizes, known, jobs, read_files, report, bar)
            self._remove_vanished(folders, report)
            self._db.execute("COMMIT")
            # Into the file itself, the log emptied: waits only for readers of an older snapshot.
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except BaseException:
            if self._db.in_transaction:  # SQLite may already have rolled back (a full disk)
                self._db.execute("ROLLBACK")
            raise
        finally:
            bar.close()
            self._counted.clear()
        stats = self.stats()
        report["documents"], report["passages"] = stats["documents"], stats["passages"]
        return report

    def _files_of(self, paths: list[str | Path], skipped: list[dict]) -> tuple[dict[Path, bool], list[Path]]:
        """The files to read, in order, each with whether it was given by name rather than found in
        a folder, and the folders given (resolved); never the index's own files. A folder that
        cannot be listed is added to ``skipped``; a path that does not exist raises."""
        files: dict[Path, bool] = {}  # path -> given by name (errors raise) rather than found in a folder
        folders = []
        own = {Path(f"{self.path.resolve()}{end}") for end in ("", "-journal", "-wal", "-shm")}  # never the index
        for given in paths:
            if not Path(given).expanduser().exists():
                raise FileNotFoundError(f"{given}: no such file or folder")
            root = Path(given).expanduser().resolve()  # "~/notes" from Python, as a shell would have it
            if root.is_dir():
                folders.append(root)
                for f in walk(root, skipped):
                    if f not in own:
                        files.setdefault(f, False)
            elif root.is_file():
                files[root] = True
            else:
                raise IndexInputError(root, "not a regular file")
        return files, folders

    def _write_files(
        self,
        files: dict[Path, bool],
        sizes: dict[Path, int],
        known: dict[str, str],
        jobs: int,
        read_files: Callable[[list[Path], dict[str, str], int], Iterator[FileRead]] | None,
        report: dict,
        bar: tqdm,
    ) -> None:
        """Inside the transaction :meth:`add` began: each file read (by ``read_files``, else here or
        by ``jobs`` workers) and written whole, the transaction committed and begun anew after each
        file once :attr:`commit_seconds` of work have passed since it began."""
        began = time.monotonic()
        reading = (
            read_files(list(files), known, self.max_words)
            if read_files is not None
            else _read_files(list(files), known, self.max_words, jobs)
        )
        done = 0
        for read in reading:
            self._add_file(read, files[read.path], report)
            done += 1
            bar.update(sizes[read.path])
            bar.set_postfix_str(f"{done:,}/{len(files):,} files, {self._written:,} passages", refresh=False)
            if time.monotonic() - began >= self.commit_seconds:
                self._db.execute("COMMIT")
                self._db.execute("BEGIN IMMEDIATE")
                began = time.monotonic()

    def _remove_vanished(self, folders: list[Path], report: dict) -> None:
        """Inside the transaction: remove the files indexed before under each folder given that no
        longer exist (those now unreadable were removed as they were skipped)."""
        for folder in folders:
            prefix = os.path.join(str(folder), "")
            for source_id, path in self._db.execute(
                "SELECT id, path FROM sources WHERE substr(path, 1, ?) = ?", (len(prefix), prefix)
            ).fetchall():
                if not os.path.exists(path):
                    self._remove(source_id, keep_source=False)
                    report["removed"] += 1

    def _add_file(self, read: FileRead, by_name: bool, report: dict) -> None:
        path = read.path
        row = self._db.execute("SELECT id, digest FROM sources WHERE path = ?", (str(path),)).fetchone()
        if read.error is not None:
            if by_name:
                raise read.error
            e = read.error
            why = e.why if isinstance(e, IndexInputError) else e.strerror or str(e)
            report["skipped"].append({"path": str(path), "why": why})
            tqdm.write(f"rckit index: skipped {path}: {why}", file=sys.stderr)
            if row:  # its old text is no longer what the file says
                self._remove(row[0], keep_source=False)
                report["removed"] += 1
            return
        if row and row[1] == read.digest:
            report["unchanged"] += 1
            return
        if row:
            source_id = row[0]
            self._remove(source_id, keep_source=True)
            self._db.execute(
                "UPDATE sources SET digest = ?, kind = ? WHERE id = ?", (read.digest, read.kind, source_id)
            )
            report["updated"] += 1
        else:
            source_id = self._db.execute(
                "INSERT INTO sources (path, digest, kind) VALUES (?, ?, ?)", (str(path), read.digest, read.kind)
            ).lastrowid
            report["added"] += 1
        for doc, spans in read.documents:
            doc_id = self._db.execute(
                "INSERT INTO documents (source_id, key, title, text) VALUES (?, ?, ?, ?)",
                (source_id, doc.key, doc.title, doc.text),
            ).lastrowid
            self._db.executemany(
                'INSERT INTO passages (document_id, ordinal, start, "end") VALUES (?, ?, ?, ?)',
                [(doc_id, i, s, e) for i, (s, e) in enumerate(spans)],
            )
            self._db.executemany(
                "INSERT OR REPLACE INTO regions (document_id, start, page, section) VALUES (?, ?, ?, ?)",
                [(doc_id, *r) for r in doc.regions],
            )
            self._written += len(spans)
        self._db.execute(
            "INSERT INTO passages_fts (rowid, text, title) SELECT id, text, title FROM passage_text "
            "WHERE document_id IN (SELECT id FROM documents WHERE source_id = ?)",
            (source_id,),
        )

    def _remove(self, source_id: int, keep_source: bool) -> None:
        """Drop a source's documents and passages (and the source itself unless ``keep_source``)."""
        docs = "(SELECT id FROM documents WHERE source_id = ?)"
        # An external-content FTS5 table forgets a row only when told its old values.
        self._db.execute(
            "INSERT INTO passages_fts (passages_fts, rowid, text, title) "
            f"SELECT 'delete', id, text, title FROM passage_text WHERE document_id IN {docs}",
            (source_id,),
        )
        self._db.execute(f"DELETE FROM passages WHERE document_id IN {docs}", (source_id,))
        self._db.execute(f"DELETE FROM regions WHERE document_id IN {docs}", (source_id,))
        self._db.execute("DELETE FROM documents WHERE source_id = ?", (source_id,))
        if not keep_source:
            self._db.execute("DELETE FROM sources WHERE id = ?", (source_id,))

    def search(self, question: str, k: int = 20) -> list[Hit]:
        """The ``k`` passages that best match ``question`` by BM25, best first.

        The question's words (runs of Unicode letters and digits, lower-cased) are each quoted as
        an FTS5 string and OR-ed, so punctuation and FTS5 syntax (AND, NOT, NEAR, ``*``, quotes)
        in a question are only words. Words in :data:`STOPWORDS` are dropped unless nothing else
        is left. A question without words gives ``[]``.

        Ranking costs FTS5 a BM25 score for every passage it ranks, so on a large index a
        question's common words ("year", "team") would have it score hundreds of thousands of
        passages. Where the passages holding any of its words number more than
        :attr:`ranked_passages`, only those holding one of its rarer words are ranked: its words
        are taken rarest first while the passages holding them stay within that number (at least
        the rarest word), and those passages get their full BM25 score over every word of the
        question. A passage holding only the question's common words is passed over; it is
        rarely among the best (BENCHMARKS.md, "Asking a collection at scale", has how often the
        top 20 is the same). Set ``ranked_passages`` to None to rank every passage.
        """
        words = list(dict.fromkeys(re.findall(r"[^\W_]+", question.lower())))
        words = [w for w in words if w not in STOPWORDS] or words
        if not words or k < 1:
            return []
        match = " OR ".join(f'"{w}"' for w in words)
        sql, rare = SEARCH_ALL, ""
        if self.ranked_passages is not None and len(words) > 1:
            counts = self._passages_holding(words)
            if sum(counts.values()) > self.ranked_passages:
                by_rarity = sorted(words, key=counts.get)
                kept, total = [], 0
                for w in by_rarity:
                    if kept and total + counts[w] > self.ranked_passages:
                        break
                    kept.append(w)
                    total += counts[w]
                sql, rare = SEARCH_SOME, " OR ".join(f'"{w}"' for w in kept)
        hits = []
        for *row, document_id, has_regions in self._db.execute(sql, (match, rare, k)).fetchall():
            hit = Hit(*row)
            if has_regions:
                regions = self._db.execute(_REGIONS_OF, (document_id, hit.start, hit.end)).fetchall()
                hit = replace(hit, regions=tuple(Region(*r) for r in regions))
            hits.append(hit)
        return hits

    def _passages_holding(self, words: list[str]) -> dict[str, int]:
        """How many passages hold each word, remembered until the index changes (``data_version``
        tells of another connection's commits; :meth:`add` forgets its own)."""
        version = self._db.execute("PRAGMA data_version").fetchone()[0]
        if version != self._counted_version:
            self._counted.clear()
            self._counted_version = version
        for w in words:
            if w not in self._counted:
                if len(self._counted) >= 100_000:  # a long-running server asked many different words
                    self._counted.clear()
                self._counted[w] = self._db.execute(
                    "SELECT count(*) FROM passages_fts WHERE passages_fts MATCH ?", (f'"{w}"',)
                ).fetchone()[0]
        return {w: self._counted[w] for w in words}

    def document_text(self, source: str, key: str | None) -> str:
        """The stored text of a document, the text a :class:`Hit`'s offsets point into."""
        row = self._db.execute(
            "SELECT d.text FROM documents d JOIN sources s ON s.id = d.source_id WHERE s.path = ? AND d.key IS ?",
            (str(source), key),
        ).fetchone()
        if row is None:
            raise KeyError(f"{source}: no document {key!r} in {self.path}")
        return row[0]

    def stats(self) -> dict:
        def count(table: str) -> int:
            return self._db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]

        wal = Path(f"{self.path}-wal")  # changes not yet copied into the file itself
        size = self.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
        return {
            "documents": count("documents"),
            "passages": count("passages"),
            "sources": count("sources"),
            "bytes": size,
            "max_words": self.max_words,
        }

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> PassageStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class FileRead(NamedTuple):
    """One file as a reader process read it: its digest, and its documents cut into passages --
    or the error that stopped it. ``documents`` is empty where the digest was the one stored."""

    path: Path
    digest: str | None
    kind: str | None
    documents: list[tuple[Document, list[tuple[int, int]]]]
    error: Exception | None


def _progress_bar(total: int, progress: bool) -> tqdm:
    """:meth:`PassageStore.add`'s bar on stderr, in bytes read (shown only with ``progress``, on a terminal)."""
    return tqdm(
        total=total,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc="indexing",
        file=sys.stderr,
        disable=None if progress else True,
    )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def read_file(path: Path, known_digest: str | None, max_words: int) -> FileRead:
    """Read one file for the index: hash it, and unless its digest is ``known_digest`` (unchanged
    since it was indexed), read its documents and cut them into passages."""
    try:
        data = path.read_bytes()
    except OSError as e:
        return FileRead(path, None, None, [], e)
    return read_data(path, data, known_digest, max_words)


def read_data(path: Path, data: bytes, known_digest: str | None, max_words: int) -> FileRead:
    """:func:`read_file` of bytes already read (on another machine, the file's bytes sent to it)."""
    try:
        digest = hashlib.sha256(data).hexdigest()
        if digest == known_digest:
            return FileRead(path, digest, None, [], None)
        kind, docs = read_documents(path, data)
    except (OSError, IndexInputError) as e:
        return FileRead(path, None, None, [], e)
    return FileRead(path, digest, kind, [(d, cut_passages(d.text, max_words)) for d in docs], None)


def _read_files(paths: list[Path], known: dict[str, str], max_words: int, jobs: int) -> Iterator[FileRead]:
    """:func:`read_file` of each path, in order: here, or by ``jobs`` worker processes reading at
    most two files each ahead of the caller."""
    if jobs < 1:
        for path in paths:
            yield read_file(path, known.get(str(path)), max_words)
        return
    # spawn, not fork: a process that has loaded PyTorch (rckit.Index beside a reader) must not fork.
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        ahead: deque = deque()
        try:
            for path in paths:
                ahead.append(pool.submit(read_file, path, known.get(str(path)), max_words))
                if len(ahead) > 2 * jobs:
                    yield ahead.popleft().result()
            while ahead:
                yield ahead.popleft().result()
        finally:
            for f in ahead:
                f.cancel()
