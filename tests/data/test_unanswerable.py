"""Unanswerable questions made by rule (issue 52): each rule on hand-made sentences makes a
question that differs from its source and keeps the source's answer as plausible; a missing
library skips its rule with a note; the same seed makes the same questions."""

import json

import pytest

from rckit.data import unanswerable as U
from rckit.data.squad import normalize_answer, read_squad
from tests.conftest import need, write_json

P0 = (
    "The Denver Broncos defeated the Carolina Panthers in Super Bowl 50, played in 2016 at Levi's Stadium in "
    "Santa Clara. Peyton Manning was the quarterback of the Broncos."
)
PANTHERS = {"text": "the Carolina Panthers", "answer_start": 28}
ARTICLE = {
    "title": "Super Bowl",
    "paragraphs": [
        {
            "context": P0,
            "qas": [
                {"id": "q1", "question": "Which team was defeated by the Broncos in 2016?", "answers": [PANTHERS]},
                {
                    "id": "q2",
                    "question": "Who was the quarterback of the Broncos?",
                    "answers": [{"text": "Peyton Manning", "answer_start": 117}],
                },
                {"id": "q3", "question": "Which team did not win Super Bowl 50?", "answers": [PANTHERS]},
                {"id": "q4", "question": "Which team did the Broncos beat in Santa Clara?", "answers": [PANTHERS]},
                {
                    "id": "q5",
                    "question": "In what year did the Broncos win this game?",
                    "answers": [{"text": "2016", "answer_start": 78}],
                },
            ],
        },
        {
            "context": "Super Bowl 51 was won by the New England Patriots in 2017 in Houston, with Tom Brady named "
            "the most valuable player.",
            "qas": [],
        },
        {
            "context": "The Panthers had beaten the Arizona Cardinals to reach the final, their second Super Bowl.",
            "qas": [],
        },
    ],
}


@pytest.fixture(scope="module")
def nlp():
    pipeline, why = U.load_pipeline()
    need("spacy", pipeline is not None, why or "")
    return pipeline


def made(nlp, rules, seed=0):
    return U.make_unanswerable([ARTICLE], seed=seed, rules=rules, nlp=nlp)


def by_source(out, source):
    return {m.rule: m for m in out.made if m.source == source}


def test_the_article_is_what_the_tests_say():
    for p in ARTICLE["paragraphs"]:
        for qa in p["qas"]:
            a = qa["answers"][0]
            assert p["context"][a["answer_start"] :].startswith(a["text"])


def test_entity_swap_names_another_entity_of_the_article_absent_from_the_paragraph(nlp):
    m = by_source(made(nlp, ["entity_swap"]), "q4")["entity_swap"]
    # "Santa Clara" (a place) -> Houston: the article's other place, Denver, is named in the paragraph
    assert m.question == "Which team did the Broncos beat in Houston?"
    assert m.context == P0 and m.plausible == [PANTHERS]


def test_number_swap_changes_the_year_to_one_the_paragraph_does_not_hold(nlp):
    m = by_source(made(nlp, ["number_swap"]), "q1")["number_swap"]
    assert m.question == "Which team was defeated by the Broncos in 2017?" and m.plausible == [PANTHERS]


def test_the_words_a_question_asks_with_are_not_swapped(nlp):
    out = made(nlp, ["number_swap", "entity_swap"])
    assert by_source(out, "q5") == {}  # "what year" and "this game" are how it asks, not what it states


def test_negation_goes_in_before_the_verb_or_after_a_copula_and_comes_out(nlp):
    out = made(nlp, ["negation"])
    assert by_source(out, "q1")["negation"].question == "Which team was not defeated by the Broncos in 2016?"
    assert by_source(out, "q2")["negation"].question == "Who was not the quarterback of the Broncos?"
    assert by_source(out, "q3")["negation"].question == "Which team did win Super Bowl 50?"
    assert by_source(out, "q4")["negation"].question == "Which team did the Broncos not beat in Santa Clara?"
    assert all(m.plausible and m.context == P0 for m in out.made)


def test_other_paragraph_asks_the_nearest_paragraph_without_the_answer():
    out = U.make_unanswerable([ARTICLE], rules=["other_paragraph"])  # needs no spaCy
    m = by_source(out, "q2")["other_paragraph"]
    assert m.question == "Who was the quarterback of the Broncos?"
    assert m.context != P0 and "Peyton Manning" not in m.context and m.plausible == []


def test_holds_answer_is_squads_answer_comparison_on_whole_words():
    def holds(text, answer):
        return U.holds_answer(normalize_answer(text), [normalize_answer(answer)])

    assert holds("It made a Denver Broncos fan of him.", "The Denver Broncos")  # case and articles aside
    assert holds("It cost 1000 dollars.", "1,000")  # punctuation aside
    assert not holds("Frederick William III of Prussia", "Russia")  # never inside another word
    assert not holds("133,000 voters", "3")
    assert not U.holds_answer("any text", [""])  # an answer normalised to nothing is held nowhere


def test_a_paragraph_holding_the_answer_after_normalisation_is_never_asked():
    """The nearest other paragraph holds "a Denver Broncos", which is "The Denver Broncos" to SQuAD's
    comparison: other_paragraph takes the next one, and so do the no-answer set's pairs."""
    article = {
        "title": "Super Bowl",
        "paragraphs": [
            {
                "context": "The Denver Broncos won Super Bowl 50.",
                "qas": [
                    {
                        "id": "q",
                        "question": "Which team won Super Bowl 50?",
                        "answers": [{"text": "The Denver Broncos", "answer_start": 0}],
                    }
                ],
            },
            {"context": "Super Bowl 50 made him a Denver Broncos fan.", "qas": []},
            {"context": "The Patriots won in 2017.", "qas": []},
        ],
    }
    out = U.make_unanswerable([article], rules=["other_paragraph"])
    assert [m.context for m in out.made] == ["The Patriots won in 2017."]
    pairs, counts = U.unanswerable_pairs([article], rate=1.0, seed=0)
    assert counts["made"] == 1 and [qa["id"] for qa in pairs[0]["paragraphs"][2]["qas"]] == ["q" + U.PAIR_SUFFIX]


def test_antonym_is_not_offered(tmp_path, capsys):
    """No WordNet data installs without a download, so no antonym rule: not a rule skipped with a note."""
    from rckit.cli import main

    assert "antonym" not in U.RULES
    train = write_json(tmp_path / "train-v1.1.json", {"version": "1.1", "data": [ARTICLE]})
    args = ["prepare", "squad-unanswerable", "--train", str(train), "--out", str(tmp_path / "made"), "--no-progress"]
    assert main([*args, "--rules", "antonym"]) == 2
    assert "--rules: unknown antonym" in capsys.readouterr().err


def test_a_missing_library_skips_its_rules_with_a_note(monkeypatch):
    monkeypatch.setattr(U, "load_pipeline", lambda: (None, "no spaCy English pipeline is installed"))
    out = U.make_unanswerable([ARTICLE])
    assert {m.rule for m in out.made} == {"other_paragraph"}
    assert out.notes == ["skipped entity_swap, number_swap, negation: no spaCy English pipeline is installed"]
    assert out.counts()["entity_swap"] == 0 and set(out.tried) == {"other_paragraph"}


def test_seeded_output_is_identical_twice_and_reads_as_squad_v2(nlp, tmp_path):
    first, again = made(nlp, U.RULES, seed=3), made(nlp, U.RULES, seed=3)
    assert first.squad() == again.squad() and len(first.made) >= 7
    ds = read_squad(write_json(tmp_path / "made.json", first.squad()))
    assert ds.report.version == "2.0" and len(ds.examples) == len(first.made)
    assert all(not e.answers for e in ds.examples)


def test_rckit_prepare_squad_unanswerable_writes_the_set_and_its_report(nlp, tmp_path, capsys):
    from rckit.cli import main

    train = write_json(tmp_path / "train-v1.1.json", {"version": "1.1", "data": [ARTICLE]})
    out = tmp_path / "made"
    args = ["prepare", "squad-unanswerable", "--train", str(train), "--out", str(out), "--no-progress", "--seed", "3"]
    assert main(args) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["made"] == made(nlp, U.RULES, seed=3).counts() and report["tried"]["negation"] == 5
    assert "negation: 5 made of 5 questions tried" in capsys.readouterr().out
    assert read_squad(out / "made.json").report.version == "2.0"
    assert main([*args[:-2], "--rules", "entity_swap,guess"]) == 2
    assert "--rules: unknown guess" in capsys.readouterr().err
