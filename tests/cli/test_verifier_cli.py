"""The command line with a verifier (rckit issue 43): ``rckit predict`` and ``rckit evaluate``
abstaining (``--always-answer``, ``--no-answer-threshold``), and ``rckit verifier --from --into``
putting a saved verifier into an exported file and ``--remove`` taking it out."""

from __future__ import annotations

import json
import shutil

import pytest

from rckit.answering.reader import Reader
from rckit.model_files.metadata import read_metadata
from tests.answering.test_verifier import REJECTING_P, random_verifier, rejecting_export  # noqa: F401 (a fixture)
from tests.cli.test_cli import _run
from tests.conftest import squad_json, write_json

CONTEXT = "alpha beta gamma delta epsilon zeta eta theta."
QUESTION = "what follows gamma ?"
ASK = ["--context", CONTEXT, "--question", QUESTION, "--device", "cpu"]


@pytest.fixture(scope="module")
def best(tiny_export) -> dict:
    """The tiny model's best span for ``QUESTION``, from the file without a verifier."""
    return Reader.load(tiny_export, "cpu").answer(CONTEXT, QUESTION)[0]


def test_predict_says_there_is_no_answer_with_its_best_guess(rejecting_export, best, capsys):  # noqa: F811
    code, out, err = _run(["predict", rejecting_export, *ASK], capsys)
    assert code == 0, err
    line = out.strip()
    assert line.startswith("(no answer in the text") and line.endswith(f"best guess: {best['answer']})"), line
    code, out, _ = _run(["predict", rejecting_export, *ASK, "--json"], capsys)
    got = json.loads(out)
    assert code == 0 and got["answer"] == "" and got["start"] is None and got["end"] is None
    assert got["no_answer_probability"] == pytest.approx(REJECTING_P) and got["score"] == got["no_answer_probability"]
    # --top-k 2: the abstention, then the two best spans, each with its probability.
    code, out, _ = _run(["predict", rejecting_export, *ASK, "--top-k", 2, "--json"], capsys)
    answers = json.loads(out)
    assert code == 0 and len(answers) == 3 and answers[0]["answer"] == "" and answers[1]["answer"] == best["answer"]
    code, out, _ = _run(["predict", rejecting_export, *ASK, "--top-k", 2], capsys)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 3 and lines[0].startswith(f"{REJECTING_P:.4f}\t(no answer in the text")
    assert lines[1].split("\t", 1)[1] == best["answer"]


def test_predict_always_answer_or_a_threshold_of_1_gives_the_span(rejecting_export, best, capsys):  # noqa: F811
    code, out, _ = _run(["predict", rejecting_export, *ASK, "--always-answer"], capsys)
    assert code == 0 and out.strip() == best["answer"]
    code, out, _ = _run(["predict", rejecting_export, *ASK, "--always-answer", "--json"], capsys)
    got = json.loads(out)
    assert (got["answer"], got["start"], got["end"]) == (best["answer"], best["start"], best["end"])
    assert got["score"] == pytest.approx(best["score"], rel=1e-6)
    assert got["no_answer_probability"] == pytest.approx(REJECTING_P)  # still said
    code, out, _ = _run(["predict", rejecting_export, *ASK, "--no-answer-threshold", 1.0], capsys)
    assert code == 0 and out.strip() == best["answer"]


def test_predict_refuses_a_threshold_for_a_file_without_a_verifier_or_outside_0_1(
    tiny_export,
    rejecting_export,  # noqa: F811
    capsys,
):
    code, out, err = _run(["predict", tiny_export, *ASK, "--no-answer-threshold", 0.5], capsys)
    assert code == 2 and out == "" and err.startswith("rckit predict: ") and "has none" in err
    assert len(err.strip().splitlines()) == 1
    code, out, err = _run(["predict", rejecting_export, *ASK, "--no-answer-threshold", 2], capsys)
    assert code == 2 and out == "" and "between 0 and 1" in err and len(err.strip().splitlines()) == 1


def test_predict_a_questions_file_abstains_record_by_record(tiny_export, rejecting_export, tmp_path, capsys):  # noqa: F811
    records = [
        {"id": "a", "context": CONTEXT, "question": QUESTION},
        {"id": "b", "context": "mu alpha kappa lambda.", "question": "what follows mu ?"},
    ]
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps(r) + "\n" for r in records))
    plain = Reader.load(tiny_export, "cpu").answer_batch([(r["context"], r["question"]) for r in records], top_k=1)
    code, _, err = _run(
        ["predict", rejecting_export, "--questions", questions, "--out", tmp_path / "a.jsonl", "--device", "cpu"],
        capsys,
    )
    assert code == 0 and "2 questions answered" in err
    got = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [g["id"] for g in got] == ["a", "b"]
    for g, want in zip(got, plain):
        first, guess = g["answers"]
        assert first["answer"] == "" and first["no_answer_probability"] == pytest.approx(REJECTING_P)
        assert (guess["answer"], guess["start"]) == (want[0]["answer"], want[0]["start"])
    code, out, _ = _run(
        ["predict", rejecting_export, "--questions", questions, "--always-answer", "--device", "cpu"], capsys
    )
    got = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [[(a["answer"], a["start"], a["end"]) for a in g["answers"]] for g in got] == [
        [(a["answer"], a["start"], a["end"]) for a in want] for want in plain
    ]


def test_evaluate_scores_the_abstentions_and_always_answer_the_spans(rejecting_export, tmp_path, capsys):  # noqa: F811
    context = "alpha beta gamma delta epsilon."
    data = write_json(
        tmp_path / "v2.json",
        squad_json(
            [
                (
                    context,
                    [
                        ("has", "what follows beta ?", [("gamma", 11)], False),
                        ("none", "what follows omega ?", [], True),
                    ],
                )
            ],
            version="2.0",
        ),
    )
    code, out, err = _run(
        ["evaluate", rejecting_export, "--data", data, "--out", tmp_path / "p.json", "--device", "cpu"], capsys
    )
    assert code == 0, err
    result = json.loads(out)
    assert json.loads((tmp_path / "p.json").read_text()) == {"has": "", "none": ""}
    assert result["exact_match"] == pytest.approx(50.0) and result["NoAns_f1"] == pytest.approx(100.0)
    assert result["HasAns_f1"] == pytest.approx(0.0) and result["no_answer_threshold"] == pytest.approx(0.5)
    code, out, _ = _run(
        [
            "evaluate",
            rejecting_export,
            "--data",
            data,
            "--out",
            tmp_path / "p.json",
            "--always-answer",
            "--device",
            "cpu",
        ],
        capsys,
    )
    result, preds = json.loads(out), json.loads((tmp_path / "p.json").read_text())
    assert code == 0 and result["always_answer"] is True and preds["has"] and preds["none"]
    assert all(text in context for text in preds.values())


def test_verifier_from_a_json_file_into_an_exported_file_and_removed(tiny_export, tmp_path, capsys):
    model = tmp_path / "model.safetensors"
    shutil.copy(tiny_export, model)
    before = read_metadata(model)
    v = random_verifier(threshold=0.37)
    saved = tmp_path / "verifier.json"
    saved.write_text(json.dumps(v.to_json()) + "\n")
    code, out, err = _run(["verifier", "--from", saved, "--into", model], capsys)
    assert code == 0, err
    assert f"{model}: verifier put in (threshold 0.370)" in out + err
    reader = Reader.load(model, "cpu")
    assert reader.verifier is not None and reader.verifier.to_json() == v.to_json()
    assert {k: x for k, x in read_metadata(model).items() if k != "verifier"} == before
    code, out, err = _run(["verifier", "--remove", "--into", model], capsys)
    assert code == 0 and f"{model}: verifier removed" in out + err
    assert read_metadata(model) == before and Reader.load(model, "cpu").verifier is None


def test_verifier_refuses_with_one_line(tiny_export, tmp_path, capsys):
    code, _, err = _run(["verifier", "--remove"], capsys)
    assert code == 2 and "name them" in err and len(err.strip().splitlines()) == 1
    damaged = tmp_path / "damaged.json"
    damaged.write_text(json.dumps({"features": [], "threshold": 0.5}))
    model = tmp_path / "model.safetensors"
    shutil.copy(tiny_export, model)
    code, _, err = _run(["verifier", "--from", damaged, "--into", model], capsys)
    assert code == 2 and "damaged verifier" in err and str(damaged) in err and len(err.strip().splitlines()) == 1
    assert "verifier" not in read_metadata(model)  # the file is left as it was
    other = random_verifier().to_json()
    other["features"] = ["not_a_feature", *other["features"][1:]]
    damaged.write_text(json.dumps(other))
    code, _, err = _run(["verifier", "--from", damaged, "--into", model], capsys)
    assert code == 2 and "another version of rckit" in err and "verifier" not in read_metadata(model)
