"""Whether a question gets the same answer however it is asked: one at a time, in batches, all together, on Ray.

    python benchmarks/same_answers.py --dev ../shared/data/squad-v1.1/dev-v1.1.json.gz \
        [--model FILE_OR_NAME] [--every 20] [--batch 32] [--ray]

Every ``--every``-th question of the dev file (529 of SQuAD v1.1 dev's 10,570 at 20), answered by
``Reader.answer_batch``: one pair a call (the page, the API), ``--batch`` pairs a call, all pairs in
one call (``rckit predict --questions``), and with ``--ray`` by ``rckit predict --questions Q --out
A.jsonl --ray`` with its defaults (a local Ray cluster of this machine). Prints, for each way as
it ends, the official F1 of its answers, how many answers (text or character offsets) differ from
one at a time's, and its seconds; a Ray run that fails is a row saying so.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

from rckit.answering.reader import Reader
from rckit.data.squad import load_json
from rckit.evaluation.squad_metrics import only_questions, score_predictions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dev", required=True)
    ap.add_argument("--model", default=None, help="a model file or an installed name (default: the default)")
    ap.add_argument("--every", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--ray", action="store_true")
    args = ap.parse_args()
    raw = load_json(args.dev)
    records = [
        {"id": qa["id"], "context": p["context"], "question": qa["question"]}
        for a in raw["data"]
        for p in a["paragraphs"]
        for qa in p["qas"]
    ][:: args.every]
    subset = only_questions(raw, {r["id"] for r in records})
    reader = Reader.load(args.model, always_answer=True)
    pairs = [(r["context"], r["question"]) for r in records]

    def asked(size: int) -> list[dict]:
        out = []
        for lo in range(0, len(pairs), size):
            out += [a[0] for a in reader.answer_batch(pairs[lo : lo + size])]
        return out

    first: list[dict] = []
    print(f"{args.model or 'the default'}: {len(records)} questions (every {args.every}th of {args.dev})")
    print("| asked | F1 | answers unlike one at a time's | seconds |")
    print("| --- | --- | --- | --- |", flush=True)

    def row(name: str, answers: list[dict], seconds: float) -> None:
        """One way's line, printed as soon as it is measured (a later way that fails loses nothing)."""
        f1 = score_predictions(subset, {r["id"]: a["answer"] for r, a in zip(records, answers)})["f1"]
        unlike = sum(
            (a["answer"], a["start"], a["end"]) != (b["answer"], b["start"], b["end"])
            for a, b in zip(answers, first or answers)
        )
        print(f"| {name} | {f1:.2f} | {unlike} | {seconds:.1f} |", flush=True)

    for name, size in (("one at a time", 1), (f"batches of {args.batch}", args.batch), ("all together", len(pairs))):
        start = time.perf_counter()
        answers = asked(size)
        first = first or answers
        row(name, answers, time.perf_counter() - start)
    if args.ray:
        with tempfile.TemporaryDirectory() as tmp:
            questions, out = Path(tmp) / "q.jsonl", Path(tmp) / "a.jsonl"
            questions.write_text("".join(json.dumps(r) + "\n" for r in records))
            model = [args.model] if args.model else []
            cmd = ["rckit", "predict", *model, "--questions", str(questions), "--out", str(out), "--ray"]
            start = time.perf_counter()
            done = subprocess.run([*cmd, "--always-answer"])
            if done.returncode != 0:
                print(f"| on Ray (defaults) | failed: exit status {done.returncode} | - | - |")
                return
            got = {}
            for line in out.read_text().splitlines():
                rec = json.loads(line)
                got[rec["id"]] = rec["answers"][0]
            row("on Ray (defaults)", [got[r["id"]] for r in records], time.perf_counter() - start)


if __name__ == "__main__":
    main()
