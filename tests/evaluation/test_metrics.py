"""Tests of the official SQuAD v1.1 / v2.0 EM and F1 (rckit.evaluation.squad_metrics).

Every expected number below was worked out by hand from the rules (see the comments), not by
running the code under test. Parity with the official scripts on random prediction files is
checked outside the test suite (the scripts are not part of this repository).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from rckit.evaluation.squad_metrics import (
    exact_match_score,
    f1_score,
    normalize_answer,
    per_question_scores,
    score_predictions,
)
from tests.conftest import need

DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "data"


def make_dataset(questions: dict[str, list[str]]) -> dict[str, Any]:
    """A one-paragraph SQuAD JSON with the given ``{id: [answer texts]}`` (empty = unanswerable)."""
    qas = [
        {
            "id": qid,
            "question": f"question {qid}?",
            "answers": [{"text": text, "answer_start": 0} for text in answers],
            "is_impossible": not answers,
        }
        for qid, answers in questions.items()
    ]
    return {"version": "test", "data": [{"title": "T", "paragraphs": [{"context": "c", "qas": qas}]}]}


# --- normalisation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  A  man,  a plan. ", "man plan"),
        ("state-of-the-art", "stateoftheart"),  # '-' deleted, no space inserted
        ("Levi's Stadium", "levis stadium"),
        ("theatre and anthem", "theatre and anthem"),  # articles only as whole words
        ("an apple AN Apple", "apple apple"),
        ("Café", "café"),
        ("thé", "thé"),  # 'é' is a word character: no boundary after 'th' + 'e'
        ("“Paris”", "“paris”"),  # curly quotes are not in string.punctuation
        ("“The”", "“ ”"),  # an article is replaced by a space, which then splits the quotes
        ("Arab–Israeli", "arab–israeli"),  # en dash kept
        ("New\u00a0York\tcity\n", "new york city"),  # str.split also splits on NBSP, tab, newline
        ("", ""),
        ("the a an .", ""),
    ],
)
def test_normalize_answer(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


# --- per-pair scores -------------------------------------------------------------------------


def test_exact_match_ignores_case_punctuation_articles_whitespace() -> None:
    assert exact_match_score("the  Denver Broncos.", "Denver Broncos") == 1.0
    assert exact_match_score("Denver", "Denver Broncos") == 0.0
    assert exact_match_score("“Paris”", "Paris") == 0.0
    assert exact_match_score('"Paris"', "Paris") == 1.0


def test_f1_partial_overlap() -> None:
    # pred [cat, sat], gold [cat, sat, on, mat]: overlap 2, p = 1, r = 1/2, F1 = 2/3.
    assert f1_score("the cat sat", "the cat sat on the mat") == pytest.approx(2 / 3)


def test_f1_counts_overlap_as_multiset() -> None:
    # [x, x, y] vs [x, y, y]: overlap min(2,1) + min(1,2) = 2, p = r = 2/3, F1 = 2/3.
    assert f1_score("x x y", "x y y") == pytest.approx(2 / 3)
    # [x, x] vs [x]: overlap 1, p = 1/2, r = 1, F1 = 2/3.
    assert f1_score("x x", "x") == pytest.approx(2 / 3)


def test_f1_no_overlap_and_curly_quotes() -> None:
    assert f1_score("Paris", "London") == 0.0
    # “paris” is one token that differs from paris.
    assert f1_score("“Paris”", "Paris") == 0.0
    # [“paris”, france] vs [paris, france]: overlap 1, p = r = 1/2, F1 = 1/2.
    assert f1_score("“Paris” France", "Paris France") == pytest.approx(0.5)


def test_f1_empty_strings_depend_on_version() -> None:
    assert f1_score("", "") == 0.0  # v1.1: no overlap means 0, even for empty vs empty
    assert f1_score("", "", version="2.0") == 1.0
    assert f1_score("the", ".", version="2.0") == 1.0  # both normalise to no tokens
    assert f1_score("", "Paris", version="2.0") == 0.0
    assert f1_score("Paris", "", version="2.0") == 0.0
    assert f1_score("", "Paris") == 0.0


# --- v1.1 dataset scores ---------------------------------------------------------------------


def test_v11_dataset_scores_by_hand() -> None:
    dataset = make_dataset(
        {
            "q1": ["Denver Broncos"],
            "q2": ["Santa Clara, California", "Levi's Stadium"],
            "q3": ["gold"],
            "q4": ["1990"],
        }
    )
    predictions = {
        "q1": "the Denver Broncos.",  # EM 1, F1 1
        # [levis, stadium, in, santa, clara] vs [santa, clara, california]: p 2/5, r 2/3, F1 1/2;
        # vs [levis, stadium]: p 2/5, r 1, F1 4/7. Max F1 4/7, EM 0.
        "q2": "Levi's Stadium in Santa Clara",
        # q3 missing: 0, 0
        "q4": "",  # empty prediction: 0, 0
    }
    result = score_predictions(dataset, predictions)
    assert result["exact_match"] == pytest.approx(100 * 1 / 4)
    assert result["f1"] == pytest.approx(100 * (1 + 4 / 7) / 4)  # 39.2857...
    assert result["total"] == 4
    assert result["missing"] == 1
    assert "unknown_ids" not in result
    assert "HasAns_total" not in result


def test_missing_prediction_scores_zero_and_keeps_total() -> None:
    dataset = make_dataset({"q1": ["a dog"], "q2": ["cat"]})
    result = score_predictions(dataset, {"q1": "dog"})
    assert result == {"exact_match": 50.0, "f1": 50.0, "total": 2, "missing": 1}
    assert score_predictions(dataset, {}) == {"exact_match": 0.0, "f1": 0.0, "total": 2, "missing": 2}


def test_max_over_gold_answers() -> None:
    dataset = make_dataset({"q1": ["Broncos", "Denver Broncos team"]})
    # vs [broncos]: p 1/2, r 1, F1 2/3; vs [denver, broncos, team]: p 1, r 2/3, F1 4/5.
    scores = per_question_scores(dataset, {"q1": "Denver Broncos"})
    assert scores["q1"][0] == 0.0
    assert scores["q1"][1] == pytest.approx(4 / 5)
    # EM and F1 are maximised separately; here the first gold answer gives both.
    assert per_question_scores(dataset, {"q1": "broncos!"})["q1"] == (1.0, 1.0)


def test_v11_empty_prediction_against_punctuation_only_gold() -> None:
    # "." normalises to "", so EM is 1 but F1 is 0 (three such answers exist in v1.1 dev).
    dataset = make_dataset({"q1": ["interventionism", "."]})
    assert per_question_scores(dataset, {"q1": ""}, "1.1")["q1"] == (1.0, 0.0)
    # v2.0 drops the empty-normalising gold answer first.
    assert per_question_scores(dataset, {"q1": ""}, "2.0")["q1"] == (0.0, 0.0)


def test_per_question_scores_keys_in_file_order() -> None:
    dataset = make_dataset({"b": ["x"], "a": ["y"], "c": ["z"]})
    scores = per_question_scores(dataset, {"a": "y", "zz": "ignored"})
    assert list(scores) == ["b", "a", "c"]
    assert scores == {"b": (0.0, 0.0), "a": (1.0, 1.0), "c": (0.0, 0.0)}


def test_unknown_ids_are_ignored_and_counted() -> None:
    dataset = make_dataset({"q1": ["yes"]})
    result = score_predictions(dataset, {"q1": "yes", "other": "no", "more": 3})  # type: ignore[dict-item]
    assert result == {"exact_match": 100.0, "f1": 100.0, "total": 1, "missing": 0, "unknown_ids": 2}


# --- v2.0 dataset scores ---------------------------------------------------------------------


def test_v20_no_answer_rules_and_breakdown() -> None:
    dataset = make_dataset(
        {
            "q1": ["Normans"],
            "q2": ["France", "in France"],
            "q3": [],
            "q4": [],
            "q5": [],
            "q6": ["10th century"],
        }
    )
    predictions = {
        "q1": "the Normans",  # answerable, right: 1, 1
        "q2": "",  # empty on answerable: 0, 0
        "q3": "",  # empty on unanswerable: 1, 1
        "q4": "Rollo",  # non-empty on unanswerable: 0, 0
        # q5 missing: 0, 0
        # [10th, and, 11th, centuries] vs [10th, century]: p 1/4, r 1/2, F1 1/3; EM 0.
        "q6": "the 10th and 11th centuries",
    }
    scores = per_question_scores(dataset, predictions, "2.0")
    assert scores["q2"] == (0.0, 0.0)
    assert scores["q3"] == (1.0, 1.0)
    assert scores["q4"] == (0.0, 0.0)
    result = score_predictions(dataset, predictions, "v2.0")
    expected = {
        "exact_match": 100 * 2 / 6,
        "f1": 100 * (1 + 1 + 1 / 3) / 6,
        "total": 6,
        "missing": 1,
        "HasAns_exact_match": 100 * 1 / 3,
        "HasAns_f1": 100 * (1 + 1 / 3) / 3,
        "HasAns_total": 3,
        "NoAns_exact_match": 100 * 1 / 3,
        "NoAns_f1": 100 * 1 / 3,
        "NoAns_total": 3,
    }
    assert result.keys() == expected.keys()
    for key, value in expected.items():
        assert result[key] == pytest.approx(value), key


def test_v20_breakdown_with_zero_total_is_omitted() -> None:
    answerable_only = make_dataset({"q1": ["yes"], "q2": ["no"]})
    result = score_predictions(answerable_only, {"q1": "yes", "q2": "yes"}, "2.0")
    assert result["HasAns_total"] == 2
    assert result["HasAns_exact_match"] == 50.0
    assert not any(key.startswith("NoAns") for key in result)
    unanswerable_only = make_dataset({"q1": []})
    result = score_predictions(unanswerable_only, {"q1": ""}, "2.0")
    assert result["NoAns_total"] == 1
    assert not any(key.startswith("HasAns") for key in result)


def test_v20_listed_answers_that_normalise_to_nothing() -> None:
    # As in the official script: HasAns (an answer is listed), but the gold answer is "".
    dataset = make_dataset({"q1": ["The"]})
    result = score_predictions(dataset, {"q1": ""}, "2.0")
    assert result["HasAns_total"] == 1
    assert result["exact_match"] == 100.0
    assert result["f1"] == 100.0


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [None, 3, ["Paris"], b"Paris"])
def test_non_string_prediction_names_the_question(bad: object) -> None:
    dataset = make_dataset({"q1": ["Paris"], "q-bad": ["London"]})
    with pytest.raises(ValueError, match="q-bad"):
        score_predictions(dataset, {"q1": "Paris", "q-bad": bad})  # type: ignore[dict-item]


@pytest.mark.parametrize("bad", ["3.0", "1", "v1", "2", "", "V2.0", 1.1, None])
def test_bad_version(bad: object) -> None:
    dataset = make_dataset({"q1": ["Paris"]})
    with pytest.raises(ValueError, match="version"):
        score_predictions(dataset, {"q1": "Paris"}, bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="version"):
        f1_score("a", "b", version=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("version", ["1.1", "v1.1", "2.0", "v2.0"])
def test_accepted_version_spellings(version: str) -> None:
    dataset = make_dataset({"q1": ["Paris"]})
    assert score_predictions(dataset, {"q1": "paris"}, version)["exact_match"] == 100.0


def test_v11_rejects_unanswerable_questions() -> None:
    dataset = make_dataset({"q1": ["Paris"], "q2": []})
    with pytest.raises(ValueError, match="q2"):
        score_predictions(dataset, {"q1": "Paris", "q2": ""}, "1.1")


def test_duplicate_question_ids_are_rejected() -> None:
    dataset = make_dataset({"q1": ["Paris"]})
    paragraph = dataset["data"][0]["paragraphs"][0]
    paragraph["qas"].append(dict(paragraph["qas"][0]))
    with pytest.raises(ValueError, match="q1"):
        score_predictions(dataset, {"q1": "Paris"})


# --- real SQuAD dev sets ---------------------------------------------------------------------


def load_shared(relative: str) -> dict[str, Any]:
    path = DATA_DIR / relative
    need("realdata", path.is_file(), f"{path} not found")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def all_qas(dataset: dict[str, Any]) -> list[dict[str, Any]]:
    return [qa for article in dataset["data"] for p in article["paragraphs"] for qa in p["qas"]]


@pytest.mark.realdata
def test_real_v11_dev_gold_and_empty_predictions() -> None:
    dataset = load_shared("squad-v1.1/dev-v1.1.json.gz")
    qas = all_qas(dataset)
    gold = {qa["id"]: qa["answers"][0]["text"] for qa in qas}
    result = score_predictions(dataset, gold, "1.1")
    assert result == {"exact_match": 100.0, "f1": 100.0, "total": 10570, "missing": 0}

    empty = score_predictions(dataset, {qa["id"]: "" for qa in qas}, "1.1")
    assert empty["f1"] == 0.0
    # Not 0: three questions list "." among their answers, which normalises to "" and so
    # matches an empty prediction exactly (the official v1.1 script gives the same 0.0284).
    assert empty["exact_match"] == pytest.approx(100 * 3 / 10570)
    assert empty["total"] == 10570


@pytest.mark.realdata
def test_real_v20_dev_gold_predictions() -> None:
    dataset = load_shared("squad-v2.0/dev-v2.0.reconstructed.json.gz")
    gold = {qa["id"]: (qa["answers"][0]["text"] if qa["answers"] else "") for qa in all_qas(dataset)}
    result = score_predictions(dataset, gold, "v2.0")
    assert result["exact_match"] == 100.0
    assert result["f1"] == 100.0
    assert result["total"] == 11873
    assert result["missing"] == 0
    assert result["HasAns_total"] == 5928
    assert result["NoAns_total"] == 5945
    assert result["HasAns_f1"] == result["NoAns_f1"] == 100.0
