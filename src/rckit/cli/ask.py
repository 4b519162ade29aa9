"""``rckit ask``: retrieve passages from an index, read them, and print the best answer.

Text output: each answer on one tab-separated line (answer, score, title, source, key, offsets),
then, indented, where it is (the file, its page or section) and the passage around it with the
answer marked (``**`` around it, or bold where stdout is a terminal and NO_COLOR is not set).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from rckit.answering.questions import read_records, write_records
from rckit.cli.arguments import abstain_options, answer_on_ray, load_reader, ray_options, reader_options
from rckit.cluster.answers import AskTask
from rckit.retrieval.collection import DEFAULT_RETRIEVER_WEIGHT, Collection

if TYPE_CHECKING:
    from rckit.answering.answer import FoundAnswer

CONTEXT_WORDS = 30  # words of the passage shown on each side of the answer
INDENT = "    "
_WORD = re.compile(r"\S+")
_SPACES = re.compile(r"\s+")  # a PDF's line breaks, runs of spaces: one space each when shown


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Retrieve the best passages for a question from an index (`rckit index`), read them with a "
        "model in one batch, and print the best answer with its document and offsets."
    )
    p.add_argument("index", metavar="INDEX", help="an index file from `rckit index`")
    p.add_argument("question", nargs="?", help="the question")
    p.add_argument("--questions", metavar="FILE", help='a JSON list or JSON-lines file of {"id"?, "question"}')
    p.add_argument("--out", help="with --questions: where the answers go (.json or .jsonl; default: stdout)")
    p.add_argument(
        "--model",
        metavar="NAME|RUN|FILE",
        help="the reader: an installed model's name (rckit models), a "
        "run or an exported file (default: $RCKIT_MODEL, else the installed minilm_reader)",
    )
    p.add_argument("--top-k", type=int, default=1, metavar="K", help="the K best answers (default 1)")
    p.add_argument("--passages", type=int, default=20, metavar="N", help="passages retrieved and read (default 20)")
    p.add_argument(
        "--retriever-weight",
        type=float,
        metavar="W",
        help="how much the retriever's BM25 score counts beside the reader's (default: the measured best)",
    )
    p.add_argument("--json", action="store_true", help="print JSON: answers with their document and offsets")
    abstain_options(p)
    p.add_argument("--device", default="auto")
    ray_options(
        p, "with --questions and --out A.jsonl: ask them (the index at the same path on every node)", blocks=True
    )


def run(args: argparse.Namespace) -> int:
    if (args.question is None) == (args.questions is None):
        raise ValueError("give a question, or --questions FILE")
    if not Path(args.index).is_file():
        raise FileNotFoundError(f"{args.index}: no such index (make one with `rckit index PATH... --out INDEX`)")
    if args.ray is not None:
        return on_ray(args)
    records = read_records(args.questions, ("question",)) if args.questions else None
    weight = DEFAULT_RETRIEVER_WEIGHT if args.retriever_weight is None else args.retriever_weight
    reader = load_reader(args.model, args)
    with Collection.open(args.index, reader, weight) as collection:
        if records is not None:
            got = collection.ask_many([r["question"] for r in records], args.top_k, args.passages)
            write_records([{"id": r["id"], "answers": a} for r, a in zip(records, got)], args.out)
            return 0
        answers = collection.ask(args.question, args.top_k, args.passages)
    if args.json:
        print(json.dumps(answers[0] if args.top_k == 1 else answers, ensure_ascii=False))
        return 0
    bold = ("\033[1m", "\033[0m") if sys.stdout.isatty() and not os.environ.get("NO_COLOR") else ("**", "**")
    width = min(shutil.get_terminal_size((100, 24)).columns, 100)
    for a in answers:
        if a["start"] is None:
            print("(no answer in these documents)")
            continue
        print(
            f"{a['answer']}\t{a['score']:.4f}\t{a['title']}\t{a['source']}"
            + (f" [{a['key']}]" if a["key"] else "")
            + f" chars {a['start']}-{a['end']}"
        )
        print(INDENT + location(a))
        p = a["passage"]
        print(
            textwrap.fill(
                around(p["text"], a["start"] - p["start"], a["end"] - p["start"], *bold),
                width,
                initial_indent=INDENT,
                subsequent_indent=INDENT,
                break_long_words=False,
                break_on_hyphens=False,
            )
        )
    return 0


def on_ray(args: argparse.Namespace) -> int:
    """``--questions Q --out A.jsonl --ray``: each question asked of the index on a Ray cluster."""
    if not args.questions or not args.out:
        raise ValueError("--ray asks a --questions file into --out A.jsonl")
    task = AskTask(
        args.model,
        reader_options(args, on_ray=True),
        index=str(Path(args.index).resolve()),
        retriever_weight=DEFAULT_RETRIEVER_WEIGHT if args.retriever_weight is None else args.retriever_weight,
        top_k=args.top_k,
        passages=args.passages,
    )
    return answer_on_ray(args, task, ("question",), "asked")


def location(answer: FoundAnswer) -> str:
    """Where an answer is, for a person: its file's name (and record), and its page or section."""
    where = [Path(answer["source"]).name + (f" [{answer['key']}]" if answer["key"] else "")]
    if answer["page"] is not None:
        where.append(f"page {answer['page']}")
    if answer["section"]:
        where.append(f"section {json.dumps(answer['section'], ensure_ascii=False)}")
    return ", ".join(where)


def around(text: str, start: int, end: int, before: str = "**", after: str = "**", words: int = CONTEXT_WORDS) -> str:
    """``text[start:end]`` between ``before`` and ``after``, with up to ``words`` words of ``text``
    on each side (cut at word boundaries, "…" where cut), each run of whitespace one space."""
    left, right = text[:start], text[end:]
    kept = list(_WORD.finditer(left))
    if len(kept) > words:
        left = "… " + left[kept[-words].start() :]
    kept = list(_WORD.finditer(right))
    if len(kept) > words:
        right = right[: kept[words - 1].end()] + " …"
    return (
        _SPACES.sub(" ", left).lstrip()
        + before
        + _SPACES.sub(" ", text[start:end]).strip()
        + after
        + _SPACES.sub(" ", right).rstrip()
    )
