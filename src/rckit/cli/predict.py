"""``rckit predict``: answer a question about a text, or a file of them."""

from __future__ import annotations

import argparse
import json
import sys
import time

from rckit.answering.answer import shown
from rckit.answering.questions import answer_questions_file, read_questions
from rckit.answering.texts import check_text
from rckit.cli.arguments import (
    MODEL_HELP,
    abstain_options,
    answer_on_ray,
    load_reader,
    model_option,
    model_source,
    ray_options,
    reader_options,
    span_options,
)
from rckit.cluster.answers import PredictTask
from rckit.model_files.source import model_names, names_several


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Answer a question about a context (--context, --question), or every record of a file "
        '(--questions FILE.json|.jsonl of {"id", "context", "question"}, answers to --out in the same order). '
        "A context longer than the model's window (the longest context it trained on) is read in overlapping "
        "windows. Without RUN: $RCKIT_MODEL, else the model installed with rckit. --model all (or dcn,qanet) "
        "answers with each installed model and prints one table: answer, probability, milliseconds."
    )
    p.add_argument(
        "run",
        nargs="?",
        metavar="RUN|FILE",
        help="run directory, checkpoint, exported .safetensors or .onnx file (default: the installed model)",
    )
    model_option(p, MODEL_HELP + "; 'all' or names joined by commas: each answers, side by side")
    p.add_argument("--context", help="context text")
    p.add_argument("--question", help="question text")
    p.add_argument(
        "--questions", metavar="FILE", help='a JSON list or JSON-lines file of {"id"?, "context", "question"} records'
    )
    p.add_argument(
        "--out",
        help="with --questions: where the answers go (.json: a list, .jsonl: one a line; "
        "default: JSON lines on stdout)",
    )
    p.add_argument("--top-k", type=int, default=1, metavar="K", help="the K best answers (default 1)")
    span_options(p)
    p.add_argument("--json", action="store_true", help="print JSON: the answer, its score and character span")
    abstain_options(p)
    p.add_argument("--device", default="auto")
    ray_options(p, "with --questions and --out A.jsonl: answer them", blocks=True)


def run(args: argparse.Namespace) -> int:
    source = model_source(args)
    several = names_several(source)
    if args.ray is not None:
        return on_ray(args, source, several)
    if several and args.questions:
        raise ValueError(
            f"--model {source} compares the models on one --context and --question, not a --questions file"
        )
    if args.questions:
        if args.context is not None or args.question is not None:
            raise ValueError("give either --questions FILE or --context and --question, not both")
        records = read_questions(args.questions)  # a bad record is refused before the model loads
    else:
        if args.context is None or args.question is None:
            raise ValueError("give --context and --question (or --questions FILE)")
        if args.out:
            raise ValueError("--out is for --questions FILE; one answer goes to stdout")
        check_text("context", args.context)
        check_text("question", args.question)
    if several:
        return side_by_side(args, model_names(source))
    reader = load_reader(source, args)
    if args.questions:
        n = answer_questions_file(reader, records, args.out, args.top_k, args.max_answer_len, args.stride)
        if args.out:
            print(f"{n} questions answered: {args.out}", file=sys.stderr)
        return 0
    answers = reader.answer(args.context, args.question, args.top_k, args.max_answer_len, args.stride)
    if args.json:
        print(json.dumps(answers[0] if args.top_k == 1 and answers else answers, ensure_ascii=False))
    elif args.top_k == 1:
        print(shown(answers[0], answers[1:]) if answers else "")
    else:
        for a in answers:
            print(f"{a['score']:.4f}\t{shown(a)}")
    return 0


def side_by_side(args: argparse.Namespace, names: list[str]) -> int:
    """Each installed model of ``names`` answers the question: one table (``--json``: a list), each
    answer with its model's milliseconds for it, timed on a second call (the first warms it up)."""
    rows = []
    for name in names:
        reader = load_reader(name, args)
        reader.answer(args.context, args.question, args.top_k, args.max_answer_len, args.stride)
        start = time.perf_counter()
        answers = reader.answer(args.context, args.question, args.top_k, args.max_answer_len, args.stride)
        ms = (time.perf_counter() - start) * 1e3
        rows.append({"model": name, "backend": reader.info.get("backend"), "ms": round(ms, 1), "answers": answers})
    if args.json:
        print(json.dumps(rows, ensure_ascii=False))
        return 0
    table = [("model", "answer", "probability", "ms")]
    for row in rows:
        best = row["answers"][0] if row["answers"] else None
        table.append(
            (row["model"], shown(best) if best else "", f"{best['score']:.3f}" if best else "", f"{row['ms']:.1f}")
        )
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    for r in table:
        print("  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths))))
    return 0


def on_ray(args: argparse.Namespace, source: str | None, several: bool) -> int:
    """``--questions Q --out A.jsonl --ray``: the file answered on a Ray cluster (:mod:`rckit.cluster.answers`)."""
    if several or not args.questions or not args.out:
        raise ValueError("--ray answers a --questions file into --out A.jsonl, with one model")
    task = PredictTask(
        source,
        reader_options(args, on_ray=True),
        top_k=args.top_k,
        max_answer_len=args.max_answer_len,
        stride=args.stride,
    )
    return answer_on_ray(args, task, ("context", "question"), "answered")
