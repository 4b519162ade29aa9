"""Drawing an explanation (rckit.explain.png, .page, .write) from explanations made by hand: no model.

``qanet_example()`` and ``dcn_example()`` are realistic enough to look at; to see them:
``python -c "from tests.answering.test_explain_figure import save_examples; save_examples('/tmp')"``.
"""

from __future__ import annotations

import html
import json
import re
import struct
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from rckit.explain.common import focus, words
from rckit.explain.page import write_html
from rckit.explain.png import write_png
from rckit.explain.write import write_explanation
from rckit.model_files.errors import MissingPackage

EIFFEL = (
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is named "
    "after the engineer Gustave Eiffel, whose company designed and built the tower from 1887 to 1889. "
    'Locally nicknamed "La dame de fer", it was constructed as the centrepiece of the 1889 World\'s Fair, '
    "and to crown the centennial anniversary of the French Revolution."
)


STOPWORDS = {"the", "a", "and", "of", "in", "is", "was", "it", "to", "?", ".", ","}


def tokenize(text: str) -> tuple[list[str], list[list[int]]]:
    found = list(re.finditer(r"\w+(?:'\w+)?|[^\w\s]", text))
    return [m.group().lower() for m in found], [[m.start(), m.end()] for m in found]


def softmax(x, axis=-1):
    x = np.asarray(x, dtype=float)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def token_index(tokens: list[str], word: str, nth: int = 0) -> int:
    return [i for i, t in enumerate(tokens) if t == word][nth]


def make_example(
    model: str,
    context: str,
    question: str,
    answer: str,
    *,
    bumps_start: dict,
    bumps_end: dict,
    related: dict,
    salient: dict,
    kind: str | None = "context-query",
    decoder=None,
    null_prob: float | None = None,
    notes=(),
    seed: int = 0,
) -> dict:
    """An explanation with plausible numbers: probabilities peaked where ``bumps`` say, attention
    high between equal or ``related`` words, saliency from ``salient`` plus a little noise."""
    rng = np.random.default_rng(seed)
    ct, co = tokenize(context)
    qt, qo = tokenize(question)
    start_char = context.index(answer)
    first = next(i for i, (s, e) in enumerate(co) if s <= start_char < e)
    last = next(i for i, (s, e) in enumerate(co) if s < start_char + len(answer) <= e)
    scale = 1 - (null_prob or 0.0)

    def probs(bumps):
        logits = rng.normal(0, 0.6, len(ct)) - 2.0
        for i, v in bumps.items():
            logits[i] = v
        return (softmax(logits) * scale).tolist()

    start, end = probs(bumps_start), probs(bumps_end)
    attention = None
    if kind is not None:
        s = rng.normal(0, 0.5, (len(ct), len(qt)))
        for i, c in enumerate(ct):
            for j, q in enumerate(qt):
                if c == q and c not in STOPWORDS:
                    s[i, j] += 4.0
                elif q in related.get(c, ()):
                    s[i, j] += 2.5
        attention = {
            "kind": kind,
            "context_to_query": softmax(s, axis=1).tolist(),
            "query_to_context": softmax(1.3 * s, axis=0).tolist(),
        }
    ig_c = rng.normal(0, 0.03, len(ct))
    ig_q = rng.normal(0, 0.03, len(qt))
    for (side, word, nth), v in salient.items():
        (ig_q if side == "q" else ig_c)[token_index(qt if side == "q" else ct, word, nth)] = v
    score = float(np.log(start[first]) + np.log(end[last]) + 9.0)
    total = float(ig_c.sum() + ig_q.sum())
    answer_dict = {
        "answer": answer,
        "score": start[first] * end[last],
        "start": start_char,
        "end": start_char + len(answer),
        "no_answer_probability": null_prob,
    }
    return {
        "model": model,
        "context": context,
        "question": question,
        "window": {"start": 0, "end": len(context)},
        "context_tokens": ct,
        "context_offsets": co,
        "question_tokens": qt,
        "question_offsets": qo,
        "answer": answer_dict,
        "answer_tokens": [first, last],
        "start_probs": start,
        "end_probs": end,
        "null_prob": null_prob,
        "attention": attention,
        "decoder": decoder,
        "saliency": {
            "gradient_x_input": {
                "context": (ig_c * 1.4 + rng.normal(0, 0.05, len(ct))).tolist(),
                "question": (ig_q * 1.4 + rng.normal(0, 0.05, len(qt))).tolist(),
            },
            "integrated_gradients": {
                "context": ig_c.tolist(),
                "question": ig_q.tolist(),
                "steps": 32,
                "score": score,
                "baseline_score": score - total - 0.04,
                "sum": total,
            },
        },
        "notes": list(notes),
    }


def qanet_example(null_prob: float | None = 0.03) -> dict:
    ct, _ = tokenize(EIFFEL)
    t = lambda w, n=0: token_index(ct, w, n)  # noqa: E731
    return make_example(
        "qanet",
        EIFFEL,
        "Whose company designed and built the Eiffel Tower?",
        "Gustave Eiffel",
        bumps_start={t("gustave"): 4.6, t("engineer"): 1.9, t("the", 2): 0.6, t("eiffel", 1): 0.8},
        bumps_end={t("eiffel", 1): 4.7, t("engineer"): 1.2, t("tower", 1): 1.1, t("company"): 0.5},
        related={
            "engineer": ("whose", "built"),
            "gustave": ("whose",),
            "constructed": ("built",),
            "named": ("whose",),
            "lattice": ("tower",),
        },
        salient={
            ("c", "gustave", 0): 0.52,
            ("c", "eiffel", 1): 0.61,
            ("c", "engineer", 0): 0.34,
            ("c", "whose", 0): 0.41,
            ("c", "company", 0): 0.22,
            ("c", ",", 2): 0.12,
            ("c", "1887", 0): -0.18,
            ("c", "paris", 0): -0.11,
            ("c", "revolution", 0): -0.07,
            ("q", "whose", 0): 0.47,
            ("q", "company", 0): 0.29,
            ("q", "built", 0): 0.12,
            ("q", "designed", 0): 0.09,
            ("q", "eiffel", 0): -0.14,
            ("q", "tower", 0): 0.05,
        },
        null_prob=null_prob,
    )


def dcn_example() -> dict:
    ct, _ = tokenize(EIFFEL)
    t = lambda w, n=0: token_index(ct, w, n)  # noqa: E731
    rng = np.random.default_rng(1)

    def step(i, peaks_s, peaks_e):
        def dist(peaks):
            logits = rng.normal(0, 0.5, len(ct)) - 2.0
            for k, v in peaks.items():
                logits[k] = v
            return softmax(logits).tolist()

        s, e = dist(peaks_s), dist(peaks_e)
        return {
            "iteration": i - 1,
            "start_probs": s,
            "end_probs": e,
            "start": int(np.argmax(s)),
            "end": int(np.argmax(e)),
        }  # iterations count from 0, as Reader.explain gives them

    # The decoder first reads the year of the World's Fair, then moves to the span of the building years.
    decoder = [
        step(1, {t("1889", 1): 2.6, t("1887"): 2.1}, {t("1889", 1): 2.9, t("1889"): 2.3}),
        step(2, {t("1887"): 3.4, t("1889", 1): 1.9}, {t("1889"): 3.3, t("1889", 1): 1.5}),
        step(3, {t("1887"): 4.3, t("1889", 1): 1.1}, {t("1889"): 4.2, t("1889", 1): 0.9}),
    ]
    ex = make_example(
        "dcn",
        EIFFEL,
        "In which years was the Eiffel Tower built?",
        "1887 to 1889",
        bumps_start={},
        bumps_end={},
        related={"constructed": ("built",), "1887": ("years",), "1889": ("years",), "designed": ("built",)},
        salient={
            ("c", "1887", 0): 0.58,
            ("c", "1889", 0): 0.49,
            ("c", "built", 0): 0.31,
            ("c", "from", 0): 0.27,
            ("c", "1889", 1): -0.21,
            ("c", "fair", 0): -0.12,
            ("q", "years", 0): 0.44,
            ("q", "built", 0): 0.36,
            ("q", "which", 0): 0.12,
            ("q", "eiffel", 0): 0.06,
        },
        kind="coattention",
        decoder=decoder,
        seed=2,
    )
    ex["start_probs"], ex["end_probs"] = decoder[-1]["start_probs"], decoder[-1]["end_probs"]
    ex["answer"]["score"] = ex["start_probs"][t("1887")] * ex["end_probs"][t("1889")]
    assert ex["answer_tokens"] == [decoder[-1]["start"], decoder[-1]["end"]]
    return ex


def lstm_example() -> dict:
    context = "Tom went to the market. He bought three apples and a loaf of bread."
    ex = make_example(
        "deep_lstm_reader",
        context,
        "What did Tom buy?",
        "three apples",
        bumps_start={8: 3.0},
        bumps_end={9: 3.0},
        related={},
        salient={("q", "buy", 0): 0.4},
        kind=None,
        notes=["the Deep LSTM Reader has no attention to show"],
    )
    return ex


def save_examples(directory: str | Path = "/tmp") -> list[Path]:
    """The examples for people to look at: explain-qanet.png/.html and explain-dcn.png/.html."""
    d = Path(directory)
    return [
        write_explanation(qanet_example(), d / "explain-qanet.png"),
        write_explanation(qanet_example(), d / "explain-qanet.html"),
        write_explanation(dcn_example(), d / "explain-dcn.png"),
        write_explanation(dcn_example(), d / "explain-dcn.html"),
    ]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


EXAMPLES = {"qanet": qanet_example, "dcn": dcn_example, "lstm": lstm_example}


@pytest.mark.parametrize("name", EXAMPLES)
def test_png_is_written_with_a_height_that_follows_its_views(name, tmp_path):
    ex = EXAMPLES[name]()
    out = write_explanation(ex, tmp_path / "e.png")
    width, height = png_size(out)
    assert 1000 <= width <= 2000 and 300 <= height <= 4000
    import matplotlib.image

    pixels = matplotlib.image.imread(out)
    assert pixels.shape[:2] == (height, width)
    assert pixels[..., :3].std() > 0.05  # drawn on, not blank
    # Fewer views, a shorter figure.
    plain = dict(ex, attention=None, decoder=None)
    write_png(plain, tmp_path / "plain.png")
    plain_height = png_size(tmp_path / "plain.png")[1]
    if name == "lstm":
        assert plain_height == height
    else:
        assert plain_height < height


def test_png_of_a_long_context_shows_the_words_around_the_answer(tmp_path):
    ex = qanet_example()
    n = len(ex["context_tokens"])
    assert focus(ex, limit=n) == (0, n)
    first, last = ex["answer_tokens"]
    for limit in (60, 20, 2):
        lo, hi = focus(ex, limit=limit)
        assert hi - lo == limit and lo <= first <= last < hi
    dcn = dcn_example()
    lo, hi = focus(dcn, limit=30)
    assert all(lo <= it[k] < hi for it in dcn["decoder"] for k in ("start", "end"))
    # A passage of several windows' length: the heat maps keep to 60 words, the figure stays readable.
    long = qanet_example()
    for key in ("context_tokens", "context_offsets", "start_probs", "end_probs"):
        long[key] = long[key] * 4
    for key in ("context_to_query", "query_to_context"):
        long["attention"][key] = long["attention"][key] * 4
    long["saliency"]["integrated_gradients"]["context"] = long["saliency"]["integrated_gradients"]["context"] * 4
    write_png(long, tmp_path / "long.png")
    assert png_size(tmp_path / "long.png")[0] < 2000


def test_words_keep_the_text_as_written():
    ws = words(
        "Hello, World's  fair.\n\nNext",
        ["hello", ",", "world's", "fair", ".", "next"],
        [[0, 5], [5, 6], [7, 14], [16, 20], [20, 21], [23, 27]],
    )
    assert [(w.text, w.sep) for w in ws] == [
        ("Hello", ""),
        (",", ""),
        ("World's", " "),
        ("fair", " "),
        (".", ""),
        ("Next", "\n"),
    ]


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


@pytest.mark.parametrize("name", EXAMPLES)
def test_html_is_one_page_with_every_word_and_the_answer_marked(name, tmp_path):
    ex = EXAMPLES[name]()
    write_explanation(ex, tmp_path / "e.html")
    assert [p.name for p in tmp_path.iterdir()] == ["e.html"]
    page = (tmp_path / "e.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert not re.search(r"\b(src|href)\s*=", page, re.I)
    assert "@import" not in page and "url(" not in page and "<link" not in page
    for s, e in ex["context_offsets"]:
        assert f">{html.escape(ex['context'][s:e])}</span>" in page
    marked = re.findall(r'<span class="answer"[^>]*>(.*?</span>)</span>', page)
    assert marked and all(text_of(m) == ex["answer"]["answer"] for m in marked)
    assert ('id="att-c2q"' in page) == (ex["attention"] is not None)
    assert ('id="dec-all"' in page) == (ex["decoder"] is not None)
    for note in ex["notes"]:
        assert html.escape(note) in page
    # The attention grid's cells give their two words and the weight on hover.
    if ex["attention"] is not None:
        q = ex["question_tokens"].index("eiffel")
        c = ex["context_tokens"].index("eiffel")
        weight = ex["attention"]["context_to_query"][c][q]
        assert f'title="passage “Eiffel” · question “Eiffel” · weight {weight:.3f}"' in page
    if ex["decoder"] is not None:
        assert page.count('class="pick') == 2 * len(ex["decoder"])


def test_a_decoder_step_at_the_null_is_no_answer(tmp_path):
    ex = dcn_example()
    ex["model"] = "dcn_plus"
    ex["decoder"][0]["start"] = ex["decoder"][0]["end"] = -1  # DCN+ trained on SQuAD v2.0 abstained first
    write_png(ex, tmp_path / "e.png")
    assert png_size(tmp_path / "e.png")[0] > 1000
    write_html(ex, tmp_path / "e.html")
    page = (tmp_path / "e.html").read_text(encoding="utf-8")
    assert "iteration 1: no answer (the null)" in page
    assert "iteration 3: words 38–40 “1887 to 1889”" in page
    assert page.count('class="pick') == 2 * len(ex["decoder"]) - 2


def test_html_escapes_the_text_it_is_given(tmp_path):
    ex = lstm_example()
    evil = '<script>alert("x")</script> <img src=x onerror=alert(1)> "quoted" & more'
    ex["context"] = evil + " " + ex["context"]
    shift = len(evil) + 1
    tokens, offsets = tokenize(ex["context"])
    ex["context_tokens"], ex["context_offsets"] = tokens, offsets
    n = len(tokens)
    ex["start_probs"] = ex["end_probs"] = [1 / n] * n
    ex["saliency"]["integrated_gradients"]["context"] = [0.0] * n
    ex["saliency"]["gradient_x_input"]["context"] = [0.1] * n
    ex["answer"]["start"] += shift
    ex["answer"]["end"] += shift
    first = next(i for i, (s, _) in enumerate(offsets) if s == ex["answer"]["start"])
    ex["answer_tokens"] = [first, first + 1]
    ex["question"] = "</title><script>alert(2)</script>?"
    ex["notes"] = ["<b>not bold</b>"]
    write_html(ex, tmp_path / "e.html")
    page = (tmp_path / "e.html").read_text(encoding="utf-8")
    assert "<script" not in page.lower() and "<img" not in page and "<b>not bold" not in page
    assert "&lt;script&gt;" in page and "&lt;b&gt;not bold&lt;/b&gt;" in page
    tags = Tags()
    tags.feed(page)
    assert tags.names <= {
        "html",
        "head",
        "meta",
        "title",
        "style",
        "body",
        "header",
        "h1",
        "h2",
        "p",
        "b",
        "ul",
        "li",
        "section",
        "span",
        "br",
        "div",
        "label",
        "input",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
    }
    assert not [a for a in tags.attributes if a.startswith("on") or a in ("src", "href", "action")]
    assert ex["question"] in tags.text and evil.split()[0] in tags.text  # shown as text, as given


class Tags(HTMLParser):
    """The element names, attribute names and text of a page."""

    def __init__(self):
        super().__init__()
        self.names, self.attributes, self.text = set(), set(), ""

    def handle_starttag(self, tag, attrs):
        self.names.add(tag)
        self.attributes |= {name for name, _ in attrs}

    def handle_data(self, data):
        self.text += data


def test_json_round_trips(tmp_path):
    ex = dcn_example()
    ex["context"] = "Der Eiffelturm – « la dame de fer » – " + ex["context"]
    write_explanation(ex, tmp_path / "e.json")
    text = (tmp_path / "e.json").read_text(encoding="utf-8")
    assert "«" in text and json.loads(text) == ex


@pytest.mark.parametrize("name", ["e.svg", "e.txt", "e"])
def test_other_suffixes_are_refused(name, tmp_path):
    with pytest.raises(ValueError, match=r"\.png, \.html or \.json"):
        write_explanation(qanet_example(), tmp_path / name)
    assert list(tmp_path.iterdir()) == []


def test_not_an_explanation_is_refused(tmp_path):
    ex = qanet_example()
    del ex["saliency"]
    with pytest.raises(ValueError, match="saliency"):
        write_explanation(ex, tmp_path / "e.html")


def test_png_without_matplotlib_names_the_install(tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingPackage, match=r"pip install 'rckit\[torch\]'") as e:
        write_explanation(qanet_example(), tmp_path / "e.png")
    assert "\n" not in str(e.value)
    write_explanation(qanet_example(), tmp_path / "e.html")  # HTML needs no matplotlib


def test_explain_figure_imports_no_torch_nor_matplotlib():
    import subprocess

    code = "import sys, rckit.explain.write; print([m for m in ('torch', 'matplotlib') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
