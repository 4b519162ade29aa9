"""Reading SQuAD v1.1 and v2.0 files into examples with character offsets.

Every question is kept with all of its gold answers. Structural problems (bad JSON, missing
fields, wrong types) raise :class:`SquadFormatError` naming the file and the question id.
An ``answer_start`` that does not point at the answer text is not fatal: the answer keeps its
text (scoring only needs the text), loses its offset (``start = None``), and is listed in the
:class:`ReadReport` so nothing disappears silently. ``strict=True`` turns it into an error.
"""

from __future__ import annotations

import gzip
import json
import re
import string
from dataclasses import dataclass, field
from pathlib import Path

_PUNCTUATION_TABLE = str.maketrans("", "", string.punctuation)
_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """SQuAD's answer normalisation (both official scripts): lower-case, drop ASCII punctuation,
    drop whole-word articles, collapse whitespace. Scoring and the no-answer data use it."""
    text = s.lower().translate(_PUNCTUATION_TABLE)
    text = _ARTICLES_RE.sub(" ", text)
    return " ".join(text.split())


class SquadFormatError(ValueError):
    """A SQuAD file that cannot be read; the message names the file and the question."""


@dataclass(frozen=True)
class Answer:
    text: str
    start: int | None  # character offset into the context, None if it did not match the text

    @property
    def end(self) -> int | None:  # half-open
        return None if self.start is None else self.start + len(self.text)


@dataclass
class SquadExample:
    qid: str
    title: str
    context_index: int  # paragraph number within the file, shared by its questions
    context: str
    question: str
    answers: list[Answer]
    is_impossible: bool = False


@dataclass
class Misaligned:
    qid: str
    answer_index: int
    text: str
    answer_start: int
    found: str  # what the context holds at answer_start


@dataclass
class ReadReport:
    path: str
    version: str  # the rules: "1.1" or "2.0" (rules_version)
    declared: str = ""  # the file's own version field, as written
    articles: int = 0
    contexts: int = 0
    questions: int = 0
    answers: int = 0
    impossible: int = 0
    misaligned: list[Misaligned] = field(default_factory=list)

    def summary(self) -> dict:
        return {
            "file": self.path,
            "version": self.version,
            "articles": self.articles,
            "contexts": self.contexts,
            "questions": self.questions,
            "answers": self.answers,
            "impossible": self.impossible,
            "misaligned_answers": len(self.misaligned),
        }


@dataclass
class SquadDataset:
    examples: list[SquadExample]
    contexts: list[str]
    report: ReadReport
    raw: dict  # the parsed JSON, as the official scorer reads it


def load_json(path: str | Path) -> dict:
    """Parse a JSON file, gzip-compressed or not, with an error naming the file."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            head = fh.read(2)
        opener = gzip.open if head == b"\x1f\x8b" else open
        with opener(path, "rt", encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as e:
        raise SquadFormatError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from e
    except UnicodeDecodeError as e:
        bad = e.object[e.start : e.start + 1].hex()
        raise SquadFormatError(
            f"{path}: not UTF-8 text (byte 0x{bad} cannot start or continue a character); JSON files are read as UTF-8"
        ) from e
    except EOFError as e:
        raise SquadFormatError(f"{path}: truncated gzip file ({e})") from e
    except OSError as e:  # a missing file, a directory, a damaged gzip header ...
        raise SquadFormatError(f"{path}: cannot read: {e.strerror or e}") from e


def _field(obj, key: str, kind, path: Path, where: str):
    if not isinstance(obj, dict) or key not in obj:
        raise SquadFormatError(f"{path}: {where}: missing field '{key}'")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise SquadFormatError(f"{path}: {where}: field '{key}' should be {kind.__name__}, got {type(value).__name__}")
    return value


def rules_version(raw: dict) -> str:
    """The SQuAD rules a file is scored by, ``"1.1"`` or ``"2.0"``, whatever its ``version`` field
    says ("1.0", "v1.0", "1.1", "v2.0", none; several public sets in SQuAD's layout write "1.0"):
    2.0 where the field says 2.x or any question is marked ``is_impossible``, else 1.1."""
    declared = str(raw.get("version", "1.1")).strip().lstrip("vV")
    if declared.startswith("2"):
        return "2.0"
    for article in raw.get("data") or []:
        for para in (article.get("paragraphs") or []) if isinstance(article, dict) else []:
            for qa in (para.get("qas") or []) if isinstance(para, dict) else []:
                if isinstance(qa, dict) and qa.get("is_impossible") is True:
                    return "2.0"
    return "1.1"


def read_squad(path: str | Path, strict: bool = False) -> SquadDataset:
    """Read a SQuAD v1.1 or v2.0 file (``.json`` or ``.json.gz``)."""
    path = Path(path)
    raw = load_json(path)
    if not isinstance(raw, dict):
        raise SquadFormatError(f"{path}: top level should be an object with 'data'")
    articles = _field(raw, "data", list, path, "top level")
    version = rules_version(raw)  # the rules it is scored by; ReadReport.declared: what the file says
    report = ReadReport(path=str(path), version=version, declared=str(raw.get("version", "")))
    examples: list[SquadExample] = []
    contexts: list[str] = []
    seen: set[str] = set()
    for a_i, article in enumerate(articles):
        title = article.get("title", "") if isinstance(article, dict) else ""
        paragraphs = _field(article, "paragraphs", list, path, f"article {a_i} ({title!r})")
        report.articles += 1
        for p_i, para in enumerate(paragraphs):
            where_p = f"article {a_i} paragraph {p_i}"
            context = _field(para, "context", str, path, where_p)
            qas = _field(para, "qas", list, path, where_p)
            context_index = len(contexts)
            contexts.append(context)
            report.contexts += 1
            for q_i, qa in enumerate(qas):
                qid = qa.get("id") if isinstance(qa, dict) else None
                where = f"question id {qid!r}" if isinstance(qid, str) else f"{where_p} question {q_i}"
                qid = _field(qa, "id", str, path, where)
                if qid in seen:
                    raise SquadFormatError(f"{path}: {where}: duplicate question id")
                seen.add(qid)
                question = _field(qa, "question", str, path, where)
                is_impossible = bool(qa.get("is_impossible", False))
                answers_raw = _field(qa, "answers", list, path, where)
                if not answers_raw and not is_impossible:
                    raise SquadFormatError(f"{path}: {where}: no answers and not marked is_impossible")
                answers = []
                for k, ans in enumerate(answers_raw):
                    text = _field(ans, "text", str, path, f"{where} answer {k}")
                    start = _field(ans, "answer_start", int, path, f"{where} answer {k}")
                    if context[start : start + len(text)] != text:
                        found = context[start : start + len(text)]
                        if strict:
                            raise SquadFormatError(
                                f"{path}: {where} answer {k}: answer_start {start} points at {found!r}, not {text!r}"
                            )
                        report.misaligned.append(Misaligned(qid, k, text, start, found))
                        start = None
                    answers.append(Answer(text, start))
                report.questions += 1
                report.answers += len(answers)
                report.impossible += is_impossible
                examples.append(SquadExample(qid, title, context_index, context, question, answers, is_impossible))
    return SquadDataset(examples, contexts, report, raw)
