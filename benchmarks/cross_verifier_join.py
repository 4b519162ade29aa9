"""A fine-tuning run's cross-encoder beside the installed feature verifier, and the two joined,
on SQuAD v2.0 dev's tuning quarter (issue 62): each one's ROC AUC for the unanswerable questions,
the best official v2.0 F1 and the F1 at the threshold keeping 95 % of the answers' F1.

    python benchmarks/cross_verifier_join.py --run runs/cross/made --v2-dev ../shared/data/squad-v2.0/dev-v2.0.json.gz

The reader (``--model``, default: the default) reads each question once, always answering; the
feature verifier's p(no answer) and the cross-encoder's logit ``z`` (the run's ``best.pt``, in
PyTorch) judge its best span. The join is a logistic regression
``p(no answer) = sigmoid(a logit(p_features) + b z + c)`` on the target ``1 - the span's F1``,
fitted on half of the quarter's passages and scored on the other half, both ways ("2-fold"), so
no question is judged by weights fitted on it. The evaluation half is never read.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from rckit.answering.reader import Reader
from rckit.contextual.encoders import find_encoder
from rckit.contextual.pieces import PieceTokenizer
from rckit.data.squad import load_json
from rckit.models.cross_encoder import CrossEncoder, CrossEncoderConfig
from rckit.training.cross_verifier import judged, logits_of, span_f1, tuning_questions


def fit(x: np.ndarray, y: np.ndarray, steps: int = 3000, lr: float = 0.5) -> np.ndarray:
    """Logistic regression of soft targets ``y`` on ``x`` (rows, features) with a bias, by gradient descent."""
    x = np.c_[x, np.ones(len(x))]
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        w -= lr * x.T @ (1 / (1 + np.exp(-x @ w)) - y) / len(y)
    return w


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="the fine-tuning run's folder (its best.pt)")
    ap.add_argument("--v2-dev", required=True)
    ap.add_argument("--model", default=None, help="the reader (default: the default model)")
    ap.add_argument("--encoder", default="minilm")
    args = ap.parse_args()

    tune, raw = tuning_questions(load_json(args.v2_dev))
    reader = Reader.load(args.model, always_answer=True)
    got = [a[0] for a in reader.answer_batch([(q.context, q.question) for q in tune], 1, cross=False)]
    spans = [[[a["start"], a["end"], a["score"]]] if a["start"] is not None else [] for a in got]
    p_features = np.array([a["no_answer_probability"] for a in got], np.float64)

    encoder = find_encoder(args.encoder)
    state = torch.load(f"{args.run}/best.pt", weights_only=True)
    model = CrossEncoder(encoder.config, CrossEncoderConfig(**state["config"]["model"]))
    model.load_state_dict(state["model"])
    triples = [(q.context, q.question, *(s[0][:2] if s else (None, None))) for q, s in zip(tune, spans)]
    z = logits_of(model, PieceTokenizer(encoder.root / "tokenizer.json"), triples, state["config"]["max_pieces"])

    target = 1.0 - np.array([span_f1(q, *(s[0][:2] if s else (None, None))) for q, s in zip(tune, spans)])
    clipped = np.clip(p_features, 1e-6, 1 - 1e-6)
    x = np.c_[np.log(clipped / (1 - clipped)), z]
    passage = {c: k for k, c in enumerate(dict.fromkeys(q.context for q in tune))}
    half = np.array([passage[q.context] % 2 for q in tune])
    joined = np.zeros(len(tune))
    for h in (0, 1):
        w = fit(x[half != h], target[half != h])
        joined[half == h] = 1 / (1 + np.exp(-(x[half == h] @ w[:2] + w[2])))

    out = {
        "run": args.run,
        "step": state["step"],
        "questions": len(tune),
        "unanswerable": sum(q.unanswerable for q in tune),
    }
    for name, p in [("features", p_features), ("cross", 1 / (1 + np.exp(z))), ("joined_2fold", joined)]:
        j = judged(p, tune, spans, raw, (0.95,))
        out[name] = {
            "auc": round(j["auc"], 4),
            "best_f1": round(j["best_f1"]["f1"], 2),
            "best_threshold": round(j["best_f1"]["threshold"], 3),
            "f1_keeping_95": round(j["kept"][0]["f1"], 2),
        }
    out["join_weights_all"] = [round(v, 4) for v in fit(x, target).tolist()]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
