"""rckit's own reader served (:class:`rckit.answering.pointer_reader.PointerReader`, a tiny random
one written here): a real ``rckit serve FILE`` on 127.0.0.1 answers as the reader answers alone,
abstains by its threshold, says what it is, and refuses to explain in one line; the page, in a
real headless Chromium (the ``browser`` marker), marks its answer or says its abstention; in
process, the batcher reads one long document's windows in calls beside other requests' and every
answer is still the one read alone."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from rckit.answering.pointer_reader import PointerReader
from rckit.serve.app import create_app
from rckit.serve.config import ServeConfig
from tests.conftest import GREEK, write_tiny_reader_file
from tests.serve.test_page import _ask, _text, browser  # noqa: F401 (a fixture)
from tests.serve.test_serve import Counting, _post_all, call, post, start_server, stop_server

PASSAGE = " ".join(GREEK * 2) + "."
OTHER = "alpha beta gamma. " * 7 + "delta epsilon."
PAIRS = [(PASSAGE, "what follows beta ?"), (PASSAGE, "what follows mu ?"), (OTHER, "what follows gamma ?")]


@pytest.fixture(scope="module")
def reader_file(tmp_path_factory):
    return write_tiny_reader_file(tmp_path_factory.mktemp("served-reader"), threshold=0.7)


def test_a_real_server_answers_with_the_readers_file(reader_file, tmp_path):
    reader = PointerReader.load(reader_file)
    proc, url = start_server([str(reader_file), "--batch-window-ms", "200"], tmp_path / "serve.log")
    try:
        status, body = post(url, {"context": PASSAGE, "questions": [q for _, q in PAIRS[:2]], "top_k": 3})
        assert status == 200, body
        assert body["answers"] == [reader.answer(PASSAGE, q, top_k=3) for _, q in PAIRS[:2]]
        assert body["model"] == "encoder_reader"

        results = [None] * len(PAIRS)  # at once, over real sockets: batched, each as alone

        def ask_one(i):
            results[i] = post(url, {"context": PAIRS[i][0], "question": PAIRS[i][1], "top_k": 2})

        threads = [threading.Thread(target=ask_one, args=(i,)) for i in range(len(PAIRS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [r[1]["answers"] for r in results] == [reader.answer(c, q, top_k=2) for c, q in PAIRS]

        status, models = call(url, "v1/models")
        assert status == 200
        (entry,) = models["models"]
        assert entry["model"] == "encoder_reader" and entry["window"] == 40 and entry["parameters"] > 1000
        assert entry["file"] == str(reader_file.resolve()) and entry["explains"] is False  # the page hides "Inside"
        status, body = call(url, "v1/explain", {"context": PASSAGE, "question": PAIRS[0][1]})
        assert status == 501 and "cannot explain its answers yet" in body["error"]
        assert post(url, {"context": " ", "question": "what ?"}) == (422, {"error": "'context' is empty"})
    finally:
        code = stop_server(proc)
    err = (tmp_path / "serve.log").read_text()
    assert code == 130 and "Traceback" not in err, err


def test_a_server_abstains_where_its_threshold_says(reader_file, tmp_path):
    proc, url = start_server([str(reader_file), "--no-answer-threshold", "0"], tmp_path / "serve.log")
    try:
        status, body = post(url, {"context": PASSAGE, "question": PAIRS[0][1], "top_k": 2})
    finally:
        stop_server(proc)
    assert status == 200, body
    first, *rest = body["answers"]
    assert first["answer"] == "" and first["start"] is None and 0 < first["no_answer_probability"] < 1
    assert [a["answer"] for a in rest] == [a["answer"] for a in PointerReader.load(reader_file).answer(*PAIRS[0])][:1]


def test_a_long_documents_windows_share_calls_and_every_answer_is_as_alone(reader_file):
    reader = PointerReader.load(reader_file, batch_size=4)
    document = " ".join([PASSAGE, OTHER] * 6)
    bodies = [{"context": document, "question": "what follows iota ?", "top_k": 3}]
    bodies += [{"context": c, "question": q, "top_k": 2} for c, q in PAIRS]
    counting = Counting(reader)
    app = create_app(counting, ServeConfig(max_batch=3, batch_window_ms=1, model_workers=2))
    responses = asyncio.run(_post_all(app, bodies))
    for body, r in zip(bodies, responses):
        assert r.status_code == 200, r.text
        assert r.json()["answers"] == reader.answer(body["context"], body["question"], top_k=body["top_k"])
    windows = reader.plan([(document, "what follows iota ?")]).work
    calls = counting.calls
    assert windows >= 4 and max(calls) <= 3 and sum(calls) == windows + len(PAIRS) and counting.most == 2
    assert json.loads(json.dumps(responses[0].json()))  # plain JSON throughout


@pytest.mark.browser
def test_the_page_answers_and_abstains_with_the_readers_file(reader_file, tmp_path, browser):  # noqa: F811
    """In a real headless Chromium: the page asks the server of the reader's file; an answer is marked
    in the passage, and (a second server abstaining on everything) an abstention is said in words
    with the sentence nearest to the question underlined."""
    from selenium.webdriver.common.by import By

    context = "Alpha beta gamma delta. Epsilon zeta eta theta."
    for threshold, abstains in (("1", False), ("0", True)):
        proc, url = start_server([str(reader_file), "--no-answer-threshold", threshold], tmp_path / "serve.log")
        try:
            browser.get(url)
            _ask(browser, context, "what follows gamma ?")
            status, api = post(url, {"context": context, "question": "what follows gamma ?", "top_k": 3})
        finally:
            stop_server(proc)
        assert status == 200 and browser.execute_script("return document.body.dataset.state") == "answered"
        first = api["answers"][0]
        if abstains:
            assert first["answer"] == "" and first["reason"]["text"] == "Alpha beta gamma delta."
            assert not browser.find_elements(By.CSS_SELECTOR, "#answer mark")
            assert _text(browser.find_element(By.CSS_SELECTOR, "#answer .nearest")) == first["reason"]["text"]
        else:
            assert _text(browser.find_element(By.CSS_SELECTOR, "#answer mark")) == first["answer"] != ""
