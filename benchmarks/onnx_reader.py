"""The answering path with PyTorch and with onnxruntime, side by side in one process.

    python benchmarks/onnx_reader.py --onnx runs/onnx/qanet-squad.onnx [runs/onnx/qanet-squad.int8.onnx] \\
        [--torch src/rckit/bundled/qanet-squad.safetensors] [--data DEV.json] [--threads 1]

For each model, loaded with ``rckit.Reader.load(..., threads=T)``:

- one question at a time: ``reader.answer(paragraph, question)`` on load_serve.py's ~150-token
  paragraph, its questions in turn, ``--repeat`` calls after 20 warm-up calls: median and p90 ms;
- batch 32: ``reader.answer_batch`` over the first ``--batch-questions`` questions of ``--data``
  (each on its own paragraph, read as the Reader reads them) in batches of 32: questions/s.

The models take turns (round ``r`` times every model once), so a slow spell of the machine
falls on all of them alike. Prints one JSON line per model.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_serve import PARAGRAPH, QUESTIONS  # noqa: E402

from rckit.answering.reader import Reader  # noqa: E402
from rckit.model_files.source import BUNDLED  # noqa: E402


def dev_pairs(path: str, n: int) -> list[tuple[str, str]]:
    from rckit.data.squad import read_squad

    return [(ex.context, ex.question) for ex in read_squad(path).examples[:n]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--torch", default=str(BUNDLED), help="a PyTorch model (run or .safetensors); 'none' to skip")
    ap.add_argument("--onnx", nargs="*", default=[], help="ONNX files")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads of each backend (serve's default: 1)")
    ap.add_argument("--repeat", type=int, default=300, help="single-question calls per model")
    ap.add_argument("--rounds", type=int, default=3, help="turns each model takes")
    ap.add_argument("--data", help="SQuAD file for the batch-32 figure")
    ap.add_argument("--batch-questions", type=int, default=512)
    args = ap.parse_args()

    sources = ([] if args.torch == "none" else [args.torch]) + args.onnx
    readers = {s: Reader.load(s, "cpu", threads=args.threads) for s in sources}
    pairs = dev_pairs(args.data, args.batch_questions) if args.data else []
    single: dict[str, list[float]] = {s: [] for s in sources}
    batch: dict[str, list[float]] = {s: [] for s in sources}
    for reader in readers.values():
        for i in range(20):
            reader.answer(PARAGRAPH, QUESTIONS[i % len(QUESTIONS)])
    per_round = max(1, args.repeat // args.rounds)
    for _ in range(args.rounds):
        for s, reader in readers.items():
            for i in range(per_round):
                t = time.perf_counter()
                reader.answer(PARAGRAPH, QUESTIONS[i % len(QUESTIONS)])
                single[s].append(1000 * (time.perf_counter() - t))
            if pairs:
                t = time.perf_counter()
                for lo in range(0, len(pairs), 32):
                    reader.answer_batch(pairs[lo : lo + 32])
                batch[s].append(len(pairs) / (time.perf_counter() - t))
    for s, reader in readers.items():
        ms = sorted(single[s])
        row = {
            "model": os.path.basename(s),
            "backend": reader.info["backend"],
            "threads": args.threads,
            "one_question_median_ms": round(statistics.median(ms), 2),
            "one_question_p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 2),
            "calls": len(ms),
        }
        if pairs:
            row["batch32_questions_per_s"] = round(statistics.median(batch[s]), 1)
            row["batch_questions"] = len(pairs)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
