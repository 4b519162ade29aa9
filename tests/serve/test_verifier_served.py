"""``rckit serve`` of a model file with a verifier (rckit issue 43), a real server on 127.0.0.1:
``/v1/answer`` abstains where the verifier says the text holds no answer, ``/v1/ask`` says there
is none in the documents, and ``--always-answer`` gives the span all the same."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rckit.answering.reader import Reader
from rckit.cli import main
from tests.answering.test_verifier import REJECTING_P, rejecting_export  # noqa: F401 (a fixture)
from tests.retrieval.test_collection import DOCS
from tests.serve.test_serve import call, post, start_server, stop_server

CONTEXT = "alpha beta gamma delta epsilon zeta eta theta."
QUESTION = "what follows gamma ?"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("verifier-index")
    for name, text in DOCS.items():
        (root / "docs" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "docs" / name).write_text(text, encoding="utf-8")
    assert main(["index", str(root / "docs"), "--out", str(root / "docs.sqlite"), "--no-progress"]) == 0
    return root / "docs.sqlite"


@pytest.fixture(scope="module")
def spans(tiny_export):
    """The tiny model's three best spans, from the file without a verifier."""
    return Reader.load(tiny_export, "cpu").answer(CONTEXT, QUESTION, top_k=3)


def _spans(answers):
    return [(a["answer"], a["start"], a["end"]) for a in answers]


def test_a_served_verifier_abstains_over_http(rejecting_export, index, spans, tmp_path):  # noqa: F811
    log = tmp_path / "serve.log"
    proc, url = start_server([str(rejecting_export), "--index", str(index)], log)
    try:
        status, body = post(url, {"context": CONTEXT, "question": QUESTION, "top_k": 3})
        assert status == 200, body
        answers = body["answers"]
        first = answers[0]
        assert first["answer"] == "" and first["start"] is None and first["end"] is None
        assert first["no_answer_probability"] == pytest.approx(REJECTING_P) and first["score"] == pytest.approx(
            REJECTING_P
        )
        assert _spans(answers[1:]) == _spans(spans)  # the best spans after it, as guesses
        # Several questions: each list starts with the abstention.
        status, body = post(url, {"context": CONTEXT, "questions": [QUESTION, "what follows eta ?"]})
        assert status == 200 and all(a[0]["answer"] == "" and a[1]["start"] is not None for a in body["answers"])
        status, info = call(url, "v1/model")
        assert status == 200 and info["verifier"]["threshold"] == 0.5 and info["always_answer"] is False
        # Asking the index: every passage read abstains, so no answer in these documents.
        status, body = call(url, "v1/ask", {"question": "When was the Eiffel Tower completed?", "top_k": 2})
        assert status == 200, body
        assert len(body["answers"]) == 1
        found = body["answers"][0]
        assert found["answer"] == "" and found["source"] is None and found["passage"] is None
        assert found["no_answer_probability"] == pytest.approx(REJECTING_P)
    finally:
        code = stop_server(proc)
    assert code == 130 and "Traceback" not in log.read_text()


def test_served_with_always_answer_the_span_comes_first(rejecting_export, index, spans, tmp_path):  # noqa: F811
    log = tmp_path / "serve.log"
    proc, url = start_server([str(rejecting_export), "--always-answer", "--index", str(index)], log)
    try:
        status, body = post(url, {"context": CONTEXT, "question": QUESTION, "top_k": 3})
        assert status == 200, body
        answers = body["answers"]
        assert _spans(answers) == _spans(spans)
        assert [a["score"] for a in answers] == pytest.approx([a["score"] for a in spans], rel=1e-5)
        assert all(a["no_answer_probability"] == pytest.approx(REJECTING_P) for a in answers)  # still said
        assert call(url, "v1/model")[1]["always_answer"] is True
        status, body = call(url, "v1/ask", {"question": "When was the Eiffel Tower completed?"})
        found = body["answers"][0]
        assert status == 200 and found["answer"] and found["source"] is not None
        assert (
            found["passage"]["text"][
                found["start"] - found["passage"]["start"] : found["end"] - found["passage"]["start"]
            ]
            == found["answer"]
        )
    finally:
        code = stop_server(proc)
    assert code == 130 and "Traceback" not in log.read_text()


def test_serve_refuses_a_threshold_for_a_model_without_a_verifier(tiny_export):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("RCKIT_API_KEY", None)
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "rckit",
            "serve",
            str(tiny_export),
            "--no-answer-threshold",
            "0.5",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert got.returncode == 2 and got.stdout == "", (got.stdout, got.stderr)
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rckit serve: ") and "has none" in lines[0], got.stderr
