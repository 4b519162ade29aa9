"""The page of ``rckit serve`` in a real headless Chromium, against a real server on 127.0.0.1.

Needs Debian's ``chromium`` and ``chromium-driver`` (``/usr/bin/chromium``,
``/usr/bin/chromedriver``) and ``selenium``; without them the tests skip with one line saying how
to install them, and fail under ``RCKIT_TEST_REQUIRE=all`` (.ci/run installs them and sets it).
Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import CHROMEDRIVER, chromium
from tests.retrieval.test_collection import index_server  # noqa: F401  (a fixture: rckit serve --index)
from tests.serve.test_access import KEY, key_file, rewrite
from tests.serve.test_serve import post, start_server, stop_server

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,1000",
]
# An emoji before the answer: the server's offsets count code points, JavaScript's UTF-16 units.
CONTEXT = (
    "Grace Hopper 🙂 joined the Navy reserve in 1943. She made the first compiler, A-0, in 1952, "
    "and later helped design COBOL, a language for business programs."
)
QUESTION = "What did Grace Hopper make in 1952?"


@pytest.fixture(scope="module")
def server(tiny_export, tmp_path_factory):
    """``rckit serve`` of conftest's tiny exported QANet; its URL."""
    proc, url = start_server([str(tiny_export)], tmp_path_factory.mktemp("page") / "serve.log")
    yield url
    stop_server(proc)


@pytest.fixture
def browser(tmp_path):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("the page test needs selenium: pip install -e '.[test]'")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium()
    for flag in FLAGS + [f"--user-data-dir={tmp_path / 'chromium'}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _wait(driver, condition, timeout=60):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda d: condition(d))


def _text(element) -> str:
    return element.get_attribute("textContent")


def _ask(driver, context: str | None, question: str):
    """Fill the form as a user would (the passage set by script: ChromeDriver types no emoji) and press Enter."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.execute_script("document.body.dataset.state = ''")
    if context is not None:
        box = driver.find_element(By.ID, "context")
        driver.execute_script("arguments[0].value = arguments[1]", box, context)
    q = driver.find_element(By.ID, "question")
    q.clear()
    q.send_keys(question, Keys.ENTER)
    _wait(driver, lambda d: d.execute_script("return document.body.dataset.state") in ("answered", "error"))


@pytest.mark.browser
def test_the_page_marks_the_answer_the_api_gives(server, browser):
    from selenium.webdriver.common.by import By

    browser.get(server)
    assert browser.title.startswith("rckit")
    by_id = lambda i: browser.find_element(By.ID, i)  # noqa: E731
    assert by_id("context").get_property("value").strip() and by_id("question").get_property("value")

    # The example the page opens with, asked with the Ask button.
    by_id("ask").click()
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#answer mark"))
    status, api = post(
        server,
        {
            "context": by_id("context").get_property("value"),
            "question": by_id("question").get_property("value"),
            "top_k": 5,
        },
    )
    assert status == 200
    assert _text(browser.find_element(By.CSS_SELECTOR, "#answer mark")) == api["answers"][0]["answer"]

    # A passage of our own, asked with Enter.
    _ask(browser, CONTEXT, QUESTION)
    status, api = post(server, {"context": CONTEXT, "question": QUESTION, "top_k": 5})
    assert status == 200 and not by_id("error").is_displayed()
    best = api["answers"][0]
    mark = browser.find_element(By.CSS_SELECTOR, "#answer mark")
    assert _text(mark) == best["answer"] == CONTEXT[best["start"] : best["end"]]
    assert _text(by_id("answer")) == CONTEXT  # the whole passage, the answer marked in place
    items = by_id("topk").find_elements(By.TAG_NAME, "li")
    assert [_text(li.find_element(By.CLASS_NAME, "text")) for li in items] == [a["answer"] for a in api["answers"]]
    assert [_text(li.find_element(By.CLASS_NAME, "score")) for li in items] == [
        f"{a['score'] * 100:.1f}%" for a in api["answers"]
    ]
    assert "ms" in _text(by_id("took")) and "qanet" in _text(by_id("took"))

    # Another of the top answers, clicked, is marked instead.
    if len(items) > 1:
        items[1].click()
        assert _text(browser.find_element(By.CSS_SELECTOR, "#answer mark")) == api["answers"][1]["answer"]

    # Text that could be markup stays text.
    html_like = "<b>bold</b> & <script>window.pwned = 1</script> Ada wrote in 1843."
    _ask(browser, html_like, "When did Ada write?")
    assert _text(by_id("answer")) == html_like
    assert not browser.find_elements(By.CSS_SELECTOR, "#answer b, #answer script")
    assert browser.execute_script("return window.pwned === undefined")

    ARTIFACTS.mkdir(exist_ok=True)
    _ask(browser, CONTEXT, QUESTION)
    browser.save_screenshot(str(ARTIFACTS / "page.png"))

    # The server's own error, shown in the page; the next question is answered again.
    _ask(browser, None, "?!")
    assert by_id("error").is_displayed() and "'question' has no letter or digit" in _text(by_id("error"))
    _ask(browser, CONTEXT, QUESTION)
    assert not by_id("error").is_displayed()
    assert _text(browser.find_element(By.CSS_SELECTOR, "#answer mark")) == best["answer"]


@pytest.mark.browser
def test_the_page_fits_a_phone(server, browser):
    from selenium.webdriver.common.by import By

    # A phone's viewport: 390 CSS pixels wide, mobile (so the page's viewport meta decides the width).
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride", {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True}
    )
    browser.get(server)
    long_word = "Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch " * 2
    _ask(browser, f"{long_word}is a village in Wales, on the island of Anglesey.", "Where is the village?")
    assert browser.find_elements(By.CSS_SELECTOR, "#answer mark")
    sizes = browser.execute_script(
        "const r = document.getElementById('ask').getBoundingClientRect();"
        "return {inner: window.innerWidth, scroll: document.documentElement.scrollWidth,"
        "        body: document.body.scrollWidth, askRight: r.right};"
    )
    assert sizes["inner"] == 390, sizes  # the viewport meta took effect
    assert sizes["scroll"] <= sizes["inner"] and sizes["body"] <= sizes["inner"], f"horizontal scroll: {sizes}"
    assert sizes["askRight"] <= sizes["inner"], f"the Ask button is off screen: {sizes}"
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "page-phone.png"))


def test_the_page_is_served_with_its_scripts(server):
    html = urllib.request.urlopen(server, timeout=10).read().decode()
    assert '<meta name="viewport"' in html and "/static/app.js" in html and "/static/style.css" in html
    info = json.load(urllib.request.urlopen(server + "v1/model", timeout=10))
    assert info["model"] == "qanet"


@pytest.fixture(scope="module")
def abstaining_server(tmp_path_factory):
    """``rckit serve`` of a tiny QANet that can abstain, its saved threshold set so it always does."""
    from rckit.export.safetensors import export_run
    from rckit.model_files.checkpoint import load_checkpoint, save_checkpoint
    from tests.answering.test_no_answer import _train, _v2_files

    root = tmp_path_factory.mktemp("abstaining-page")
    train, dev = _v2_files(root)
    assert _train(root, train, dev, "--set", "model.no_answer=true") == 0
    run = root / "run"
    for name in ("best.pt", "last.pt"):
        ckpt = load_checkpoint(run / name)
        ckpt["decode"]["no_answer_threshold"] = -1e9
        save_checkpoint({k: v for k, v in ckpt.items() if k != "format"}, run / name)
    export_run(run, root / "abstaining.safetensors", dtype="fp32")
    proc, url = start_server([str(root / "abstaining.safetensors")], root / "serve.log")
    yield url
    stop_server(proc)


@pytest.mark.browser
def test_the_page_says_when_the_passage_holds_no_answer(abstaining_server, browser):
    from selenium.webdriver.common.by import By

    browser.get(abstaining_server)
    context, question = "alpha beta gamma delta epsilon.", "what follows omega ?"
    _ask(browser, context, question)
    status, api = post(abstaining_server, {"context": context, "question": question, "top_k": 5})
    assert status == 200
    first = api["answers"][0]
    assert first["answer"] == "" and first["start"] is None and 0 < first["no_answer_probability"] < 1
    assert not browser.find_element(By.ID, "error").is_displayed()
    assert not browser.find_elements(By.CSS_SELECTOR, "#answer mark")  # nothing marked
    # Said in words above the passage; no "% sure" for a null model's abstention at a low p(no answer).
    note = "No answer in this passage. The reader's best guesses are listed below."
    assert _text(browser.find_element(By.CSS_SELECTOR, "#answer .no-answer-note")) == note
    assert _text(browser.find_element(By.ID, "answer")) == note + context
    items = browser.find_element(By.ID, "topk").find_elements(By.TAG_NAME, "li")
    assert _text(items[0].find_element(By.CLASS_NAME, "text")) == "No answer in this passage"
    assert "no-answer" in items[0].get_attribute("class")
    # The best spans stay after it, and one clicked is marked in the passage.
    assert [_text(li.find_element(By.CLASS_NAME, "text")) for li in items[1:]] == [
        a["answer"] for a in api["answers"][1:]
    ]
    items[1].click()
    assert _text(browser.find_element(By.CSS_SELECTOR, "#answer mark")) == api["answers"][1]["answer"]


@pytest.mark.browser
def test_the_page_asks_the_servers_documents_in_its_second_tab(index_server, browser):  # noqa: F811 (the fixture)
    """Served with an index, the page gets a second tab; an answer is shown marked in its passage,
    with its document's name, as the API gives it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from tests.serve.test_serve import call

    url, _ = index_server
    browser.get(url)
    tab = _wait(
        browser,
        lambda d: d.find_element(By.ID, "tab-collection").is_displayed() and d.find_element(By.ID, "tab-collection"),
    )
    tab.click()
    assert browser.find_element(By.ID, "collection-view").is_displayed()
    assert not browser.find_element(By.ID, "passage-view").is_displayed()
    assert "4 documents" in _text(browser.find_element(By.ID, "collection-hint"))
    question = "Who was the first person to walk on the Moon?"
    browser.execute_script("document.body.dataset.state = ''")
    browser.find_element(By.ID, "collection-question").send_keys(question, Keys.ENTER)
    _wait(browser, lambda d: d.execute_script("return document.body.dataset.state") in ("answered", "error"))
    status, api = call(url, "v1/ask", {"question": question, "top_k": 3})
    assert status == 200
    items = browser.find_element(By.ID, "found").find_elements(By.TAG_NAME, "li")
    assert len(items) == len(api["answers"])
    best = api["answers"][0]
    assert _text(items[0].find_element(By.CSS_SELECTOR, ".passage mark")) == best["answer"]
    assert "Neil Armstrong" in best["answer"]
    assert _text(items[0].find_element(By.CLASS_NAME, "doc")) == "Apollo · records.jsonl [moon]"
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "page-collection.png"))


@pytest.fixture
def keyed_server(tiny_export, tmp_path):
    """``rckit serve`` of the tiny exported QANet with a key file of one key; its URL and the file."""
    keys = key_file(tmp_path / "keys", f"page {KEY}")
    proc, url = start_server(
        [str(tiny_export), "--api-key-file", str(keys), "--access-log", "off"], tmp_path / "serve.log"
    )
    yield url, keys
    stop_server(proc)


def _post_with_key(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(
        url + "v1/answer",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status, json.load(r)


@pytest.mark.browser
def test_the_page_asks_for_the_key_once_keeps_it_for_the_tab_and_again_after_a_401(keyed_server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    url, keys = keyed_server
    by_id = lambda i: browser.find_element(By.ID, i)  # noqa: E731
    state = lambda d: d.execute_script("return document.body.dataset.state")  # noqa: E731
    stored = lambda: browser.execute_script("return sessionStorage.getItem('rckit-key')")  # noqa: E731

    browser.get(url)  # the page itself needs no key; its first API call is told it does
    _wait(browser, lambda d: state(d) == "key")
    assert by_id("key-form").is_displayed() and by_id("key").get_attribute("type") == "password"
    assert "needs a key" in _text(by_id("key-hint"))

    browser.execute_script("document.body.dataset.state = ''")
    by_id("key").send_keys("not-the-key", Keys.ENTER)
    _wait(browser, lambda d: state(d) == "key")
    assert "not accepted" in _text(by_id("key-hint")) and stored() is None

    by_id("key").send_keys(KEY, Keys.ENTER)
    _wait(browser, lambda d: state(d) == "ready")
    assert not by_id("key-form").is_displayed() and "qanet" in _text(by_id("model")) and stored() == KEY
    assert not by_id("tabs").is_displayed()  # no index: the page keeps its one tab
    _ask(browser, CONTEXT, QUESTION)
    status, api = _post_with_key(url, {"context": CONTEXT, "question": QUESTION, "top_k": 5})
    assert status == 200 and state(browser) == "answered"
    assert _text(browser.find_element(By.CSS_SELECTOR, "#answer mark")) == api["answers"][0]["answer"]

    # Kept for the tab: the page, loaded again, asks for nothing.
    browser.refresh()
    _wait(browser, lambda d: "qanet" in _text(d.find_element(By.ID, "model")))
    assert not by_id("key-form").is_displayed()
    _ask(browser, CONTEXT, QUESTION)
    assert state(browser) == "answered"

    # The key withdrawn from the server's file: the next question is refused, the key forgotten and asked for.
    rewrite(keys, "other some-other-key-0123")
    _ask(browser, CONTEXT, QUESTION)
    assert state(browser) == "error" and "needs a key" in _text(by_id("error"))
    assert by_id("key-form").is_displayed() and "not accepted" in _text(by_id("key-hint")) and stored() is None
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "page-key.png"))


@pytest.fixture(scope="module")
def facts_server(tmp_path_factory):
    """``rckit serve --index`` of write_facts' files (a two-page PDF among them), with the installed model; its URL."""
    from rckit.cli import main
    from tests.retrieval.test_formats_answered import write_facts

    root = tmp_path_factory.mktemp("facts")
    write_facts(root / "docs")
    assert main(["index", str(root / "docs"), "--out", str(root / "docs.sqlite"), "--no-progress"]) == 0
    proc, url = start_server(["--index", str(root / "docs.sqlite")], root / "serve.log")
    yield url
    stop_server(proc)


@pytest.mark.browser
def test_the_page_says_the_page_or_section_beside_the_file(facts_server, browser):
    """An answer on a PDF's second page says "page 2" beside the file's name; one under a heading, its section."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from tests.serve.test_serve import call

    browser.get(facts_server)
    tab = _wait(
        browser,
        lambda d: d.find_element(By.ID, "tab-collection").is_displayed() and d.find_element(By.ID, "tab-collection"),
    )
    tab.click()

    def ask(question):
        browser.execute_script("document.body.dataset.state = ''")
        box = browser.find_element(By.ID, "collection-question")
        box.clear()
        box.send_keys(question, Keys.ENTER)
        _wait(browser, lambda d: d.execute_script("return document.body.dataset.state") in ("answered", "error"))
        status, api = call(facts_server, "v1/ask", {"question": question, "top_k": 3})
        assert status == 200 and browser.execute_script("return document.body.dataset.state") == "answered"
        best = browser.find_element(By.ID, "found").find_elements(By.TAG_NAME, "li")[0]
        return best, api["answers"][0]

    best, api = ask("When does the apple harvest in Kent begin?")
    assert (api["answer"], api["section"]) == ("late August", "Harvest")
    assert _text(best.find_element(By.CLASS_NAME, "doc")) == "Kent Orchards · orchards.html · § Harvest"

    best, api = ask("How many gales did the weather station record in 1890?")
    assert (api["answer"], api["page"], api["section"]) == ("261", 2, None)
    assert _text(best.find_element(By.CSS_SELECTOR, ".passage mark")) == "261"
    assert _text(best.find_element(By.CLASS_NAME, "doc")) == "Observatory Log · observatory.pdf · page 2"
    where = best.find_element(By.CLASS_NAME, "where")
    assert _text(where) == "page 2" and where.is_displayed()
    browser.save_screenshot("/tmp/rckit-page-where.png")


@pytest.fixture(scope="module")
def installed_server(tmp_path_factory):
    """``rckit serve`` with no model: the installed default, rckit's own reader; its URL."""
    proc, url = start_server([], tmp_path_factory.mktemp("installed") / "serve.log")
    yield url
    stop_server(proc)


@pytest.mark.browser
def test_the_installed_default_answers_the_pages_passage_and_abstains_where_it_is_silent(installed_server, browser):
    """The page as it opens, asked of `rckit serve` with no model: "Who deciphered the hieroglyphs?"
    is Champollion, marked; "Who won the 2018 World Cup?" is no answer, said in words with the
    sentence nearest to the question underlined. The default cannot explain yet: no "Inside"."""
    from selenium.webdriver.common.by import By

    browser.get(installed_server)
    by_id = lambda i: browser.find_element(By.ID, i)  # noqa: E731
    assert by_id("question").get_property("value") == "Who deciphered the hieroglyphs?"
    by_id("ask").click()  # the example passage the page opens with
    _wait(browser, lambda d: d.execute_script("return document.body.dataset.state") in ("answered", "error"))
    assert _text(browser.find_element(By.CSS_SELECTOR, "#answer mark")) == "Jean-François Champollion"
    assert "by minilm_reader" in _text(by_id("took")) and not by_id("inside-row").is_displayed()

    context = by_id("context").get_property("value")
    for question in ("Who won the 2018 World Cup?", "How much does the Rosetta Stone weigh?"):
        _ask(browser, None, question)
        status, api = post(installed_server, {"context": context, "question": question})
        first = api["answers"][0]
        assert status == 200 and first["answer"] == "" and first["no_answer_probability"] > 0.6, (question, first)
        assert not browser.find_elements(By.CSS_SELECTOR, "#answer mark")
        note = _text(browser.find_element(By.CSS_SELECTOR, "#answer .no-answer-note"))
        assert note.startswith(f"No answer in this passage ({100 * first['no_answer_probability']:.1f}% sure).")
        assert not by_id("inside-row").is_displayed()
    # The World Cup shares no word with the passage: nothing to underline. The stone's weight does:
    # the sentence that speaks of the stone, to check that it gives no weight.
    nearest = _text(browser.find_element(By.CSS_SELECTOR, "#answer .nearest"))
    assert nearest == first["reason"]["text"] and nearest.startswith("The Rosetta Stone is a slab")
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "page-default-abstains.png"))


@pytest.fixture(scope="module")
def qanet_server(tmp_path_factory):
    """``rckit serve --model qanet`` (its ONNX file where onnxruntime is here, explained with the
    ``.safetensors`` beside it); its URL."""
    proc, url = start_server(["--model", "qanet"], tmp_path_factory.mktemp("qanet") / "serve.log")
    yield url
    stop_server(proc)


@pytest.mark.browser
def test_the_page_looks_inside_an_answer(qanet_server, browser):
    """ "Inside" under an answer shows POST /v1/explain's page in a frame as tall as it: the answer
    boxed in the shaded passage, attention cells whose hover text names the two words and the weight."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    browser.get(qanet_server)
    by_id = lambda i: browser.find_element(By.ID, i)  # noqa: E731
    state = lambda d: d.execute_script("return document.body.dataset.state")  # noqa: E731
    assert not by_id("inside-button").is_displayed()  # no answer yet
    by_id("ask").click()  # the example passage the page opens with
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#answer mark"))
    answer = _text(browser.find_element(By.CSS_SELECTOR, "#answer mark"))
    assert not by_id("inside").is_displayed()

    by_id("inside-button").click()
    _wait(browser, lambda d: state(d) in ("explained", "error"), timeout=120)
    assert state(browser) == "explained" and not by_id("inside-error").is_displayed()
    frame = by_id("inside-frame")
    assert frame.is_displayed() and frame.get_attribute("sandbox") == "allow-same-origin"
    sizes = browser.execute_script(
        "const f = document.getElementById('inside-frame'); return {frame: f.clientHeight,"
        " page: f.contentDocument.documentElement.scrollHeight, inner: window.innerWidth,"
        " scroll: document.documentElement.scrollWidth, right: f.getBoundingClientRect().right};"
    )
    assert abs(sizes["frame"] - sizes["page"]) <= 2, sizes  # as tall as its page: nothing to scroll in it
    assert sizes["scroll"] <= sizes["inner"] and sizes["right"] <= sizes["inner"], sizes

    browser.switch_to.frame(frame)
    try:
        boxed = browser.find_element(By.CSS_SELECTOR, "p.text .answer")
        assert _text(boxed) == answer and boxed.get_attribute("title") == "the answer"
        assert "Q: Who deciphered the hieroglyphs?" in _text(browser.find_element(By.TAG_NAME, "h1"))
        cells = browser.find_elements(By.CSS_SELECTOR, ".v-c2q .grid td[title]")
        assert cells and all(c.get_attribute("title").startswith("passage \u201c") for c in cells[:5])
        cell = next(c for c in cells if c.is_displayed())
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", cell)  # the page's too
        ActionChains(browser).move_to_element(cell).perform()  # the browser's tooltip shows this text
        title = cell.get_attribute("title")
        assert " \u00b7 question \u201c" in title and " \u00b7 weight 0." in title, title
        assert not browser.execute_script("return typeof window.pwned !== 'undefined' || document.scripts.length")
    finally:
        browser.switch_to.default_content()

    # A new question closes the panel: it explained the answer before.
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1280, min(4000, height + 140))  # the whole page in the screenshot
    _wait(
        browser,
        lambda d: d.execute_script(  # refitted to the window: no scrollbar in the frame
            "const f = document.getElementById('inside-frame'); const p = f.contentDocument.documentElement;"
            "return p.scrollHeight <= f.clientHeight && p.scrollWidth <= f.clientWidth"
        ),
        timeout=10,
    )
    by_id("inside").location_once_scrolled_into_view
    browser.save_screenshot("/tmp/rckit-page-inside.png")
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "page-inside.png"))
    _ask(browser, None, "When was the stone found?")
    assert state(browser) == "answered" and not by_id("inside").is_displayed()


@pytest.fixture(scope="module")
def two_models_server(tmp_path_factory):
    """``rckit serve --model qanet,dcn``: two installed models, qanet the default; its URL."""
    proc, url = start_server(["--model", "qanet,dcn"], tmp_path_factory.mktemp("two-models") / "serve.log")
    yield url
    stop_server(proc)


@pytest.mark.browser
def test_the_page_chooses_a_model_and_compares_every_served_model(two_models_server, browser):
    """With two models served: a selector of both (the default chosen) whose choice answers; Compare
    asks each the same question and shows one row a model, its answer marked as the API gives it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    url = two_models_server
    browser.get(url)
    by_id = lambda i: browser.find_element(By.ID, i)  # noqa: E731
    state = lambda d: d.execute_script("return document.body.dataset.state")  # noqa: E731
    _wait(browser, lambda d: d.find_element(By.ID, "model-row").is_displayed())
    served = json.load(urllib.request.urlopen(url + "v1/models", timeout=10))["models"]
    select = Select(by_id("model-select"))
    assert [o.get_attribute("value") for o in select.options] == [m["name"] for m in served] == ["qanet", "dcn"]
    assert select.first_selected_option.get_attribute("value") == "qanet" and served[0]["default"]
    f1 = next((s["f1"] for s in served[0]["scores"] if "f1" in s), served[0]["dev_score"]["dev_f1"])
    assert _text(select.options[0]) == f"qanet · F1 {f1:.1f}"
    assert by_id("compare-button").is_displayed() and _text(by_id("model")) == " · models: qanet, dcn"

    # Compare, on the paragraph the page opens with: one row a model, in the server's order, each
    # answer marked in an excerpt of the passage around it.
    context, question = by_id("context").get_property("value"), by_id("question").get_property("value")
    by_id("compare-button").click()
    _wait(browser, lambda d: state(d) in ("compared", "error"))
    assert state(browser) == "compared" and not by_id("result").is_displayed()
    rows = browser.find_elements(By.CSS_SELECTOR, "#compare-rows .compare-row")
    assert [r.get_attribute("data-model") for r in rows] == ["qanet", "dcn"]
    for row in rows:
        name = row.get_attribute("data-model")
        status, api = post(url, {"context": context, "question": question, "model": name})
        best = api["answers"][0]
        assert status == 200 and api["model"] == name
        assert _text(row.find_element(By.CSS_SELECTOR, ".compare-name strong")) == name
        assert _text(row.find_element(By.CSS_SELECTOR, ".excerpt mark")) == best["answer"]
        excerpt = _text(row.find_element(By.CLASS_NAME, "excerpt")).strip("…")
        assert excerpt in context and len(excerpt) < len(context)  # the words around the answer, not all of it
        assert _text(row.find_element(By.CLASS_NAME, "prob")) == f"{best['score'] * 100:.1f}%"
        assert re.fullmatch(r"\d+ ms", _text(row.find_element(By.CLASS_NAME, "ms")))

    # Read at a glance: each row a few lines (an excerpt, not the paragraph), nothing sideways.
    sizes = browser.execute_script(
        "const rows = [...document.querySelectorAll('#compare-rows .compare-row')];"
        "return {rows: rows.map((r) => r.getBoundingClientRect().height), inner: window.innerWidth,"
        "        scroll: document.documentElement.scrollWidth, page: document.documentElement.scrollHeight,"
        "        line: parseFloat(getComputedStyle(rows[0]).lineHeight)};"
    )
    browser.set_window_size(1280, sizes["page"] + 150)  # the whole page in the screenshot
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "page-compare.png"))
    assert all(h <= 5 * sizes["line"] for h in sizes["rows"]) and sizes["scroll"] <= sizes["inner"], sizes

    # The chosen model answers, and the page says which; the comparison gives way to the answer.
    select.select_by_value("dcn")
    _ask(browser, CONTEXT, QUESTION)
    status, api = post(url, {"context": CONTEXT, "question": QUESTION, "top_k": 5, "model": "dcn"})
    assert status == 200 and api["model"] == "dcn" and state(browser) == "answered"
    assert _text(browser.find_element(By.CSS_SELECTOR, "#answer mark")) == api["answers"][0]["answer"]
    assert "by dcn" in _text(by_id("took")) and not by_id("compare").is_displayed()
