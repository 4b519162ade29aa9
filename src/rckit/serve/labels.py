"""The labels a user makes on the page (``rckit serve --labels FILE``): a SQuAD v1.1 file, grown
one question at a time.

Each label is a question about a passage of a document, with its answer's text and character
offset; :class:`LabelFile` adds it to the file under the document's article and the passage's
paragraph (both made on first use), so the file is always one a SQuAD reader takes as it is:
``rckit adapt --labels FILE`` trains on it, ``rckit evaluate --data FILE`` scores on it.

Nothing is lost: a label is written as a whole new file beside the old one, flushed to disk and
renamed over it, so a crash mid-write leaves the old file or the new one, never half of one; two
requests at once (two tabs, two servers on one file) take turns under a lock on ``FILE.lock``
and each reads the file afresh, so neither overwrites the other's label. A label whose answer is
not the passage's text at its offset is refused in one line, as is a file that is not SQuAD.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rckit.data.squad import load_json, read_squad


class LabelFile:
    """A SQuAD v1.1 file of labels (see the module docstring); made empty on first use."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self._thread_lock = threading.Lock()
        if not self.path.parent.is_dir():
            raise FileNotFoundError(f"{self.path}: its folder {self.path.parent} does not exist")
        if self.path.exists():
            read_squad(self.path)  # a file that is not SQuAD is refused now, naming what is wrong

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._thread_lock, open(self.lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process writing the same file waits here
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> dict:
        if not self.path.exists():
            return {"version": "1.1", "data": []}
        return load_json(self.path)

    def stats(self) -> dict:
        """How many questions, passages and documents the file holds."""
        with self._locked():
            data = self._read()["data"]
        paragraphs = [p for a in data for p in a["paragraphs"]]
        return {
            "file": self.path.name,
            "questions": sum(len(p["qas"]) for p in paragraphs),
            "passages": len(paragraphs),
            "documents": len(data),
        }

    def add(self, document: str, context: str, question: str, answer: str, answer_start: int) -> dict:
        """Add one label; returns its ``id`` and the file's counts. A ValueError (one line) for an
        answer that is not ``context[answer_start:answer_start + len(answer)]``, an empty field,
        or the same question about the same passage again."""
        document, question = document.strip(), question.strip()
        if not context.strip() or not question or not answer.strip():
            raise ValueError("a label needs a passage, a question and an answer selected in the passage")
        if (
            not 0 <= answer_start <= len(context) - len(answer)
            or context[answer_start : answer_start + len(answer)] != answer
        ):
            raise ValueError(
                f"the answer {answer[:60]!r} is not the passage's text at character {answer_start}: "
                "select it in the passage"
            )
        if answer != answer.strip():
            raise ValueError("the answer starts or ends with white space: select the words alone")
        qid = uuid.uuid4().hex[:16]
        with self._locked():
            squad = self._read()
            article = next((a for a in squad["data"] if a.get("title") == document), None)
            if article is None:
                article = {"title": document, "paragraphs": []}
                squad["data"].append(article)
            paragraph = next((p for p in article["paragraphs"] if p["context"] == context), None)
            if paragraph is None:
                paragraph = {"context": context, "qas": []}
                article["paragraphs"].append(paragraph)
            if any(qa["question"].strip() == question for qa in paragraph["qas"]):
                raise ValueError("this question about this passage is labelled already")
            paragraph["qas"].append(
                {"id": qid, "question": question, "answers": [{"text": answer, "answer_start": answer_start}]}
            )
            self._write(squad)
        paragraphs = [p for a in squad["data"] for p in a["paragraphs"]]
        return {
            "id": qid,
            "file": self.path.name,
            "questions": sum(len(p["qas"]) for p in paragraphs),
            "passages": len(paragraphs),
            "documents": len(squad["data"]),
        }

    def _write(self, squad: dict) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(squad, f, ensure_ascii=False, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)  # whole or not at all
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        folder = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)  # the rename itself survives a crash
        finally:
            os.close(folder)
