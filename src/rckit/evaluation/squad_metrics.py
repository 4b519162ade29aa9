"""Exact match (EM) and F1 as defined by the official SQuAD v1.1 and v2.0 evaluation scripts.

Written from the published rules (Rajpurkar et al. 2016, "SQuAD: 100,000+ Questions for
Machine Comprehension of Text", EMNLP; Rajpurkar, Jia & Liang 2018, "Know What You Don't
Know: Unanswerable Questions for SQuAD", ACL) and checked against the official scripts
``evaluate-v1.1.py`` and ``evaluate-v2.0.py``: on the real v1.1 and v2.0 dev sets, 250
random prediction files (context spans, perturbed gold answers, empty and missing answers)
gave identical totals, breakdowns and per-question scores (largest difference 0.0).

Answer normalisation (both versions), applied in this order:

1. lower-case (``str.lower``);
2. delete every character of ``string.punctuation``. That set is ASCII only, so curly quotes,
   en dashes and other non-ASCII punctuation stay (``“Paris”`` never equals ``Paris``);
3. replace the articles ``a``, ``an``, ``the`` by a space where they are whole words
   (``\\b(a|an|the)\\b``, Unicode word boundaries, so ``thé`` is kept);
4. collapse runs of whitespace to one space and strip the ends.

Tokens are the whitespace-separated pieces of the normalised string.

Per question, with ``P`` the prediction tokens and ``G`` the tokens of one gold answer,
``overlap`` the size of the multiset intersection of P and G:

- EM = 1 if the normalised strings are equal, else 0;
- F1 = 2 p r / (p + r) with p = overlap / |P|, r = overlap / |G|; 0 when overlap is 0;
- both are maximised (separately) over the gold answers.

Version 1.1: the gold answers are all listed answers (a question with none is an error: use
version 2.0 for such data). F1 is 0 whenever the overlap is 0, so an empty prediction against
an empty-normalising gold answer (the v1.1 dev set has three ``.`` answers) gets EM 1 but F1 0.

Version 2.0:

- the gold answers are those whose normalised text is non-empty; if none is left the only
  gold answer is ``""`` (no answer);
- the prediction ``""`` (or anything that normalises to it, such as ``"the"``) means
  "no answer";
- if P or G is empty, F1 = 1 when both are empty, else 0;
- HasAns / NoAns break the scores down by whether the question lists any answer at all (as
  the official script does, before the empty-text filter above).

Dataset-level scores are 100 * mean over every question of the dataset. A question without a
prediction scores 0 and still counts in ``total``. This matches ``evaluate-v1.1.py``; the
official v2.0 script instead drops such questions from ``total`` and then fails in its
HasAns/NoAns breakdown, so on complete prediction files the two agree and on incomplete ones
this module is the one that still answers. Predictions for ids not in the dataset are ignored
(and counted); duplicate question ids in the dataset are an error. Sums run in dataset order
with the official arithmetic, so results are bit-for-bit those of the official scripts, not just
close.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rckit.answering.decoding import abstains
from rckit.data.squad import load_json, normalize_answer, rules_version

VERSIONS = {"1.1": "1.1", "v1.1": "1.1", "2.0": "2.0", "v2.0": "2.0"}


def _check_version(version: str) -> str:
    """Map an accepted version spelling to "1.1" or "2.0"."""
    canonical = VERSIONS.get(version) if isinstance(version, str) else None
    if canonical is None:
        raise ValueError(f"unknown SQuAD version {version!r}; expected one of {sorted(VERSIONS)}")
    return canonical


def _tokens(s: str) -> list[str]:
    return normalize_answer(s).split()


def _overlap(pred: list[str], gold: list[str]) -> int:
    """Size of the multiset intersection of two token lists."""
    # Same count as sum((Counter(pred) & Counter(gold)).values()), without building two
    # Counters per gold answer: the scorer spends most of its time here.
    unmatched: dict[str, int] = {}
    for token in gold:
        unmatched[token] = unmatched.get(token, 0) + 1
    overlap = 0
    for token in pred:
        left = unmatched.get(token, 0)
        if left:
            unmatched[token] = left - 1
            overlap += 1
    return overlap


def _f1_tokens(pred: list[str], gold: list[str], version: str) -> float:
    """Token-overlap F1 of two normalised token lists under the rules of ``version``."""
    if version == "2.0" and (not pred or not gold):
        return float(pred == gold)
    overlap = _overlap(pred, gold)
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred)
    recall = overlap / len(gold)
    # Same operation order as the official scripts, so sums match them bit for bit.
    return 2 * precision * recall / (precision + recall)


def exact_match_score(prediction: str, ground_truth: str) -> float:
    """1.0 if the two answers are equal after normalisation, else 0.0 (same in v1.1 and v2.0)."""
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def f1_score(prediction: str, ground_truth: str, version: str = "1.1") -> float:
    """Token-overlap F1 of one prediction against one gold answer, in [0, 1]."""
    return _f1_tokens(_tokens(prediction), _tokens(ground_truth), _check_version(version))


def _get(obj: Any, key: str, kind: type, where: str) -> Any:
    """``obj[key]``, or a ValueError saying where the dataset lacks it or holds the wrong type."""
    if not isinstance(obj, Mapping):
        raise ValueError(f"{where}: expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise ValueError(f"{where}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind):
        raise ValueError(f"{where}: field {key!r} should be {kind.__name__}, got {type(value).__name__}")
    return value


def _iter_questions(dataset: Mapping[str, Any]) -> Iterator[tuple[str, list[str]]]:
    """Yield ``(question id, listed answer texts)`` in file order; ids must be unique.

    A dataset missing a field the scorer reads (or holding the wrong type there) raises a
    ``ValueError`` that says where, as in ``article 0 paragraph 2 question 1: missing field 'answers'``.
    """
    seen: set[str] = set()
    for a, article in enumerate(_get(dataset, "data", list, "top level")):
        for p, paragraph in enumerate(_get(article, "paragraphs", list, f"article {a}")):
            for q, qa in enumerate(_get(paragraph, "qas", list, f"article {a} paragraph {p}")):
                where = f"article {a} paragraph {p} question {q}"
                qid = _get(qa, "id", str, where)
                if qid in seen:
                    # A dict of scores cannot hold both, and the official scripts disagree
                    # on how to count them, so refuse rather than pick one.
                    raise ValueError(f"duplicate question id {qid!r} in dataset")
                seen.add(qid)
                where = f"{where} (id {qid!r})"
                answers = _get(qa, "answers", list, where)
                yield qid, [_get(answer, "text", str, f"{where} answer {k}") for k, answer in enumerate(answers)]


def _gold_tokens(qid: str, answers: list[str], version: str) -> list[list[str]]:
    """Normalised token lists of the gold answers the rules of ``version`` score against."""
    gold = [_tokens(text) for text in answers]
    if version == "2.0":
        return [tokens for tokens in gold if tokens] or [[]]
    if not gold:
        raise ValueError(
            f"question {qid!r} has no gold answers, as in SQuAD 2.0 data: score it with the 2.0 rules "
            "(`rckit score --version 2.0`, or version='2.0' in Python)"
        )
    return gold


def _score_one(pred: list[str], gold: list[list[str]], version: str) -> tuple[float, float]:
    # Token lists are equal exactly when the normalised strings are (both are ' '-joined).
    em = max(float(pred == tokens) for tokens in gold)
    f1 = max(_f1_tokens(pred, tokens, version) for tokens in gold)
    return em, f1


def per_question_scores(
    dataset: Mapping[str, Any], predictions: Mapping[str, str], version: str = "1.1"
) -> dict[str, tuple[float, float]]:
    """``{question id: (EM, F1)}`` in [0, 1] for every question of ``dataset``, in file order.

    A question without a prediction gets ``(0.0, 0.0)``. Raises ``ValueError`` if a
    prediction is not a string, or (v1.1) if a question has no gold answers.
    """
    version = _check_version(version)
    scores: dict[str, tuple[float, float]] = {}
    for qid, answers in _iter_questions(dataset):
        gold = _gold_tokens(qid, answers, version)
        if qid not in predictions:
            scores[qid] = (0.0, 0.0)
            continue
        prediction = predictions[qid]
        if not isinstance(prediction, str):
            raise ValueError(f"prediction for question {qid!r} must be a string, got {type(prediction).__name__}")
        scores[qid] = _score_one(_tokens(prediction), gold, version)
    return scores


def _percent(scores: list[tuple[float, float]]) -> tuple[float, float]:
    """100 * mean EM and F1; sums in order, as the official scripts do."""
    total = len(scores)
    return (
        100.0 * sum(em for em, _ in scores) / total,
        100.0 * sum(f1 for _, f1 in scores) / total,
    )


def score_predictions(
    dataset: Mapping[str, Any], predictions: Mapping[str, str], version: str = "1.1"
) -> dict[str, float | int]:
    """Official SQuAD EM and F1 (percentages) of ``predictions`` on a parsed SQuAD JSON.

    Returns ``exact_match``, ``f1``, ``total`` (questions in the dataset) and ``missing``
    (questions without a prediction, scored 0). Version 2.0 adds ``HasAns_exact_match``,
    ``HasAns_f1``, ``HasAns_total`` and the same for ``NoAns``, each only when its total is
    non-zero. ``unknown_ids`` (predictions for ids not in the dataset, ignored) appears only
    when non-zero.
    """
    version = _check_version(version)
    scores = per_question_scores(dataset, predictions, version)
    if not scores:
        raise ValueError("dataset has no questions")
    exact_match, f1 = _percent(list(scores.values()))
    result: dict[str, float | int] = {
        "exact_match": exact_match,
        "f1": f1,
        "total": len(scores),
        "missing": sum(1 for qid in scores if qid not in predictions),
    }
    if version == "2.0":
        has_answer = {qid: bool(answers) for qid, answers in _iter_questions(dataset)}
        for name, wanted in (("HasAns", True), ("NoAns", False)):
            group = [s for qid, s in scores.items() if has_answer[qid] is wanted]
            if group:
                result[f"{name}_exact_match"], result[f"{name}_f1"] = _percent(group)
                result[f"{name}_total"] = len(group)
    unknown = sum(1 for qid in predictions if qid not in scores)
    if unknown:
        result["unknown_ids"] = unknown
    return result


def only_questions(raw: dict, keep: set[str]) -> dict:
    """The SQuAD document ``raw`` with only the questions whose ids are in ``keep``, so that a
    ``--limit`` evaluation is scored over the questions it answered (and says so in ``total``)."""
    return {
        **raw,
        "data": [
            {
                **art,
                "paragraphs": [{**p, "qas": [qa for qa in p["qas"] if qa["id"] in keep]} for p in art["paragraphs"]],
            }
            for art in raw["data"]
        ],
    }


def best_thresholds(
    dataset: Mapping[str, Any], span_predictions: Mapping[str, str], margins: Mapping[str, float]
) -> dict[str, float]:
    """The official v2.0 script's ``best_exact``/``best_f1`` and their thresholds.

    ``span_predictions`` are every question's best span (the model never abstaining) and
    ``margins`` its no-answer score (here the null's log-probability margin over the span,
    the official ``--na-prob-file``'s role: abstain where ``margin > threshold``). Questions
    are taken in increasing margin and answered one more at a time, from abstaining on all; the
    best total and the margin of the last question answered at that point are returned, as the
    official ``find_best_thresh`` does (with "abstain on all" at the lowest margin - 1).
    """
    scores = per_question_scores(dataset, span_predictions, "2.0")
    has_answer = {qid: bool(answers) for qid, answers in _iter_questions(dataset)}
    order = sorted(scores, key=lambda q: margins[q])
    out: dict[str, float] = {}
    for name, k in (("exact", 0), ("f1", 1)):
        current = best = float(sum(not has_answer[q] for q in scores))
        threshold = margins[order[0]] - 1.0 if order else 0.0
        for q in order:
            if has_answer[q]:
                current += scores[q][k]
            elif span_predictions.get(q):
                current -= 1.0
            if current > best:
                best, threshold = current, margins[q]
        out[f"best_{name}"] = 100.0 * best / max(1, len(scores))
        out[f"best_{name}_thresh"] = threshold
    return out


def score_files(dataset_file: str | Path, predictions_file: str | Path, version: str | None = None) -> dict:
    """``rckit score``: official EM/F1 of a predictions file (``{question id: answer text}``)
    against a SQuAD file; ``version`` (1.1 or 2.0) defaults to the dataset's rules
    (:func:`rckit.data.squad.rules_version`: its field, or its ``is_impossible`` questions).
    A file of the wrong shape is a ValueError naming it."""
    dataset = load_json(dataset_file)
    predictions = load_json(predictions_file)
    if not isinstance(predictions, dict):
        raise ValueError(
            f"{predictions_file}: expected an object mapping question ids to answer strings, "
            f"got a {type(predictions).__name__}"
        )
    for qid, text in predictions.items():
        if not isinstance(text, str):
            raise ValueError(
                f"{predictions_file}: the prediction for question {qid!r} should be a string, got {type(text).__name__}"
            )
    if not isinstance(dataset, dict):
        raise ValueError(f"{dataset_file}: top level should be an object with 'data', got a {type(dataset).__name__}")
    version = version or rules_version(dataset)
    try:
        result = score_predictions(dataset, predictions, version)
    except ValueError as e:  # predictions are checked above: what is left is about the dataset
        raise ValueError(f"{dataset_file}: {e}") from e
    return result


def abstaining(spans: dict[str, str], margins: dict[str, float], threshold: float) -> dict[str, str]:
    """``spans`` (every question's best span) with ``""`` where the null's margin passes
    ``threshold``: the predictions at another threshold, without reading the split again."""
    return {q: "" if abstains(margins.get(q), threshold) else text for q, text in spans.items()}
