"""SQuAD v1.1 dev (every question has an answer) over the no-answer threshold: what abstaining costs.

    python benchmarks/v11_threshold_curve.py --model FILE|NAME|default [--model ...] --data DEV.json.gz
        [--thresholds 0.4,0.5,0.6,0.7,0.8,0.802,0.9,1.0] [--out curve.json]

Each model reads every question once, always answering, with its p(no answer)
(``best_spans``: a span reader's verifier, or rckit's own reader's calibrated margin); at each
threshold the answer is kept where p(no answer) is at most the threshold. Prints, for each model
and threshold, the official v1.1 EM and F1 and the share of questions answered.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rckit.answering.reader import Reader
from rckit.data.squad import load_json
from rckit.evaluation.squad_metrics import score_predictions


def curve(model: str, raw: dict, thresholds: list[float]) -> list[dict]:
    reader = Reader.load(None if model == "default" else model, always_answer=True)
    ids, pairs = [], []
    for article in raw["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                ids.append(qa["id"])
                pairs.append((para["context"], qa["question"]))
    spans = reader.best_spans(pairs)
    rows = []
    for t in thresholds:
        preds = {q: (text if p <= t else "") for q, (text, p) in zip(ids, spans)}
        scores = score_predictions(raw, preds, "1.1")
        answered = sum(1 for text in preds.values() if text) / len(preds)
        rows.append({"threshold": t, "exact_match": scores["exact_match"], "f1": scores["f1"], "answered": answered})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, help="a model file, an installed name, or default")
    ap.add_argument("--data", required=True, help="SQuAD v1.1 dev")
    ap.add_argument("--thresholds", default="0.4,0.5,0.6,0.7,0.8,0.802,0.9,1.0")
    ap.add_argument("--out", default="runs/v11-threshold-curve.json")
    args = ap.parse_args()
    raw = load_json(args.data)
    thresholds = [float(t) for t in args.thresholds.split(",")]
    out = {model: curve(model, raw, thresholds) for model in args.model}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
