"""rckit.Reader: answers with exact character offsets, top-k, long documents in windows, batches.

Windows and offsets are tested with :class:`MarkerModel`, a stand-in span model whose answer is
known: start logit 20 on one word, end logit 20 on another, 0 elsewhere, so the answer is the
span from the first word to the second wherever a window holds both (probability near 1), and
something of probability about 1/window anywhere else. Batching is tested on a tiny trained
QANet (``tiny_run`` in conftest), whose answers are arbitrary but must not depend on batching.
"""

import json
import math

import pytest

import rckit
from rckit import kernels
from rckit.answering.reader import Reader, windows
from rckit.answering.torch_backend import TorchModel
from rckit.data.vocab import SPECIALS, Vocab, Vocabularies
from rckit.layers.masking import mask_logits
from rckit.models.contract import ReadingModel, SpanOutput

FILLER = "the river runs past old mills and quiet farms before it reaches a grey sea".split()


def marker_vocabs() -> Vocabularies:
    words = SPECIALS + sorted(set(FILLER) | {"zebra", "crossing", "where", "is"})
    chars = SPECIALS + sorted(set("".join(words[2:])))
    return Vocabularies(Vocab(words, len(words)), Vocab(chars, len(chars)), lowercase=True, max_word_len=16)


class MarkerModel(ReadingModel):
    """Start logit 20 on ``start_word``, end logit 20 on ``end_word``, 0 on every other token."""

    def __init__(self, vocabs: Vocabularies, start_word: str = "zebra", end_word: str = "crossing"):
        super().__init__(None)
        self.start_id, self.end_id = vocabs.words.get(start_word), vocabs.words.get(end_word)
        self.batches = []  # (B, Tc) of every forward

    def forward(self, batch):
        self.batches.append(tuple(batch.c_words.shape))
        start = (batch.c_words == self.start_id).float() * 20.0  # (B, Tc)
        end = (batch.c_words == self.end_id).float() * 20.0  # (B, Tc)
        return SpanOutput(mask_logits(start, batch.c_mask), mask_logits(end, batch.c_mask))


def marker_reader(window: int = 40) -> Reader:
    vocabs = marker_vocabs()
    return Reader(TorchModel(MarkerModel(vocabs)), vocabs, window=window)


def document(n_words: int, fact_at: int) -> str:
    """``n_words`` filler words with "zebra crossing" as words ``fact_at`` and ``fact_at + 1``."""
    words = [FILLER[i % len(FILLER)] for i in range(n_words)]
    words[fact_at : fact_at + 2] = ["zebra", "crossing"]
    return " ".join(words)


def assert_slices(context: str, answers: list[dict]) -> None:
    for a in answers:
        assert context[a["start"] : a["end"]] == a["answer"], a
        assert 0.0 <= a["score"] <= 1.0
    assert [a["score"] for a in answers] == sorted((a["score"] for a in answers), reverse=True)


# ------------------------------------------------------------------ offsets, top-k, bad input


def test_offsets_slice_the_original_text_whatever_its_spacing_and_script():
    reader = marker_reader()
    context = "Café naïve — 北京 is far.\n\n  Where the river  meets the sea:\tZEBRA \u00a0 \n crossing\n東京。"
    [best] = reader.answer(context, "where is the zebra crossing ?")
    assert best["answer"] == "ZEBRA \u00a0 \n crossing"  # the text as given: case, no-break space, newline
    assert context[best["start"] : best["end"]] == best["answer"] and best["score"] > 0.99
    top = reader.answer(context, "where is the zebra crossing ?", top_k=5)
    assert len(top) == 5 and top[0] == best and len({(a["start"], a["end"]) for a in top}) == 5
    assert_slices(context, top)


def test_a_list_of_questions_gives_a_list_of_answer_lists():
    reader = marker_reader()
    context = "the zebra crossing is past the mills."
    got = reader.answer(context, ["where is the zebra crossing ?", "where is it ?"], top_k=2)
    assert len(got) == 2 and all(len(g) == 2 for g in got)
    assert got[0][0]["answer"] == got[1][0]["answer"] == "zebra crossing"


@pytest.mark.parametrize(
    "context, question, message",
    [
        ("", "what ?", "the context is empty"),
        ("   \n\t", "what ?", "the context is empty"),
        ("the river.", "", "the question is empty"),
        ("the river.", " ?!. ", "the question has no letter or digit, only punctuation"),
        ("— … !", "what ?", "the context has no letter or digit"),
    ],
)
def test_nothing_to_read_or_ask_is_a_clear_error(context, question, message):
    with pytest.raises(ValueError, match=message):
        marker_reader().answer(context, question)


def test_a_bad_pair_in_a_batch_is_named():
    with pytest.raises(ValueError, match=r"the question is empty: nothing to answer \(pair 1\)"):
        marker_reader().answer_batch([("the river.", "where ?"), ("the sea.", "  ")])


def test_bad_settings_are_refused():
    reader = marker_reader()
    for kwargs, message in (
        ({"top_k": 0}, "top_k"),
        ({"max_answer_len": 0}, "max_answer_len"),
        ({"stride": 0}, "stride"),
        ({"stride": 41}, "stride"),
    ):
        with pytest.raises(ValueError, match=message):
            reader.answer("the river.", "where ?", **kwargs)


# ------------------------------------------------------------------ long documents


def test_windows_cover_the_document_and_end_at_its_end():
    assert windows(10, 40, 20) == [(0, 10)]
    assert windows(40, 40, 20) == [(0, 40)]
    assert windows(100, 40, 20) == [(0, 40), (20, 60), (40, 80), (60, 100)]
    assert windows(95, 40, 30) == [(0, 40), (30, 70), (55, 95)]


def test_an_answer_across_a_window_edge_is_found_in_the_overlap():
    reader = marker_reader(window=40)
    context = document(200, fact_at=39)  # "zebra" is the last token of window 0, "crossing" opens window 2
    [best] = reader.answer(context, "where is the zebra crossing ?", stride=20)
    assert best["answer"] == "zebra crossing" and best["score"] > 0.99
    # Windows that only touch cut the answer in two: neither holds it whole.
    [cut] = reader.answer(context, "where is the zebra crossing ?", stride=40)
    assert cut["answer"] != "zebra crossing" and cut["score"] < 0.5
    assert_slices(context, [best, cut])


def test_an_answer_in_the_last_window_of_a_long_document_is_found():
    reader = marker_reader(window=40)
    context = document(1000, fact_at=996)
    [best] = reader.answer(context, "where is the zebra crossing ?")
    assert best["answer"] == "zebra crossing" and context[best["start"] : best["end"]] == "zebra crossing"
    assert best["start"] == context.rindex("zebra")
    n_windows = len(windows(1000, 40, 20))
    assert sum(b for b, _ in reader.model.model.batches) == n_windows and all(
        t <= 40 for _, t in reader.model.model.batches
    )


def test_a_span_found_in_several_windows_counts_once_with_its_best_score():
    reader = marker_reader(window=40)
    context = document(120, fact_at=60)  # inside four windows at stride 10
    top = reader.answer(context, "where is the zebra crossing ?", top_k=10, stride=10)
    spans = [(a["start"], a["end"]) for a in top]
    assert len(top) == 10 and len(set(spans)) == 10
    assert [a["answer"] for a in top].count("zebra crossing") == 1 and top[0]["answer"] == "zebra crossing"
    assert_slices(context, top)


def test_a_20000_word_document_is_answered():
    reader = marker_reader(window=400)
    filler = " ".join(FILLER[i % len(FILLER)] for i in range(200))
    context = "\n\n".join(document(200, fact_at=150) if p == 73 else filler for p in range(100))
    [best] = reader.answer(context, "where is the zebra crossing ?")
    assert best["answer"] == "zebra crossing"
    assert best["start"] == context.index("zebra") and len(context.split()) == 20000


def test_a_plan_of_whole_contexts_reads_each_in_one_window():
    """What evaluation asks for: each context whole, every window read, each pair's best span
    and (for a model that can abstain) its null margin."""
    reader = marker_reader(window=40)
    long, short = document(120, fact_at=90), "the zebra crossing is past the mills."
    pairs = [(long, "where is the zebra crossing ?"), (short, "where is it ?"), (long, "where is it ?")]
    job = reader.plan(pairs, whole=True)
    assert [[(lo, hi) for _, _, lo, hi in group] for group in job.windows] == [[(0, 120)] * 2, [(0, 8)]]
    assert len(reader.plan(pairs).windows) > 2 and reader.window == 40  # the reader's own plans are unchanged
    reader.batch_size = 2
    assert [len(items) for items in reader.batches(job)] == [2, 1]
    reader.read_all(job)
    assert job.best_spans() == [("zebra crossing", None)] * 3  # a model that cannot abstain has no margin
    assert [a[0]["answer"] for a in job.answers()] == ["zebra crossing"] * 3


# ------------------------------------------------------------------ a trained model, batched


@pytest.fixture(scope="module")
def reader(tiny_run):
    return Reader.load(tiny_run)


CONTEXTS = [
    "alpha beta gamma delta epsilon zeta eta.",
    "theta iota kappa lambda mu alpha beta gamma delta, epsilon zeta eta theta.",
    " ".join("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split() * 6) + ".",
]
QUESTIONS = ["what follows alpha ?", "what follows gamma ?", "what follows kappa ?", "where is mu ?"]


def test_info_describes_the_model_as_json(reader, tiny_run):
    info = json.loads(json.dumps(reader.info))
    assert info["model"] == "qanet" and info["source"] == str((tiny_run / "best.pt").resolve())
    assert info["window"] == reader.window == 400 and info["decode"] == {
        "max_answer_len": 30,
        "no_answer_threshold": 0.0,
    }
    assert info["parameters"] == sum(p.numel() for p in reader.model.model.parameters()) > 0
    assert info["config"]["d_model"] == 16 and "dev_f1" in info["dev_score"]


def test_many_questions_per_context_give_the_answers_of_one_at_a_time(reader, monkeypatch):
    monkeypatch.setattr(reader, "window", 16)  # the third context is read in windows
    pairs = [(c, q) for q in QUESTIONS for c in CONTEXTS]  # interleaved: the batches regroup them
    with kernels.use("all"):
        together = reader.answer_batch(pairs, top_k=3)
        alone = [reader.answer_batch([p], top_k=3)[0] for p in pairs]
    for (context, _), got, want in zip(pairs, together, alone):
        assert [(a["answer"], a["start"], a["end"]) for a in got] == [(a["answer"], a["start"], a["end"]) for a in want]
        assert [a["score"] for a in got] == pytest.approx([a["score"] for a in want], rel=1e-4, abs=1e-6)
        assert_slices(context, got)


def test_each_context_is_tokenized_once_and_encoded_once_per_batch(reader, monkeypatch):
    import rckit.data.prepare as prepare

    model = reader.model.model
    tokenized, embedded, encoded = [], [], []
    tokenize = prepare.tokenize
    monkeypatch.setattr(prepare, "tokenize", lambda text: tokenized.append(text) or tokenize(text))
    embed, encode = model.embed.word_features, model.emb_enc.forward
    monkeypatch.setattr(model.embed, "word_features", lambda w, c: embedded.append(tuple(w.shape)) or embed(w, c))
    monkeypatch.setattr(model.emb_enc, "forward", lambda x, *a: encoded.append(x.shape[0]) or encode(x, *a))
    pairs = [(CONTEXTS[i % 2], q) for i, q in enumerate(QUESTIONS * 2)]
    reader.answer_batch(pairs)
    assert tokenized.count(CONTEXTS[0]) == tokenized.count(CONTEXTS[1]) == 1
    assert encoded == [2, 8]  # one forward: two distinct contexts encoded, then the eight questions
    words = {w.lower() for c, q in pairs for w in tokenize(c)[0] + tokenize(q)[0]}
    assert len(embedded) == 1 and embedded[0][0] == 1 and embedded[0][1] <= 1 + len(words)  # each token once


def test_a_small_batch_size_keeps_a_contexts_questions_together(reader, monkeypatch):
    monkeypatch.setattr(reader, "batch_size", 4)
    seen = []
    answer = reader.model.model.answer_pass

    def counting(words, chars, c_tokens, c_mask, q_tokens, q_mask, q_context):
        seen.append((len(q_context), len(c_tokens)))
        return answer(words, chars, c_tokens, c_mask, q_tokens, q_mask, q_context)

    monkeypatch.setattr(reader.model.model, "answer_pass", counting)
    pairs = [(CONTEXTS[0], q) for q in QUESTIONS[:3]] + [(CONTEXTS[1], q) for q in QUESTIONS[:3]]
    reader.answer_batch(pairs)
    assert seen == [(3, 1), (3, 1)]  # not 4 + 2: a context's questions do not straddle batches


def test_chinese_and_messy_text_is_answered_inside_the_text(reader):
    for context in (
        "北京是中国的首都，也是政治和文化中心。北京有很多名胜古迹，比如故宫和长城。",
        "  alpha\n\nbeta\t\tgamma  — délta “epsilon” zeta…\n",
        "Ünïcödé alpha 𝔘𝔫𝔦 beta 👍 gamma.",
    ):
        answers = reader.answer(context, "what follows alpha ?", top_k=5)
        assert answers and answers[0]["answer"]
        assert_slices(context, answers)


# ------------------------------------------------------------------ the default model and rckit.answer


def test_without_a_default_model_the_error_says_how_to_get_one(monkeypatch, tmp_path):
    monkeypatch.delenv("RCKIT_MODEL", raising=False)
    monkeypatch.setattr("rckit.model_files.source.BUNDLED", tmp_path / "minilm_reader-squad.safetensors")
    with pytest.raises(FileNotFoundError, match="no default model is installed.*RCKIT_MODEL=FILE") as e:
        Reader.load()
    assert "\n" not in str(e.value)
    monkeypatch.setenv("RCKIT_MODEL", str(tmp_path / "gone.safetensors"))
    with pytest.raises(FileNotFoundError, match="RCKIT_MODEL=.*gone.safetensors: no such file"):
        Reader.load()


def test_rckit_answer_uses_rckit_model(monkeypatch, tiny_export):
    monkeypatch.setenv("RCKIT_MODEL", str(tiny_export))
    assert rckit.Reader is Reader
    assert Reader.load().info["source"] == str(tiny_export.resolve())
    [best] = rckit.answer("alpha beta gamma delta.", "what follows alpha ?")
    assert set(best) == {"answer", "score", "start", "end", "no_answer_probability"} and best["answer"]
    assert rckit._reader.cache_info().currsize >= 1
    again = rckit.answer("alpha beta gamma delta.", ["what follows alpha ?", "what follows beta ?"], top_k=2)
    assert len(again) == 2 and {k: again[0][0][k] for k in ("answer", "start", "end")} == {
        k: best[k] for k in ("answer", "start", "end")
    }
    assert again[0][0]["score"] == pytest.approx(best["score"], rel=1e-4)  # batch of 2: another summation order
    mine = Reader.load(tiny_export)
    assert rckit.answer("alpha beta gamma delta.", "what follows alpha ?", model=mine) == [best]


def test_import_rckit_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, rckit; print('torch' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )


def test_scores_are_span_probabilities(reader):
    context = CONTEXTS[1]
    answers = reader.answer(context, "what follows alpha ?", top_k=200, max_answer_len=3)
    assert sum(a["score"] for a in answers) <= 1.0 + 1e-5
    assert all(math.isfinite(a["score"]) for a in answers)


def test_planning_requests_together_answers_each_as_alone(reader, monkeypatch):
    """Reader.plan_many tokenizes several requests in one pass (a context two of them ask about
    once); each job, read with another's windows in the same forwards, answers as its own plan."""
    monkeypatch.setattr(reader, "window", 16)  # the third context is read in windows
    requests = [
        ([(CONTEXTS[0], QUESTIONS[0]), (CONTEXTS[2], QUESTIONS[1])], 2, None),
        ([(CONTEXTS[2], QUESTIONS[2])], 1, 3),
        ([(CONTEXTS[0], "   ")], 1, None),
    ]  # refused, alone
    jobs = reader.plan_many(requests)
    assert isinstance(jobs[2], ValueError) and "question is empty" in str(jobs[2])
    assert jobs[0].arrays is jobs[1].arrays  # one tokenizing pass
    parts = [(job, [item for group in job.windows for item in group]) for job in jobs[:2]]
    reader.read(parts)  # one forward over both requests' windows
    for job, (pairs, top_k, max_answer_len) in zip(jobs[:2], requests):
        for got, want in zip(job.answers(), reader.answer_batch(pairs, top_k, max_answer_len)):
            assert [(a["answer"], a["start"], a["end"]) for a in got] == [
                (a["answer"], a["start"], a["end"]) for a in want
            ]
            assert [a["score"] for a in got] == pytest.approx([a["score"] for a in want], rel=1e-4, abs=1e-6)
