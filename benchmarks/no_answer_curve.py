"""The no-answer trade of the installed model, the feature verifier beside rckit's own reader
(issue 71; ``rckit verifier --own``): official F1 on a SQuAD v2.0 file and on SQuAD v1.1 dev against the threshold, each
verifier's ROC AUC for the unanswerable questions, and a figure of both curves.

    python benchmarks/no_answer_curve.py --v2 runs/data/squad-no-answer/eval-v2.0.json.gz \\
        --v11 ../shared/data/squad-v1.1/dev-v1.1.json.gz --out docs/figures/no-answer-curve.png

Each question is read once (as ``rckit evaluate`` reads it: its context whole); both verifiers
judge the reader's best span from that reading. Prints a JSON of the curves and the figures at each
verifier's own threshold; the figure goes to ``--out``. ``--yardstick`` adds another v2.0 file
(benchmarks/yardstick/questions.json) at the installed thresholds.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from rckit.answering.reader import CHUNK, Reader
from rckit.data.squad import read_squad
from rckit.evaluation.auc import auc
from rckit.evaluation.squad_metrics import abstaining, score_predictions

NAMES = {"features": "feature verifier", "own": "rckit's own reader"}
THRESHOLDS = tuple(round(t, 2) for t in np.arange(0.05, 1.0, 0.05))


def judged(reader: Reader, path: str) -> tuple[dict, dict, dict, dict]:
    """(raw SQuAD JSON, best spans, the feature verifier's and the own reader's p(no answer)) by id."""
    data = read_squad(path)
    raw, examples = data.raw, data.examples
    spans, p_features, p_own = {}, {}, {}
    pairs = [(ex.context, ex.question) for ex in examples]
    for lo, job in zip(range(0, len(examples), CHUNK), reader.read_chunks(pairs, whole=True, evidence=True)):
        chunk = examples[lo : lo + CHUNK]
        ranked = job._ranked()
        x = job.features(ranked)
        features = reader.verifier.probability(x)
        own = reader.verifier.judge([(ex.context, ex.question) for ex in chunk], x)
        for ex, r, pf, po in zip(chunk, ranked, features.tolist(), own.tolist()):
            spans[ex.qid] = ex.context[r[0][0][0] : r[0][0][1]] if r else ""
            p_features[ex.qid], p_own[ex.qid] = pf, po
    return raw, spans, p_features, p_own


def at(raw: dict, spans: dict, p: dict, threshold: float) -> dict:
    got = score_predictions(raw, abstaining(spans, p, threshold), "2.0")
    return {k: round(got[k], 2) for k in ("f1", "exact_match", "HasAns_f1", "NoAns_f1") if k in got}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="a model file with both verifiers (default: the installed one)")
    ap.add_argument("--v2", required=True, help="a SQuAD v2.0 file (the evaluation half)")
    ap.add_argument("--v11", required=True, help="SQuAD v1.1 dev")
    ap.add_argument("--yardstick", help="another SQuAD v2.0 file, scored at the installed thresholds")
    ap.add_argument("--out", help="the figure (PNG)")
    args = ap.parse_args()
    reader = Reader.load(args.model, "cpu", always_answer=True)
    assert reader.verifier is not None and reader.verifier.own is not None, "the model has no own-reader verifier"
    own = {"features": reader.verifier.threshold, "own": reader.verifier.own.threshold}
    report: dict = {"thresholds": own, "files": {}}
    for name, path in (("v2", args.v2), ("v11", args.v11), ("yardstick", args.yardstick)):
        if path is None:
            continue
        t0 = time.time()
        raw, spans, pf, po = judged(reader, path)
        entry: dict = {"questions": len(spans), "seconds": round(time.time() - t0, 1)}
        unanswerable = {qa["id"] for a in raw["data"] for p in a["paragraphs"] for qa in p["qas"] if not qa["answers"]}
        for verifier, p in (("features", pf), ("own", po)):
            ids = list(spans)
            if unanswerable:
                entry[f"{verifier}_auc"] = round(
                    auc(np.asarray([p[i] for i in ids]), np.asarray([i in unanswerable for i in ids])), 4
                )
            entry[f"{verifier}_at_own"] = at(raw, spans, p, own[verifier])
            entry[f"{verifier}_curve"] = {str(t): at(raw, spans, p, t)["f1"] for t in THRESHOLDS}
        entry["always_answer"] = at(raw, spans, pf, math.inf)
        report["files"][name] = entry
        print(json.dumps({name: {k: v for k, v in entry.items() if not k.endswith("curve")}}), flush=True)
    print(json.dumps(report))
    if args.out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.2))
        styles = {"v2": "-", "v11": "--"}
        labels = {"v2": "SQuAD v2.0 evaluation half", "v11": "SQuAD v1.1 dev"}
        for name in ("v2", "v11"):
            for verifier, colour in (("features", "tab:grey"), ("own", "tab:blue")):
                curve = report["files"][name][f"{verifier}_curve"]
                ax.plot(
                    [float(t) for t in curve],
                    list(curve.values()),
                    styles[name],
                    color=colour,
                    label=f"{labels[name]}, {NAMES[verifier]}",
                )
        for verifier, colour in (("features", "tab:grey"), ("own", "tab:blue")):
            ax.axvline(own[verifier], color=colour, linewidth=0.8, linestyle=":")
        ax.set_xlabel("threshold on p(no answer): abstain above it")
        ax.set_ylabel("official F1")
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()
