"""Readers that can say "no answer": the null score, its loss, decoding, the v2.0 figures, training."""

import json
import math

import numpy as np
import pytest
import torch

from rckit.answering.decoding import best_spans, spans_and_null
from rckit.cli import main
from rckit.evaluation.squad_metrics import best_thresholds, score_predictions
from rckit.models.losses import span_loss
from tests.conftest import (
    GLOVE_WORDS,
    GREEK,
    TINY,
    TINY_QANET,
    TINY_QANET_TRAIN,
    greek_paragraphs,
    squad_json,
    write_json,
)


def test_span_loss_targets_the_null_for_unanswerable_questions():
    start = torch.tensor([[0.0, 5.0, 0.0], [0.0, 0.0, 0.0]], requires_grad=True)
    end = torch.tensor([[0.0, 5.0, 0.0], [0.0, 0.0, 0.0]], requires_grad=True)
    null = torch.zeros(2, requires_grad=True)
    y = torch.tensor([1, -1])
    answerable = torch.tensor([True, False])
    loss = span_loss(start, end, y, y, null, null, answerable)
    # Row 0 targets token 1 of [null, t0, t1, t2]; row 1 the null of 4 equal scores: 2 log 4.
    row0 = 2 * -torch.log_softmax(torch.tensor([0.0, 0.0, 5.0, 0.0]), 0)[2]
    assert loss.item() == pytest.approx(((row0 + 2 * math.log(4)) / 2).item(), rel=1e-5)
    loss.backward()
    assert null.grad[1] < 0  # the unanswerable row pushes its null up
    assert null.grad[0] > 0  # the answerable row pushes its null down
    # Without null scores, an unanswerable row is left out (the v1.1 loss, unchanged).
    only0 = span_loss(start[:1], end[:1], y[:1], y[:1])
    assert span_loss(start, end, y, y).item() == pytest.approx(only0.item())


def test_spans_and_null_decodes_the_best_span_and_the_null_margin():
    start = np.array([[0.0, 3.0, 0.0], [0.0, 3.0, 0.0]], np.float32)
    end = np.array([[0.0, 0.0, 3.0], [0.0, 0.0, 3.0]], np.float32)
    mask = np.ones((2, 3), bool)
    null = np.array([-5.0, 8.0], np.float32)
    spans, null_score = spans_and_null(start, end, mask, null, null, max_answer_len=30)
    assert spans.start.tolist() == [1, 1] and spans.end.tolist() == [2, 2]  # context token indices
    margin = null_score - spans.score
    assert margin[0] < 0 < margin[1]
    # The null's score is a log-probability over [null, tokens]: exp is p(no answer).
    p_start = torch.softmax(torch.tensor([8.0, 0.0, 3.0, 0.0]), 0)[0]
    p_end = torch.softmax(torch.tensor([8.0, 0.0, 0.0, 3.0]), 0)[0]
    assert math.exp(null_score[1]) == pytest.approx((p_start * p_end).item(), rel=1e-5)
    plain = best_spans(start, end, mask, 30)
    assert plain.start.tolist() == spans.start.tolist()


def test_best_thresholds_follow_the_official_search():
    data = squad_json(
        [
            (
                "a b c d",
                [
                    ("q1", "?", [("a", 0)], False),
                    ("q2", "?", [], True),
                    ("q3", "?", [("c", 4)], False),
                    ("q4", "?", [], True),
                ],
            )
        ],
        version="2.0",
    )
    spans = {"q1": "a", "q2": "b", "q3": "d", "q4": "c"}
    margins = {"q1": -3.0, "q2": -1.0, "q3": 0.5, "q4": 2.0}
    got = best_thresholds(data, spans, margins)
    # Answer q1 only (abstain where margin > -3): q1 right, q2 and q4 abstain right, q3 wrong: 3/4.
    assert got["best_f1"] == pytest.approx(75.0) and got["best_f1_thresh"] == -3.0
    assert got["best_exact"] == pytest.approx(75.0)
    # The official rule agrees with scoring the thresholded predictions directly.
    preds = {q: "" if margins[q] > got["best_f1_thresh"] else t for q, t in spans.items()}
    assert score_predictions(data, preds, "2.0")["f1"] == pytest.approx(got["best_f1"])


def test_qanet_null_position_gives_null_scores_and_keeps_v1_models_as_they_are():
    from rckit.models.qanet import QANet, QANetConfig
    from tests.models.test_contract import emb_info, span_batch

    batch, info = span_batch(), emb_info()
    torch.manual_seed(0)
    plain = QANet(QANetConfig(**TINY_QANET), info).eval()
    torch.manual_seed(0)
    abstaining = QANet(QANetConfig(**TINY_QANET, no_answer=True), info).eval()
    out, out_na = plain(batch), abstaining(batch)
    assert out.start_null is None and out.end_null is None
    B, T = batch.c_words.shape
    assert out_na.start_logits.shape == (B, T) and out_na.start_null.shape == (B,)
    assert torch.isfinite(out_na.start_null).all()
    assert (out_na.start_logits[~batch.c_mask] < -1e30).all()  # padding stays out of the softmax
    # Same initialisation apart from the null: the v1.1 weights are those of the plain model.
    shared = {k: v for k, v in abstaining.state_dict().items() if k != "null"}
    assert all(torch.equal(v, plain.state_dict()[k]) for k, v in shared.items())
    assert set(abstaining.state_dict()) - set(plain.state_dict()) == {"null"}


def _v2_files(root):
    """Greek-letter questions, plus unanswerable ones: "what follows omega ?" (never in a context)."""

    def with_impossible(paras):
        out = []
        for c, (context, qas) in enumerate(paras):
            qas = [(*qa, False) for qa in qas] + [(f"c{c}na", "what follows omega ?", [], True)]
            out.append((context, qas))
        return out

    train = write_json(root / "train.json", squad_json(with_impossible(greek_paragraphs(4)), version="2.0"))
    dev = write_json(root / "dev.json", squad_json(with_impossible(greek_paragraphs(2)), version="2.0"))
    lines = [
        f"{w} " + " ".join(f"{(i + 1) * 0.1 + k:.2f}" for k in range(4))
        for i, w in enumerate(GLOVE_WORDS + GREEK + ["omega"])
    ]
    (root / "glove.txt").write_text("\n".join(lines) + "\n")
    (root / "tiny.json").write_text(json.dumps({"model": TINY_QANET, "train": TINY_QANET_TRAIN}))
    return train, dev


def _train(root, train, dev, *extra):
    return main(
        [
            "train",
            "qanet",
            "--preset",
            str(root / "tiny.json"),
            "--out",
            str(root / "run"),
            "--max-steps",
            "3",
            "--train",
            str(train),
            "--dev",
            str(dev),
            "--embeddings",
            str(root / "glove.txt"),
            "--cache-dir",
            str(root / "cache"),
            "--no-progress",
            *extra,
        ]
    )


def test_training_on_v2_data_needs_a_model_that_can_abstain(tmp_path, capsys):
    train, dev = _v2_files(tmp_path)
    assert _train(tmp_path, train, dev) == 2
    err = capsys.readouterr().err
    assert "4 unanswerable questions" in err and "model.no_answer=true" in err and len(err.strip().splitlines()) == 1


def test_a_no_answer_model_trains_on_v2_data_and_evaluate_prints_the_official_figures(tmp_path, capsys):
    train, dev = _v2_files(tmp_path)
    assert _train(tmp_path, train, dev, "--set", "model.no_answer=true") == 0
    capsys.readouterr()
    preds_file = tmp_path / "preds.json"
    assert main(["evaluate", str(tmp_path / "run"), "--out", str(preds_file)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["total"] == 8 and result["HasAns_total"] == 6 and result["NoAns_total"] == 2
    for key in ("HasAns_f1", "NoAns_f1", "best_f1", "best_f1_thresh", "best_exact", "no_answer_threshold"):
        assert key in result
    assert result["best_f1"] >= result["f1"] - 1e-9  # the best threshold on the file bounds the run's own
    preds = json.loads(preds_file.read_text())
    abstained = [q for q, t in preds.items() if t == ""]
    # NoAns F1 is the share of unanswerable questions the model abstained on.
    assert result["NoAns_f1"] == pytest.approx(100.0 * sum(q.endswith("na") for q in abstained) / 2)
    assert main(["evaluate", str(tmp_path / "run"), "--out", str(preds_file), "--always-answer"]) == 0
    always = json.loads(capsys.readouterr().out)
    assert (
        always["always_answer"] and always["NoAns_f1"] == 0.0 and "" not in json.loads(preds_file.read_text()).values()
    )


@pytest.mark.parametrize("name", ["dcn_plus", "deep_lstm_reader"])
def test_dcn_plus_and_the_deep_lstm_reader_train_on_v2_data_and_abstain_through_the_reader(name, tmp_path, capsys):
    """The other span models take the same path as QANet: train with a null (DCN+ with its
    self-critical reward), threshold from the v2.0 dev file, evaluate, answer or abstain."""
    from rckit.answering.reader import Reader

    train, dev = _v2_files(tmp_path)
    (tmp_path / "tiny.json").write_text(json.dumps({"model": SPAN_MODELS[name], "train": TINY_QANET_TRAIN}))
    assert (
        main(
            [
                "train",
                name,
                "--preset",
                str(tmp_path / "tiny.json"),
                "--out",
                str(tmp_path / "run"),
                "--max-steps",
                "3",
                "--train",
                str(train),
                "--dev",
                str(dev),
                "--embeddings",
                str(tmp_path / "glove.txt"),
                "--cache-dir",
                str(tmp_path / "cache"),
                "--no-progress",
                "--set",
                "model.no_answer=true",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "run")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["NoAns_total"] == 2 and math.isfinite(result["no_answer_threshold"])
    answers = _reader_with_threshold(tmp_path / "run", -1e9).answer(CONTEXT, "what follows omega ?", top_k=1)
    assert answers[0]["answer"] == "" and 0 < answers[0]["no_answer_probability"] < 1
    assert (
        Reader.load(tmp_path / "run", always_answer=True).answer(CONTEXT, "what follows omega ?")[0]["start"]
        is not None
    )


def test_training_chooses_the_threshold_on_the_v2_dev_file_and_saves_it(tmp_path):
    from rckit.model_files.checkpoint import load_checkpoint

    train, dev = _v2_files(tmp_path)
    assert _train(tmp_path, train, dev, "--set", "model.no_answer=true", "--set", "train.eval_every=3") == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "dev_f1" in r]
    assert evals and all(math.isfinite(r["no_answer_threshold"]) for r in evals)
    best = load_checkpoint(tmp_path / "run" / "best.pt")
    assert best["decode"]["no_answer_threshold"] == evals[-1]["no_answer_threshold"]


def test_null_scores_shift_token_only_spans_onto_the_null_softmax():
    from rckit.answering.decoding import null_scores, topk_spans

    g = torch.Generator().manual_seed(0)
    start, end = torch.randn(3, 6, generator=g), torch.randn(3, 6, generator=g)
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[2, 4:] = False
    s_null, e_null = torch.randn(3, generator=g), torch.randn(3, generator=g)
    start, end, mask, s_null, e_null = (t.numpy() for t in (start, end, mask, s_null, e_null))
    null, shift = null_scores(start, end, mask, s_null, e_null)
    spans, null_again = spans_and_null(start, end, mask, s_null, e_null, 30)
    assert np.allclose(null, null_again)
    top = topk_spans(start, end, mask, 1, 30)
    assert np.allclose(top.score[:, 0] + shift, spans.score, atol=1e-5)
    # Against the softmax over [null, tokens] written out.
    for b in range(3):
        both = torch.cat([torch.tensor(s_null[b : b + 1]), torch.tensor(start[b][mask[b]])]).log_softmax(0)
        both_end = torch.cat([torch.tensor(e_null[b : b + 1]), torch.tensor(end[b][mask[b]])]).log_softmax(0)
        assert null[b] == pytest.approx(float(both[0] + both_end[0]), abs=1e-5)
        s, e = int(spans.start[b]), int(spans.end[b])
        assert spans.score[b] == pytest.approx(float(both[1 + s] + both_end[1 + e]), abs=1e-5)


@pytest.fixture(scope="module")
def abstaining_run(tmp_path_factory):
    """A tiny QANet that can abstain, trained 3 steps on v2.0 data."""
    root = tmp_path_factory.mktemp("abstaining")
    train, dev = _v2_files(root)
    assert _train(root, train, dev, "--set", "model.no_answer=true") == 0
    return root / "run"


def _reader_with_threshold(run, threshold):
    from dataclasses import replace

    from rckit.answering.reader import Reader

    reader = Reader.load(run)
    reader.decode = replace(reader.decode, no_answer_threshold=threshold)
    return reader


CONTEXT = "alpha beta gamma delta epsilon zeta eta theta."


def test_the_reader_abstains_with_an_empty_answer_and_keeps_the_spans_after_it(abstaining_run):
    answers = _reader_with_threshold(abstaining_run, -1e9).answer(CONTEXT, "what follows omega ?", top_k=2)
    assert len(answers) == 3
    first, *spans = answers
    assert first["answer"] == "" and first["start"] is None and first["end"] is None
    p = first["no_answer_probability"]
    assert 0.0 < p < 1.0 and first["score"] == p
    for a in spans:
        assert (
            a["start"] is not None and CONTEXT[a["start"] : a["end"]] == a["answer"] and a["no_answer_probability"] == p
        )
    # The same question with a threshold no null can pass: the spans alone, the same probability.
    never = _reader_with_threshold(abstaining_run, 1e9).answer(CONTEXT, "what follows omega ?", top_k=2)
    assert never == spans
    # A span's score and the null's share one softmax: together they stay within 1.
    assert p + sum(a["score"] for a in spans) <= 1.0 + 1e-6


def test_a_model_that_cannot_abstain_says_so_with_a_null_probability(tiny_run):
    from rckit.answering.reader import Reader

    answers = Reader.load(tiny_run).answer(CONTEXT, "what follows alpha ?", top_k=2)
    assert answers and all(a["no_answer_probability"] is None and a["start"] is not None for a in answers)


def test_a_long_document_takes_its_lowest_null_over_the_windows():
    from rckit.answering.job import Job

    a = {"ctx_ptr": [0, 3], "ctx_offsets": [(0, 1), (2, 3), (4, 5)]}
    job = Job([("a b c", "q")], top_k=1, max_answer_len=5, arrays=a, windows=[], no_answer_threshold=0.0)
    job.record([(0, 0, 0, 2)], [[0]], [[0]], [[-2.0]], nulls=[-0.5])  # this window: no answer
    assert job.answers()[0][0]["answer"] == ""
    job.record([(0, 0, 1, 3)], [[1]], [[1]], [[-1.0]], nulls=[-4.0])  # this one: the answer is here
    best = job.answers()[0]
    assert best[0]["answer"] == "c" and best[0]["no_answer_probability"] == pytest.approx(math.exp(-4.0))


def test_predict_says_no_answer_as_text_and_as_json(abstaining_run, tmp_path, capsys, monkeypatch):
    from rckit.model_files.checkpoint import load_checkpoint, save_checkpoint

    for name in ("best.pt", "last.pt"):  # a run whose saved threshold always abstains
        ckpt = load_checkpoint(abstaining_run / name)
        ckpt["decode"]["no_answer_threshold"] = -1e9
        save_checkpoint({k: v for k, v in ckpt.items() if k != "format"}, tmp_path / name)
    (tmp_path / "config.json").write_text((abstaining_run / "config.json").read_text())
    capsys.readouterr()
    assert main(["predict", str(tmp_path), "--context", CONTEXT, "--question", "what follows omega ?"]) == 0
    shown = capsys.readouterr().out.strip()  # the abstention, and the best span after it as a guess
    assert shown.startswith("(no answer in the text; best guess: ") and shown.endswith(")")
    assert main(["predict", str(tmp_path), "--context", CONTEXT, "--question", "what follows omega ?", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["answer"] == "" and got["start"] is None and 0 < got["no_answer_probability"] < 1
    # --always-answer: the best span all the same, and how likely the text holds none.
    assert (
        main(
            [
                "predict",
                str(tmp_path),
                "--context",
                CONTEXT,
                "--question",
                "what follows omega ?",
                "--json",
                "--always-answer",
            ]
        )
        == 0
    )
    best = json.loads(capsys.readouterr().out)
    assert best["start"] is not None and CONTEXT[best["start"] : best["end"]] == best["answer"] != ""
    assert best["no_answer_probability"] == pytest.approx(got["no_answer_probability"])
    assert (
        main(["predict", str(tmp_path), "--context", CONTEXT, "--question", "what follows omega ?", "--always-answer"])
        == 0
    )
    assert capsys.readouterr().out.strip() == best["answer"]
    # A file of questions: the abstention as official v2.0 prediction files write it, then the best span.
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "q1", "context": CONTEXT, "question": "what follows omega ?"}) + "\n")
    assert (
        main(
            [
                "predict",
                str(tmp_path),
                "--questions",
                str(questions),
                "--out",
                str(tmp_path / "a.jsonl"),
                "--top-k",
                "2",
            ]
        )
        == 0
    )
    (rec,) = [json.loads(ln) for ln in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert rec["id"] == "q1" and rec["answers"][0] == got and rec["answers"][1]["answer"] == best["answer"]


def test_an_exported_abstaining_model_keeps_its_null_and_threshold(abstaining_run, tmp_path):
    from rckit.answering.reader import Reader
    from rckit.export.safetensors import export_run
    from rckit.model_files.metadata import read_metadata

    out = tmp_path / "abstaining.safetensors"
    export_run(abstaining_run, out, dtype="fp32")
    meta = read_metadata(out)
    assert meta["model_config"]["no_answer"] is True
    from_run, from_file = Reader.load(abstaining_run), Reader.load(out)
    assert from_file.decode.no_answer_threshold == from_run.decode.no_answer_threshold
    a = from_run.answer(CONTEXT, "what follows omega ?", top_k=2)
    b = from_file.answer(CONTEXT, "what follows omega ?", top_k=2)
    assert [x["answer"] for x in a] == [x["answer"] for x in b]
    assert b[0]["no_answer_probability"] == pytest.approx(a[0]["no_answer_probability"], rel=1e-4)


SPAN_MODELS = {  # every span model of the tests' one table, without dropout (the deep LSTM reader wider)
    "qanet": TINY_QANET,
    "dcn": {**TINY[("dcn", "span")], "dropout": 0.0},
    "dcn_plus": {**TINY[("dcn_plus", "span")], "dropout": 0.0, "word_dropout": 0.0},
    "deep_lstm_reader": {**TINY[("deep_lstm_reader", "span")], "hidden": 16, "skip_dim": 8, "dropout": 0.0},
}


@pytest.mark.parametrize("name", sorted(SPAN_MODELS))
def test_every_span_model_scores_a_null_and_keeps_its_v1_weights(name):
    from rckit.models import MODELS
    from tests.models.test_contract import emb_info, span_batch

    cfg_cls, model_cls = MODELS[name]
    batch, info = span_batch(), emb_info()
    batch.answerable = torch.tensor([True, True, False])
    torch.manual_seed(0)
    plain = model_cls(cfg_cls(**SPAN_MODELS[name]), info).eval()
    torch.manual_seed(0)
    abstaining = model_cls(cfg_cls(**SPAN_MODELS[name], no_answer=True), info).eval()
    assert not plain.no_answer and abstaining.no_answer
    out, out_na = plain(batch), abstaining(batch)
    assert out.start_null is None and out.end_null is None
    assert out_na.start_logits.shape == out_na.end_logits.shape == batch.c_mask.shape
    assert out_na.start_null.shape == out_na.end_null.shape == (3,)
    assert torch.isfinite(out_na.start_null).all() and torch.isfinite(out_na.end_null).all()
    assert (out_na.start_logits[~batch.c_mask] < -1e30).all() and (out_na.end_logits[~batch.c_mask] < -1e30).all()
    # The same initialisation apart from the null: a v1.1 model's weights, checkpoints and files still fit.
    own = abstaining.state_dict()
    assert set(own) - set(plain.state_dict()) == {"null"}
    assert all(torch.equal(v, own[k]) for k, v in plain.state_dict().items())
    abstaining.train()
    loss = abstaining.loss(
        abstaining(batch),
        batch,
        reward_fn=(lambda i, s, e: torch.full(s.shape, 0.5)) if abstaining.uses_reward else None,
    )
    loss.backward()
    assert torch.isfinite(loss) and abstaining.null.grad is not None and abstaining.null.grad.abs().sum() > 0


def _follows_batch(n: int, seed: int):
    """ "what follows X ?" over contexts of 8 distinct words; every third X is not in its context."""
    from rckit.data.batching import Batch

    g = torch.Generator().manual_seed(seed)
    T, W = 8, 3
    c_words = torch.stack([10 + torch.randperm(16, generator=g)[:T] for _ in range(n)])  # words 10..25
    q_words = torch.zeros(n, 2, dtype=torch.long)
    q_words[:, 0] = 5  # "what follows"
    answerable = torch.arange(n) % 3 != 2
    y = torch.randint(0, T - 1, (n,), generator=g)  # X is at y, the answer at y + 1
    q_words[:, 1] = torch.where(answerable, c_words[torch.arange(n), y], 26 + torch.randint(0, 14, (n,), generator=g))
    chars = lambda w: torch.stack([w % 11 + 1, w // 11 + 1, torch.ones_like(w)], -1)[..., :W]  # noqa: E731
    return Batch(
        c_words=c_words,
        c_chars=chars(c_words),
        c_mask=torch.ones(n, T, dtype=torch.bool),
        q_words=q_words,
        q_chars=chars(q_words),
        q_mask=torch.ones(n, 2, dtype=torch.bool),
        y_start=torch.where(answerable, y + 1, -1),
        y_end=torch.where(answerable, y + 1, -1),
        index=torch.arange(n),
        answerable=answerable,
    )


@pytest.mark.parametrize("name", sorted(SPAN_MODELS))
def test_a_tiny_model_learns_to_abstain_where_the_question_names_a_word_the_context_lacks(name):
    """Trained on a generated set, every span model answers the questions it can and abstains on
    the others: the null beats the best span exactly on the unanswerable ones."""
    from rckit.models import MODELS
    from tests.models.test_contract import emb_info

    cfg_cls, model_cls = MODELS[name]
    torch.manual_seed(0)
    over = {"mixed_objective": False} if name == "dcn_plus" else {}
    model = model_cls(cfg_cls(**SPAN_MODELS[name], **over, no_answer=True), emb_info())
    batch = _follows_batch(12, seed=0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(600):
        model.train()
        loss = model.loss(model(batch), batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 19:
            model.eval()
            with torch.no_grad():
                out = model(batch)
            spans, null = spans_and_null(
                *(t.float().numpy() for t in (out.start_logits, out.end_logits)),
                batch.c_mask.numpy(),
                out.start_null.float().numpy(),
                out.end_null.float().numpy(),
                3,
            )
            abstains = torch.from_numpy(null > spans.score)
            spans.start, spans.end = torch.from_numpy(spans.start), torch.from_numpy(spans.end)
            if torch.equal(abstains, ~batch.answerable) and torch.equal(
                spans.start[batch.answerable], batch.y_start[batch.answerable]
            ):
                break
    assert torch.equal(abstains, ~batch.answerable), (name, step)
    assert torch.equal(spans.start[batch.answerable], batch.y_start[batch.answerable])
    assert torch.equal(spans.end[batch.answerable], batch.y_end[batch.answerable])
