"""Labels made on the page (``rckit serve --labels FILE``): the SQuAD file they grow, its safety
(concurrent writers, a crash mid-write, a bad label, a file that is not SQuAD), the API behind the
server's keys, and the Label tab in a real headless Chromium against a real server."""

from __future__ import annotations

import json
import multiprocessing
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rckit.data.squad import read_squad
from rckit.serve import labels as labels_module
from rckit.serve.app import create_app
from rckit.serve.config import ServeConfig
from rckit.serve.labels import LabelFile
from tests.retrieval.test_collection import index_server  # noqa: F401  (a fixture: rckit serve --index --labels)
from tests.serve.test_access import KEY, bearer
from tests.serve.test_page import browser  # noqa: F401  (a fixture: headless Chromium)
from tests.serve.test_serve import FakeReader

PASSAGE = "Press 🙂 the red button to stop the pump. The blue one starts it again."


def label(n: int = 0, **change) -> dict:
    at = PASSAGE.index("the red button")
    return {
        "document": "manual.pdf",
        "context": PASSAGE,
        "question": f"What stops the pump? ({n})",
        "answer": "the red button",
        "answer_start": at,
        **change,
    }


def test_labels_grow_a_squad_file_by_document_and_passage(tmp_path):
    f = LabelFile(tmp_path / "labels.json")
    assert f.stats() == {"file": "labels.json", "questions": 0, "passages": 0, "documents": 0}
    first = f.add(**label(0))
    f.add(**label(1))
    f.add(**{**label(2), "document": "other.pdf"})
    last = f.add(**label(3, context=PASSAGE + " More."))
    assert first["questions"] == 1 and last == {**last, "questions": 4, "passages": 3, "documents": 2}
    ds = read_squad(tmp_path / "labels.json")  # a SQuAD file as rckit adapt reads it
    assert len(ds.examples) == 4 and ds.report.version == "1.1"
    e = ds.examples[0]
    assert e.answers[0].text == "the red button" and e.context[e.answers[0].start :].startswith("the red button")
    assert first["id"] == e.qid


@pytest.mark.parametrize(
    "change, message",
    [
        ({"answer_start": 0}, "not the passage's text at character 0"),
        ({"answer": "the green button"}, "not the passage's text"),
        ({"answer": "the red button ", "answer_start": PASSAGE.index("the red button")}, "white space"),
        ({"question": "  "}, "needs a passage, a question and an answer"),
    ],
)
def test_a_label_not_in_its_passage_is_refused_in_one_line(tmp_path, change, message):
    f = LabelFile(tmp_path / "labels.json")
    with pytest.raises(ValueError, match=message):
        f.add(**label(**change))
    assert not (tmp_path / "labels.json").exists()


def test_the_same_question_about_the_same_passage_is_refused(tmp_path):
    f = LabelFile(tmp_path / "labels.json")
    f.add(**label(0))
    with pytest.raises(ValueError, match="labelled already"):
        f.add(**label(0))
    assert f.stats()["questions"] == 1


def test_a_file_that_is_not_squad_or_a_folder_that_is_not_there_is_refused(tmp_path):
    bad = tmp_path / "labels.json"
    bad.write_text('{"version": "1.1", "data": [{"title": "x"}]}')
    with pytest.raises(ValueError, match="labels.json.*paragraphs"):
        LabelFile(bad)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        LabelFile(tmp_path / "nowhere" / "labels.json")
    with pytest.raises(ValueError, match="paragraphs"):
        ServeConfig(labels=str(bad)).check()  # refused before the server starts


def test_a_crash_mid_write_leaves_the_old_file_whole(tmp_path, monkeypatch):
    f = LabelFile(tmp_path / "labels.json")
    f.add(**label(0))
    before = (tmp_path / "labels.json").read_bytes()

    def dump_half(obj, fh, **kw):
        fh.write(json.dumps(obj, **kw)[:40])
        raise OSError("disk full")

    monkeypatch.setattr(labels_module.json, "dump", dump_half)
    with pytest.raises(OSError, match="disk full"):
        f.add(**label(1))
    assert (tmp_path / "labels.json").read_bytes() == before
    assert len(read_squad(tmp_path / "labels.json").examples) == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def _add_many(path: str, start: int, n: int) -> None:
    f = LabelFile(path)
    for i in range(start, start + n):
        f.add(**label(i))


def test_two_processes_and_many_threads_at_once_lose_nothing(tmp_path):
    path = str(tmp_path / "labels.json")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_add_many, args=(path, 1000 * k, 15)) for k in range(2)]
    threads = [threading.Thread(target=_add_many, args=(path, 5000 + 100 * k, 5)) for k in range(4)]
    for w in procs + threads:
        w.start()
    for w in procs + threads:
        w.join(120)
    assert all(p.exitcode == 0 for p in procs)
    ds = read_squad(path)
    assert len(ds.examples) == 2 * 15 + 4 * 5
    assert len({e.question for e in ds.examples}) == 50


def test_the_api_adds_labels_behind_the_servers_keys(tmp_path):
    labels_f = tmp_path / "labels.json"
    with TestClient(create_app(FakeReader(), ServeConfig(labels=str(labels_f), api_key=KEY, access_log="off"))) as c:
        assert c.post("/v1/labels", json=label()).status_code == 401  # the API's key, as for answers
        r = c.post("/v1/labels", json=label(), headers=bearer(KEY))
        assert r.status_code == 200 and r.json()["questions"] == 1
        r = c.post("/v1/labels", json=label(answer_start=3), headers=bearer(KEY))
        assert r.status_code == 422 and "not the passage's text at character 3" in r.json()["error"]
        r = c.post("/v1/labels", json={**label(), "answer_start": "6"}, headers=bearer(KEY))
        assert r.status_code == 422 and "'answer_start' must be an integer" in r.json()["error"]
        r = c.post("/v1/labels", json={k: v for k, v in label().items() if k != "document"}, headers=bearer(KEY))
        assert r.status_code == 422 and "'document' is required" in r.json()["error"]
        assert c.get("/v1/labels", headers=bearer(KEY)).json() == {
            "file": "labels.json",
            "questions": 1,
            "passages": 1,
            "documents": 1,
        }
        assert "/v1/labels" in c.get("/openapi.json").json()["paths"]
    with TestClient(create_app(FakeReader(), ServeConfig(access_log="off"))) as c:
        r = c.get("/v1/labels")
        assert r.status_code == 404 and "--labels" in r.json()["error"]
        assert c.post("/v1/labels", json=label()).status_code == 404


@pytest.mark.browser
def test_the_page_labels_an_answer_the_user_selects(tiny_export, tmp_path, browser):  # noqa: F811 (the fixture)
    """The Label tab as a user takes it: a passage pasted, a question, the model's answer marked,
    other words selected with the mouse, saved; the file holds them at the right offsets (an emoji
    before them: the page counts code points as the server does)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from tests.serve.test_page import ARTIFACTS, _text, _wait
    from tests.serve.test_serve import call, start_server, stop_server

    labels_f = tmp_path / "labels.json"
    proc, url = start_server([str(tiny_export), "--labels", str(labels_f)], tmp_path / "serve.log")
    try:
        state = lambda d: d.execute_script("return document.body.dataset.state")  # noqa: E731
        by_id = lambda i: browser.find_element(By.ID, i)  # noqa: E731
        browser.get(url)
        tab = _wait(
            browser, lambda d: d.find_element(By.ID, "tab-label").is_displayed() and d.find_element(By.ID, "tab-label")
        )
        assert not by_id("tab-collection").is_displayed()  # no index: no documents' tab
        assert "0 questions labelled in labels.json" in _text(by_id("label-count"))
        tab.click()
        assert by_id("label-view").is_displayed() and not by_id("passage-view").is_displayed()
        by_id("label-document").send_keys("pump-manual.pdf")
        browser.execute_script("arguments[0].value = arguments[1]", by_id("label-context"), PASSAGE)
        browser.execute_script("document.body.dataset.state = ''")
        by_id("label-question").send_keys("Which button stops the pump?", Keys.ENTER)
        _wait(browser, lambda d: state(d) in ("suggested", "error"))
        assert state(browser) == "suggested"
        status, api = call(url, "v1/answer", {"context": PASSAGE, "question": "Which button stops the pump?"})
        model_answer = api["answers"][0]["answer"]
        assert _text(browser.find_element(By.CSS_SELECTOR, "#label-passage mark")) == model_answer
        assert "The model's answer" in _text(by_id("label-chosen"))

        # The user selects " the red button " (with a space each side) in the passage with the mouse.
        browser.execute_script("""
            const box = document.getElementById('label-passage');
            const text = box.textContent, at = text.indexOf(' the red button ');
            box.replaceChildren(document.createTextNode(text));
            const range = document.createRange();
            range.setStart(box.firstChild, at);
            range.setEnd(box.firstChild, at + ' the red button '.length);
            const sel = window.getSelection(); sel.removeAllRanges(); sel.addRange(range);
            box.dispatchEvent(new MouseEvent('mouseup', {bubbles: true}));""")
        assert _text(browser.find_element(By.CSS_SELECTOR, "#label-passage mark")) == "the red button"
        assert "Your answer" in _text(by_id("label-chosen"))
        ARTIFACTS.mkdir(exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "page-label.png"))
        browser.execute_script("document.body.dataset.state = ''")
        by_id("label-save").click()
        _wait(browser, lambda d: state(d) in ("labelled", "error"))
        assert state(browser) == "labelled"
        assert "1 question labelled in labels.json (1 document)" in _text(by_id("label-count"))
        assert by_id("label-question").get_attribute("value") == ""  # ready for the next question
        ds = read_squad(labels_f)
        (e,) = ds.examples
        a = e.answers[0]
        assert (e.question, a.text, a.start) == (
            "Which button stops the pump?",
            "the red button",
            PASSAGE.index("the red button"),
        )
        assert json.loads(Path(labels_f).read_text())["data"][0]["title"] == "pump-manual.pdf"
    finally:
        stop_server(proc)


@pytest.mark.browser
def test_the_page_finds_a_passage_to_label_in_the_servers_documents(index_server, browser):  # noqa: F811
    """With an index and no passage pasted, Suggest finds the passage in the server's documents,
    names its file and marks the model's answer; accepted as it is, it is saved."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from tests.serve.test_page import _text, _wait

    url, folder = index_server
    state = lambda d: d.execute_script("return document.body.dataset.state")  # noqa: E731
    by_id = lambda i: browser.find_element(By.ID, i)  # noqa: E731
    browser.get(url)
    tab = _wait(
        browser, lambda d: d.find_element(By.ID, "tab-label").is_displayed() and d.find_element(By.ID, "tab-label")
    )
    assert by_id("tab-collection").is_displayed()  # both tabs beside the passage's
    tab.click()
    assert by_id("label-find-hint").is_displayed()
    browser.execute_script("document.body.dataset.state = ''")
    by_id("label-question").send_keys("Who was the first person to walk on the Moon?", Keys.ENTER)
    _wait(browser, lambda d: state(d) in ("suggested", "error"))
    assert state(browser) == "suggested", _text(by_id("label-error"))
    context = by_id("label-context").get_attribute("value")
    marked = _text(browser.find_element(By.CSS_SELECTOR, "#label-passage mark"))
    assert "Neil Armstrong" in marked and "Neil Armstrong" in context
    assert by_id("label-document").get_attribute("value") == "records.jsonl [moon]"
    browser.execute_script("document.body.dataset.state = ''")
    by_id("label-save").click()
    _wait(browser, lambda d: state(d) in ("labelled", "error"))
    assert state(browser) == "labelled"
    ds = read_squad(folder.parent / "labels.json")
    (e,) = [e for e in ds.examples if e.question == "Who was the first person to walk on the Moon?"]
    assert e.answers[0].text == marked and e.context == context
