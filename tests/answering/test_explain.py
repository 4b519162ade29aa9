"""Reader.explain and ``rckit explain``: the probabilities the decoder read, the attention, DCN's
decoder iterations, saliency, long documents, the command, and the ONNX refusal.

Span models are built untrained at the tiny sizes of the contract test (their answers are arbitrary,
but an explanation must agree with whatever they answer); the command runs on ``tiny_run``.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from rckit.answering.decoding import best_spans
from rckit.answering.explain import recorded_attention
from rckit.answering.reader import Reader
from rckit.answering.torch_backend import TorchModel
from rckit.cli import main
from rckit.data.embeddings import EmbeddingInfo
from rckit.layers import coattention
from rckit.layers.coattention import Coattention
from rckit.layers.embedding import PartiallyFrozenEmbedding
from rckit.layers.masking import mask_logits
from rckit.models import MODELS
from rckit.models.contract import ReadingModel, SpanOutput
from rckit.models.dcn import DynamicDecoder
from tests.answering.test_reader import FILLER, marker_vocabs
from tests.conftest import TINY
from tests.model_files.test_bundled import QANET, QANET_ONNX

KEYS = {
    "model",
    "context",
    "question",
    "window",
    "context_tokens",
    "context_offsets",
    "question_tokens",
    "question_offsets",
    "answer",
    "answer_tokens",
    "start_probs",
    "end_probs",
    "null_prob",
    "attention",
    "decoder",
    "saliency",
    "notes",
}
SPAN_MODELS = ("qanet", "dcn", "dcn_plus", "deep_lstm_reader")
CONTEXT = "the river runs past old mills and quiet farms before it reaches a grey sea."
QUESTION = "where is the river ?"


def tiny_reader(name: str, no_answer: bool = False, window: int = 400, seed: int = 0, **config) -> Reader:
    """An untrained ``name`` at its contract-test size, on the marker vocabularies."""
    vocabs = marker_vocabs()
    g = torch.Generator().manual_seed(0)
    emb = EmbeddingInfo(torch.randn(len(vocabs.words), 6, generator=g), n_trainable_words=4, n_chars=len(vocabs.chars))
    cfg_cls, model_cls = MODELS[name]
    torch.manual_seed(seed)
    model = model_cls(cfg_cls(**{**TINY[(name, "span")], **config}, no_answer=no_answer), emb)
    return Reader(TorchModel(model), vocabs, window=window, info={"model": name})


def shapes_agree(e: dict) -> None:
    """Every per-token list is as long as its tokens, and the offsets slice the texts as given."""
    assert set(e) == KEYS
    Tc, Tq = len(e["context_tokens"]), len(e["question_tokens"])
    assert len(e["context_offsets"]) == len(e["start_probs"]) == len(e["end_probs"]) == Tc > 0
    assert len(e["question_offsets"]) == Tq > 0
    assert [e["context"][s:t] for s, t in e["context_offsets"]] == e["context_tokens"]
    assert [e["question"][s:t] for s, t in e["question_offsets"]] == e["question_tokens"]
    assert e["window"] == {"start": e["context_offsets"][0][0], "end": e["context_offsets"][-1][1]}
    for kind in ("gradient_x_input", "integrated_gradients"):
        got = e["saliency"][kind]
        assert len(got["context"]) == Tc and len(got["question"]) == Tq
        assert all(math.isfinite(v) for v in got["context"] + got["question"])
    if e["attention"] is not None:
        for key in ("context_to_query", "query_to_context"):
            assert np.array(e["attention"][key]).shape == (Tc, Tq)
    assert json.loads(json.dumps(e)) == e  # JSON as it is


@pytest.mark.parametrize("no_answer", [False, True], ids=["v1", "no-answer"])
@pytest.mark.parametrize("name", SPAN_MODELS)
def test_the_probabilities_are_what_the_decoder_read_and_agree_with_the_answer(name, no_answer):
    reader = tiny_reader(name, no_answer)
    e = reader.explain(CONTEXT, QUESTION, steps=4)
    shapes_agree(e)
    assert e["model"] == name and e["answer"] == reader.answer(CONTEXT, QUESTION)[0]
    p_start, p_end = np.array(e["start_probs"]), np.array(e["end_probs"])
    if no_answer:  # the softmaxes run over [null, tokens]: the tokens hold what the null does not
        assert e["null_prob"] == pytest.approx((1 - p_start.sum()) * (1 - p_end.sum()), rel=1e-4)
        assert e["answer"]["no_answer_probability"] == pytest.approx(e["null_prob"], rel=1e-4)
    else:
        assert p_start.sum() == pytest.approx(1.0, abs=1e-5) and p_end.sum() == pytest.approx(1.0, abs=1e-5)
        assert e["null_prob"] is None
    best = best_spans(
        np.log(p_start)[None], np.log(p_end)[None], np.ones((1, len(p_start)), bool), reader.decode.max_answer_len
    )
    if e["answer"]["start"] is None:
        assert e["answer_tokens"] is None
    else:
        s, t = e["answer_tokens"]
        assert [int(best.start[0]), int(best.end[0])] == [s, t]
        assert e["answer"]["score"] == pytest.approx(p_start[s] * p_end[t], rel=1e-4)
        assert (e["context_offsets"][s][0], e["context_offsets"][t][1]) == (e["answer"]["start"], e["answer"]["end"])


def test_an_abstention_is_explained_by_the_nulls_score():
    reader = tiny_reader("qanet", no_answer=True)
    reader.decode.no_answer_threshold = -1e9  # always abstain
    e = reader.explain(CONTEXT, QUESTION, steps=4)
    assert e["answer"]["answer"] == "" and e["answer_tokens"] is None
    assert any("null's" in n for n in e["notes"])


@pytest.mark.parametrize("no_answer", [False, True], ids=["v1", "no-answer"])
def test_qanet_context_query_attention_rows_sum_to_one_over_the_question(no_answer):
    e = tiny_reader("qanet", no_answer).explain(CONTEXT, QUESTION, steps=2)
    att = e["attention"]
    assert att["kind"] == "context-query"
    rows, columns = np.array(att["context_to_query"]), np.array(att["query_to_context"])
    assert rows.sum(1) == pytest.approx(np.ones(len(e["context_tokens"])), abs=1e-5)
    if no_answer:  # the columns also weigh the null position, which is not a token
        assert (columns.sum(0) < 1 + 1e-5).all()
    else:
        assert columns.sum(0) == pytest.approx(np.ones(len(e["question_tokens"])), abs=1e-5)


@pytest.mark.parametrize("name", ["dcn", "dcn_plus"])
def test_coattention_weights_are_shown_without_the_sentinels(name):
    e = tiny_reader(name).explain(CONTEXT, QUESTION, steps=2)
    att = e["attention"]
    assert att["kind"] == "coattention"
    rows, columns = np.array(att["context_to_query"]), np.array(att["query_to_context"])
    assert (rows >= 0).all() and (rows.sum(1) <= 1 + 1e-5).all() and (columns.sum(0) <= 1 + 1e-5).all()
    assert any("sentinel" in n for n in e["notes"])
    assert any("2 coattention layers" in n for n in e["notes"]) == (name == "dcn_plus")


def test_the_coattention_weights_recomputed_are_the_layers_own(monkeypatch):
    """The hook recomputes A^Q and A^D from the layer's inputs; they equal what the layer computed."""
    g = torch.Generator().manual_seed(3)
    layer = Coattention(5, project_question=True).eval()
    D, Q = torch.randn(1, 7, 5, generator=g), torch.randn(1, 4, 5, generator=g)
    d_mask, q_mask = torch.ones(1, 7, dtype=torch.bool), torch.ones(1, 4, dtype=torch.bool)
    computed = []
    softmax = coattention.masked_softmax
    monkeypatch.setattr(
        coattention, "masked_softmax", lambda *a, **k: computed.append(softmax(*a, **k)) or computed[-1]
    )
    holder = torch.nn.Sequential(layer)
    with torch.no_grad(), recorded_attention(holder, 7) as seen:
        layer(D, Q, d_mask, q_mask)
    A_Q, A_D = computed  # the layer's own, with the sentinels
    assert np.allclose(seen[0]["context_to_query"], A_D[0, :7, :4].numpy(), atol=1e-6)
    assert np.allclose(seen[0]["query_to_context"], A_Q[0, :7, :4].numpy(), atol=1e-6)


def test_a_model_without_attention_says_so():
    e = tiny_reader("deep_lstm_reader").explain(CONTEXT, QUESTION, steps=2)
    assert e["attention"] is None and e["decoder"] is None
    assert any("no attention" in n for n in e["notes"])


@pytest.mark.parametrize("no_answer", [False, True], ids=["v1", "no-answer"])
@pytest.mark.parametrize("name", ["dcn", "dcn_plus"])
def test_the_decoder_trace_ends_where_the_decoder_stopped_on_the_answers_span(name, no_answer):
    iterations = 4
    for seed in range(40):  # an untrained decoder's span is often backwards; take a seed where it is not
        reader = tiny_reader(name, no_answer, seed=seed, iterations=iterations)
        e = reader.explain(CONTEXT, QUESTION, steps=2)
        last = e["decoder"][-1]
        if 0 <= last["start"] <= last["end"] and e["answer_tokens"] is not None:
            break
    else:
        pytest.fail("no seed gave a forward span")
    trace = e["decoder"]
    assert [step["iteration"] for step in trace] == list(range(len(trace))) and 1 <= len(trace) <= iterations
    spans = [(step["start"], step["end"]) for step in trace]
    # It stops at the first repeat, or after its last iteration.
    assert all(spans[i] != spans[i - 1] for i in range(1, len(spans) - 1))
    assert len(trace) == iterations or spans[-1] == spans[-2]
    # The span decoder reads the last iteration's logits: its probabilities, and its span.
    assert last["start_probs"] == pytest.approx(e["start_probs"], abs=1e-6)
    assert last["end_probs"] == pytest.approx(e["end_probs"], abs=1e-6)
    assert [last["start"], last["end"]] == e["answer_tokens"]
    for step in trace:
        assert len(step["start_probs"]) == len(e["context_tokens"])


@pytest.mark.parametrize("name", ["qanet", "deep_lstm_reader", "dcn"])
def test_integrated_gradients_add_up_to_the_score_less_the_baselines(name):
    e = tiny_reader(name).explain(CONTEXT, QUESTION, steps=64)
    ig = e["saliency"]["integrated_gradients"]
    gap = ig["score"] - ig["baseline_score"]
    assert ig["steps"] == 64
    assert sum(ig["context"]) + sum(ig["question"]) == pytest.approx(ig["sum"], rel=1e-4, abs=1e-5)
    assert abs(ig["sum"] - gap) <= 0.05 * abs(gap) + 1e-3, ig
    assert not any("more steps" in n for n in e["notes"])


@pytest.mark.parametrize("name", ["dcn", "dcn_plus"])
@pytest.mark.parametrize("no_answer", [False, True], ids=["v1", "no-answer"])
def test_every_copy_on_the_integrated_gradients_path_follows_the_decoders_own_path(name, no_answer):
    reader = tiny_reader(name, no_answer)
    decoder = next(m for m in reader.model.model.modules() if isinstance(m, DynamicDecoder))
    runs = []
    hook = decoder.register_forward_hook(lambda _m, _a, out: runs.append(out))
    try:
        e = reader.explain(CONTEXT, QUESTION, steps=6)
    finally:
        hook.remove()
    copies = [run for run in runs if run["starts"].shape[1] > 1]  # the batches of the path, not the answer's
    assert sum(run["starts"].shape[1] for run in copies) == 7
    real = runs[len(runs) - len(copies) - 1]  # explain's own forward just before the path
    shift = 1 if no_answer else 0
    assert [[int(real["starts"][i, 0]) - shift, int(real["ends"][i, 0]) - shift] for i in range(len(e["decoder"]))] == [
        [step["start"], step["end"]] for step in e["decoder"]
    ]
    for run in copies:
        assert torch.equal(run["starts"], real["starts"][:, :1].expand_as(run["starts"]))
        assert torch.equal(run["ends"], real["ends"][:, :1].expand_as(run["ends"]))
        assert torch.equal(run["active"], real["active"][:, :1].expand_as(run["active"]))


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_a_decoder_whose_pointers_are_not_the_answer_says_so(seed):
    e = tiny_reader("dcn", seed=seed).explain(CONTEXT, QUESTION, steps=2, max_answer_len=1)
    last = e["decoder"][-1]
    said = [n for n in e["notes"] if n.startswith("the decoder's last pointers")]
    if [last["start"], last["end"]] == e["answer_tokens"]:
        assert not said
    else:
        assert said == [
            f"the decoder's last pointers (start word {last['start'] + 1}, end word {last['end'] + 1}) "
            "are not a span of at most 1 words; the answer is the best such span of the last "
            "iteration's start and end probabilities"
        ]
    assert e["answer_tokens"][1] - e["answer_tokens"][0] == 0  # the answer keeps the limit


def test_the_decoder_points_where_it_is_told_and_stops_where_the_path_repeats():
    torch.manual_seed(0)
    decoder = DynamicDecoder(hidden=4, pool=2, iterations=4).eval()
    U, mask = torch.randn(2, 6, 8), torch.ones(2, 6, dtype=torch.bool)
    starts = torch.tensor([[2, 4], [5, 4], [1, 4], [1, 4]])  # (I, B): row 1 repeats at iteration 1
    ends = torch.tensor([[3, 5], [5, 5], [2, 5], [2, 5]])
    with torch.no_grad():
        run = decoder(U, mask, follow=(starts, ends))
        moved = starts.clone()
        moved[0, 0] = 0  # row 0's first pointer elsewhere
        other = decoder(U, mask, follow=(moved, ends))
    assert torch.equal(run["starts"], starts) and torch.equal(run["ends"], ends)
    assert run["active"].tolist() == [[True, True], [True, True], [True, False], [True, False]]
    # Iteration 1 reads the pointers of iteration 0: moved in row 0 only.
    assert torch.equal(run["start_iters"][0], other["start_iters"][0])
    assert not torch.allclose(run["start_iters"][1, 0], other["start_iters"][1, 0])
    assert torch.equal(run["start_iters"][1, 1], other["start_iters"][1, 1])


def test_changing_a_word_changes_its_saliency_and_not_the_shape():
    reader = tiny_reader("qanet")
    before = reader.explain(CONTEXT, QUESTION, steps=8)
    k = before["context_tokens"].index("quiet")
    after = reader.explain(CONTEXT.replace("quiet", "grey"), QUESTION, steps=8)
    assert len(after["context_tokens"]) == len(before["context_tokens"])
    for kind in ("gradient_x_input", "integrated_gradients"):
        b, a = before["saliency"][kind]["context"], after["saliency"][kind]["context"]
        assert len(a) == len(b) and a[k] != pytest.approx(b[k], rel=1e-3)


class MarkedWords(ReadingModel):
    """Start logit 20 on "zebra", end logit 20 on "crossing", plus a small term from the word
    vectors of the context and the question (so that saliency has something to read)."""

    def __init__(self, vocabs):
        super().__init__(None)
        g = torch.Generator().manual_seed(0)
        self.embed = PartiallyFrozenEmbedding(torch.randn(len(vocabs.words), 4, generator=g), 4)
        self.start_id, self.end_id = vocabs.words.get("zebra"), vocabs.words.get("crossing")

    def forward(self, batch):
        c, q = self.embed(batch.c_words), self.embed(batch.q_words)  # (B, Tc, 4), (B, Tq, 4)
        small = 0.1 * (c * q.mean(1, keepdim=True)).sum(-1)  # (B, Tc)
        start = (batch.c_words == self.start_id).float() * 20.0 + small
        end = (batch.c_words == self.end_id).float() * 20.0 + small
        return SpanOutput(mask_logits(start, batch.c_mask), mask_logits(end, batch.c_mask))


def test_a_long_document_explains_the_window_that_gave_the_answer():
    vocabs = marker_vocabs()
    reader = Reader(TorchModel(MarkedWords(vocabs)), vocabs, window=40, info={"model": "marked"})
    words = [FILLER[i % len(FILLER)] for i in range(200)]
    words[150:152] = ["zebra", "crossing"]
    context = " ".join(words)
    e = reader.explain(context, "where is the zebra crossing ?", steps=4)
    shapes_agree(e)
    assert e["answer"] == reader.answer(context, "where is the zebra crossing ?")[0]
    assert e["answer"]["answer"] == "zebra crossing"
    assert e["window"]["start"] > 0 and len(e["context_tokens"]) == 40  # a later window, offsets into the whole text
    s, t = e["answer_tokens"]
    assert e["context_tokens"][s : t + 1] == ["zebra", "crossing"]
    assert (e["context_offsets"][s][0], e["context_offsets"][t][1]) == (e["answer"]["start"], e["answer"]["end"])
    assert any("windows" in n for n in e["notes"])
    assert e["attention"] is None  # and the note says so


def test_rckit_explain_prints_the_explanation_as_json(tiny_run, capsys, tmp_path):
    context = "alpha beta gamma delta epsilon zeta eta."
    assert (
        main(
            [
                "explain",
                str(tiny_run),
                "--context",
                context,
                "--question",
                "what follows gamma ?",
                "--json",
                "--steps",
                "4",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    e = json.loads(capsys.readouterr().out)
    shapes_agree(e)
    assert e["model"] == "qanet" and e["attention"]["kind"] == "context-query"
    assert e["answer"] == Reader.load(tiny_run).answer(context, "what follows gamma ?")[0]
    assert e["saliency"]["integrated_gradients"]["steps"] == 4
    out = tmp_path / "why.json"
    assert (
        main(
            [
                "explain",
                "--model",
                str(tiny_run),
                "--context",
                context,
                "--question",
                "what follows gamma ?",
                "--steps",
                "4",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert set(json.loads(out.read_text())) == KEYS
    for name, begins in (("why.png", b"\x89PNG\r\n\x1a\n"), ("why.html", b"<!DOCTYPE html>")):
        assert (
            main(
                [
                    "explain",
                    str(tiny_run),
                    "--context",
                    context,
                    "--question",
                    "what follows gamma ?",
                    "--steps",
                    "4",
                    "--out",
                    str(tmp_path / name),
                ]
            )
            == 0
        )
        assert (tmp_path / name).read_bytes().startswith(begins), name
    assert "epsilon" in (tmp_path / "why.html").read_text(encoding="utf-8")
    assert main(["explain", str(tiny_run), "--context", context, "--question", "what ?", "--out", "x.txt"]) == 2
    assert "--out x.txt" in capsys.readouterr().err


def test_an_onnx_reader_refuses_in_one_line_naming_the_pytorch_file(capsys):
    pytest.importorskip("onnxruntime", reason="the ONNX path needs onnxruntime (pip install 'rckit[onnx]')")
    with pytest.raises(ValueError, match="explaining needs the PyTorch model"):
        Reader.load(QANET_ONNX).explain("alpha beta gamma.", "what follows beta ?")
    capsys.readouterr()  # a fresh cache builds the encoder's graph on first use, and says so on stderr
    assert main(["explain", str(QANET_ONNX), "--context", "alpha beta gamma.", "--question", "what ?"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "qanet-squad.onnx is an ONNX file" in err and "rckit[torch]" in err
    assert f"rckit explain {QANET}" in err  # the installed model's PyTorch file lies beside it


def test_the_answering_modules_import_no_torch():
    code = (
        "import sys, rckit.answering.reader, rckit.answering.explanation, rckit.cli.explain; "
        "print('torch' in sys.modules)"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )


def test_without_a_model_rckit_explain_takes_the_installed_models_pytorch_file(monkeypatch):
    from rckit.cli.explain import torch_source

    monkeypatch.delenv("RCKIT_MODEL", raising=False)
    assert torch_source(None) == QANET  # the default may be its ONNX file, which cannot explain


@pytest.mark.parametrize("model", ["attentive_reader", "impatient_reader"])
def test_rckit_explain_example_shows_a_cloze_readers_attention_over_a_document(model, tmp_path, tiny_glove, capsys):
    """Hermann et al.'s Figure 3 for a run trained here: the attention over one dev document."""
    from rckit.data.cloze.examples import write_cloze_jsonl
    from tests.training.test_cloze_training import cloze_examples

    root = tmp_path / "cloze"
    root.mkdir()
    write_cloze_jsonl(root / "train.jsonl", cloze_examples(16, 0, "t"))
    write_cloze_jsonl(root / "dev.jsonl", cloze_examples(6, 1, "d"))
    preset = tmp_path / "p.json"
    preset.write_text(
        json.dumps(
            {
                "model": {"hidden": 6, "attention": 5, "dropout": 0.0},
                "train": {"batch_size": 4, "warmup_steps": 0, "eval_every": 2, "log_every": 1, "eval_questions": 0},
            }
        )
    )
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                model,
                "--out",
                str(run),
                "--max-steps",
                "2",
                "--cloze-data",
                str(root),
                "--embeddings",
                str(tiny_glove),
                "--preset",
                str(preset),
                "--no-progress",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["explain", str(run), "--example", "2", "--json"]) == 0
    e = json.loads(capsys.readouterr().out)
    doc, query = e["document_tokens"], e["query_tokens"]
    assert e["id"] == "d2" and e["model"] == model and len(doc) == 8 and "@placeholder" in query
    rows = [e["attention"]] if model == "attentive_reader" else e["attention"]
    assert model == "attentive_reader" or e["attention_steps"] == list(range(len(query)))
    for row in rows:
        assert len(row) == len(doc) and sum(row) == pytest.approx(1.0, abs=1e-5)
    probs = [c["probability"] for c in e["candidates"]]
    assert probs == sorted(probs, reverse=True) and sum(probs) == pytest.approx(1.0, abs=1e-5)
    assert {c["entity"] for c in e["candidates"]} == {t for t in doc if t.startswith("@entity")}
    assert e["answer"] == e["candidates"][0]["entity"] and e["gold"] in doc
    assert main(["explain", str(run), "--example", "d4", "--out", str(tmp_path / "fig.png")]) == 0
    assert (tmp_path / "fig.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert main(["explain", str(run), "--example", "99"]) == 2
    assert "example 99 is out of range" in capsys.readouterr().err


def test_attention_recorded_for_an_explanation_ignores_the_same_model_answering_in_another_thread(tiny_run):
    """A server answers with the model it explains with: another thread's forward is not recorded."""
    import threading

    from rckit.answering.explain import recorded_attention

    reader = Reader.load(tiny_run)
    context = "alpha beta gamma delta epsilon zeta eta."
    with recorded_attention(reader.model.model, 8) as seen:
        other = threading.Thread(target=reader.answer, args=(context, "what follows gamma ?"))
        other.start()
        other.join()
        assert seen == []
        reader.answer(context, "what follows gamma ?")  # this thread's own forward is recorded
        assert len(seen) == 1 and seen[0]["kind"] == "context-query"
