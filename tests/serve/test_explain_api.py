"""``POST /v1/explain``: the explanation of an answer over HTTP, as JSON or as one HTML page.

In process (conftest's tiny QANet run, PyTorch; the installed model's ONNX file, explained with the
``.safetensors`` beside it) and behind a real ``rckit serve`` with a key on 127.0.0.1: the reply's
keys and shapes, bad requests refused exactly as ``POST /v1/answer`` refuses them, 501 where no
PyTorch model can explain, and explanations taken one at a time while answers go on.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import threading
import time
import urllib.error
import urllib.request

import httpx
import pytest
from fastapi.testclient import TestClient

from rckit.answering.explanation import DEFAULT_STEPS, needs_torch
from rckit.explain.common import KEYS
from rckit.serve.app import create_app
from rckit.serve.config import ServeConfig
from tests.model_files.test_bundled import QANET, QANET_ONNX
from tests.serve.test_serve import start_server, stop_server, tiny_reader  # noqa: F401  (a fixture)

CONTEXT = "The Rosetta Stone was found in 1799 near Rashid. Champollion read the hieroglyphs in 1822."
QUESTION = "Who read the hieroglyphs?"
KEY = "explain-test-key-0123456789"


def check_explanation(e: dict, context: str, question: str) -> None:
    """The reply's explanation: every field, each per-token list as long as its tokens."""
    assert tuple(e) == KEYS
    assert (e["context"], e["question"]) == (context, question)
    tc, tq = len(e["context_tokens"]), len(e["question_tokens"])
    assert tc > 0 and tq > 0
    assert [context[s:t] for s, t in e["context_offsets"]] == e["context_tokens"]
    assert [question[s:t] for s, t in e["question_offsets"]] == e["question_tokens"]
    assert len(e["start_probs"]) == len(e["end_probs"]) == tc
    if e["null_prob"] is None:  # a softmax over the window's tokens
        assert sum(e["start_probs"]) == pytest.approx(1, abs=1e-3) and sum(e["end_probs"]) == pytest.approx(1, abs=1e-3)
    a = e["answer"]
    assert context[a["start"] : a["end"]] == a["answer"]
    first, last = e["answer_tokens"]
    assert e["context_offsets"][first][0] == a["start"] and e["context_offsets"][last][1] == a["end"]
    att = e["attention"]
    assert att["kind"] == "context-query"
    for key in ("context_to_query", "query_to_context"):
        assert len(att[key]) == tc and {len(row) for row in att[key]} == {tq}
    for kind in ("gradient_x_input", "integrated_gradients"):
        assert len(e["saliency"][kind]["context"]) == tc and len(e["saliency"][kind]["question"]) == tq


@pytest.fixture(scope="module")
def client(tiny_reader):  # noqa: F811 (the fixture)
    with TestClient(
        create_app(tiny_reader, ServeConfig(max_body_bytes=3_000, max_context_chars=600, access_log="off"))
    ) as c:
        yield c


def explain(client, body, query: str = ""):
    return client.post(f"/v1/explain{query}", json=body)


def test_an_explanation_as_json_and_as_a_page(client, tiny_reader):  # noqa: F811
    r = explain(client, {"context": CONTEXT, "question": QUESTION, "steps": 4})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"explanation", "model", "ms"} and body["model"] == "qanet" and body["ms"] > 0
    e = body["explanation"]
    check_explanation(e, CONTEXT, QUESTION)
    assert e["saliency"]["integrated_gradients"]["steps"] == 4
    alone = tiny_reader.explain(CONTEXT, QUESTION, steps=4)
    assert e["answer"] == alone["answer"] == tiny_reader.answer(CONTEXT, QUESTION)[0]
    assert e["start_probs"] == pytest.approx(alone["start_probs"], rel=1e-5, abs=1e-7)
    # the same answer as POST /v1/answer gives
    assert (
        client.post("/v1/answer", json={"context": CONTEXT, "question": QUESTION}).json()["answers"][0] == e["answer"]
    )
    assert (
        explain(client, {"context": CONTEXT, "question": QUESTION}).json()["explanation"]["saliency"][
            "integrated_gradients"
        ]["steps"]
        == DEFAULT_STEPS
    )

    page = explain(client, {"context": CONTEXT, "question": QUESTION, "steps": 4}, "?format=html")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    text = page.text
    assert text.startswith("<!DOCTYPE html>") and "<script" not in text and "<link" not in text
    assert "Q: Who read the hieroglyphs?" in text and 'class="answer"' in text
    assert "weight " in text and "\u201chieroglyphs\u201d" in text  # an attention cell's hover text
    assert explain(client, {"context": CONTEXT, "question": QUESTION}, "?format=json").json()["model"] == "qanet"
    r = explain(client, {"context": CONTEXT, "question": QUESTION}, "?format=xml")
    assert (r.status_code, r.json()) == (422, {"error": "'format' must be json or html, not 'xml'"})


SAME_AS_ANSWER = [  # refused by POST /v1/explain exactly as by POST /v1/answer
    ("malformed JSON", b'{"context": "a", "question": '),
    ("empty body", b""),
    ("not UTF-8", b'{"context": "\xff\xfe", "question": "q"}'),
    ("a list, not an object", b'["context", "question"]'),
    ("missing context", {"question": "Who?"}),
    ("context a number", {"context": 5, "question": "Who?"}),
    ("question a list", {"context": CONTEXT, "question": ["Who?"]}),
    ("question a number", {"context": CONTEXT, "question": 3}),
    ("max_answer_len a string", {"context": CONTEXT, "question": "Who?", "max_answer_len": "3"}),
    ("max_answer_len 0", {"context": CONTEXT, "question": "Who?", "max_answer_len": 0}),
    ("empty context", {"context": "", "question": "Who?"}),
    ("blank context", {"context": " \n\t ", "question": "Who?"}),
    ("empty question", {"context": CONTEXT, "question": ""}),
    ("punctuation for a question", {"context": CONTEXT, "question": "?!"}),
    ("a question too long", {"context": CONTEXT, "question": "why " * 300}),
    ("a context too long", {"context": "word " * 130 + "end.", "question": "Who?"}),
    ("a body too large", {"context": "word " * 700, "question": "Who?"}),
]


@pytest.mark.parametrize("body", [c[1] for c in SAME_AS_ANSWER], ids=[c[0] for c in SAME_AS_ANSWER])
def test_a_bad_request_is_refused_as_post_v1_answer_refuses_it(client, body):
    sent = (
        {"content": body, "headers": {"content-type": "application/json"}}
        if isinstance(body, bytes)
        else {"json": body}
    )
    got, answer = client.post("/v1/explain", **sent), client.post("/v1/answer", **sent)
    assert 400 <= got.status_code < 500 and got.json().keys() == {"error"}
    assert (got.status_code, got.json()) == (answer.status_code, answer.json())


@pytest.mark.parametrize(
    "body,message",
    [
        (
            {"context": CONTEXT, "questions": ["Who?", "When?"]},
            "'questions': POST /v1/explain explains one question; send it as 'question'",
        ),
        (
            {"context": CONTEXT, "question": "Who?", "questions": ["When?"]},
            "'questions': POST /v1/explain explains one question; send it as 'question'",
        ),
        ({"context": CONTEXT}, "'question' is required"),
        ({"context": CONTEXT, "question": None}, "'question' is required"),
        (
            {"context": CONTEXT, "question": "Who?", "top_k": 3},
            "unknown field 'top_k' (the fields are context, question, max_answer_len, steps, model)",
        ),
        ({"context": CONTEXT, "question": "Who?", "steps": 0}, "'steps' must be between 1 and 128, not 0"),
        ({"context": CONTEXT, "question": "Who?", "steps": 129}, "'steps' must be between 1 and 128, not 129"),
        ({"context": CONTEXT, "question": "Who?", "steps": 2.5}, "'steps' must be an integer, not a number (2.5)"),
        ({"context": CONTEXT, "question": "Who?", "steps": "8"}, "'steps' must be an integer, not a string"),
    ],
    ids=[
        "two questions",
        "question and questions",
        "no question",
        "question null",
        "top_k",
        "steps 0",
        "steps 129",
        "steps a fraction",
        "steps a string",
    ],
)
def test_explain_takes_one_question_and_steps_in_range(client, body, message):
    r = explain(client, body)
    assert (r.status_code, r.json()) == (422, {"error": message})


def test_the_schema_states_the_body_its_limits_and_the_formats(client):
    spec = client.get("/openapi.json").json()
    op = spec["paths"]["/v1/explain"]["post"]
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["context", "question"] and not schema["additionalProperties"]
    assert set(schema["properties"]) == {"context", "question", "max_answer_len", "steps", "model"}
    steps = schema["properties"]["steps"]
    assert (steps["minimum"], steps["maximum"], steps["default"]) == (1, 128, DEFAULT_STEPS)
    assert schema["properties"]["context"]["maxLength"] == 600 and "3,000 bytes" in schema["description"]
    assert [p["schema"]["enum"] for p in op["parameters"] if p["name"] == "format"] == [["json", "html"]]
    assert set(op["responses"]["200"]["content"]) == {"application/json", "text/html"}
    assert {"400", "413", "422", "501", "503"} <= set(op["responses"])
    explanation = spec["components"]["schemas"]["Explanation"]
    assert tuple(explanation["properties"]) == KEYS


# -- the installed model: an ONNX file, explained with PyTorch ------------------------------------


@pytest.fixture(scope="module")
def onnx_reader():
    pytest.importorskip("onnxruntime", reason="the ONNX path needs onnxruntime (pip install 'rckit[onnx]')")
    from rckit.answering.reader import Reader

    assert QANET_ONNX.is_file() and QANET.is_file()
    return Reader.load(QANET_ONNX)


EIFFEL = (
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is named after "
    "the engineer Gustave Eiffel, whose company designed and built the tower from 1887 to 1889."
)


def test_a_server_of_an_onnx_file_explains_with_the_safetensors_beside_it(onnx_reader):
    assert onnx_reader.info["backend"] == "onnxruntime"
    with TestClient(create_app(onnx_reader, ServeConfig(access_log="off"))) as client:
        question = "Whose company designed and built the Eiffel Tower?"
        r = explain(client, {"context": EIFFEL, "question": question, "steps": 8})
        assert r.status_code == 200, r.text
        e = r.json()["explanation"]
        check_explanation(e, EIFFEL, question)
        answered = client.post("/v1/answer", json={"context": EIFFEL, "question": question}).json()["answers"][0]
        assert e["answer"]["answer"] == answered["answer"] == "Gustave Eiffel"
        # PyTorch's (the encoder in fp32) and onnxruntime's (the default's encoder in int8)
        assert e["answer"]["score"] == pytest.approx(answered["score"], abs=0.02)


def test_without_pytorch_an_onnx_server_answers_501_in_one_line_and_goes_on(onnx_reader, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch fails, as where it is not installed
    with TestClient(create_app(onnx_reader, ServeConfig(access_log="off"))) as client:
        r = explain(client, {"context": EIFFEL, "question": "Who designed it?"})
        assert r.status_code == 501 and r.json() == {"error": needs_torch(str(QANET_ONNX))}
        assert "\n" not in r.json()["error"] and "pip install 'rckit[torch]'" in r.json()["error"]
        assert str(QANET) in r.json()["error"]  # the file that would explain
        assert client.post("/v1/answer", json={"context": EIFFEL, "question": "Who designed it?"}).status_code == 200
    monkeypatch.delitem(sys.modules, "torch")

    from rckit.answering.reader import Reader

    alone = tmp_path / "alone.onnx"  # an ONNX file with no .safetensors beside it
    shutil.copyfile(QANET_ONNX, alone)
    with TestClient(create_app(Reader.load(alone), ServeConfig(access_log="off"))) as client:
        r = explain(client, {"context": EIFFEL, "question": "Who designed it?"})
        assert r.status_code == 501 and r.json() == {"error": needs_torch(str(alone))}
        assert "the run or the .safetensors file it was exported from" in r.json()["error"]


# -- one at a time, and answers meanwhile ---------------------------------------------------------


def test_explanations_run_one_at_a_time_off_the_event_loop(tiny_reader):  # noqa: F811
    """Two explanations asked at once both succeed, one after the other, in a thread of their own;
    /v1/answer answers while one is being computed."""
    release = threading.Event()
    at_once, most, loop_threads = [0], [0], set()
    lock = threading.Lock()

    class Held:  # the tiny reader, its explanations held until the test lets them go
        info, window, plan_many, read = tiny_reader.info, tiny_reader.window, tiny_reader.plan_many, tiny_reader.read

        def explain(self, *args):
            with lock:
                at_once[0] += 1
                most[0] = max(most[0], at_once[0])
            try:
                assert release.wait(30)
                time.sleep(0.05)  # the other one, were it running too, would overlap here
                return tiny_reader.explain(*args)
            finally:
                with lock:
                    at_once[0] -= 1

    app = create_app(Held(), ServeConfig(access_log="off"))

    async def scenario():
        loop_threads.add(threading.get_ident())
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
            body = {"context": CONTEXT, "question": QUESTION, "steps": 2}
            first = asyncio.create_task(c.post("/v1/explain", json=body))
            second = asyncio.create_task(c.post("/v1/explain", json={**body, "question": "When was it found?"}))
            await asyncio.sleep(0.2)
            answered = await c.post("/v1/answer", json={"context": CONTEXT, "question": QUESTION})
            waiting = not first.done() and not second.done()
            release.set()
            return answered, waiting, await first, await second

    answered, waiting, first, second = asyncio.run(scenario())
    assert answered.status_code == 200 and waiting  # answered while both explanations waited
    assert first.status_code == second.status_code == 200, (first.text, second.text)
    assert first.json()["explanation"]["question"] == QUESTION
    assert second.json()["explanation"]["question"] == "When was it found?"
    assert most[0] == 1


def _call(url: str, path: str, body: dict, key: str | None = KEY, timeout: float = 120) -> tuple[int, dict | str]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read().decode()
            return r.status, json.loads(text) if r.headers["content-type"].startswith("application/json") else text
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def test_a_real_server_with_a_key_explains_two_at_once_and_answers_meanwhile(tiny_export, tmp_path):
    log = tmp_path / "serve.log"
    proc, url = start_server([str(tiny_export), "--api-key", KEY], log)
    try:
        body = {"context": CONTEXT, "question": QUESTION, "steps": 128}
        status, refused = _call(url, "v1/explain", body, key=None)
        assert status == 401 and "needs a key" in refused["error"]
        status, got = _call(url, "v1/explain", body)
        assert status == 200, got
        check_explanation(got["explanation"], CONTEXT, QUESTION)
        status, page = _call(url, "v1/explain?format=html", body)
        assert status == 200 and page.startswith("<!DOCTYPE html>")
        assert _call(url, "v1/explain", {**body, "steps": 129})[0] == 422

        results: dict[str, tuple] = {}

        def ask(name: str, path: str, sent: dict) -> None:
            results[name] = _call(url, path, sent)

        threads = [
            threading.Thread(target=ask, args=(f"explain{i}", "v1/explain", {**body, "question": q}))
            for i, q in enumerate((QUESTION, "When was the stone found?"))
        ]
        threads += [
            threading.Thread(target=ask, args=(f"answer{i}", "v1/answer", {"context": CONTEXT, "question": q}))
            for i, q in enumerate(("Who read the hieroglyphs?", "Where was it found?"))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert {name: status for name, (status, _) in results.items()} == dict.fromkeys(results, 200), results
        assert results["explain0"][1]["explanation"]["question"] == QUESTION
        assert results["explain1"][1]["explanation"]["question"] == "When was the stone found?"
        check_explanation(results["explain1"][1]["explanation"], CONTEXT, "When was the stone found?")
    finally:
        code = stop_server(proc)
    err = log.read_text()
    assert code == 130 and "Traceback" not in err, err
    assert KEY not in err
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert [(r["status"], r["key"]) for r in lines if r["path"] == "/v1/explain"][0] == (401, None)


def test_an_explanation_waiting_past_the_time_limit_is_dropped_with_503(tiny_reader):  # noqa: F811
    release, ran = threading.Event(), []

    class Held:
        info, window, plan_many, read = tiny_reader.info, tiny_reader.window, tiny_reader.plan_many, tiny_reader.read

        def explain(self, *args):
            ran.append(args[1])
            assert release.wait(30)
            return tiny_reader.explain(*args)

    app = create_app(Held(), ServeConfig(access_log="off", request_timeout=0.3))

    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
            body = {"context": CONTEXT, "question": QUESTION, "steps": 2}
            late = await asyncio.gather(
                c.post("/v1/explain", json=body), c.post("/v1/explain", json={**body, "question": "When was it found?"})
            )
            release.set()
            return late, await c.post("/v1/explain", json={**body, "question": "Where was it found?"})

    late, after = asyncio.run(scenario())
    for r in late:
        assert r.status_code == 503 and "not answered within 0.3 s" in r.json()["error"], r.text
    assert after.status_code == 200, after.text
    assert ran == [QUESTION, "Where was it found?"]  # the one that waited was never computed
