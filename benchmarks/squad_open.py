"""SQuAD-open, small: every paragraph of SQuAD v1.1 train and dev in one index, asked every dev question.

    python benchmarks/squad_open.py --train TRAIN.json.gz --dev DEV.json.gz --out DIR [--model RUN|FILE]
        [--passages 20] [--tune 1000] [--weights 0,0.1,0.25,0.5,1] [--limit N] [--latency 200]

1. ``rckit index`` of both files (every paragraph a document, cut into passages): time and size.
2. Retrieval: the share of all dev questions with one of their answers in the top 1 / 5 / 20
   passages (answer and passage compared after SQuAD's answer normalisation, on word boundaries).
3. The retriever weight (:mod:`rckit.retrieval.collection`): the first ``--tune`` questions of the
   *training* file are read once and ranked with each of ``--weights``; the weight with the best
   F1 there is the one used on dev (dev never chooses anything).
4. End to end: every dev question (``--limit``: the first N), its ``--passages`` passages read in
   batches, the top answer scored by the official v1.1 rules (EM/F1 over every question), with
   each weight shown beside the chosen one for the record.
5. Speed: ``ask`` latency p50/p99 of ``--latency`` single dev questions, one at a time, and the
   questions/s of step 4.

Prints one JSON object; figures go to RESULTS.md and BENCHMARKS.md, not here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from rckit.answering.reader import Reader
from rckit.data.squad import load_json, normalize_answer
from rckit.evaluation.squad_metrics import score_predictions
from rckit.retrieval.collection import Collection, rank
from rckit.retrieval.store import PassageStore


def questions_of(raw: dict) -> list[dict]:
    return [
        {"id": qa["id"], "question": qa["question"], "answers": [a["text"] for a in qa["answers"]]}
        for art in raw["data"]
        for p in art["paragraphs"]
        for qa in p["qas"]
    ]


def holds(passage: str, answers: list[str]) -> bool:
    text = f" {normalize_answer(passage)} "
    return any(f" {normalize_answer(a)} " in text for a in answers if normalize_answer(a))


def read_all(index: PassageStore, reader: Reader, qs: list[dict], passages: int, chunk: int = 32):
    """Each question's hits and the reader's best span on each hit (read once, ranked later)."""
    out = []
    for lo in range(0, len(qs), chunk):
        part = qs[lo : lo + chunk]
        hits = [index.search(q["question"], passages) for q in part]
        got = iter(reader.answer_batch([(h.text, q["question"]) for q, hs in zip(part, hits) for h in hs], 1))
        out += [[(h, next(got)) for h in hs] for hs in hits]
        print(f"\r  read {min(lo + chunk, len(qs)):,}/{len(qs):,}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", required=True)
    ap.add_argument("--dev", required=True)
    ap.add_argument("--out", required=True, help="folder for the index")
    ap.add_argument("--model", help="reader (default: the installed model)")
    ap.add_argument("--passages", type=int, default=20)
    ap.add_argument("--tune", type=int, default=1000)
    ap.add_argument("--weights", default="0,0.1,0.25,0.5,1")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--latency", type=int, default=200)
    args = ap.parse_args()
    weights = [float(w) for w in args.weights.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res: dict = {"passages": args.passages}

    path = out / "squad-open.sqlite"
    path.unlink(missing_ok=True)
    t0 = time.perf_counter()
    with PassageStore(path) as index:
        index.add([args.train, args.dev])
        res["index"] = {**index.stats(), "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(res["index"]), file=sys.stderr)

    dev_raw = load_json(args.dev)
    dev_all = questions_of(dev_raw)
    dev = dev_all[: args.limit] if args.limit else dev_all
    tune = questions_of(load_json(args.train))[: args.tune]
    reader = Reader.load(args.model)
    with PassageStore(path) as index:
        t0 = time.perf_counter()
        hits = [index.search(q["question"], args.passages) for q in dev_all]  # retrieval: every dev question
        res["search_ms"] = round(1000 * (time.perf_counter() - t0) / len(dev_all), 2)
        res["retrieval"] = {
            f"top{k}": round(
                100.0
                * sum(any(holds(h.text, q["answers"]) for h in hs[:k]) for q, hs in zip(dev_all, hits))
                / len(dev_all),
                2,
            )
            for k in (1, 5, args.passages)
        }
        res["retrieval_questions"] = len(dev_all)
        print(json.dumps(res["retrieval"]), file=sys.stderr)

        tuned = read_all(index, reader, tune, args.passages)
        res["tune"] = {}
        for w in weights:
            preds = {q["id"]: rank(r, 1, w)[0]["answer"] for q, r in zip(tune, tuned)}
            raw = {
                "data": [
                    {
                        "paragraphs": [
                            {"qas": [{"id": q["id"], "answers": [{"text": a} for a in q["answers"]]} for q in tune]}
                        ]
                    }
                ]
            }
            res["tune"][w] = round(score_predictions(raw, preds, "1.1")["f1"], 2)
        best = max(weights, key=lambda w: res["tune"][w])
        res["retriever_weight"] = best

        t0 = time.perf_counter()
        read = read_all(index, reader, dev, args.passages)
        seconds = time.perf_counter() - t0
        res["questions_per_s"] = round(len(dev) / seconds, 2)
        dev_ids = {q["id"] for q in dev}
        raw = {
            "data": [
                {"paragraphs": [{"qas": [qa for qa in p["qas"] if qa["id"] in dev_ids]} for p in art["paragraphs"]]}
                for art in dev_raw["data"]
            ]
        }
        res["end_to_end"] = {}
        for w in weights:
            preds = {q["id"]: rank(r, 1, w)[0]["answer"] for q, r in zip(dev, read)}
            s = score_predictions(raw, preds, "1.1")
            res["end_to_end"][w] = {"em": round(s["exact_match"], 2), "f1": round(s["f1"], 2)}
        res["questions"] = len(dev)

        times = []
        asking = Collection(index, reader, best)  # what `rckit ask` does for one question
        for q in dev[: args.latency]:
            t0 = time.perf_counter()
            asking.ask(q["question"], 1, args.passages)
            times.append(1000 * (time.perf_counter() - t0))
        times.sort()
        res["ask_ms"] = {
            "p50": round(statistics.median(times), 1),
            "p99": round(times[min(len(times) - 1, int(0.99 * len(times)))], 1),
            "n": len(times),
        }
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
