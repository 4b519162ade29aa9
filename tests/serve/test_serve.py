"""rckit serve: the JSON API, its errors, batching of concurrent requests, a real server.

Most tests use a fake reader (``plan_many``, ``read``, ``window`` and ``info`` as
:class:`rckit.answering.reader.Reader`'s) that records the size of every call; the end-to-end ones use
the real Reader on conftest's tiny QANet run in process, and on its exported file behind a real uvicorn
server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from rckit.serve.app import create_app
from rckit.serve.config import ServeConfig

CONTEXT = "Ada Lovelace wrote the first published program in 1843 for the Analytical Engine of Charles Babbage."


class FakeJob:
    """A fake reader's plan: each pair read in ``windows`` windows of 100 tokens, one item each."""

    def __init__(self, reader, pairs, top_k, max_answer_len, windows):
        self.reader, self.pairs, self.top_k, self.max_answer_len = reader, pairs, top_k, max_answer_len
        count = windows if callable(windows) else (lambda context: windows)
        self.windows = [[(i, w)] for i, (c, _) in enumerate(pairs) for w in range(count(c))]
        self.work = len(self.windows)
        self.read = 0  # items read so far

    @staticmethod
    def cost(items) -> int:
        return 100 * len(items)

    def answers(self):
        assert self.read == self.work, "answers asked for before every window was read"
        return [self.reader.answers(c, q, self.top_k) for c, q in self.pairs]


class FakeReader:
    """Answers with words of the context, chosen by the question, best first; records every model
    call's size and its requests' settings. ``windows``: how many windows each pair is read in
    (or a function of its context giving that)."""

    info = {"model": "fake-reader", "source": None, "config": {}}
    window = 400
    collection_verifier = None  # no verifier: a collection's answer is its best span
    own_verifier = None  # nor rckit's own reader checking its best answers

    def __init__(self, delay: float = 0.0, fail_on: str | None = None, windows=1):
        self.delay = delay
        self.fail_on = fail_on
        self.windows = windows
        self.calls: list[int] = []
        self.settings: list[tuple[int, int | None]] = []
        self.log: list[list[str]] = []  # each call: the question of each of its items
        self.planned: list[int] = []  # requests planned together, plan after plan
        self.lock = threading.Lock()
        self.busy = False  # two calls at once would mean the model runs outside the one worker
        self.concurrent = False  # a batcher with several workers: calls at once are allowed
        self.at_once = self.most_at_once = 0

    def plan(self, pairs, top_k=1, max_answer_len=None):
        return FakeJob(self, pairs, top_k, max_answer_len, self.windows)

    def plan_many(self, requests):
        self.planned.append(len(requests))
        return [self.plan(*r) for r in requests]

    def read(self, parts):
        with self.lock:
            assert self.concurrent or not self.busy, "two model calls ran at once"
            self.busy = True
            self.at_once += 1
            self.most_at_once = max(self.most_at_once, self.at_once)
        try:
            self.calls.append(sum(len(items) for _, items in parts))
            self.log.append([job.pairs[i][1] for job, items in parts for i, _ in items])
            for job, items in parts:
                self.settings.append((job.top_k, job.max_answer_len))
                for i, _ in items:
                    if self.fail_on and self.fail_on in job.pairs[i][1]:
                        raise RuntimeError(f"cannot answer {job.pairs[i][1]!r}")
            time.sleep(self.delay(parts) if callable(self.delay) else self.delay)
            with self.lock:
                for job, items in parts:
                    job.read += len(items)
        finally:
            with self.lock:
                self.at_once -= 1
                self.busy = self.at_once > 0

    def answers(self, context, question, top_k):
        words = [m.span() for m in re.finditer(r"\w+", context)]
        out = []
        for k in range(min(top_k, len(words))):
            s, e = words[(len(question) + k) % len(words)]
            out.append(
                {"answer": context[s:e], "score": 1 / (k + 2), "start": s, "end": e, "no_answer_probability": None}
            )
        return out


@pytest.fixture
def fake():
    return FakeReader()


@pytest.fixture
def client(fake):
    with TestClient(create_app(fake, ServeConfig(max_body_bytes=2_000, max_questions=8))) as c:
        yield c


def ask(client, **body):
    return client.post("/v1/answer", json=body)


def check_good_request(client, fake):
    r = ask(client, context=CONTEXT, question="Who wrote it?")
    assert r.status_code == 200, r.text
    assert r.json()["answers"] == fake.answers(CONTEXT, "Who wrote it?", 1)


# -- what the API answers --------------------------------------------------------------------


def test_one_question_gives_its_top_k(client, fake):
    r = ask(client, context=CONTEXT, question="When was it published?", top_k=3)
    assert r.status_code == 200
    body = r.json()
    assert body["answers"] == fake.answers(CONTEXT, "When was it published?", 3)
    assert body["model"] == "fake-reader" and body["ms"] >= 0
    for a in body["answers"]:
        assert CONTEXT[a["start"] : a["end"]] == a["answer"]


def test_several_questions_give_a_list_each(client, fake):
    qs = ["Who?", "When was it published?", "For which engine?"]
    r = ask(client, context=CONTEXT, questions=qs, top_k=2, max_answer_len=5)
    assert r.status_code == 200
    assert r.json()["answers"] == [fake.answers(CONTEXT, q, 2) for q in qs]
    assert fake.calls == [3] and fake.settings == [(2, 5)]


def test_model_health_docs_and_page(client):
    assert client.get("/v1/model").json() == FakeReader.info
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["model"] == "fake-reader"
    spec = client.get("/openapi.json").json()
    schema = spec["paths"]["/v1/answer"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    fields = {name for branch in schema["oneOf"] for name in branch["properties"]}
    assert {"context", "question", "questions", "top_k", "max_answer_len"} <= fields
    assert client.get("/docs").status_code == 200
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for element in ("context", "question", "ask", "answer", "topk", "took", "error"):
        assert f'id="{element}"' in page.text
    assert 'name="viewport"' in page.text
    for name, kind in (("app.js", "javascript"), ("style.css", "text/css")):
        r = client.get(f"/static/{name}")
        assert r.status_code == 200 and kind in r.headers["content-type"]


def test_the_page_never_puts_text_in_as_html():
    js = (Path(__file__).resolve().parents[2] / "src/rckit/serve/static/app.js").read_text()
    assert "innerHTML" not in js and "insertAdjacentHTML" not in js and "document.write" not in js


# -- every bad request: its status, one clear message, and the server goes on ----------------

BAD_JSON = [
    ("malformed JSON", b'{"context": "a", "question": ', 400, "not valid JSON"),
    ("empty body", b"", 400, "the body is empty"),
    ("not UTF-8", b'{"context": "\xff\xfe", "question": "q"}', 400, "not UTF-8"),
    ("a list, not an object", b'["context", "question"]', 422, "must be a JSON object"),
    ("a string, not an object", b'"hello"', 422, "must be a JSON object"),
]

BAD_FIELDS = [
    ("missing context", {"question": "Who?"}, "'context' is required"),
    ("no question", {"context": CONTEXT}, "'question' (one question) or 'questions'"),
    ("both question and questions", {"context": CONTEXT, "question": "a", "questions": ["b"]}, "not both"),
    ("context a number", {"context": 5, "question": "Who?"}, "'context' must be a string, not a number (5)"),
    ("question null", {"context": CONTEXT, "question": None}, "'question' (one question) or 'questions'"),
    ("question a list", {"context": CONTEXT, "question": ["Who?"]}, "'question' must be a string, not a list"),
    ("questions a string", {"context": CONTEXT, "questions": "Who?"}, "'questions' must be a list of strings"),
    (
        "questions holding a number",
        {"context": CONTEXT, "questions": ["Who?", 3]},
        "'questions[1]' must be a string, not a number (3)",
    ),
    ("top_k a string", {"context": CONTEXT, "question": "Who?", "top_k": "3"}, "'top_k' must be an integer"),
    ("top_k a boolean", {"context": CONTEXT, "question": "Who?", "top_k": True}, "'top_k' must be an integer"),
    ("top_k a fraction", {"context": CONTEXT, "question": "Who?", "top_k": 2.5}, "'top_k' must be an integer"),
    ("top_k 0", {"context": CONTEXT, "question": "Who?", "top_k": 0}, "'top_k' must be between 1 and 20, not 0"),
    ("top_k 21", {"context": CONTEXT, "question": "Who?", "top_k": 21}, "'top_k' must be between 1 and 20, not 21"),
    (
        "max_answer_len 0",
        {"context": CONTEXT, "question": "Who?", "max_answer_len": 0},
        "'max_answer_len' must be between 1 and 200",
    ),
    ("a misspelt field", {"context": CONTEXT, "qestion": "Who?"}, "unknown field 'qestion'"),
    ("empty context", {"context": "", "question": "Who?"}, "'context' is empty"),
    ("blank context", {"context": " \n\t ", "question": "Who?"}, "'context' is empty"),
    ("empty question", {"context": CONTEXT, "question": ""}, "'question' is empty"),
    ("punctuation for a question", {"context": CONTEXT, "question": "?!"}, "'question' has no letter or digit"),
    ("an empty question among several", {"context": CONTEXT, "questions": ["Who?", " "]}, "'questions[1]' is empty"),
    ("no questions", {"context": CONTEXT, "questions": []}, "'questions' is an empty list"),
    (
        "too many questions",
        {"context": CONTEXT, "questions": ["Who?"] * 9},
        "'questions' has 9 questions; this server takes at most 8",
    ),
    (
        "a question too long",
        {"context": CONTEXT, "question": "why " * 300},
        "'question' has 1,200 characters; this server reads at most 1,000",
    ),
]


@pytest.mark.parametrize("body,status,message", [c[1:] for c in BAD_JSON], ids=[c[0] for c in BAD_JSON])
def test_a_body_that_is_not_a_request(client, fake, body, status, message):
    r = client.post("/v1/answer", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status
    assert r.json().keys() == {"error"} and message in r.json()["error"]
    check_good_request(client, fake)


@pytest.mark.parametrize("body,message", [c[1:] for c in BAD_FIELDS], ids=[c[0] for c in BAD_FIELDS])
def test_a_bad_field_is_named(client, fake, body, message):
    r = ask(client, **body)
    assert r.status_code == 422
    assert r.json() == {"error": r.json()["error"]} and message in r.json()["error"], r.json()
    assert fake.calls == []  # refused before the model
    check_good_request(client, fake)


def test_a_whole_number_written_as_a_float_is_an_integer(client, fake):
    """JSON (and JSON Schema's integer) does not tell 2 from 2.0; a client generated from the schema may send either."""
    r = ask(client, context=CONTEXT, question="When was it published?", top_k=2.0, max_answer_len=5.0)
    assert r.status_code == 200 and r.json()["answers"] == fake.answers(CONTEXT, "When was it published?", 2)


def test_json_nested_10000_deep_is_a_400_not_a_500(fake):
    with TestClient(create_app(fake)) as client:
        for body in (b"[" * 10_000 + b"]" * 10_000, b'{"a": ' * 10_000 + b"1" + b"}" * 10_000):
            r = client.post("/v1/answer", content=body, headers={"content-type": "application/json"})
            assert r.status_code == 400 and r.json() == {"error": "the body is JSON nested too deeply to read"}
        check_good_request(client, fake)


def test_a_body_over_the_limit_is_refused_from_its_length(client, fake):
    r = ask(client, context="word " * 500, question="Who?")
    assert r.status_code == 413
    assert "this server takes at most 2000" in r.json()["error"]
    check_good_request(client, fake)


def test_a_streamed_body_over_the_limit_is_cut_off(fake):
    app = create_app(fake, ServeConfig(max_body_bytes=2_000))
    sent = []

    async def chunks():  # no Content-Length: the size is only known as it arrives
        for _ in range(1000):
            sent.append(1)
            yield b" " * 100

    async def post_stream():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            r = await c.post("/v1/answer", content=chunks())
            good = await c.post("/v1/answer", json={"context": CONTEXT, "question": "Who wrote it?"})
            return r, good

    r, good = asyncio.run(post_stream())
    assert r.status_code == 413 and "over 2000 bytes" in r.json()["error"]
    assert "content-length" not in r.request.headers
    assert len(sent) < 25  # refused after ~2000 bytes, the rest never read
    assert good.status_code == 200


def test_other_paths_and_methods_answer_in_json(client, fake):
    r = client.get("/v2/answer")
    assert r.status_code == 404 and r.json() == {"error": "no such page: /v2/answer"}
    r = client.get("/v1/answer")
    assert r.status_code == 405 and "GET" in r.json()["error"] and r.headers["allow"] == "POST"
    for path in ("/health", "/v1/model"):  # RFC 9110: a 405 says which methods the resource takes
        r = client.request("TRACE", path)
        assert r.status_code == 405 and "GET" in r.headers["allow"], (path, r.headers)
    check_good_request(client, fake)


def test_the_schema_states_every_rule_the_server_enforces(fake):
    app = create_app(fake, ServeConfig(max_questions=8, max_question_chars=100, max_context_chars=50_000, max_work=64))
    with TestClient(app) as client:
        body = client.get("/openapi.json").json()["paths"]["/v1/answer"]["post"]["requestBody"]
        one, many = body["content"]["application/json"]["schema"]["oneOf"]
        assert one["required"] == ["context", "question"] and many["required"] == ["context", "questions"]
        assert not one["additionalProperties"] and not many["additionalProperties"]
        for text in (
            one["properties"]["context"],
            one["properties"]["question"],
            many["properties"]["questions"]["items"],
        ):
            assert (
                text["minLength"] == 1 and re.search(text["pattern"], "Who?") and not re.search(text["pattern"], "?!_")
            )
        assert one["properties"]["question"]["maxLength"] == 100
        assert many["properties"]["questions"]["minItems"] == 1 and many["properties"]["questions"]["maxItems"] == 8
        assert one["properties"]["top_k"]["minimum"] == 1 and one["properties"]["top_k"]["maximum"] == 20
        # the work limit as lengths: 64 windows of 400 tokens, 200 apart, with one question (at most
        # --max-context-chars), 64 / 8 = 8 windows with a list
        assert one["properties"]["context"]["maxLength"] == 400 + 63 * 200 == 13_000
        assert many["properties"]["context"]["maxLength"] == 400 + 7 * 200
        assert "4,000,000 bytes" in body["content"]["application/json"]["schema"]["description"]
        ok = ask(client, context="w " * 898 + "end.", questions=["Who?"] * 8)  # 1,800 characters
        assert ok.status_code == 200, ok.text
        r = ask(client, context="w " * 1_000 + "end.", questions=["Who?"] * 8)
        assert (
            r.status_code == 422
            and "'context' has 2,004 characters; this server reads at most 1,800 (with "
            "'questions'; one 'question' may ask about 13,000)"
            == r.json()["error"]
        )
        assert ask(client, context="w " * 1_000 + "end.", question="Who?").status_code == 200


def test_a_setting_out_of_range_is_refused_naming_it(fake):
    for config, name in (
        (ServeConfig(max_batch=0), "max_batch"),
        (ServeConfig(request_timeout=0), "request_timeout"),
        (ServeConfig(max_questions=8, max_work=4), "max_work"),
        (ServeConfig(policy="lifo"), "policy"),
    ):
        with pytest.raises(ValueError, match=name):
            create_app(fake, config)


def test_the_schemas_text_pattern_is_the_readers_text_rule():
    """A text the schema's pattern allows is one the reader reads (text_problem), in every script."""
    from rckit.answering.texts import text_problem
    from rckit.serve.schema import HAS_WORD

    for text in ("Who?", "?!", "_", " \n", "½", "é", "\u0301", "٣", "漢", "🙂", "a_", "__1"):
        assert bool(re.search(HAS_WORD, text)) == (text_problem(text) is None), text


def test_the_answers_schema_is_the_typed_answers_with_their_descriptions(client):
    from typing import NotRequired, get_args, get_origin, get_type_hints

    from rckit.answering import answer

    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    for typed in (answer.Answer, answer.FoundAnswer, answer.Passage, answer.Reason):
        hints = get_type_hints(typed, include_extras=True)
        schema = schemas[typed.__name__]
        properties = schema["properties"]
        assert properties.keys() == hints.keys()
        for name, hint in hints.items():
            optional = get_origin(hint) is NotRequired  # a key only some carry (an abstention's reason)
            hint = get_args(hint)[0] if optional else hint
            assert properties[name]["description"] == hint.__metadata__[0], (typed.__name__, name)
            assert (name in schema.get("required", [])) != optional, (typed.__name__, name)


def test_a_request_over_the_work_limit_is_413_naming_it():
    fake = FakeReader(windows=5)  # every question read in 5 windows
    with TestClient(create_app(fake, ServeConfig(max_questions=4, max_work=8))) as client:
        r = ask(client, context=CONTEXT, questions=["Who?", "When?"])
        assert (
            r.status_code == 413 and "asks for 10 readings" in r.json()["error"] and "--max-work" in r.json()["error"]
        )
        assert fake.calls == []  # refused after planning, before the model
        assert ask(client, context=CONTEXT, question="Who?").status_code == 200


def test_a_request_over_its_time_limit_is_503_and_dropped():
    fake = FakeReader(delay=0.1, windows=6)  # 6 calls of 0.1 s: more than the limit
    with TestClient(create_app(fake, ServeConfig(max_batch=1, request_timeout=0.25))) as client:
        r = ask(client, context=CONTEXT, question="Who?")
        assert (
            r.status_code == 503 and "within 0.25 s" in r.json()["error"] and "--request-timeout" in r.json()["error"]
        )
        time.sleep(0.15)
        assert client.get("/health").json()["queued"] == 0
        assert len(fake.calls) < 6  # its last windows were never read


def test_a_failing_model_is_a_500_for_its_request_only():
    fake = FakeReader(fail_on="boom")
    with TestClient(create_app(fake)) as client:
        r = ask(client, context=CONTEXT, question="boom?")
        assert r.status_code == 500
        assert "the model failed on this request: RuntimeError: cannot answer 'boom?'" == r.json()["error"]
        check_good_request(client, fake)


# -- batching ----------------------------------------------------------------------------------


async def _post_all(app, bodies):
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        return await asyncio.gather(*(c.post("/v1/answer", json=b) for b in bodies))


def _bodies(n):
    """n requests, each with its own context and questions, some with several and other top_k."""
    bodies = []
    for i in range(n):
        context = f"Request {i} asks about " + " ".join(f"w{i}x{j}" for j in range(3 + i % 5)) + "."
        if i % 3 == 0:
            bodies.append({"context": context, "questions": [f"q{i} {'a' * k}?" for k in range(3)], "top_k": 2})
        else:
            bodies.append({"context": context, "question": f"question {i}{'?' * (i % 4)}", "top_k": 1 + i % 3})
    return bodies


def _expected(fake, body):
    if "question" in body:
        return fake.answers(body["context"], body["question"], body["top_k"])
    return [fake.answers(body["context"], q, body["top_k"]) for q in body["questions"]]


def test_concurrent_requests_share_model_calls_and_each_gets_its_own_answers():
    fake = FakeReader(delay=0.05)  # while the model runs, the next requests queue
    app = create_app(fake, ServeConfig(max_batch=8, batch_window_ms=20))
    bodies = _bodies(24)
    responses = asyncio.run(_post_all(app, bodies))
    for body, r in zip(bodies, responses):
        assert r.status_code == 200, r.text
        assert r.json()["answers"] == _expected(fake, body)
    n_questions = sum(len(b.get("questions", [1])) for b in bodies)
    assert sum(fake.calls) == n_questions
    assert len(fake.calls) < len(bodies) and max(fake.calls) <= 8, fake.calls


def test_requests_that_wait_together_are_planned_together():
    fake = FakeReader(delay=0.05)
    app = create_app(fake, ServeConfig(max_batch=8, batch_window_ms=20))
    bodies = _bodies(12)
    responses = asyncio.run(_post_all(app, bodies))
    assert all(r.status_code == 200 for r in responses)
    assert sum(fake.planned) == len(bodies) and max(fake.planned) > 1, fake.planned


def test_concurrent_requests_from_threads_are_batched():
    fake = FakeReader(delay=0.05)
    bodies = _bodies(12)
    with TestClient(create_app(fake, ServeConfig(max_batch=32, batch_window_ms=30))) as client:
        results = [None] * len(bodies)

        def post(i):
            results[i] = client.post("/v1/answer", json=bodies[i])

        threads = [threading.Thread(target=post, args=(i,)) for i in range(len(bodies))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(r.status_code == 200 for r in results)
        assert [r.json()["answers"] for r in results] == [_expected(fake, b) for b in bodies]
        assert len(fake.calls) < len(bodies), fake.calls
        assert client.get("/health").json()["calls"] == len(fake.calls)


def test_a_request_larger_than_a_batch_is_answered_in_several_calls():
    fake = FakeReader()
    with TestClient(create_app(fake, ServeConfig(max_batch=4))) as client:
        qs = [f"question {'x' * k}" for k in range(10)]
        r = ask(client, context=CONTEXT, questions=qs)
        assert r.json()["answers"] == [fake.answers(CONTEXT, q, 1) for q in qs]
        assert fake.calls == [4, 4, 2]


def test_requests_with_other_settings_share_a_call_and_each_keeps_its_own():
    fake = FakeReader(delay=0.05)
    app = create_app(fake, ServeConfig(max_batch=32, batch_window_ms=50))
    bodies = [
        {"context": CONTEXT, "question": "Who?", "top_k": 1},
        {"context": CONTEXT, "question": "When?", "top_k": 4},
        {"context": CONTEXT, "question": "Where?", "top_k": 2, "max_answer_len": 3},
    ]
    responses = asyncio.run(_post_all(app, bodies))
    assert [len(r.json()["answers"]) for r in responses] == [1, 4, 2]
    assert [r.json()["answers"] for r in responses] == [_expected(fake, b) for b in bodies]
    # one call for the three, each request decoded with its own settings
    assert fake.calls == [3] and sorted(fake.settings, key=str) == sorted([(1, None), (4, None), (2, 3)], key=str)


def test_a_failure_in_a_shared_call_fails_only_the_request_that_caused_it():
    fake = FakeReader(delay=0.02, fail_on="boom")
    app = create_app(fake, ServeConfig(max_batch=32, batch_window_ms=50))
    bodies = [{"context": CONTEXT, "question": q} for q in ("Who?", "boom?", "When?", "Where?")]
    responses = asyncio.run(_post_all(app, bodies))
    assert [r.status_code for r in responses] == [200, 500, 200, 200]
    assert "boom" in responses[1].json()["error"]
    assert responses[3].json()["answers"] == fake.answers(CONTEXT, "Where?", 1)


@pytest.mark.parametrize("policy", ["fair", "round-robin"])
def test_a_paragraph_is_answered_between_the_windows_of_a_long_document(policy):
    """A question asked while a 20-window document is being read, 4 windows a call, is read in
    the next call instead of after the document; the document's answers are still whole."""
    fake = FakeReader(delay=0.03, windows=lambda context: 20 if context.startswith("LONG") else 1)
    app = create_app(fake, ServeConfig(max_batch=4, batch_window_ms=0, policy=policy))

    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            long = asyncio.create_task(c.post("/v1/answer", json={"context": "LONG " + CONTEXT, "question": "What?"}))
            while not fake.calls:  # the document is being read
                await asyncio.sleep(0.005)
            short = await c.post("/v1/answer", json={"context": CONTEXT, "question": "Who?"})
            calls_so_far = len(fake.log)
            return await long, short, calls_so_far

    long, short, calls_when_short_was_answered = asyncio.run(scenario())
    assert long.status_code == short.status_code == 200
    assert long.json()["answers"] == fake.answers("LONG " + CONTEXT, "What?", 1)
    assert short.json()["answers"] == fake.answers(CONTEXT, "Who?", 1)
    asked_in = [k for k, questions in enumerate(fake.log) if "Who?" in questions]
    assert asked_in and asked_in[0] <= 2 < len(fake.log) - 1, fake.log  # early, with document windows after it
    assert calls_when_short_was_answered < len(fake.log)
    assert sum(q == "What?" for questions in fake.log for q in questions) == 20


def test_two_workers_read_at_once_and_answer_a_request_after_its_last_window():
    """With two workers the waiting items are shared between two calls at once; a document whose
    windows went into both is answered only when both are done (FakeJob.answers checks)."""
    from rckit.serve.batcher import Batcher

    fake = FakeReader(delay=0.05, windows=lambda context: 5 if context.startswith("LONG") else 1)
    fake.concurrent = True

    async def scenario():
        batcher = Batcher(fake, ServeConfig(max_batch=4, batch_window_ms=5, model_workers=2, request_timeout=20))
        batcher.start()
        try:
            asked = [batcher.submit([(CONTEXT, f"Question {k}?")]) for k in range(6)]
            asked.append(batcher.submit([("LONG " + CONTEXT, "What?")]))
            return await asyncio.gather(*asked)
        finally:
            await batcher.stop()
            batcher.close()

    got = asyncio.run(scenario())
    assert got[:6] == [[fake.answers(CONTEXT, f"Question {k}?", 1)] for k in range(6)]
    assert got[6] == [fake.answers("LONG " + CONTEXT, "What?", 1)]
    assert fake.most_at_once == 2 and sum(fake.calls) == 6 + 5 and max(fake.calls) <= 4

    # A document's two windows in two calls at once, the first window's call the slower: its
    # answers wait for that call too.
    fake = FakeReader(
        delay=lambda parts: 0.3 if any(w == 0 for _, items in parts for _, w in items) else 0.01, windows=2
    )
    fake.concurrent = True

    async def document():
        batcher = Batcher(fake, ServeConfig(max_batch=1, batch_window_ms=0, model_workers=2, request_timeout=20))
        batcher.start()
        try:
            return await batcher.submit([("LONG " + CONTEXT, "What?")])
        finally:
            await batcher.stop()
            batcher.close()

    assert asyncio.run(document()) == [fake.answers("LONG " + CONTEXT, "What?", 1)]
    assert fake.calls == [1, 1] and fake.most_at_once == 2


def test_the_policies_choose_windows_as_documented():
    from rckit.serve.batcher import Batcher, Pending

    fake = FakeReader(windows=lambda context: {"long": 6, "mid": 3}.get(context, 1))

    async def take(policy: str, arrivals: list[tuple[str, float]]) -> list[tuple[str, int]]:
        batcher = Batcher(fake, ServeConfig(max_batch=4, policy=policy), age_ms=1000)
        loop = asyncio.get_running_loop()
        batcher._loop, now = loop, loop.time()
        for context, waited in arrivals:
            batcher._waiting.append(Pending(fake.plan([(context, "q")]), loop.create_future(), now - waited))
        return [(p.job.pairs[0][0], len(items)) for p, items in batcher._take()]

    # fair: least work left first, whole, the rest of the call to the next
    assert asyncio.run(take("fair", [("long", 0.2), ("short", 0.1)])) == [("short", 1), ("long", 3)]
    # ... but a request that has waited the age bound (1 s here) has one window first, in turn
    assert asyncio.run(take("fair", [("long", 2.0), ("short", 0.1)])) == [("long", 3), ("short", 1)]
    # round-robin: one window of each in turn, in arrival order
    assert asyncio.run(take("round-robin", [("long", 0.2), ("mid", 0.1)])) == [("long", 2), ("mid", 2)]


# -- the real Reader, in process and behind a real server ----------------------------------------


@pytest.fixture(scope="module")
def tiny_reader(tiny_run):
    from rckit.answering.reader import Reader

    return Reader.load(tiny_run)


QUESTIONS = [
    (
        "The Rosetta Stone was found in 1799 near Rashid. Champollion read the hieroglyphs in 1822.",
        "When was the stone found?",
    ),
    (
        "The Rosetta Stone was found in 1799 near Rashid. Champollion read the hieroglyphs in 1822.",
        "Who read the hieroglyphs?",
    ),
    ("Ada Lovelace wrote a program in 1843 for the Analytical Engine.", "Who wrote a program?"),
    ("Paris is the capital of France, and the Eiffel Tower was built there in 1889.", "When was the tower built?"),
    ("Grace Hopper 🙂 made the first compiler, A-0, in 1952.", "What did Grace Hopper make?"),
]


def check_answers(answers, context, top_k):
    assert 1 <= len(answers) <= top_k
    for a in answers:
        assert context[a["start"] : a["end"]] == a["answer"] and a["answer"]
        assert 0 < a["score"] <= 1
    assert [a["score"] for a in answers] == sorted((a["score"] for a in answers), reverse=True)


def same_answers(got, alone):
    """Batched answers equal answers read alone: same spans and scores, up to float noise."""
    assert [(a["start"], a["end"], a["answer"]) for a in got] == [(a["start"], a["end"], a["answer"]) for a in alone]
    assert [a["score"] for a in got] == pytest.approx([a["score"] for a in alone], rel=1e-4)


def test_the_real_reader_through_the_api(tiny_reader):
    with TestClient(create_app(tiny_reader)) as client:
        assert client.get("/v1/model").json()["model"] == "qanet"
        for context, question in QUESTIONS:
            r = ask(client, context=context, question=question, top_k=3)
            assert r.status_code == 200, r.text
            check_answers(r.json()["answers"], context, 3)
            same_answers(r.json()["answers"], tiny_reader.answer(context, question, 3))
        r = ask(client, context=QUESTIONS[0][0], questions=[q for _, q in QUESTIONS[:2]], top_k=2)
        for answers, (context, question) in zip(r.json()["answers"], QUESTIONS[:2]):
            same_answers(answers, tiny_reader.answer(context, question, 2))


class Counting:
    """``reader`` as a server calls it, counting its calls in flight at once (``most``) and the
    items of each call (``calls``); each call sleeps 20 ms so that another may start meanwhile."""

    def __init__(self, reader):
        self.reader, self.info, self.window, self.plan_many = reader, reader.info, reader.window, reader.plan_many
        self.now = self.most = 0
        self.calls: list[int] = []
        self.lock = threading.Lock()

    def read(self, parts):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.calls.append(sum(len(items) for _, items in parts))
        try:
            time.sleep(0.02)
            return self.reader.read(parts)
        finally:
            with self.lock:
                self.now -= 1


def test_the_real_reader_with_two_workers_answers_a_document_read_in_calls_at_once(tiny_reader):
    """A long context's windows read by two calls at once, with short questions beside it: every
    answer as read alone (the job's record is shared between the two threads)."""
    document = " ".join(c for c, _ in QUESTIONS) * 12  # many windows of the tiny model's
    bodies = [{"context": document, "question": "Who read the hieroglyphs?", "top_k": 3}]
    bodies += [{"context": c, "question": q, "top_k": 2} for c, q in QUESTIONS]
    counting = Counting(tiny_reader)
    app = create_app(counting, ServeConfig(max_batch=2, batch_window_ms=1, model_workers=2))
    responses = asyncio.run(_post_all(app, bodies))
    for body, r in zip(bodies, responses):
        assert r.status_code == 200, r.text
        same_answers(r.json()["answers"], tiny_reader.answer(body["context"], body["question"], body["top_k"]))
    assert len(tiny_reader.plan([(document, "x")]).windows) >= 4 and counting.most == 2


def test_the_real_reader_batched_answers_equal_answers_alone(tiny_reader):
    calls = []

    class Recording:
        info, window, plan_many = tiny_reader.info, tiny_reader.window, tiny_reader.plan_many

        def read(self, parts):
            calls.append(sum(len(items) for _, items in parts))
            time.sleep(0.02)  # let the others queue behind the first call
            return tiny_reader.read(parts)

    app = create_app(Recording(), ServeConfig(max_batch=32, batch_window_ms=20))
    bodies = [{"context": c, "question": q, "top_k": 2} for c, q in QUESTIONS * 3]
    responses = asyncio.run(_post_all(app, bodies))
    for body, r in zip(bodies, responses):
        assert r.status_code == 200, r.text
        same_answers(r.json()["answers"], tiny_reader.answer(body["context"], body["question"], 2))
    assert sum(calls) == len(bodies) and len(calls) < len(bodies), calls


def start_server(args: list[str], log: Path, timeout: float = 120) -> tuple[subprocess.Popen, str]:
    """``python -m rckit serve ARGS --port 0`` on 127.0.0.1; the process and the URL it printed."""
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    env.pop("RCKIT_API_KEY", None)  # a developer's own key would make these servers ask for one
    proc = subprocess.Popen(
        [sys.executable, "-m", "rckit", "serve", *args, "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
        env=env,
    )
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    line = ""
    while time.monotonic() < deadline and proc.poll() is None:
        if sel.select(timeout=0.5):
            line = proc.stdout.readline()
            break
    found = re.search(r"http://127\.0\.0\.1:\d+/", line)
    if not found:
        proc.kill()
        proc.wait()
        pytest.fail(f"rckit serve printed no URL: {line!r}\n{log.read_text()}")
    return proc, found.group(0)


def stop_server(proc: subprocess.Popen) -> int:
    """Ctrl-C, as a user would; the exit status once it has shut down."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail("rckit serve did not stop within 30 s of Ctrl-C")
    proc.stdout.close()
    return proc.returncode


def call(url: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    """GET ``url + path`` (no body) or POST ``body`` as JSON; the status and the JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def post(url: str, body: dict | bytes, timeout: float = 60) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url + "v1/answer", data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def test_a_real_server_answers_over_http_and_stops_on_ctrl_c(tiny_export, tmp_path):
    log = tmp_path / "serve.log"
    proc, url = start_server([str(tiny_export), "--max-body-bytes", "5000", "--batch-window-ms", "300"], log)
    try:
        context, question = QUESTIONS[0]
        status, body = post(url, {"context": context, "question": question, "top_k": 3})
        assert status == 200, body
        check_answers(body["answers"], context, 3)
        assert body["model"] == "qanet"

        assert post(url, {"context": " ", "question": question}) == (422, {"error": "'context' is empty"})
        assert post(url, b"{not json")[0] == 400
        status, body = post(url, {"context": "word " * 2000, "question": question})
        assert status == 413 and "at most 5000" in body["error"]

        # Concurrent requests over real sockets: batched (a 300 ms window gathers them), each
        # answered as when asked alone.
        alone = [post(url, {"context": c, "question": q, "top_k": 2})[1]["answers"] for c, q in QUESTIONS]
        calls_before = json.load(urllib.request.urlopen(url + "health", timeout=10))["calls"]
        results = [None] * len(QUESTIONS)

        def ask_one(i):
            c, q = QUESTIONS[i]
            results[i] = post(url, {"context": c, "question": q, "top_k": 2})

        threads = [threading.Thread(target=ask_one, args=(i,)) for i in range(len(QUESTIONS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for (status, body), expected in zip(results, alone):
            assert status == 200
            same_answers(body["answers"], expected)
        health = json.load(urllib.request.urlopen(url + "health", timeout=10))
        assert health["calls"] - calls_before < len(QUESTIONS)
    finally:
        code = stop_server(proc)
    err = log.read_text()
    assert code == 130 and "Traceback" not in err, err


def test_pytorch_leaves_one_core_to_the_http_side_and_onnxruntime_runs_two_calls_sleeping(monkeypatch, tmp_path):
    import rckit.serve.app as app

    monkeypatch.chdir(
        tmp_path
    )  # the model files are told apart by rckit.model_files.open_model, which needs them there
    for name in ("model.onnx", "model.safetensors"):
        (tmp_path / name).touch()

    for cores, torch_threads, onnx in ((1, 1, (1, 1)), (2, 1, (2, 1)), (16, 15, (2, 8))):
        monkeypatch.setattr(app, "available_cores", lambda: cores)
        assert app.model_settings(onnx=False) == (1, torch_threads)
        assert app.model_settings(onnx=True) == onnx
        assert app.model_settings(onnx=True, model_workers=4) == (4, max(1, cores // 4))
    loaded, made = {}, {}
    monkeypatch.setattr(app.Reader, "load", lambda source, **kw: loaded.update(kw) or "reader")
    monkeypatch.setattr(
        app, "create_app", lambda reader, config: made.update(vars(config)) or (_ for _ in ()).throw(SystemExit(3))
    )
    with pytest.raises(SystemExit):
        app.serve("model.onnx")
    assert (loaded["threads"], loaded["spin"], made["model_workers"]) == (8, False, 2)
    with pytest.raises(SystemExit):
        app.serve("model.safetensors")
    assert (loaded["threads"], made["model_workers"]) == (15, 1)
    with pytest.raises(ValueError, match="workers must be at least 1"):
        app.serve("model.onnx", ServeConfig(model_workers=0))


def test_ctrl_c_ends_serve_with_130_even_if_uvicorn_returns_quietly(tiny_export, monkeypatch, capsys):
    import rckit.serve.app as app
    from rckit.cli import main

    def run_then_return(self, sockets=None):  # a shutdown after SIGINT that re-raises nothing
        self.handle_exit(signal.SIGINT, None)

    monkeypatch.setattr(app.uvicorn.Server, "run", run_then_return)
    monkeypatch.setattr("torch.set_num_threads", lambda n: None)  # keep this process's threads
    assert main(["serve", str(tiny_export), "--port", "0"]) == 130
    assert "interrupted" in capsys.readouterr().err
