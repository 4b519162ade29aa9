"""``rckit predict --questions``: a file of questions about new text, answered by a :class:`Reader`.

:func:`read_questions` reads ``{"id", "context", "question"}`` records (a JSON list or JSON
lines) and refuses a bad one with its line or index before any is answered;
:func:`answer_questions_file` answers them in order and writes ``{"id", "answers"}`` per record.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rckit.answering.reader import Reader, check_text
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
    path = Path(path)
    shape = "{" + ", ".join(f'"{f}"' for f in ("id", *fields)) + "}"
    if path.suffix == ".jsonl":
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(
                f"{path}: not UTF-8 text (byte 0x{e.object[e.start : e.start + 1].hex()} at offset {e.start})"
            ) from None
        records = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append((f"line {lineno}", json.loads(line)))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}: line {lineno}: not valid JSON ({e.msg}, column {e.colno})") from None
    else:
        data = load_json(path)
        if not isinstance(data, list):
            raise ValueError(
                f"{path}: expected a list of {shape} records, "
                f"got a JSON {type(data).__name__} (or use .jsonl, one record a line)"
            )
        records = [(f"record [{i}]", r) for i, r in enumerate(data)]
    out = []
    for n, (where, rec) in enumerate(records):
        why = record_error(rec, fields)
        if why:
            raise ValueError(f"{path}: {where}: {why}")
        out.append({"id": rec.get("id", n), **{f: rec[f] for f in fields}})
    return out


def record_error(rec: object, fields: tuple[str, ...]) -> str | None:
    """Why ``rec`` is not a question record with the text ``fields`` (and an optional string or
    integer ``id``), or None: what :func:`read_records` refuses a file for, and ``--ray`` skips."""
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


def answer_questions_file(
    reader: Reader,
    records: list[dict],
    out: str | Path | None,
    top_k: int = 1,
    max_answer_len: int | None = None,
    stride: int | None = None,
    chunk: int = 2048,
) -> int:
    """Answer ``records`` (from :func:`read_questions`) in their order; write ``{"id", "answers"}``
    per record to ``out`` (``.jsonl``: one a line, else a JSON list; None: JSON lines on stdout).
    Returns how many were answered."""
    results = []
    for lo in range(0, len(records), chunk):  # bounded memory; a file's questions on one text are usually adjacent
        part = records[lo : lo + chunk]
        got = reader.answer_batch([(r["context"], r["question"]) for r in part], top_k, max_answer_len, stride)
        results.extend({"id": r["id"], "answers": answers} for r, answers in zip(part, got))
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
