"""SQuAD-open with questions the collection cannot answer: does the reader say so? (issue 43)

    python benchmarks/squad_open_no_answer.py --train TRAIN.json.gz --dev DEV.json.gz --out DIR
        [--model NAME|FILE] [--per-half 500] [--passages 20] [--seed 0]

The index holds every paragraph of SQuAD v1.1 train and the dev articles at even positions
(counting from 0); questions are drawn (``--per-half`` from each, seeded) from the dev articles
at even positions, whose answers are in the collection, and from those at odd positions, whose
articles are not: for those the right reply is "no answer in these documents". Both halves are
scored together by the official v2.0 rules (an odd-article question is unanswerable: ``""``
scores 1, anything else 0), as:

- the reader always answering (as before the verifier),
- always abstaining,
- the passage verifier alone, at its own threshold and at others (a passage whose p(no answer)
  is above the threshold is set aside; where every passage is, the reply is "no answer in these
  documents": :func:`rckit.retrieval.collection.rank`),
- what ``rckit ask`` does: the passage verifier at its threshold, then the collection verifier
  over all the passages read at its own (and, for the curve, at others).

Each question's passages are read once (the verifier's probability is kept with each), and
every setting ranks the same readings. Prints one JSON object; figures go to RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from rckit.answering.answer import no_answer
from rckit.answering.reader import Reader
from rckit.data.squad import load_json
from rckit.evaluation.squad_metrics import score_predictions
from rckit.retrieval.collection import DEFAULT_RETRIEVER_WEIGHT, rank
from rckit.retrieval.store import PassageStore
from rckit.training.collection_verifier import halves_as_squad, read_questions

THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", required=True)
    ap.add_argument("--dev", required=True)
    ap.add_argument("--out", required=True, help="folder for the index and the collection file")
    ap.add_argument("--model", help="reader with a verifier (default: the installed model)")
    ap.add_argument("--per-half", type=int, default=500)
    ap.add_argument("--passages", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = load_json(args.dev)
    even = {"version": "1.1", "data": dev["data"][0::2]}
    (out / "dev-even.json").write_text(json.dumps(even))
    path = out / "squad-open-half.sqlite"
    t0 = time.perf_counter()
    if not path.is_file():
        with PassageStore(path) as index:
            index.add([args.train, out / "dev-even.json"])
    res: dict = {"index_seconds": round(time.perf_counter() - t0, 1), "passages": args.passages}
    rng = random.Random(args.seed)
    qs = []
    for half, articles in (("in", dev["data"][0::2]), ("out", dev["data"][1::2])):
        found = [(qa, half) for art in articles for p in art["paragraphs"] for qa in p["qas"]]
        qs += rng.sample(found, min(args.per_half, len(found)))
    reader = Reader.load(args.model, always_answer=True)  # each passage's best span and p(no answer)
    if reader.verifier is None:
        raise SystemExit(f"{reader.info['source']}: no verifier")
    t0 = time.perf_counter()
    with PassageStore(path) as index:  # each question's passages read as `rckit ask` reads them
        read = read_questions(
            reader,
            index,
            qs,
            args.passages,
            lambda n, total: print(f"\r  read {n:,}/{total:,}", end="", file=sys.stderr, flush=True),
        )
    print(file=sys.stderr)
    res["questions_per_s"] = round(len(qs) / (time.perf_counter() - t0), 2)
    raw = halves_as_squad(qs)

    def at(threshold: float | None, collection=None) -> dict:
        preds = {}
        for (qa, _), passages in zip(qs, read):
            kept = []
            for h, answers in passages:
                p = answers[0]["no_answer_probability"]
                abstains = threshold is not None and p > threshold
                kept.append((h, [no_answer(p), *answers] if abstains else answers))
            preds[qa["id"]] = rank(kept, 1, DEFAULT_RETRIEVER_WEIGHT, qa["question"], collection)[0]["answer"]
        s = score_predictions(raw, preds, "2.0")
        return {k: round(s[k], 2) for k in ("exact_match", "f1", "HasAns_f1", "NoAns_f1") if k in s}

    v = reader.verifier
    res["questions"] = {"in_collection": args.per_half, "not_in_collection": args.per_half}
    res["always_answer"] = at(None)
    res["always_abstain"] = {"f1": round(100.0 * sum(h == "out" for _, h in qs) / len(qs), 2)}
    res["passage_verifier"] = {"threshold": round(v.threshold, 4), **at(v.threshold)}
    res["passage_curve"] = {t: at(t) for t in THRESHOLDS}
    if v.collection is not None:  # what `rckit ask` does: both verifiers at their own thresholds
        res["ask"] = {"collection_threshold": round(v.collection.threshold, 4), **at(v.threshold, v.collection)}
        res["collection_curve"] = {}
        for t in THRESHOLDS:
            v.collection.threshold = t
            res["collection_curve"][t] = at(v.threshold, v.collection)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
