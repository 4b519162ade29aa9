"""``rckit predict``: answer a question about a text, or a file of them."""

from __future__ import annotations

import json
import sys

from rckit.answering.answer import shown
from rckit.answering.questions import answer_questions_file, read_questions
from rckit.answering.reader import Reader, check_text


def add_arguments(p) -> None:
    p.description = (
        "Answer a question about a context (--context, --question), or every record of a file "
        "(--questions FILE.json|.jsonl of {\"id\", \"context\", \"question\"}, answers to --out in the same order). "
        "A context longer than the model's window (the longest context it trained on) is read in overlapping "
        "windows. Without RUN: $RCKIT_MODEL, else the model installed with rckit."
    )
    p.add_argument("run", nargs="?", metavar="RUN|FILE",
                   help="run directory, checkpoint, exported .safetensors or .onnx file (default: the installed model)")
    p.add_argument("--context", help="context text")
    p.add_argument("--question", help="question text")
    p.add_argument("--questions", metavar="FILE", help="a JSON list or JSON-lines file of {\"id\"?, \"context\", "
                   "\"question\"} records")
    p.add_argument("--out", help="with --questions: where the answers go (.json: a list, .jsonl: one a line; "
                   "default: JSON lines on stdout)")
    p.add_argument("--top-k", type=int, default=1, metavar="K", help="the K best answers (default 1)")
    p.add_argument("--max-answer-len", type=int, metavar="N", help="longest answer in tokens (default: the run's "
                   "decode.max_answer_len)")
    p.add_argument("--stride", type=int, metavar="N", help="tokens between the starts of two windows of a long "
                   "context (default: half a window)")
    p.add_argument("--json", action="store_true", help="print JSON: the answer, its score and character span")
    p.add_argument("--always-answer", action="store_true", help="a model that can say the text holds no answer "
                   "(SQuAD v2.0) gives its best span all the same (its no_answer_probability still said)")
    p.add_argument("--device", default="auto")


def run(args) -> int:
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
    reader = Reader.load(args.run, args.device, always_answer=args.always_answer)
    if args.questions:
        n = answer_questions_file(reader, records, args.out, args.top_k, args.max_answer_len, args.stride)
        if args.out:
            print(f"{n} questions answered: {args.out}", file=sys.stderr)
        return 0
    answers = reader.answer(args.context, args.question, args.top_k, args.max_answer_len, args.stride)
    if args.json:
        print(json.dumps(answers[0] if args.top_k == 1 and answers else answers, ensure_ascii=False))
    elif args.top_k == 1:
        print(shown(answers[0]) if answers else "")
    else:
        for a in answers:
            print(f"{a['score']:.4f}\t{shown(a)}")
    return 0
