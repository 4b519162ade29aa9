"""The page of ``rckit serve`` in a real headless Chromium, for a model file whose verifier says
the passage holds no answer (rckit issue 43): the abstention is shown first, nothing is marked in
the passage but its sentence nearest to the question, underlined as the reason (issue 71), and the
reader's best spans follow as guesses, each one marked when clicked.
Needs Chromium, as tests/serve/test_page.py (the ``browser`` marker); a screenshot goes to
/tmp/page-no-answer.png."""

from __future__ import annotations

import pytest

from tests.answering.test_verifier import REJECTING_P, rejecting_export  # noqa: F401 (a fixture)
from tests.serve.test_page import _ask, _text, browser  # noqa: F401 (a fixture)
from tests.serve.test_serve import post, start_server, stop_server

SCREENSHOT = "/tmp/page-no-answer.png"


@pytest.fixture(scope="module")
def verifier_server(rejecting_export, tmp_path_factory):  # noqa: F811
    proc, url = start_server([str(rejecting_export)], tmp_path_factory.mktemp("page-verifier") / "serve.log")
    yield url
    stop_server(proc)


@pytest.mark.browser
def test_the_page_shows_the_verifiers_abstention_then_the_guesses(verifier_server, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    browser.get(verifier_server)
    context, question = "Alpha beta gamma delta. Epsilon zeta eta theta.", "what follows gamma ?"
    _ask(browser, context, question)
    status, api = post(verifier_server, {"context": context, "question": question, "top_k": 5})
    assert status == 200
    first = api["answers"][0]
    assert first["answer"] == "" and first["start"] is None
    assert first["no_answer_probability"] == pytest.approx(REJECTING_P)
    assert first["reason"] == {"text": "Alpha beta gamma delta.", "start": 0, "end": 23}
    assert browser.execute_script("return document.body.dataset.state") == "answered"
    assert not browser.find_element(By.ID, "error").is_displayed()
    assert not browser.find_elements(By.CSS_SELECTOR, "#answer mark")  # nothing marked
    note = browser.find_element(By.CSS_SELECTOR, "#answer .no-answer-note")  # said in words above the passage
    assert _text(note) == (
        f"No answer in this passage ({REJECTING_P * 100:.1f}% sure). Underlined: the sentence nearest to the "
        "question, to check that it does not say. The reader's best guesses are listed below."
    )
    assert _text(browser.find_element(By.ID, "answer")).endswith(context)
    assert _text(browser.find_element(By.CSS_SELECTOR, "#answer .nearest")) == first["reason"]["text"]
    items = browser.find_element(By.ID, "topk").find_elements(By.TAG_NAME, "li")
    assert len(items) == len(api["answers"]) >= 2
    assert _text(items[0].find_element(By.CLASS_NAME, "text")) == "No answer in this passage"
    assert "no-answer" in items[0].get_attribute("class") and "current" in items[0].get_attribute("class")
    assert _text(items[0].find_element(By.CLASS_NAME, "score")) == f"{REJECTING_P * 100:.1f}%"
    assert [_text(li.find_element(By.CLASS_NAME, "text")) for li in items[1:]] == [
        a["answer"] for a in api["answers"][1:]
    ]
    assert not any("no-answer" in li.get_attribute("class") for li in items[1:])
    browser.save_screenshot(SCREENSHOT)
    # The best guess, clicked, is marked in the passage; the abstention, clicked again, unmarks it.
    items[1].click()
    assert _text(browser.find_element(By.CSS_SELECTOR, "#answer mark")) == api["answers"][1]["answer"]
    assert not browser.find_elements(By.CSS_SELECTOR, "#answer .no-answer-note")
    items[0].click()
    assert not browser.find_elements(By.CSS_SELECTOR, "#answer mark")
    assert browser.find_elements(By.CSS_SELECTOR, "#answer .no-answer-note")
