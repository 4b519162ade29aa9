"""rckit's own reader judged on everything issue 71 names, in one run of one file.

    python benchmarks/own_reader.py --model SOURCE --data-dir ../shared/data [--threshold P]
        [--step best|last] [--limit N] [--latency 100] [--out figures.json]

SOURCE: a reader file (``rckit-pointer-1``), or a fine-tuning run folder or its carry, exported
first at ``--step`` to an int8 file beside ``--out`` (as ``rckit export`` ships it); or, for the
same figures of the reader beside it, ``default``, an installed model's name or a span reader's
file (its threshold and p(no answer) its verifier's). Prints one JSON object:

- ``v11_dev``: SQuAD v1.1 dev, every question (``--limit``: the first N), always answering, EM/F1;
  at the threshold and over thresholds 0.05-0.95, EM/F1 and the share answered (every question
  has an answer: what abstaining costs); and always answering without v2.0 dev's training-quarter
  questions (the run trained on those);
- ``v2_eval_half``: SQuAD v2.0 dev's evaluation half (odd articles: never trained, tuned or chosen
  on), official v2.0 figures at the threshold, the ROC AUC of ``p(no answer)`` for its
  unanswerable questions, and the official best-threshold F1 on the half itself (an upper bound,
  not a result);
- ``yardstick`` and ``threshold_set`` (``benchmarks/yardstick``, ``benchmarks/threshold-set``):
  the share of unanswerable questions abstained on, the answerable ones' F1, F1, AUC; the
  threshold set's curve over thresholds 0.05-0.95 too (the default is chosen on it, never on the
  yardstick);
- ``page``: the page's passage and its two questions of the issue (the answer and p(no answer));
- ``latency_ms``: one new paragraph's question, asked alone (``--latency`` paragraphs of v1.1
  dev, the first question of each), median and 90th percentile.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from rckit.answering.pointer_reader import PointerReader
from rckit.data.no_answer import split_v2_dev
from rckit.data.squad import load_json
from rckit.evaluation.auc import auc
from rckit.evaluation.squad_metrics import best_thresholds, only_questions, score_predictions
from rckit.export.encoder_reader import is_reader_run
from rckit.model_files.reader_file import is_reader_file

ROOT = Path(__file__).resolve().parent.parent
PAGE_QUESTIONS = ("Who won the 2018 World Cup?", "Who deciphered the hieroglyphs?")
CURVE = tuple(round(t, 2) for t in np.arange(0.05, 1.0, 0.05))


def questions(raw: dict, limit: int | None = None) -> tuple[list[str], list[tuple[str, str]], list[bool]]:
    ids, pairs, unanswerable = [], [], []
    for article in raw["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                ids.append(qa["id"])
                pairs.append((para["context"], qa["question"]))
                unanswerable.append(bool(qa.get("is_impossible")) or not qa.get("answers"))
    return ids[:limit], pairs[:limit], unanswerable[:limit]


def judged(reader, raw: dict, version: str, threshold: float, limit: int | None = None) -> dict:
    """Official figures of ``raw`` at ``threshold``, always answering, and (v2.0) the AUC and the
    best threshold on the set itself."""
    ids, pairs, unanswerable = questions(raw, limit)
    best = reader.best_spans(pairs)
    spans = {q: text for q, (text, _) in zip(ids, best)}
    p_null = {q: p for q, (_, p) in zip(ids, best)}
    raw = only_questions(raw, set(ids)) if limit else raw
    out = {"questions": len(ids), "always_answering": score_predictions(raw, spans, version), "spans": spans}
    if version == "1.1":  # every question has an answer: what abstaining costs, at the threshold and over it
        out["at_threshold"] = {"threshold": threshold, **_answered(raw, spans, p_null, threshold)}
        out["curve"] = [_answered(raw, spans, p_null, t) for t in CURVE]
    if version == "2.0":
        out["at_threshold"] = {"threshold": threshold, **score_predictions(raw, at(spans, p_null, threshold), "2.0")}
        out["abstained_unanswerable"] = 100 * float(
            np.mean([p_null[q] > threshold for q, u in zip(ids, unanswerable) if u])
        )
        out["auc"] = auc(np.asarray([p_null[q] for q in ids]), np.asarray(unanswerable))
        out["best_on_itself"] = best_thresholds(raw, spans, p_null)
        out["curve"] = [{"threshold": t, **_short(score_predictions(raw, at(spans, p_null, t), "2.0"))} for t in CURVE]
    return out


def at(spans: dict[str, str], p_null: dict[str, float], threshold: float) -> dict[str, str]:
    return {q: "" if p_null[q] > threshold else text for q, text in spans.items()}


def _answered(raw: dict, spans: dict[str, str], p_null: dict[str, float], threshold: float) -> dict:
    kept = at(spans, p_null, threshold)
    scores = score_predictions(raw, kept, "1.1")
    answered = sum(1 for text in kept.values() if text) / max(1, len(kept))
    return {"threshold": threshold, "exact_match": scores["exact_match"], "f1": scores["f1"], "answered": answered}


def _short(scores: dict) -> dict:
    return {k: scores.get(k) for k in ("f1", "HasAns_f1", "NoAns_f1")}


def latency(reader, raw: dict, n: int) -> dict:
    """ms for one new paragraph's first question, asked alone."""
    paras = [p for a in raw["data"] for p in a["paragraphs"]][:n]
    reader.answer(paras[0]["context"], paras[0]["qas"][0]["question"])  # warm up
    times = []
    for para in paras:
        t = time.perf_counter()
        reader.answer(para["context"], para["qas"][0]["question"])
        times.append(1000 * (time.perf_counter() - t))
    return {"questions": len(times), "median": statistics.median(times), "p90": float(np.percentile(times, 90))}


def page_passage() -> str:
    html = (ROOT / "src" / "rckit" / "serve" / "static" / "index.html").read_text(encoding="utf-8")
    return re.search(r'<textarea id="context"[^>]*>(.*?)</textarea>', html, re.S).group(1)


def readers(source: str, out: Path, threshold: float | None, step: str = "best"):
    """(the reader always answering, its threshold, a function of a threshold giving it abstaining
    there, what it was read from) of ``source`` (module docstring)."""
    given = Path(source)
    ours = is_reader_run(given) or (given.is_file() and is_reader_file(given))
    if not ours:  # the default, an installed name, a span reader's file
        from rckit.answering.reader import Reader

        name = None if source == "default" else source
        reader = Reader.load(name, always_answer=True)
        own = reader.verifier.answer_threshold if reader.verifier is not None else 1.0
        return reader, own, lambda t: Reader.load(name, no_answer_threshold=t), reader.info.get("source")
    path = reader_file(source, out, threshold if threshold is not None else 0.5, step)
    reader = PointerReader.load(path, always_answer=True)
    return reader, reader.info["threshold"], lambda t: PointerReader.load(path, no_answer_threshold=t), str(path)


def reader_file(source: str, out: Path, threshold: float, step: str = "best") -> Path:
    if is_reader_file(source):
        return Path(source)
    from rckit.contextual.encoders import find_encoder
    from rckit.export.encoder_reader import export_reader

    path = out.with_suffix(".reader.safetensors")
    export_reader(source, find_encoder("minilm"), path, threshold, step)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--threshold", type=float, help="p(no answer) above which it abstains (default: the file's)")
    ap.add_argument("--step", choices=["best", "last"], default="best", help="a run's step (rckit export --step)")
    ap.add_argument("--limit", type=int, help="the first N questions of each SQuAD set")
    ap.add_argument("--latency", type=int, default=100)
    ap.add_argument("--out", default="runs/own-reader-figures.json")
    args = ap.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    reader, own_threshold, abstaining, path = readers(args.model, out, args.threshold, args.step)
    threshold = args.threshold if args.threshold is not None else own_threshold
    data = Path(args.data_dir)
    v11 = load_json(data / "squad-v1.1" / "dev-v1.1.json.gz")
    v2 = load_json(data / "squad-v2.0" / "dev-v2.0.reconstructed.json.gz")
    quarter = {qa["id"] for a in split_v2_dev(v2)[0] for p in a["paragraphs"] for qa in p["qas"]}
    figures = {"file": str(path), "threshold": threshold}
    figures["v11_dev"] = judged(reader, v11, "1.1", threshold, args.limit)
    spans = figures["v11_dev"].pop("spans")
    outside = only_questions(v11, {q for q in spans if q not in quarter})
    kept = {q: text for q, text in spans.items() if q not in quarter}
    figures["v11_dev_outside_training_quarter"] = score_predictions(outside, kept, "1.1")
    half = {"version": "v2.0", "data": split_v2_dev(v2)[2]}
    figures["v2_eval_half"] = judged(reader, half, "2.0", threshold, args.limit)
    figures["v2_eval_half"].pop("spans")
    for name, folder in (("yardstick", "yardstick"), ("threshold_set", "threshold-set")):
        file = ROOT / "benchmarks" / folder / "questions.json"
        if file.is_file():
            figures[name] = judged(reader, load_json(file), "2.0", threshold)
            figures[name].pop("spans")
    answers = abstaining(threshold).answer(page_passage(), list(PAGE_QUESTIONS))
    figures["page"] = [
        {"question": q, "answer": got[0]["answer"], "no_answer_probability": got[0]["no_answer_probability"]}
        for q, got in zip(PAGE_QUESTIONS, answers)
    ]
    figures["latency_ms"] = latency(reader, v11, args.latency)
    out.write_text(json.dumps(figures, indent=1))
    json.dump(figures, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
