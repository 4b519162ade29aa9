"""rckit's own reader as a span reader's verifier (issue 71, point 5), on tiny models written by the
tests: put into a model file alone and joined, the Reader abstaining by it and its threshold, the
same answers alone and batched, a collection's best answers checked by it, the command, and the
refusals (a missing or damaged file, a file naming issue 62's retired cross-encoder)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rckit.answering.own_verifier import OwnVerifier, joined, logit
from rckit.answering.pointer_reader import PointerReader
from rckit.answering.reader import Reader
from rckit.answering.verifier import Verifier
from rckit.export.metadata_edit import set_verifier
from rckit.training.own_verifier import fit_logistic, install_own_verifier
from tests.answering.test_verifier import random_verifier
from tests.conftest import greek_paragraphs, squad_json, write_json, write_tiny_reader_file

QUESTIONS = ["what follows alpha ?", "what follows omega beta ?", "what follows gamma ?"]


def own_reader(path: Path) -> PointerReader:
    return PointerReader.load(path, always_answer=True)


def test_the_join_is_a_logistic_regression_on_the_two_logits():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4000, 2))
    truth = np.array([1.5, -0.7, 0.3])
    y = rng.random(4000) < 1 / (1 + np.exp(-(x @ truth[:2] + truth[2])))
    w = fit_logistic(x, y)
    np.testing.assert_allclose(w, truth, atol=0.15)
    p = joined(1 / (1 + np.exp(-x[:, 0])), 1 / (1 + np.exp(-x[:, 1])), tuple(w))
    np.testing.assert_allclose(logit(p), x @ w[:2] + w[2], atol=1e-6)


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
def own_file(tmp_path_factory) -> Path:
    """The tiny encoder's longest window: a collection's English questions are many pieces in its
    Greek vocabulary."""
    return write_tiny_reader_file(tmp_path_factory.mktemp("own"), max_pieces=64)


def _installed(root: Path, tiny_export: Path, own_file: Path, v2_dev: Path, join: bool, threshold=None):
    model_file = root / "tiny.safetensors"
    shutil.copy(tiny_export, model_file)
    network = random_verifier(threshold=1.0)  # the network lets every passage of a collection through
    reader = Reader.load(tiny_export, "cpu", always_answer=True)
    own = install_own_verifier(own_file, reader, network, v2_dev, model_file, join=join, threshold=threshold, log=print)
    set_verifier(model_file, Verifier.from_json({**network.to_json(), "own": own}, str(model_file)))
    return model_file, own


@pytest.fixture(scope="module")
def alone(tiny_export, own_file, v2_dev, tmp_path_factory):
    return _installed(tmp_path_factory.mktemp("alone"), tiny_export, own_file, v2_dev, join=False)


@pytest.fixture(scope="module")
def joined_file(tiny_export, own_file, v2_dev, tmp_path_factory):
    return _installed(tmp_path_factory.mktemp("joined"), tiny_export, own_file, v2_dev, join=True)


def test_installed_alone_the_reader_abstains_by_the_own_readers_probability(alone, own_file):
    model_file, own = alone
    assert (model_file.parent / own["file"]).is_file() and "join" not in own
    assert own["tuning"]["questions"] == 6 and 0.0 <= own["tuning"]["auc_own"] <= 1.0
    context = greek_paragraphs(1)[0][0]
    got = Reader.load(model_file, "cpu").answer(context, QUESTIONS, top_k=2)
    plain = Reader.load(model_file, "cpu", always_answer=True).answer(context, QUESTIONS, top_k=2)
    p_own = [p for _, p in own_reader(own_file).best_spans([(context, q) for q in QUESTIONS])]
    threshold = own["threshold"]
    for answers, always, want in zip(got, plain, p_own):
        p = answers[0]["no_answer_probability"]
        assert p == pytest.approx(want, abs=1e-6)
        assert always[0]["start"] is not None and always[0]["no_answer_probability"] == pytest.approx(p)
        assert (answers[0]["answer"] == "") == (p > threshold)
        if answers[0]["answer"] != "":  # the span reader's answers are unchanged where it answers
            assert answers[0]["answer"] == always[0]["answer"]
    low = Reader.load(model_file, "cpu", no_answer_threshold=0.0).answer(context, QUESTIONS)
    assert all(a[0]["answer"] == "" for a in low)
    high = Reader.load(model_file, "cpu", no_answer_threshold=1.0).answer(context, QUESTIONS)
    assert [a[0]["answer"] for a in high] == [a[0]["answer"] for a in plain]
    info = Reader.load(model_file, "cpu").info["verifier"]
    assert info["own_reader"] == own["file"] and info["threshold"] == pytest.approx(threshold)


def test_joined_the_probability_is_the_join_of_the_network_and_the_own_reader(joined_file, own_file):
    model_file, own = joined_file
    assert len(own["join"]) == 3 and all(np.isfinite(own["join"]))
    context = greek_paragraphs(2)[1][0]
    reader = Reader.load(model_file, "cpu", always_answer=True)
    got = [a[0]["no_answer_probability"] for a in reader.answer(context, QUESTIONS)]
    network_only = Reader.load(model_file, "cpu", always_answer=True)
    network_only.verifier.own = None
    p_features = [a[0]["no_answer_probability"] for a in network_only.answer(context, QUESTIONS)]
    p_own = [p for _, p in own_reader(own_file).best_spans([(context, q) for q in QUESTIONS])]
    np.testing.assert_allclose(got, joined(p_features, p_own, tuple(own["join"])), atol=1e-6)


def test_the_same_answers_alone_and_batched(joined_file):
    model_file, _ = joined_file
    reader = Reader.load(model_file, "cpu")
    pairs = [(c, q) for c, qas in greek_paragraphs(3) for _, q, _ in qas] + [
        (greek_paragraphs(1)[0][0], q) for q in QUESTIONS
    ]
    batched = reader.answer_batch(pairs, top_k=2)
    for pair, want in zip(pairs, batched):
        one = reader.answer(*pair, top_k=2)
        assert [a["answer"] for a in one] == [a["answer"] for a in want]
        assert one[0]["no_answer_probability"] == pytest.approx(want[0]["no_answer_probability"], abs=1e-6)


def test_a_missing_or_damaged_reader_file_and_the_retired_cross_encoder_are_refused(alone, tmp_path):
    model_file, own = alone
    copy = tmp_path / "tiny.safetensors"
    shutil.copy(model_file, copy)
    with pytest.raises(ValueError, match=f"verifier's reader .*{own['file']} is missing"):
        Reader.load(copy, "cpu")
    data = bytearray((model_file.parent / own["file"]).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / own["file"]).write_bytes(bytes(data))
    with pytest.raises(ValueError, match=f"{own['file']}: damaged"):
        Reader.load(copy, "cpu")
    inner = random_verifier().to_json()
    with pytest.raises(ValueError, match="cross-encoder, which this rckit no longer reads"):
        Verifier.from_json({**inner, "cross": {"file": "x.onnx"}}, str(copy))
    with pytest.raises(ValueError, match="three numbers"):
        OwnVerifier(None, {"threshold": 0.5, "join": [1.0, 2.0]})
    with pytest.raises(ValueError, match="no 'sha256'"):
        OwnVerifier.from_json({"file": own["file"], "threshold": 0.5}, model_file)


def test_a_collection_checks_its_best_answers_with_the_own_reader(joined_file, tmp_path):
    from rckit.retrieval.collection import Collection
    from tests.retrieval.test_collection import DOCS

    model_file, _ = joined_file
    folder = tmp_path / "docs"
    for name, text in DOCS.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    question = "When was the Eiffel Tower completed?"
    reader = Reader.load(model_file, "cpu", no_answer_threshold=1.0)  # the own reader accepts every answer
    own, _ = reader.own_verifier
    network_only = Reader.load(model_file, "cpu", no_answer_threshold=1.0)
    network_only.verifier.own = None
    with Collection.open(tmp_path / "i.sqlite", reader) as collection:
        collection.add([folder])
        answers = collection.ask(question, top_k=2, passages=4)
        assert 1 <= len(answers) <= 2 and all(a["start"] is not None for a in answers)
        for a in answers:  # each answer carries the join's probability on its own passage
            text = a["passage"]["text"]
            p_features = network_only.answer(text, question)[0]["no_answer_probability"]
            want = own.probability([(text, question)], [p_features])[0]
            assert a["no_answer_probability"] == pytest.approx(float(want), abs=1e-6)
    rejecting = Reader.load(model_file, "cpu", no_answer_threshold=0.0)  # ... and now none
    with Collection.open(tmp_path / "i.sqlite", rejecting) as collection:
        got = collection.ask(question, top_k=2, passages=4)
        assert len(got) == 1 and got[0]["answer"] == "" and got[0]["source"] is None


def test_the_command_puts_the_own_reader_into_files(tiny_export, own_file, v2_dev, tmp_path, capsys):
    from rckit.cli import main

    files = tmp_path / "files"
    files.mkdir()
    model_file = files / "tiny.safetensors"
    shutil.copy(tiny_export, model_file)
    common = ["verifier", str(tiny_export), "--own", str(own_file), "--v2-dev", str(v2_dev)]
    set_verifier(model_file, None)  # a file without a verifier is refused: the own reader joins its network
    assert main([*common, "--into", str(model_file)]) == 2
    assert "has no verifier" in capsys.readouterr().err
    set_verifier(model_file, random_verifier(threshold=1.0))
    assert main([*common, "--into", str(model_file), "--threshold", "0.0"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["rule"] == "threshold 0.0" and {"auc", "auc_features", "auc_own", "best"} <= set(figures)
    assert (files / "tiny.own-reader.safetensors").read_bytes() == own_file.read_bytes()
    context = greek_paragraphs(1)[0][0]
    assert main(["predict", str(model_file), "--context", context, "--question", "what follows alpha ?", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["answer"] == "" and got["no_answer_probability"] > 0.0  # threshold 0: abstains
    assert main(["verifier", "--remove", "--into", str(model_file)]) == 0
    assert Reader.load(model_file, "cpu").verifier is None
