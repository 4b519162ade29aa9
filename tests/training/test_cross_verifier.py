"""The cross-encoder verifier on a tiny random encoder written here: its input, fine-tuning (the loss
falls, a resumed run continues exactly), the exported graph against PyTorch, the Reader abstaining by
it, and the refusals (a damaged or missing graph, another encoder)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from rckit.answering.cross_verifier import CrossVerifier, cross_inputs
from rckit.answering.reader import Reader
from rckit.answering.verifier import Verifier
from rckit.contextual.encoders import find_encoder
from rckit.contextual.pieces import PieceTokenizer
from rckit.export.metadata_edit import set_verifier
from rckit.models.cross_encoder import CrossEncoder, CrossEncoderConfig
from rckit.training.cross_verifier import (
    CrossTrainConfig,
    batches,
    example_weights,
    examples_of,
    fine_tune,
    made_examples,
    questions_of,
)
from tests.answering.test_verifier import random_verifier
from tests.conftest import GREEK, greek_paragraphs, squad_json, write_json, write_tiny_encoder


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path:
    return write_tiny_encoder(tmp_path_factory.mktemp("cross-enc") / "tiny", [*GREEK, "what", "follows"], dim=8)


def tiny_model(encoder: Path, dropout: float = 0.1, pool: str = "first") -> CrossEncoder:
    from safetensors.torch import load_file

    files = find_encoder(str(encoder))
    config = CrossEncoderConfig(dropout=dropout, pool=pool)
    return CrossEncoder.from_encoder(load_file(str(encoder / "model.safetensors")), files.config, config)


# ---------------------------------------------------------------- 1. the input


def test_the_input_is_question_candidate_and_the_window_around_it(encoder):
    tok = PieceTokenizer(encoder / "tokenizer.json")
    context = " ".join(GREEK[:20])  # one piece a word
    start = context.index("kappa")
    x = cross_inputs(tok, [(context, "what follows iota", start, start + 5)], max_pieces=64)
    ids, types = x["ids"][0], x["types"][0]
    q = tok.pieces(["what follows iota"])[0][0]
    kappa = tok.pieces(["kappa"])[0][0]
    c_ids = tok.pieces([context])[0][0]
    n = 1 + len(q) + 1
    assert ids[0] == tok.cls and ids[n - 1] == tok.sep and list(ids[1 : n - 1]) == list(q)
    assert list(ids[n : n + len(kappa)]) == list(kappa) and ids[n + len(kappa)] == tok.sep
    assert list(ids[n + len(kappa) + 1 : -1]) == list(c_ids) and ids[-1] == tok.sep  # the whole passage fits
    assert (types[:n] == 0).all() and (types[n:] == 1).all() and x["mask"][0].all()

    # A passage longer than the input: the window is centred on the candidate.
    long = " ".join(GREEK * 6)
    at = long.index("kappa", len(long) // 2)
    x = cross_inputs(tok, [(long, "what follows iota", at, at + 5)], max_pieces=24)
    ids = x["ids"][0]
    assert len(ids) == 24
    window = ids[1 + len(q) + 1 + len(kappa) + 1 : -1]
    long_ids = list(tok.pieces([long])[0][0])
    middle = len(tok.pieces([long[:at]])[0][0])  # kappa's piece in the passage
    assert len(kappa) == 1 and long_ids[middle] == kappa[0]
    room = len(window)
    assert list(window) == long_ids[middle - room // 2 : middle - room // 2 + room]

    # No candidate: an empty segment and the passage's first pieces; a batch is padded, masked.
    x = cross_inputs(tok, [(long, "what follows iota", None, None), (context, "what", 0, 5)], max_pieces=24)
    assert x["ids"][0][len(q) + 2] == tok.sep and list(x["ids"][0][len(q) + 3 : len(q) + 6]) == list(c_ids[:3])
    assert x["mask"][1].sum() < x["ids"].shape[1] and (x["ids"][1][~x["mask"][1]] == 0).all()


def test_the_readers_encoder_is_unchanged_by_segments_and_dropout(encoder):
    model = tiny_model(encoder).bert.eval()
    ids = torch.tensor([[2, 7, 9, 3, 11, 3]])
    mask = torch.ones_like(ids, dtype=torch.bool)
    plain = model(ids, mask, (1, 2))
    assert torch.equal(plain, model(ids, mask, (1, 2), torch.zeros_like(ids)))
    assert not torch.equal(plain, model(ids, mask, (1, 2), torch.ones_like(ids)))  # segments read
    model.train()
    assert not torch.equal(plain, model(ids, mask, (1, 2)))  # dropout (0.1 here) only in training


# ---------------------------------------------------------------- 2. fine-tuning


def test_fine_tuning_steps_lower_the_loss_and_leave_the_embeddings(encoder):
    model = tiny_model(encoder, dropout=0.0)  # at width 8, dropout's noise would hide the fall
    tok = PieceTokenizer(encoder / "tokenizer.json")
    context = " ".join(GREEK[:12])
    triples = [(context, f"what follows {GREEK[i]}", *_span(context, GREEK[i + 1])) for i in range(10)]
    target = torch.tensor([1.0, 0.0] * 5)
    x = {k: torch.from_numpy(v) for k, v in cross_inputs(tok, triples).items()}
    word = model.bert.word.weight.detach().clone()
    opt = torch.optim.AdamW(model.trainable(), lr=1e-2)
    model.train()
    losses = []
    for _ in range(100):
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model.read(x["ids"], x["mask"], x["types"]), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.1 * losses[0]
    assert torch.equal(model.bert.word.weight, word)  # frozen: the exported graph looks it up in the encoder's


def test_made_questions_come_in_pairs_with_their_sources():
    sources = squad_json([("alpha beta gamma", [("s1", "what follows alpha", [("beta", 6)], False)])])
    made = {
        "version": "v2.0",
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": "alpha beta gamma",
                        "qas": [
                            {
                                "id": f"s1:{rule}",
                                "question": q,
                                "answers": [],
                                "is_impossible": True,
                                "rule": rule,
                                "source": "s1",
                                "plausible_answers": [{"text": "beta", "answer_start": 6}] if keep else [],
                            }
                            for rule, q, keep in [
                                ("negation", "what does not follow alpha", True),
                                ("entity_swap", "what follows omega", True),
                                ("other_paragraph", "what follows alpha", False),
                            ]
                        ],
                    }
                ],
            }
        ],
    }
    got = made_examples(made, sources, n=10)
    pairs = sorted((e.question, e.start, e.end, e.target, e.kind, e.unanswerable) for e in got)
    assert pairs == [
        ("what does not follow alpha", 6, 10, 0.0, "made", True),
        ("what follows alpha", 6, 10, 1.0, "gold", False),  # the source, once
        ("what follows omega", 6, 10, 0.0, "made", True),
    ]
    assert len(made_examples(made, sources, n=1)) == 2


def test_mean_pooling_reads_the_real_pieces_only(encoder):
    model = tiny_model(encoder, pool="mean").eval()
    torch.nn.init.normal_(model.head.weight)
    tok = PieceTokenizer(encoder / "tokenizer.json")
    context = " ".join(GREEK[:12])
    short = (context, "what", *_span(context, "beta"))
    long = (" ".join(GREEK[:20]), "what follows alpha", *_span(context, "beta"))
    alone = {k: torch.from_numpy(v) for k, v in cross_inputs(tok, [short]).items()}
    both = {k: torch.from_numpy(v) for k, v in cross_inputs(tok, [short, long]).items()}
    with torch.no_grad():
        z_alone = model.read(alone["ids"], alone["mask"], alone["types"])
        z_both = model.read(both["ids"], both["mask"], both["types"])
        first = tiny_model(encoder).eval()
        first.head.load_state_dict(model.head.state_dict())
        z_first = first.read(alone["ids"], alone["mask"], alone["types"])
    assert both["ids"].shape[1] > alone["ids"].shape[1]  # the short input is padded beside the long one
    assert z_both[0].item() == pytest.approx(z_alone[0].item(), abs=1e-5)
    assert z_first.item() != pytest.approx(z_alone.item(), abs=1e-4)  # the first piece's state differs
    with pytest.raises(ValueError, match="pool"):
        CrossEncoderConfig(pool="max")


def _span(context: str, word: str) -> tuple[int, int]:
    at = context.index(word)
    return at, at + len(word)


def test_examples_carry_the_span_f1_and_batches_are_a_seeded_permutation():
    raw = squad_json(
        [
            (
                "alpha beta gamma delta",
                [("a", "what follows alpha", [("beta", 6)], False), ("u", "what follows omega", [], True)],
            )
        ],
        version="2.0",
    )
    raw["data"][0]["paragraphs"][0]["qas"][1]["plausible_answers"] = [{"text": "delta", "answer_start": 17}]
    qs = questions_of(raw["data"], "t")
    got = examples_of(qs, [[[6, 16, 0.9], [0, 5, 0.1]], [[6, 10, 0.8]]])
    targets = {(e.question[-5:], e.start, e.end, e.kind): e.target for e in got}
    assert targets[("alpha", 6, 16, "reader")] == pytest.approx(2 / 3)  # "beta gamma" against "beta"
    assert targets[("alpha", 0, 5, "reader")] == 0.0 and targets[("alpha", 6, 10, "gold")] == 1.0
    assert targets[("omega", 6, 10, "reader")] == 0.0 and targets[("omega", 17, 22, "plausible")] == 0.0
    assert [e.unanswerable for e in got] == [False, False, False, True, True]

    # The reader's best span only; balanced, either side weighs half of the total.
    top = examples_of(qs, [[[6, 16, 0.9], [0, 5, 0.1]], [[6, 10, 0.8]]], reader_spans=1)
    assert [(e.start, e.kind) for e in top] == [(6, "reader"), (6, "gold"), (6, "reader"), (17, "plausible")]
    w = example_weights(got, "questions")
    una = np.array([e.unanswerable for e in got])
    assert w[una].sum() == pytest.approx(w[~una].sum()) and w.mean() == pytest.approx(1.0)
    assert (example_weights(got, "none") == 1.0).all()
    # Within each passage: one that holds only answerable questions weighs nothing.
    other = questions_of(squad_json([("omega psi", [("b", "what follows omega", [("psi", 6)], False)])])["data"], "t")
    mixed = got + examples_of(other, [[[6, 9, 0.9]]])
    w = example_weights(mixed, "paragraphs")
    assert (w[len(got) :] == 0).all() and w[: len(got)] == pytest.approx(example_weights(got, "questions"))
    with pytest.raises(ValueError, match="balance"):
        example_weights(got, "articles")
    order = batches(got * 10, 3, seed=1)
    assert sorted(i for b in order for i in b) == list(range(len(got) * 10))
    assert order == batches(got * 10, 3, seed=1) and order != batches(got * 10, 3, seed=2)


@pytest.fixture(scope="module")
def v2_dev(tmp_path_factory) -> Path:
    """A v2.0 dev file of four articles (training quarter 0, tuning quarter 2), half unanswerable."""
    articles = []
    for a in range(4):
        paras = greek_paragraphs(2 + a)[a:]
        doc = squad_json(
            [(c, [(f"{a}{qid}", q, ans, False) for qid, q, ans in qas]) for c, qas in paras], version="2.0"
        )
        for para in doc["data"][0]["paragraphs"]:
            for qa in para["qas"][1:]:
                qa["question"] = qa["question"].replace("follows", "follows omega")
                qa["answers"], qa["is_impossible"] = [], True
        articles.append({"title": f"A{a}", "paragraphs": doc["data"][0]["paragraphs"]})
    return write_json(tmp_path_factory.mktemp("v2") / "dev-v2.0.json", {"version": "v2.0", "data": articles})


@pytest.fixture(scope="module")
def tiny_reader(tiny_export) -> Reader:
    return Reader.load(tiny_export, "cpu", always_answer=True)


# max_pieces: the tiny encoder has 64 positions
CONFIG = dict(batch_size=4, epochs=3, eval_every=3, v11_sample=0, max_pieces=64, model=CrossEncoderConfig(dropout=0.1))


def test_a_run_stopped_and_resumed_ends_where_an_unbroken_run_ends(encoder, tiny_reader, v2_dev, tmp_path):
    files = find_encoder(str(encoder))
    whole = fine_tune(tiny_reader, files, v2_dev, tmp_path / "whole", config=CrossTrainConfig(**CONFIG), log=print)
    assert whole["done"] and whole["step"] == whole["planned"] > 4
    first = fine_tune(
        tiny_reader, files, v2_dev, tmp_path / "cut", config=CrossTrainConfig(**CONFIG), max_steps=4, log=print
    )
    assert first["step"] == 4 and not first["done"]
    with pytest.raises(ValueError, match="already holds a run"):
        fine_tune(tiny_reader, files, v2_dev, tmp_path / "cut", config=CrossTrainConfig(**CONFIG), log=print)
    with pytest.raises(ValueError, match="64 positions"):
        fine_tune(
            tiny_reader, files, v2_dev, tmp_path / "long", config=CrossTrainConfig(**{**CONFIG, "max_pieces": 65})
        )
    rest = fine_tune(tiny_reader, files, v2_dev, tmp_path / "cut", resume=True, log=print)
    assert rest["done"] and rest["step"] == whole["step"]
    a = torch.load(tmp_path / "whole" / "last.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "cut" / "last.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    log = [json.loads(line) for line in (tmp_path / "whole" / "log.jsonl").read_text().splitlines()]
    assert [line["step"] for line in log][:2] == [3, 6] and all(0 <= line["auc"] <= 1 for line in log)
    best = torch.load(tmp_path / "whole" / "best.pt", weights_only=True)
    assert best["best"]["tuning_f1"] == max(line["tuning_f1"] for line in log)


# ---------------------------------------------------------------- 3. exported, installed, refused


@pytest.fixture(scope="module")
def installed(encoder, tiny_reader, tiny_export, v2_dev, tmp_path_factory):
    """A fine-tuned tiny run exported and put into a copy of conftest's tiny model file."""
    from rckit.training.cross_verifier import install_cross_verifier

    root = tmp_path_factory.mktemp("installed")
    files = find_encoder(str(encoder))
    fine_tune(tiny_reader, files, v2_dev, root / "run", config=CrossTrainConfig(**CONFIG), log=print)
    model_file = root / "files" / "tiny.safetensors"
    model_file.parent.mkdir()
    shutil.copy(tiny_export, model_file)
    cross = install_cross_verifier(root / "run", tiny_reader, files, v2_dev, model_file, keep=0.95)
    inner = random_verifier(threshold=1.0).to_json()  # the network lets every passage of a collection through
    set_verifier(model_file, Verifier.from_json({**inner, "cross": cross}, str(model_file)))
    return model_file, cross, cross["threshold"], root / "run"


def test_the_graph_answers_as_the_pytorch_module(installed, encoder):
    from rckit.export.cross_verifier import export_cross_verifier, load_run
    from rckit.training.cross_verifier import check_triples, logits_of

    model_file, _, _, run = installed
    files = find_encoder(str(encoder))
    meta, diff = export_cross_verifier(run, files, model_file.parent, "fp32", check_triples(), int8=False)
    assert diff < 1e-3
    model, _ = load_run(run, files)
    tok = PieceTokenizer(encoder / "tokenizer.json")
    triples = check_triples()
    got = CrossVerifier.from_json(meta, model_file).logits(triples)
    np.testing.assert_allclose(got, logits_of(model, tok, triples, meta["max_pieces"]), atol=1e-3)
    # batches of other sizes and orders give each triple the same logit
    np.testing.assert_allclose(
        CrossVerifier.from_json(meta, model_file).logits(triples[::-1], batch=1)[::-1], got, atol=1e-4
    )


def test_the_reader_abstains_by_the_cross_encoder_and_its_threshold(installed, encoder):
    from rckit.export.cross_verifier import load_run
    from rckit.training.cross_verifier import logits_of

    model_file, cross, threshold, run = installed
    context = greek_paragraphs(1)[0][0]
    questions = [
        "what follows alpha ?",
        "what follows omega beta ?",
        "what follows 🙂 ?",
    ]  # the tokenizer cannot spell the last
    reader = Reader.load(model_file, "cpu")
    got = reader.answer(context, questions, top_k=2)
    plain = Reader.load(model_file, "cpu", always_answer=True).answer(context, questions, top_k=2)
    model, _ = load_run(run, find_encoder(str(encoder)))
    tok = PieceTokenizer(encoder / "tokenizer.json")
    spans = [(a[0]["start"], a[0]["end"]) for a in plain]
    z = logits_of(model, tok, [(context, q, *s) for q, s in zip(questions, spans)], cross["max_pieces"])
    for answers, always, zi in zip(got, plain, z):
        p = answers[0]["no_answer_probability"]
        assert p == pytest.approx(1 / (1 + np.exp(zi)), abs=1e-3)
        assert always[0]["start"] is not None and always[0]["no_answer_probability"] == pytest.approx(p)
        assert (answers[0]["answer"] == "") == (p > threshold)
    # a threshold below every probability abstains on all; above, answers all
    low = Reader.load(model_file, "cpu", no_answer_threshold=0.0).answer(context, questions)
    assert all(a[0]["answer"] == "" for a in low)
    high = Reader.load(model_file, "cpu", no_answer_threshold=1.0).answer(context, questions)
    assert [a[0]["answer"] for a in high] == [a[0]["answer"] for a in plain]


def test_a_missing_damaged_or_foreign_graph_is_refused_in_one_line(installed, encoder, tmp_path):
    model_file, cross, _, _ = installed
    copy = tmp_path / "tiny.safetensors"
    shutil.copy(model_file, copy)
    with pytest.raises(ValueError, match=f"verifier's graph .*{cross['file']} is missing"):
        Reader.load(copy, "cpu")
    graph = tmp_path / cross["file"]
    data = bytearray((model_file.parent / cross["file"]).read_bytes())
    data[len(data) // 2] ^= 0xFF
    graph.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=f"{graph.name}: damaged"):
        Reader.load(copy, "cpu")
    shutil.copy(model_file.parent / cross["file"], graph)
    other = write_tiny_encoder(tmp_path / "other", [*GREEK, "what", "follows"], dim=8, seed=3)
    meta = json.loads(json.dumps(cross))
    meta["encoder"] = str(other)
    with pytest.raises(ValueError, match="fine-tuned from the encoder"):
        CrossVerifier.from_json(meta, copy)


def test_a_collection_checks_its_best_answers_with_the_cross_encoder(installed, tmp_path):
    from rckit.retrieval.collection import CROSS_CANDIDATES, Collection
    from tests.retrieval.test_collection import DOCS

    model_file, _, threshold, _ = installed
    folder = tmp_path / "docs"
    for name, text in DOCS.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    question = "When was the Eiffel Tower completed?"
    reader = Reader.load(model_file, "cpu", no_answer_threshold=1.0)  # the cross-encoder accepts every answer
    cross, _ = reader.cross_verifier
    with Collection.open(tmp_path / "i.sqlite", reader) as collection:
        collection.add([folder])
        answers = collection.ask(question, top_k=2, passages=4)
        assert 1 <= len(answers) <= 2 and all(a["start"] is not None for a in answers)
        for a in answers:  # each answer carries the cross-encoder's probability on its own passage
            p = a["passage"]
            want = cross.probability([(p["text"], question, a["start"] - p["start"], a["end"] - p["start"])])[0]
            assert a["no_answer_probability"] == pytest.approx(float(want), abs=1e-5)
    rejecting = Reader.load(model_file, "cpu", no_answer_threshold=0.0)  # ... and now none
    with Collection.open(tmp_path / "i.sqlite", rejecting) as collection:
        got = collection.ask(question, top_k=2, passages=4)
        assert len(got) == 1 and got[0]["answer"] == "" and got[0]["source"] is None
    assert CROSS_CANDIDATES >= 1 and 0.0 <= threshold <= 1.0


def test_the_command_fine_tunes_resumes_and_puts_the_verifier_into_files(
    encoder, tiny_export, tiny_reader, v2_dev, tmp_path, capsys
):
    from rckit.cli import main

    run = tmp_path / "run"
    common = ["verifier", str(tiny_export), "--cross-encoder", str(run), "--v2-dev", str(v2_dev)]
    common += ["--encoder", str(encoder), "--max-pieces", "64", "--v11-sample", "0", "--epochs", "20"]
    assert main([*common, "--max-steps", "2", "--eval-every", "2"]) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert first["step"] == 2 and not first["done"]
    assert main([*common, "--resume", "--max-steps", "3"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["step"] == 3
    files = tmp_path / "files"
    files.mkdir()
    model_file = files / "tiny.safetensors"
    shutil.copy(tiny_export, model_file)
    # A file without a verifier is refused: the cross-encoder joins the one it carries.
    set_verifier(model_file, None)
    capsys.readouterr()
    assert main([*common, "--into", str(model_file)]) == 2
    assert "has no verifier" in capsys.readouterr().err
    set_verifier(model_file, random_verifier(threshold=1.0))
    assert main([*common, "--into", str(model_file), "--threshold", "0.0"]) == 0
    graphs = list(files.glob("tiny.verifier-*.onnx"))
    assert len(graphs) == 1  # one of the fp32 and int8 graphs kept
    capsys.readouterr()
    context = greek_paragraphs(1)[0][0]
    assert main(["predict", str(model_file), "--context", context, "--question", "what follows alpha ?", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["answer"] == "" and got["no_answer_probability"] > 0.0  # threshold 0: abstains
