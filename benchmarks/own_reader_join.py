"""rckit's own reader's "no answer" beside today's default: alone, as the default's verifier, and joined.

    python benchmarks/own_reader_join.py --model READER_FILE --data-dir ../shared/data [--default NAME]
        [--limit N] [--out figures.json]

Issue 71, point 5: if rckit's own reader does not become the default, its p(no answer) may serve
beside today's reader as the verifier, where that measures better than the feature verifier. Every
figure here reads SQuAD v2.0 dev's tuning quarter (articles 1, 5, 9, ...: where a threshold or a
join is fitted) and its evaluation half (odd articles: where it is judged, never fitted on):

- ``default``: the installed default (``--default``), its spans and its verifier's p(no answer);
- ``own``: the reader file, its spans and its calibrated p(no answer);
- ``own_as_verifier``: the default's spans, abstaining by the own reader's p(no answer);
- ``joined``: the default's spans, abstaining by ``sigmoid(w . [logit p_default, logit p_own] + b)``,
  the weights fitted on the tuning quarter (:func:`rckit.training.own_verifier.fit_logistic`: what
  ``rckit verifier --own`` puts into a file).

For each: the evaluation half's ROC AUC of the probability for its unanswerable questions, and its
official v2.0 F1 / HasAns F1 / NoAns F1 at the threshold that gives the best F1 on the tuning
quarter (that threshold too). Prints one JSON object, and writes it to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from rckit.answering.own_verifier import joined, logit
from rckit.answering.pointer_reader import PointerReader
from rckit.answering.reader import Reader
from rckit.data.no_answer import split_v2_dev
from rckit.data.squad import load_json
from rckit.evaluation.auc import auc
from rckit.evaluation.squad_metrics import score_predictions
from rckit.training.own_verifier import fit_logistic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from own_reader import questions  # noqa: E402 (this folder's script)


def at(spans: dict[str, str], p_null: dict[str, float], threshold: float) -> dict[str, str]:
    return {q: "" if p_null[q] > threshold else text for q, text in spans.items()}


def best_threshold(raw: dict, spans: dict[str, str], p_null: dict[str, float]) -> float:
    """The threshold on p(no answer) with the best official v2.0 F1 on ``raw`` (its own p values
    and 1.0 tried: abstain above it)."""
    tried = sorted(set(p_null.values()) | {1.0})
    if len(tried) > 400:  # the F1 is flat between neighbours: a grid of quantiles is as good
        tried = sorted(set(np.quantile(list(p_null.values()), np.linspace(0, 1, 401)).tolist()) | {1.0})
    return max(tried, key=lambda t: score_predictions(raw, at(spans, p_null, t), "2.0")["f1"])


def judged(tune: tuple, half: tuple, spans_of, p_of) -> dict:
    """The figures of one way of answering (module docstring): ``spans_of(part)`` and ``p_of(part)``
    give each question's span and p(no answer) on the tuning quarter or the evaluation half."""
    (t_raw, _, _), (h_raw, h_ids, h_unanswerable) = tune, half
    t_spans, t_p = spans_of("tune"), p_of("tune")
    h_spans, h_p = spans_of("half"), p_of("half")
    threshold = best_threshold(t_raw, t_spans, t_p)
    scores = score_predictions(h_raw, at(h_spans, h_p, threshold), "2.0")
    abstainable = [(q, u) for q, u in zip(h_ids, h_unanswerable) if u]
    return {
        "auc": auc(np.asarray([h_p[q] for q in h_ids]), np.asarray(h_unanswerable)),
        "threshold": threshold,
        **{k: scores.get(k) for k in ("f1", "exact_match", "HasAns_f1", "NoAns_f1")},
        "abstained_unanswerable": 100 * float(np.mean([h_p[q] > threshold for q, _ in abstainable])),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a file of rckit's own reader")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--default", help="the reader beside it (default: the installed default)")
    ap.add_argument("--limit", type=int, help="the first N questions of each part")
    ap.add_argument("--out", default="runs/own-reader-join.json")
    args = ap.parse_args()
    v2 = load_json(Path(args.data_dir) / "squad-v2.0" / "dev-v2.0.reconstructed.json.gz")
    _, tune_articles, half_articles = split_v2_dev(v2)
    parts = {}
    for name, articles in (("tune", tune_articles), ("half", half_articles)):
        raw = {"version": "v2.0", "data": articles}
        ids, pairs, unanswerable = questions(raw, args.limit)
        parts[name] = (raw, ids, pairs, unanswerable)
    if args.limit:
        from rckit.evaluation.squad_metrics import only_questions

        parts = {k: (only_questions(r, set(i)), i, p, u) for k, (r, i, p, u) in parts.items()}
    read: dict[str, dict[str, tuple[dict, dict]]] = {"default": {}, "own": {}}
    default = Reader.load(args.default, always_answer=True)
    own = PointerReader.load(args.model, always_answer=True)
    for who, reader in (("default", default), ("own", own)):
        for name, (_, ids, pairs, _) in parts.items():
            got = reader.best_spans(pairs)
            read[who][name] = ({q: t for q, (t, _) in zip(ids, got)}, {q: float(p) for q, (_, p) in zip(ids, got)})
            print(f"{who} read the {name} part ({len(ids)} questions)", file=sys.stderr)
    tune = (parts["tune"][0], parts["tune"][1], parts["tune"][3])
    half = (parts["half"][0], parts["half"][1], parts["half"][3])

    def joined_p(name: str, w: np.ndarray) -> dict[str, float]:
        ids = parts[name][1]
        p = [[read[who][name][1][q] for q in ids] for who in ("default", "own")]
        return dict(zip(ids, joined(p[0], p[1], tuple(w)).tolist()))

    t_ids = parts["tune"][1]
    x_tune = np.stack([logit([read[who]["tune"][1][q] for q in t_ids]) for who in ("default", "own")], axis=1)
    w = fit_logistic(x_tune, np.asarray(parts["tune"][3], np.float64))
    figures = {
        "model": str(Path(args.model).resolve()),
        "default": default.info.get("source"),
        "questions": {name: len(parts[name][1]) for name in parts},
        "default_reader": judged(tune, half, lambda n: read["default"][n][0], lambda n: read["default"][n][1]),
        "own": judged(tune, half, lambda n: read["own"][n][0], lambda n: read["own"][n][1]),
        "own_as_verifier": judged(tune, half, lambda n: read["default"][n][0], lambda n: read["own"][n][1]),
        "joined": {
            "weights": w.tolist(),
            **judged(tune, half, lambda n: read["default"][n][0], lambda n: joined_p(n, w)),
        },
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(figures, indent=1))
    json.dump(figures, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
