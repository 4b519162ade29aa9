"""rckit serve with several models: ``--model qanet,dcn`` (or ``all``), ``GET /v1/models``, and the
``"model"`` field of every request body.

The HTTP tests run a real ``rckit serve --model qanet,dcn`` (two installed models, qanet the
default) on 127.0.0.1; the plumbing ones (each model its own batcher, the schema) use
test_serve's fake reader in process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rckit.model_files.metadata import read_metadata
from rckit.model_files.source import installed_models, installed_path
from rckit.serve.app import create_app, sources
from rckit.serve.config import ServeConfig
from tests.serve.test_serve import CONTEXT, FakeReader, call, start_server, stop_server

QUESTION = "When did Ada Lovelace write the first published program?"


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """``rckit serve --model qanet,dcn``; its URL."""
    proc, url = start_server(
        ["--model", "qanet,dcn", "--access-log", "off"], tmp_path_factory.mktemp("two-models") / "serve.log"
    )
    yield url
    stop_server(proc)


def test_each_model_answers_by_name_and_the_reply_names_it(two):
    replies = {}
    for name in ("qanet", "dcn"):
        status, body = call(two, "v1/answer", {"context": CONTEXT, "question": QUESTION, "model": name, "top_k": 2})
        assert status == 200, body
        assert body["model"] == name and len(body["answers"]) == 2
        best = body["answers"][0]
        assert CONTEXT[best["start"] : best["end"]] == best["answer"]
        replies[name] = body["answers"]
    # Two models, not one asked twice: their probabilities differ.
    assert replies["qanet"][0]["score"] != replies["dcn"][0]["score"]
    # A list of questions goes to the model named too.
    status, body = call(
        two, "v1/answer", {"context": CONTEXT, "questions": [QUESTION, "Whose engine was it?"], "model": "dcn"}
    )
    assert status == 200 and body["model"] == "dcn" and len(body["answers"][0]) == 1
    first, want = body["answers"][0][0], replies["dcn"][0]  # the same answer; the score within batching's rounding
    assert (first["answer"], first["start"], first["end"]) == (want["answer"], want["start"], want["end"])
    assert first["score"] == pytest.approx(want["score"], rel=1e-5)


def test_no_model_or_null_is_the_default_one(two):
    named = call(two, "v1/answer", {"context": CONTEXT, "question": QUESTION, "model": "qanet"})[1]
    for body in ({"context": CONTEXT, "question": QUESTION}, {"context": CONTEXT, "question": QUESTION, "model": None}):
        status, got = call(two, "v1/answer", body)
        assert status == 200 and got["model"] == "qanet" and got["answers"] == named["answers"]


def test_a_model_not_served_is_refused_with_the_served_list(two):
    for path, body in (
        ("v1/answer", {"context": CONTEXT, "question": QUESTION, "model": "x"}),
        ("v1/explain", {"context": CONTEXT, "question": QUESTION, "model": "x"}),
        ("v1/answer", {"context": CONTEXT, "question": QUESTION, "model": "dcn_plus"}),
    ):
        status, got = call(two, path, body)
        name = body["model"]
        assert (status, got) == (422, {"error": f"'model': '{name}' is not served here (served: qanet, dcn)"})
    status, got = call(two, "v1/answer", {"context": CONTEXT, "question": QUESTION, "model": 2})
    assert (status, got) == (422, {"error": "'model' must be a string, not a number (2)"})
    assert call(two, "v1/model?model=x") == (422, {"error": "'model': 'x' is not served here (served: qanet, dcn)"})


def test_v1_models_lists_both_the_default_marked(two):
    status, body = call(two, "v1/models")
    assert status == 200
    models = body["models"]
    assert [(m["name"], m["model"], m["default"]) for m in models] == [("qanet", "qanet", True), ("dcn", "dcn", False)]
    qanet, dcn = models
    assert qanet["backend"] in ("onnxruntime", "torch") and dcn["backend"] == "torch"
    assert dcn["file"].endswith("dcn-squad.safetensors") and dcn["parameters"] > qanet["parameters"] > 0
    trained = read_metadata(dcn["file"])["train_config"]["max_c_len"]  # each reads windows of its training length
    assert (qanet["window"], dcn["window"]) == (400, trained) and trained != 400
    assert all(0 < m["dev_score"]["dev_f1"] < 100 and isinstance(m["scores"], list) for m in models)
    # GET /v1/model: the default's description, or the one named.
    assert call(two, "v1/model")[1]["model"] == "qanet"
    assert call(two, "v1/model?model=dcn")[1]["source"] == dcn["file"]
    health = call(two, "health")[1]
    assert health["model"] == "qanet" and health["models"] == ["qanet", "dcn"]


def test_explain_uses_the_model_named(two):
    status, body = call(two, "v1/explain", {"context": CONTEXT, "question": QUESTION, "model": "dcn", "steps": 2})
    assert status == 200, body
    assert body["model"] == "dcn" and body["explanation"]["model"] == "dcn"
    answered = call(two, "v1/answer", {"context": CONTEXT, "question": QUESTION, "model": "dcn"})[1]
    assert body["explanation"]["answer"] == answered["answers"][0]


def test_the_schema_states_the_served_models(two):
    spec = call(two, "openapi.json")[1]
    paths = spec["paths"]
    assert "/v1/models" in paths and "422" in paths["/v1/explain"]["post"]["responses"]
    bodies = [
        *paths["/v1/answer"]["post"]["requestBody"]["content"]["application/json"]["schema"]["oneOf"],
        paths["/v1/explain"]["post"]["requestBody"]["content"]["application/json"]["schema"],
    ]
    for body in bodies:
        assert body["properties"]["model"]["anyOf"][0] == {"type": "string", "enum": ["qanet", "dcn"]}
        assert "model" not in body["required"]
    [param] = paths["/v1/model"]["get"]["parameters"]
    assert param["name"] == "model" and param["schema"]["enum"] == ["qanet", "dcn"]


def test_an_unknown_model_name_is_one_line_naming_the_installed_ones():
    run = subprocess.run(
        [sys.executable, "-m", "rckit", "serve", "--model", "nosuch", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and run.stdout == ""
    [line] = run.stderr.strip().splitlines()
    assert line.startswith("rckit serve: nosuch: ") and f"(installed: {', '.join(installed_models())})" in line
    run = subprocess.run(
        [sys.executable, "-m", "rckit", "serve", "--model", "qanet,nosuch", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and "nosuch" in run.stderr and "installed: minilm_reader, qanet" in run.stderr
    run = subprocess.run(
        [sys.executable, "-m", "rckit", "serve", "some-run", "--model", "dcn", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert run.stderr.strip() == "rckit serve: give the model once: RUN|FILE (some-run) or --model (dcn), not both"


def test_sources_of_a_model_spec():
    assert sources(None) == [None] and sources("qanet") == ["qanet"] and sources("runs/x") == ["runs/x"]
    assert sources("all") == installed_models() and sources("dcn,qanet,dcn") == ["dcn", "qanet"]
    with pytest.raises(FileNotFoundError, match="installed: minilm_reader, qanet"):
        sources("dcn,nosuch")


# -- the plumbing, in process ------------------------------------------------------------------


def test_each_model_has_its_own_batcher_and_settings():
    a, b = FakeReader(), FakeReader()
    b.concurrent = True  # b's batcher may run two calls at once
    app = create_app(
        {"a": a, "b": b}, ServeConfig(access_log="off"), {"b": ServeConfig(access_log="off", model_workers=2)}
    )
    assert [m.batcher.model_workers for m in app.state.models.values()] == [1, 2]
    assert app.state.batcher is app.state.models["a"].batcher
    with TestClient(app) as client:
        for name, reader in (("a", a), ("b", b), (None, a)):
            body = {"context": CONTEXT, "question": f"Who is {name}?"} | ({"model": name} if name else {})
            r = client.post("/v1/answer", json=body)
            assert r.status_code == 200 and r.json()["model"] == (name or "a")
            assert reader.log[-1] == [body["question"]]  # read by that model alone
        assert (len(a.calls), len(b.calls)) == (2, 1)
        assert client.get("/health").json()["calls"] == 3
        models = client.get("/v1/models").json()["models"]
        assert [(m["name"], m["default"], m["model"], m["file"]) for m in models] == [
            ("a", True, "fake-reader", None),
            ("b", False, "fake-reader", None),
        ]


def test_one_reader_is_served_under_its_own_name_as_before():
    with TestClient(create_app(FakeReader(), ServeConfig(access_log="off"))) as client:
        assert client.get("/v1/models").json()["models"][0]["name"] == "fake-reader"
        r = client.post("/v1/answer", json={"context": CONTEXT, "question": "Who?", "model": "fake-reader"})
        assert r.status_code == 200 and r.json()["model"] == "fake-reader"
        r = client.post("/v1/answer", json={"context": CONTEXT, "question": "Who?", "model": "qanet"})
        assert r.json() == {"error": "'model': 'qanet' is not served here (served: fake-reader)"}


def test_the_context_limit_is_the_smallest_windows():
    """The schema's context lengths follow from the work limit with the smallest window served, so
    a context it allows is within the limit for every model."""
    small, large = FakeReader(), FakeReader()
    large.window = 800
    config = ServeConfig(max_work=64, max_questions=8, access_log="off")
    with TestClient(create_app({"large": large, "small": small}, config)) as client:
        one = client.get("/openapi.json").json()["paths"]["/v1/answer"]["post"]["requestBody"]["content"][
            "application/json"
        ]["schema"]["oneOf"][0]
        assert one["properties"]["context"]["maxLength"] == 400 + 63 * 200


def test_serve_names_installed_models_and_gives_each_its_backends_settings(monkeypatch):
    import rckit.serve.app as app

    made = []
    monkeypatch.setattr(app, "available_cores", lambda: 16)
    monkeypatch.setattr(app.Reader, "load", lambda source, **kw: f"reader of {Path(source).name}")
    monkeypatch.setattr(
        app,
        "create_app",
        lambda models, config, settings=None: (
            made.append((models, config, settings)) or (_ for _ in ()).throw(SystemExit(3))
        ),
    )
    with pytest.raises(SystemExit):
        app.serve("qanet_paper")  # one model, named as installed, not by its architecture (qanet)
    assert made[-1] == ({"qanet_paper": f"reader of {installed_path('qanet_paper').name}"}, made[-1][1], None)
    with pytest.raises(SystemExit):
        app.serve("dcn,qanet")
    models, config, settings = made[-1]
    assert list(models) == list(settings) == ["dcn", "qanet"] and config == settings["dcn"]
    assert (settings["dcn"].model_workers, settings["dcn"].threads) == (1, 15)  # PyTorch
    if models["qanet"].endswith(".onnx"):  # onnxruntime is here
        assert (settings["qanet"].model_workers, settings["qanet"].threads) == (2, 8)


def test_ask_reads_the_documents_with_the_model_named(tmp_path):
    from rckit.cli import main

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text(
        "Ada Lovelace wrote the first program in 1843.\n\nBabbage built engines.\n"
    )
    assert main(["index", str(tmp_path / "docs"), "--out", str(tmp_path / "docs.sqlite"), "--no-progress"]) == 0
    a, b = FakeReader(), FakeReader()
    config = ServeConfig(index=str(tmp_path / "docs.sqlite"), access_log="off")
    with TestClient(create_app({"a": a, "b": b}, config)) as client:
        r = client.post("/v1/ask", json={"question": "When did Ada write?", "model": "b"})
        assert r.status_code == 200 and r.json()["model"] == "b" and r.json()["answers"]
        assert b.log and not a.log
        r = client.post("/v1/ask", json={"question": "When did Ada write?", "model": "c"})
        assert r.json() == {"error": "'model': 'c' is not served here (served: a, b)"}
