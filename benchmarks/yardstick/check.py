#!/usr/bin/env python3
"""Validate benchmarks/yardstick/questions.json (stdlib only).

Checks that the file is SQuAD v2.0 shaped, that ids are unique, that every answer and
plausible answer span sits at its answer_start, that answerable questions have 1-3 answers
and unanswerable ones none, and that each title names its kind (news / manual / encyclopedia).
Prints passages, questions and unanswerable counts per kind (and per slip, read from the id
suffix). Exits 1 naming the first faulty id (or title) it meets.

    python3 benchmarks/yardstick/check.py [path/to/questions.json]
"""

import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

KINDS = ("news", "manual", "encyclopedia")
SLIPS = {
    "miss": "missing detail",
    "nbr": "neighbour's attribute",
    "event": "event not mentioned",
    "prem": "false premise / changed word",
}


def fail(where, why):
    print(f"FAULT {where}: {why}")
    sys.exit(1)


def check_spans(qid, context, spans, field):
    for s in spans:
        text, start = s.get("text"), s.get("answer_start")
        if not isinstance(text, str) or not text.strip() or not isinstance(start, int):
            fail(qid, f"{field}: malformed span {s!r}")
        if context[start : start + len(text)] != text:
            fail(qid, f"{field}: {text!r} is not at offset {start} (found {context[start : start + len(text)]!r})")


def main(path):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if doc.get("version") != "v2.0":
        fail(path, f"version is {doc.get('version')!r}, not 'v2.0'")
    seen = set()
    passages, questions, impossible = Counter(), Counter(), Counter()
    slips = defaultdict(Counter)
    warnings = []
    for article in doc.get("data", []):
        title = article.get("title", "")
        kind = title.split(":", 1)[0]
        if kind not in KINDS:
            fail(title or "<untitled>", f"title does not start with one of {KINDS}")
        for para in article.get("paragraphs", []):
            context = para.get("context")
            if not isinstance(context, str) or not context:
                fail(title, "missing context")
            words = len(context.split())
            if not 40 <= words <= 200:
                warnings.append(f"{title}: {words} words (wanted 40-200)")
            passages[kind] += 1
            n_qas = len(para.get("qas", []))
            if not 2 <= n_qas <= 4:
                warnings.append(f"{title}: {n_qas} questions (wanted 2-4)")
            for qa in para.get("qas", []):
                qid = qa.get("id")
                if not isinstance(qid, str) or not qid:
                    fail(title, "question without an id")
                if qid in seen:
                    fail(qid, "duplicate id")
                seen.add(qid)
                if not isinstance(qa.get("question"), str) or not qa["question"].strip():
                    fail(qid, "empty question")
                answers = qa.get("answers")
                if not isinstance(answers, list):
                    fail(qid, "answers is not a list")
                impossible_flag = qa.get("is_impossible")
                if not isinstance(impossible_flag, bool):
                    fail(qid, "is_impossible is not a bool")
                questions[kind] += 1
                if impossible_flag:
                    if answers:
                        fail(qid, "unanswerable question has answers")
                    check_spans(qid, context, qa.get("plausible_answers", []), "plausible_answers")
                    impossible[kind] += 1
                    slip = qid.rsplit("-", 1)[-1]
                    if slip not in SLIPS:
                        fail(qid, f"unanswerable id does not end in a slip ({', '.join(SLIPS)})")
                    slips[kind][slip] += 1
                else:
                    if not 1 <= len(answers) <= 3:
                        fail(qid, f"answerable question has {len(answers)} answers (wanted 1-3)")
                    check_spans(qid, context, answers, "answers")
                    if "plausible_answers" in qa:
                        fail(qid, "answerable question has plausible_answers")

    print(f"{'kind':<14}{'passages':>9}{'questions':>10}{'answerable':>11}{'unanswerable':>13}")
    for kind in KINDS:
        print(
            f"{kind:<14}{passages[kind]:>9}{questions[kind]:>10}"
            f"{questions[kind] - impossible[kind]:>11}{impossible[kind]:>13}"
        )
    total_q, total_u = sum(questions.values()), sum(impossible.values())
    print(f"{'total':<14}{sum(passages.values()):>9}{total_q:>10}{total_q - total_u:>11}{total_u:>13}")
    print()
    print(f"{'slip':<38}" + "".join(f"{k:>14}" for k in KINDS) + f"{'total':>8}")
    for code, name in SLIPS.items():
        row = [slips[k][code] for k in KINDS]
        print(f"{name + ' (' + code + ')':<38}" + "".join(f"{n:>14}" for n in row) + f"{sum(row):>8}")
    for w in warnings:
        print("warning:", w)
    print("OK")
    return 0


if __name__ == "__main__":
    default = Path(__file__).resolve().parent / "questions.json"
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else default))
