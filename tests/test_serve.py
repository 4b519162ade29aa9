"""rckit serve: the JSON API, its errors, batching of concurrent requests, a real server.

Most tests use a fake reader (``answer_batch`` and ``info`` as :class:`rckit.saved.reader.Reader`'s)
that records the size of every call; the end-to-end ones use the real Reader on conftest's tiny
QANet run in process, and on its exported file behind a real uvicorn server on 127.0.0.1.
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

CONTEXT = "Ada Lovelace wrote the first published program in 1843 for the Analytical Engine of Charles Babbage."


class FakeReader:
    """Answers with words of the context, chosen by the question, best first; records call sizes."""

    info = {"model": "fake-reader", "source": None, "config": {}}

    def __init__(self, delay: float = 0.0, fail_on: str | None = None):
        self.delay = delay
        self.fail_on = fail_on
        self.calls: list[int] = []
        self.settings: list[tuple[int, int | None]] = []
        self.lock = threading.Lock()
        self.busy = False  # two calls at once would mean the model runs outside the one worker

    def answer_batch(self, pairs, top_k=1, max_answer_len=None):
        with self.lock:
            assert not self.busy, "two model calls ran at once"
            self.busy = True
        try:
            self.calls.append(len(pairs))
            self.settings.append((top_k, max_answer_len))
            time.sleep(self.delay)
            return [self.answers(c, q, top_k) for c, q in pairs]
        finally:
            self.busy = False

    def answers(self, context, question, top_k):
        if self.fail_on and self.fail_on in question:
            raise RuntimeError(f"cannot answer {question!r}")
        words = [m.span() for m in re.finditer(r"\w+", context)]
        out = []
        for k in range(min(top_k, len(words))):
            s, e = words[(len(question) + k) % len(words)]
            out.append({"answer": context[s:e], "score": 1 / (k + 2), "start": s, "end": e})
        return out


@pytest.fixture
def fake():
    return FakeReader()


@pytest.fixture
def client(fake):
    with TestClient(create_app(fake, max_body_bytes=2_000, max_questions=8)) as c:
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
    assert {"context", "question", "questions", "top_k", "max_answer_len"} <= set(schema["properties"])
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
    js = (Path(__file__).resolve().parents[1] / "src/rckit/serve/static/app.js").read_text()
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
    ("questions holding a number", {"context": CONTEXT, "questions": ["Who?", 3]},
     "'questions[1]' must be a string, not a number (3)"),
    ("top_k a string", {"context": CONTEXT, "question": "Who?", "top_k": "3"}, "'top_k' must be an integer"),
    ("top_k a boolean", {"context": CONTEXT, "question": "Who?", "top_k": True}, "'top_k' must be an integer"),
    ("top_k a fraction", {"context": CONTEXT, "question": "Who?", "top_k": 2.5}, "'top_k' must be an integer"),
    ("top_k 0", {"context": CONTEXT, "question": "Who?", "top_k": 0}, "'top_k' must be between 1 and 20, not 0"),
    ("top_k 21", {"context": CONTEXT, "question": "Who?", "top_k": 21}, "'top_k' must be between 1 and 20, not 21"),
    ("max_answer_len 0", {"context": CONTEXT, "question": "Who?", "max_answer_len": 0},
     "'max_answer_len' must be between 1 and 200"),
    ("a misspelt field", {"context": CONTEXT, "qestion": "Who?"}, "unknown field 'qestion'"),
    ("empty context", {"context": "", "question": "Who?"}, "'context' is empty"),
    ("blank context", {"context": " \n\t ", "question": "Who?"}, "'context' is empty"),
    ("empty question", {"context": CONTEXT, "question": ""}, "'question' is empty"),
    ("punctuation for a question", {"context": CONTEXT, "question": "?!"}, "'question' has no letter or digit"),
    ("an empty question among several", {"context": CONTEXT, "questions": ["Who?", " "]}, "'questions[1]' is empty"),
    ("no questions", {"context": CONTEXT, "questions": []}, "'questions' is an empty list"),
    ("too many questions", {"context": CONTEXT, "questions": ["Who?"] * 9},
     "'questions' has 9 questions; this server takes at most 8"),
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


def test_a_body_over_the_limit_is_refused_from_its_length(client, fake):
    r = ask(client, context="word " * 500, question="Who?")
    assert r.status_code == 413
    assert "this server takes at most 2000" in r.json()["error"]
    check_good_request(client, fake)


def test_a_streamed_body_over_the_limit_is_cut_off(fake):
    app = create_app(fake, max_body_bytes=2_000)
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
    assert r.status_code == 405 and "GET" in r.json()["error"]
    check_good_request(client, fake)


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
    app = create_app(fake, max_batch=8, batch_window_ms=20)
    bodies = _bodies(24)
    responses = asyncio.run(_post_all(app, bodies))
    for body, r in zip(bodies, responses):
        assert r.status_code == 200, r.text
        assert r.json()["answers"] == _expected(fake, body)
    n_questions = sum(len(b.get("questions", [1])) for b in bodies)
    assert sum(fake.calls) == n_questions
    assert len(fake.calls) < len(bodies) and max(fake.calls) <= 8, fake.calls


def test_concurrent_requests_from_threads_are_batched():
    fake = FakeReader(delay=0.05)
    bodies = _bodies(12)
    with TestClient(create_app(fake, max_batch=32, batch_window_ms=30)) as client:
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
    with TestClient(create_app(fake, max_batch=4)) as client:
        qs = [f"question {'x' * k}" for k in range(10)]
        r = ask(client, context=CONTEXT, questions=qs)
        assert r.json()["answers"] == [fake.answers(CONTEXT, q, 1) for q in qs]
        assert fake.calls == [4, 4, 2]


def test_other_max_answer_len_goes_to_its_own_call_and_each_keeps_its_top_k():
    fake = FakeReader(delay=0.05)
    app = create_app(fake, max_batch=32, batch_window_ms=50)
    bodies = [{"context": CONTEXT, "question": "Who?", "top_k": 1},
              {"context": CONTEXT, "question": "When?", "top_k": 4},
              {"context": CONTEXT, "question": "Where?", "top_k": 2, "max_answer_len": 3}]
    responses = asyncio.run(_post_all(app, bodies))
    assert [len(r.json()["answers"]) for r in responses] == [1, 4, 2]
    assert [r.json()["answers"] for r in responses] == [_expected(fake, b) for b in bodies]
    assert sorted(fake.settings, key=str) == sorted([(4, None), (2, 3)], key=str)


def test_a_failure_in_a_shared_call_fails_only_the_request_that_caused_it():
    fake = FakeReader(delay=0.02, fail_on="boom")
    app = create_app(fake, max_batch=32, batch_window_ms=50)
    bodies = [{"context": CONTEXT, "question": q} for q in ("Who?", "boom?", "When?", "Where?")]
    responses = asyncio.run(_post_all(app, bodies))
    assert [r.status_code for r in responses] == [200, 500, 200, 200]
    assert "boom" in responses[1].json()["error"]
    assert responses[3].json()["answers"] == fake.answers(CONTEXT, "Where?", 1)


# -- the real Reader, in process and behind a real server ----------------------------------------

@pytest.fixture(scope="module")
def tiny_reader(tiny_run):
    from rckit.saved.reader import Reader

    return Reader.load(tiny_run)


QUESTIONS = [
    ("The Rosetta Stone was found in 1799 near Rashid. Champollion read the hieroglyphs in 1822.",
     "When was the stone found?"),
    ("The Rosetta Stone was found in 1799 near Rashid. Champollion read the hieroglyphs in 1822.",
     "Who read the hieroglyphs?"),
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


def test_the_real_reader_batched_answers_equal_answers_alone(tiny_reader):
    calls = []

    class Recording:
        info = tiny_reader.info

        def answer_batch(self, pairs, top_k=1, max_answer_len=None):
            calls.append(len(pairs))
            time.sleep(0.02)  # let the others queue behind the first call
            return tiny_reader.answer_batch(pairs, top_k, max_answer_len)

    app = create_app(Recording(), max_batch=32, batch_window_ms=20)
    bodies = [{"context": c, "question": q, "top_k": 2} for c, q in QUESTIONS * 3]
    responses = asyncio.run(_post_all(app, bodies))
    for body, r in zip(bodies, responses):
        assert r.status_code == 200, r.text
        same_answers(r.json()["answers"], tiny_reader.answer(body["context"], body["question"], 2))
    assert sum(calls) == len(bodies) and len(calls) < len(bodies), calls


def start_server(args: list[str], log: Path, timeout: float = 120) -> tuple[subprocess.Popen, str]:
    """``python -m rckit serve ARGS --port 0`` on 127.0.0.1; the process and the URL it printed."""
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    proc = subprocess.Popen([sys.executable, "-m", "rckit", "serve", *args, "--host", "127.0.0.1", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=log.open("w"), text=True, env=env)
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


def test_the_model_leaves_one_core_to_the_http_side(monkeypatch):
    import rckit.serve.app as app

    for cores, want in ((1, 1), (2, 1), (16, 15)):
        monkeypatch.setattr(app, "available_cores", lambda: cores)
        assert app.model_threads() == want


def test_ctrl_c_ends_serve_with_130_even_if_uvicorn_returns_quietly(tiny_export, monkeypatch, capsys):
    import rckit.serve.app as app
    from rckit.cli import main

    def run_then_return(self, sockets=None):  # a shutdown after SIGINT that re-raises nothing
        self.handle_exit(signal.SIGINT, None)

    monkeypatch.setattr(app.uvicorn.Server, "run", run_then_return)
    monkeypatch.setattr("torch.set_num_threads", lambda n: None)  # keep this process's threads
    assert main(["serve", str(tiny_export), "--port", "0"]) == 130
    assert "interrupted" in capsys.readouterr().err
