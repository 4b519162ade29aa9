"""Questions files: ``rckit predict --questions`` (a file of questions about new text, answered by
a :class:`Reader`), ``rckit ask --questions`` and their ``--ray`` runs (:mod:`rckit.cluster.answers`).

:func:`stream_records` is the one reader of such a file: ``{"id", "context", "question"}`` records
(``{"id", "question"}`` for ``ask``) from a JSON list or JSON lines, a line at a time; a bad record
is refused with its line or index (:func:`read_records`: before any is answered) or, on a cluster,
reported and skipped. :func:`answer_records` answers records in order, as ``{"id", "answers"}``,
and :func:`answer_questions_file` writes them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rckit.answering.reader import Reader
from rckit.answering.texts import check_text
from rckit.data.squad import load_json


def read_questions(path: str | Path) -> list[dict]:
    """``{"id", "context", "question"}`` records from a JSON list or a JSON-lines file (``.jsonl``).

    ``id`` is optional (a record's place in the file stands in for it). A record that cannot be
    answered is refused with its line (JSON lines) or index (JSON list), before any is answered.
    """
    return read_records(path, ("context", "question"))


def read_records(path: str | Path, fields: tuple[str, ...]) -> list[dict]:
    """Records with the text ``fields`` (and an optional ``id``), as :func:`read_questions`
    reads them: ``("question",)`` for questions asked of an index (``rckit ask --questions``)."""
    return list(stream_records(path, fields))


def stream_records(
    path: str | Path, fields: tuple[str, ...], skip: Callable[[str], object] | None = None
) -> Iterator[dict]:
    """The records of a questions file in order, ``{"id", **fields}``, a JSON-lines file read a
    line at a time (a JSON list is read whole: it has no lines). A line or record that is not one
    (not UTF-8, not JSON, :func:`record_error`) is refused with its line or index, a ``ValueError``;
    with ``skip``, reported to it and passed over (``--ray``: the rest is answered)."""
    path = Path(path)
    bad = skip or _refuse
    numbered = _json_lines(path, bad) if path.suffix == ".jsonl" else _json_list(path, fields)
    for n, (where, rec) in enumerate(numbered):
        why = record_error(rec, fields)
        if why:
            bad(f"{path}: {where}: {why}")
            continue
        yield {"id": rec.get("id", n), **{f: rec[f] for f in fields}}


def _refuse(why: str) -> None:
    raise ValueError(why)


def _json_lines(path: Path, bad: Callable[[str], object]) -> Iterator[tuple[str, Any]]:
    """``(where, value)`` of each line of a JSON-lines file that holds any; the others to ``bad``."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                bad(f"{path}: line {lineno}: not UTF-8 text (byte 0x{raw[e.start : e.start + 1].hex()})")
                continue
            if not line.strip():
                continue
            try:
                yield f"line {lineno}", json.loads(line)
            except json.JSONDecodeError as e:
                bad(f"{path}: line {lineno}: not valid JSON ({e.msg}, column {e.colno})")


def _json_list(path: Path, fields: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    """``(where, value)`` of each item of a file holding a JSON list of records."""
    data = load_json(path)
    if not isinstance(data, list):
        shape = "{" + ", ".join(f'"{f}"' for f in ("id", *fields)) + "}"
        raise ValueError(
            f"{path}: expected a list of {shape} records, "
            f"got a JSON {type(data).__name__} (or use .jsonl, one record a line)"
        )
    return ((f"record [{i}]", r) for i, r in enumerate(data))


def record_error(rec: object, fields: tuple[str, ...]) -> str | None:
    """Why ``rec`` is not a question record with the text ``fields`` (and an optional string or
    integer ``id``), or None: what :func:`stream_records` refuses a file for, or ``--ray`` skips."""
    shape = "{" + ", ".join(f'"{f}"' for f in ("id", *fields)) + "}"
    if not isinstance(rec, dict):
        return f"expected an object {shape}, got {type(rec).__name__}"
    for field in fields:
        if field not in rec:
            return f"missing field '{field}'"
        try:
            check_text(field, rec[field])
        except ValueError as e:
            return str(e)
    qid = rec.get("id", 0)
    if not isinstance(qid, (str, int)) or isinstance(qid, bool):
        return f"field 'id' should be a string or an integer, got {type(qid).__name__}"
    return None


def answer_records(
    reader: Reader,
    records: list[dict],
    top_k: int = 1,
    max_answer_len: int | None = None,
    stride: int | None = None,
    chunk: int = 2048,
) -> list[dict]:
    """``{"id", "answers"}`` of each record (``{"id", "context", "question"}``), in their order,
    read ``chunk`` at a time (:meth:`Reader.answer_batch`): more than the Reader's own
    :data:`~rckit.answering.reader.CHUNK`, as a file's questions on one text are usually adjacent,
    and still bounded memory. A Ray block (:mod:`rckit.cluster.answers`) of at most ``chunk``
    records is read as one chunk."""
    pairs = [(r["context"], r["question"]) for r in records]
    got = reader.answer_batch(pairs, top_k, max_answer_len, stride, chunk=chunk)
    return [{"id": r["id"], "answers": answers} for r, answers in zip(records, got)]


def answer_questions_file(
    reader: Reader,
    records: list[dict],
    out: str | Path | None,
    top_k: int = 1,
    max_answer_len: int | None = None,
    stride: int | None = None,
) -> int:
    """Answer ``records`` (from :func:`read_questions`) in their order (:func:`answer_records`);
    write ``{"id", "answers"}`` per record to ``out`` (``.jsonl``: one a line, else a JSON list;
    None: JSON lines on stdout). Returns how many were answered."""
    results = answer_records(reader, records, top_k, max_answer_len, stride)
    write_records(results, out)
    return len(results)


def write_records(results: list[dict], out: str | Path | None) -> None:
    """``results`` to ``out``: ``.jsonl`` one a line, else a JSON list; None: JSON lines on stdout."""
    if out is None:
        for rec in results:
            sys.stdout.write(json.dumps(rec, ensure_ascii=False) + "\n")
    elif Path(out).suffix == ".jsonl":
        Path(out).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in results), encoding="utf-8")
    else:
        Path(out).write_text(json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8")
