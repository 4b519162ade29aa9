"""``search`` and ``ask`` latency, and what search finds, on indexes of any size.

    python benchmarks/make_collection.py ... --passages 1000000 --out C1M     # the documents
    rckit index C1M --out C1M.sqlite                                           # the index
    python benchmarks/collection_scale.py --dev DEV.json.gz C22K.sqlite C200K.sqlite C1M.sqlite
        [--search 1000] [--ask 200] [--model RUN|FILE] [--passages 20] [--ranked N|all]

For each index: its passages and size on disk; ``search`` (BM25, the top ``--passages``) p50 / p99
/ mean over the first ``--search`` questions of SQuAD v1.1 dev, after 20 unmeasured ones; the share
of those questions with an answer in the top 1 / 5 / 20 passages (the guard on what search
finds: every dev paragraph is in each collection of make_collection.py); ``ask`` (search, read the
passages in one batch, rank: what ``rckit ask`` and ``POST /v1/ask`` do) p50 / p99 over the first
``--ask`` questions, one at a time, with one reader loaded once for every index. Prints one JSON
object; figures go to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from squad_open import holds  # a sibling script: the answer in a passage, as SQuAD-open counts it

from rckit.answering.reader import Reader
from rckit.data.squad import load_json
from rckit.retrieval.collection import Collection
from rckit.retrieval.store import PassageStore


def percentiles(ms: list[float]) -> dict:
    ms = sorted(ms)
    return {
        "p50": round(statistics.median(ms), 1),
        "p99": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 1),
        "mean": round(statistics.mean(ms), 1),
        "n": len(ms),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("indexes", nargs="+", metavar="INDEX")
    ap.add_argument("--dev", required=True)
    ap.add_argument("--search", type=int, default=1000)
    ap.add_argument("--ask", type=int, default=200)
    ap.add_argument("--model", help="the reader (default: the installed model)")
    ap.add_argument("--passages", type=int, default=20)
    ap.add_argument(
        "--ranked",
        default=None,
        metavar="N|all",
        help="PassageStore.ranked_passages (default: the store's own; all: rank every passage)",
    )
    args = ap.parse_args()
    questions = [
        {"question": qa["question"], "answers": [a["text"] for a in qa["answers"]]}
        for art in load_json(args.dev)["data"]
        for p in art["paragraphs"]
        for qa in p["qas"]
    ]
    reader = Reader.load(args.model) if args.ask else None
    out = []
    for path in args.indexes:
        res: dict = {"index": str(path)}
        with PassageStore(path) as store:
            if args.ranked is not None:
                store.ranked_passages = None if args.ranked == "all" else int(args.ranked)
            res["ranked_passages"] = store.ranked_passages
            stats = store.stats()
            res.update(passages=stats["passages"], documents=stats["documents"], mib=round(stats["bytes"] / 2**20, 1))
            for q in questions[:20]:
                store.search(q["question"], args.passages)
            times, found = [], {1: 0, 5: 0, args.passages: 0}
            for q in questions[: args.search]:
                t0 = time.perf_counter()
                hits = store.search(q["question"], args.passages)
                times.append(1000 * (time.perf_counter() - t0))
                for k in found:
                    found[k] += any(holds(h.text, q["answers"]) for h in hits[:k])
            res["search_ms"] = percentiles(times)
            res["answer_in_top"] = {k: round(100.0 * n / len(times), 2) for k, n in found.items()}
            if reader is not None:
                asking = Collection(store, reader)
                for q in questions[:5]:
                    asking.ask(q["question"], 1, args.passages)
                times = []
                for q in questions[: args.ask]:
                    t0 = time.perf_counter()
                    asking.ask(q["question"], 1, args.passages)
                    times.append(1000 * (time.perf_counter() - t0))
                res["ask_ms"] = percentiles(times)
        print(json.dumps(res), file=sys.stderr)
        out.append(res)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
