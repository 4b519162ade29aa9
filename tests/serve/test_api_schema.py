"""The HTTP API keeps the contract it publishes: schemathesis, every check, against a real server.

schemathesis reads ``/openapi.json`` from a real ``rckit serve`` (conftest's tiny exported QANet,
with a key and an index of one small file) on 127.0.0.1 and sends what the schema allows and what
it forbids, with the key: every response must be documented, match its schema and content type,
no request may get a 5xx, what the schema allows must be accepted and what it forbids refused, a
method a path does not take must get 405, and a request without the key must be refused.

Beside it, the rule every text of a request follows, a letter or digit (``str.isalnum``), read
from the schema as JSON Schema's tools read it (ECMA-262, here jsonschema_rs, schemathesis's
validator) on every code point: a question in any script the server reads is valid by the schema.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import jsonschema_rs  # schemathesis's validator: a test dependency with it
import pytest

from rckit.answering.texts import text_problem
from rckit.serve.config import ServeConfig
from rckit.serve.schema import HAS_WORD, ApiError, Requests
from tests.serve.test_serve import start_server, stop_server

KEY = "schema-test-key-0123456789"


def schemathesis_cli() -> str:
    found = shutil.which("st", path=str(Path(sys.executable).parent)) or shutil.which("st")
    assert found, "schemathesis is a test dependency: pip install -e '.[test]'"
    return found


def test_the_text_pattern_is_str_isalnum_on_every_code_point():
    """JSON Schema's reading of the pattern (ECMA-262: jsonschema_rs) and Python's agree with the
    reader's rule on all of Unicode (the surrogates, which no JSON text holds alone, aside)."""
    schema = jsonschema_rs.validator_for({"type": "string", "pattern": HAS_WORD})
    python = re.compile(HAS_WORD, re.ASCII)  # as schemathesis compiles a pattern to draw from it
    differ = [
        f"U+{cp:04X}"
        for cp in range(sys.maxunicode + 1)
        if not 0xD800 <= cp <= 0xDFFF
        and not schema.is_valid(chr(cp)) == bool(python.search(chr(cp))) == chr(cp).isalnum()
    ]
    assert not differ, differ[:20]


@pytest.mark.parametrize(
    "text",
    [
        "Ñ\U0001d49c\U0001d49e",  # the issue's: one accented letter and two astral-plane letters
        "¿Cuándo abrió la barrera?",
        "Πότε άνοιξε το φράγμα;",
        "屏障是什么时候开放的？",
        "กา",
        "١٩٨٤",
        "\U0001d413\U0001d421\U0001d41e",  # mathematical bold letters
        "½",
        "Ⅻ",
        "a_",
        "ǅ",
    ],
)
def test_a_text_in_any_script_is_valid_by_the_schema_and_read_by_the_server(text):
    requests = Requests.of(ServeConfig(), window=400)
    answer, ask = requests.answer_schema(), requests.ask_schema()
    for body, schema, parse in (
        ({"context": text, "question": text}, answer, requests.parse_answer),
        ({"context": text, "questions": [text]}, answer, requests.parse_answer),
        ({"question": text}, ask, requests.parse_ask),
    ):
        assert jsonschema_rs.validator_for(schema).is_valid(body), body
        parse(json.dumps(body).encode())  # no ApiError


@pytest.mark.parametrize("text", ["?!", "_", " \n", "\u0301", "🙂", "—…", "\U000e0041"])
def test_a_text_without_a_letter_or_digit_is_invalid_by_both_with_todays_message(text):
    requests = Requests.of(ServeConfig(), window=400)
    body = {"context": "The barrier opened in 1984.", "question": text}
    assert not jsonschema_rs.validator_for(requests.answer_schema()).is_valid(body)
    with pytest.raises(ApiError) as refused:
        requests.parse_answer(json.dumps(body).encode())
    assert refused.value.status == 422
    assert refused.value.message == f"'question' {text_problem(text)}"
    assert text_problem(text) in ("is empty", f"has no letter or digit, only punctuation ({text.strip()[:20]!r})")
    assert all(unicodedata.category(ch)[0] not in "LN" for ch in text)


def test_the_api_keeps_its_published_schema(tiny_export, tmp_path):
    from rckit.cli import main

    (tmp_path / "docs").mkdir()  # an index and labels, so that /v1/ask, /v1/index and /v1/labels are tried too
    (tmp_path / "docs" / "a.txt").write_text("alpha beta gamma delta.\n\nepsilon zeta eta theta.\n")
    assert main(["index", str(tmp_path / "docs"), "--out", str(tmp_path / "docs.sqlite"), "--no-progress"]) == 0
    proc, url = start_server(
        [
            str(tiny_export),
            "--index",
            str(tmp_path / "docs.sqlite"),
            "--api-key",
            KEY,
            "--labels",
            str(tmp_path / "labels.json"),
        ],
        tmp_path / "serve.log",
    )
    # A label's answer must be its passage's text at answer_start: a rule between two fields that no
    # JSON schema states, so a schema-valid label may be refused with 422, saying so.
    (tmp_path / "schemathesis.toml").write_text(
        '[[operations]]\ninclude-path = "/v1/labels"\ninclude-method = "POST"\n'
        "[operations.checks.positive_data_acceptance]\n"
        'expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx"]\n'
    )
    try:
        run = subprocess.run(
            [
                schemathesis_cli(),
                "run",
                f"{url}openapi.json",
                "--checks",
                "all",
                "--header",
                f"Authorization: Bearer {KEY}",
                "--max-examples",
                "60",
                "--seed",
                "1",
                "--request-timeout",
                "60",
                "--no-color",
                # Hypothesis's own speed check on generating POST /v1/labels's bodies (many
                # interdependent fields): a loaded machine trips it, while every API check still runs.
                "--suppress-health-check",
                "too_slow",
            ],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=tmp_path,
        )
    finally:
        stop_server(proc)
    report = run.stdout[-6000:] + run.stderr[-2000:]
    assert run.returncode == 0, report
    assert "no issues found" in run.stdout.lower(), report
    # /v1/answer, /v1/explain, /v1/ask, /v1/index, /v1/model, /v1/models, /health, GET and POST /v1/labels
    assert "9 selected / 9 total" in run.stdout, report
    assert KEY not in (tmp_path / "serve.log").read_text()  # the access log names a key, never shows it
