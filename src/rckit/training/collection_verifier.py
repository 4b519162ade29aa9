"""Training the collection's half of the verifier: whether the passages retrieved for a question
hold its answer at all (:class:`rckit.answering.verifier.CollectionVerifier`).

The passage verifier (:mod:`rckit.training.verifier`) judges one passage at a time; asked of a
collection, a reader reads twenty passages, and a question the collection cannot answer gets
twenty chances for one wrong answer to pass. The collection verifier sees the passages together:
the passage verifier's probabilities over all of them, the first-ranked answer's, the
retriever's BM25 scores, and the question's names and content words against every passage read.

Its training side is SQuAD v1.1 train only: an index of the train articles at even positions
(counting from 0), asked questions drawn from those articles (their answers are in it) and from
the articles at odd positions (they are not: the right reply is "no answer in these
documents"), half of each kind. Each question is read as ``rckit ask`` reads it (the reader with
its passage verifier), ranked (:func:`rckit.retrieval.collection.rank`) and turned into
:data:`rckit.answering.verifier_features.COLLECTION_FEATURES`; questions on which the passage verifier
already abstained everywhere are left out (the collection verifier never sees them). Each training
question counts twice, with all its passages and with its first k (k drawn), so that a folder of
a few files, which retrieves fewer, is not new to it. Logistic
regression and one hidden layer of 16 are compared on a tuning set drawn the same way from other
questions, by the official v2.0 F1 (an unanswerable question scores 1 for "no answer"); the
winner keeps the threshold of its best F1 there. Dev data is never read.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rckit.answering.reader import Reader
from rckit.answering.verifier import CollectionVerifier
from rckit.data.squad import load_json
from rckit.evaluation.squad_metrics import abstaining, best_thresholds, score_predictions
from rckit.retrieval.collection import DEFAULT_PASSAGES, DEFAULT_RETRIEVER_WEIGHT, collection_evidence, rank, retrieve
from rckit.retrieval.store import PassageStore
from rckit.training.verifier import fit

if TYPE_CHECKING:
    from collections.abc import Callable

FORMS = (0, 16)


def _asked(articles: list[dict], half: str) -> list[tuple[dict, str]]:
    return [(qa, half) for art in articles for p in art["paragraphs"] for qa in p["qas"]]


def read_questions(
    reader: Reader,
    index: PassageStore,
    qs: list[tuple[dict, str]],
    passages: int,
    progress: Callable[[int, int], object] | None = None,
) -> list[list[tuple[dict, list]]]:
    """Each question of ``qs`` (``(qa, "in"|"out")``) read as ``rckit ask`` reads it: its
    ``passages`` best passages, each ``(hit, the reader's answers)``."""
    out = []
    for lo in range(0, len(qs), 32):
        found = retrieve(index, [qa["question"] for qa, _ in qs[lo : lo + 32]], passages)
        got = iter(reader.answer_batch(found.pairs, own=False) if found.pairs else [])
        out += [[(h, next(got)) for h in hs] for hs in found.hits]
        if progress is not None:
            progress(min(lo + 32, len(qs)), len(qs))
    return out


def evidence(question: str, read: list) -> tuple[np.ndarray, str] | None:
    """(collection features, the first-ranked answer) of one question's readings, or None where
    the passage verifier abstained on every passage."""
    best = rank(read, 1, DEFAULT_RETRIEVER_WEIGHT)[0]
    if best["start"] is None:
        return None
    return collection_evidence(question, read, best), best["answer"]


def halves_as_squad(qs: list[tuple[dict, str]]) -> dict:
    """Questions of the two halves (``(qa, "in"|"out")``) as SQuAD v2.0 for scoring: "out" ones unanswerable."""
    return {
        "version": "v2.0",
        "data": [
            {
                "paragraphs": [
                    {
                        "qas": [
                            {
                                "id": qa["id"],
                                "answers": qa["answers"] if half == "in" else [],
                                "is_impossible": half == "out",
                            }
                            for qa, half in qs
                        ]
                    }
                ]
            }
        ],
    }


def train_collection_verifier(
    reader: Reader,
    v11_train: str | Path,
    work: str | Path,
    per_half: int = 1000,
    tune_per_half: int = 500,
    passages: int = DEFAULT_PASSAGES,
    seed: int = 0,
    log: Callable[[str], object] = print,
) -> tuple[CollectionVerifier, dict]:
    """The collection verifier of ``reader`` (module docstring); ``work``: where the index goes."""
    if reader.verifier is None:
        raise ValueError(f"{reader.info.get('source')}: the collection verifier needs the passage verifier first")
    raw = load_json(v11_train)
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    path = work / "train-even.sqlite"
    if not path.is_file():
        (work / "train-even.json").write_text(json.dumps({"version": "1.1", "data": raw["data"][0::2]}))
        with PassageStore(path.with_suffix(".tmp")) as index:
            index.add([work / "train-even.json"])
        path.with_suffix(".tmp").replace(path)
    rng = random.Random(seed)
    inside, outside = _asked(raw["data"][0::2], "in"), _asked(raw["data"][1::2], "out")
    rng.shuffle(inside)
    rng.shuffle(outside)
    train = inside[:per_half] + outside[:per_half]
    tune = inside[per_half : per_half + tune_per_half] + outside[per_half : per_half + tune_per_half]
    show = (lambda n, total: log(f"  read {n:,}/{total:,}")) if log else None
    with PassageStore(path) as index:
        read_train = read_questions(reader, index, train, passages, show)
        read_tune = read_questions(reader, index, tune, passages, show)
    # Each training question twice: with all its passages, and with its first k (k drawn from 1 to
    # passages - 1), as a small collection or a smaller --passages gives them.
    got_train = [evidence(qa["question"], read) for (qa, _), read in zip(train, read_train)]
    got_train += [
        evidence(qa["question"], read[: rng.randint(1, max(1, len(read) - 1))])
        for (qa, _), read in zip(train, read_train)
    ]
    got_tune = [evidence(qa["question"], read) for (qa, _), read in zip(tune, read_tune)]
    kept = [(q, r) for q, r in zip(train + train, got_train) if r is not None]
    x = np.stack([r[0] for _, r in kept])
    y = np.asarray([half == "out" for (_, half), _ in kept], np.float32)
    spans = {qa["id"]: (r[1] if r is not None else "") for (qa, _), r in zip(tune, got_tune)}
    tune_raw = halves_as_squad(tune)
    tried, best = [], None
    for hidden in FORMS:
        v = fit(x, y, np.ones(len(y), np.float32), hidden, seed, collection=True)
        margins = {
            qa["id"]: (float(v.probability(r[0][None])[0]) if r is not None else 2.0)
            for (qa, _), r in zip(tune, got_tune)
        }
        threshold = float(min(max(best_thresholds(tune_raw, spans, margins)["best_f1_thresh"], 0.0), 1.0))
        s = score_predictions(tune_raw, abstaining(spans, margins, threshold), "2.0")
        got = {"hidden": hidden, "threshold": threshold, **{k: round(s[k], 2) for k in ("f1", "HasAns_f1", "NoAns_f1")}}
        tried.append(got)
        log(f"  collection verifier, hidden {hidden}: tuning F1 {got['f1']:.2f} at threshold {threshold:.3f}")
        if best is None or got["f1"] > best[1]["f1"]:
            best = (v, got)
    v, got = best
    record = {
        "form": {"hidden": got["hidden"]},
        "index": "SQuAD v1.1 train, articles at even positions",
        "trained_on": {
            "questions": len(kept),
            "in_collection": int((y == 0).sum()),
            "not_in_collection": int(y.sum()),
            "left_to_the_passage_verifier": 2 * len(train) - len(kept),
            "readings": "each question with all its passages and with its first k",
        },
        "tuning": {"questions": len(tune), **got},
        "compared": tried,
        "passages": passages,
        "seed": seed,
    }
    return CollectionVerifier(v.mean, v.scale, v.layers, got["threshold"], record), record
