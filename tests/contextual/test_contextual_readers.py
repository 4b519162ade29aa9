"""A reader with contextual states, as a user meets it: trained, evaluated, exported, answered on
PyTorch and on onnxruntime alike, long contexts, explained, and refused where the encoder differs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rckit.cli import main
from tests.conftest import (
    GLOVE_WORDS,
    GREEK,
    TINY_QANET,
    TINY_QANET_TRAIN,
    greek_paragraphs,
    squad_json,
    write_json,
    write_tiny_encoder,
)

CONTEXT = "alpha beta gamma delta epsilon zeta."
QUESTIONS = ["what follows beta ?", "what follows delta ?"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """$RCKIT_CACHE for the module: where evaluation keeps states and the encoder's ONNX graph."""
    path = tmp_path_factory.mktemp("rckit-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RCKIT_CACHE", str(path))
        yield path


@pytest.fixture(scope="module")
def ctx_run(tmp_path_factory, cache) -> Path:
    """A tiny QANet reading a tiny encoder's layers 1 and 2, trained 3 steps."""
    root = tmp_path_factory.mktemp("ctx-run")
    enc = write_tiny_encoder(root / "encoder", GREEK + ["what", "follows"])
    train_f = write_json(root / "train.json", squad_json(greek_paragraphs(4)))
    dev_f = write_json(root / "dev.json", squad_json(greek_paragraphs(2)))
    preset = {"model": {**TINY_QANET, "contextual": str(enc), "contextual_layers": [1, 2]}, "train": TINY_QANET_TRAIN}
    (root / "tiny.json").write_text(json.dumps(preset))
    lines = [
        f"{w} " + " ".join(f"{(i + 1) * 0.1 + k:.2f}" for k in range(4)) for i, w in enumerate(GLOVE_WORDS + GREEK)
    ]
    (root / "glove.txt").write_text("\n".join(lines) + "\n")
    assert (
        main(
            [
                "prepare",
                "squad",
                "--train",
                str(train_f),
                "--dev",
                str(dev_f),
                "--embeddings",
                str(root / "glove.txt"),
                "--cache-dir",
                str(root / "cache"),
                "--contextual",
                str(enc),
                "--contextual-layers",
                "1,2",
            ]
        )
        == 0
    )
    states = list((root / "cache").glob("**/states/*/meta.json"))
    assert len(states) == 2 and all(json.loads(f.read_text())["complete"] for f in states)  # train and dev
    assert (
        main(
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
                str(train_f),
                "--dev",
                str(dev_f),
                "--embeddings",
                str(root / "glove.txt"),
                "--cache-dir",
                str(root / "cache"),
                "--no-progress",
            ]
        )
        == 0
    )
    return root / "run"


@pytest.fixture(scope="module")
def ctx_files(ctx_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("ctx-files")
    assert main(["export", str(ctx_run), "--out", str(out / "m.safetensors")]) == 0
    assert main(["export", str(ctx_run), "--out", str(out / "m.onnx")]) == 0
    return out / "m.safetensors", out / "m.onnx"


def test_the_run_the_file_and_the_onnx_file_answer_alike(ctx_run, ctx_files):
    import rckit

    readers = [rckit.Reader.load(s) for s in (ctx_run, *ctx_files)]
    got = [r.answer(CONTEXT, QUESTIONS, top_k=3) for r in readers]
    for other in got[1:]:
        for a, b in zip(got[0], other):
            assert [x["answer"] for x in a] == [x["answer"] for x in b]
            np.testing.assert_allclose([x["score"] for x in a], [x["score"] for x in b], rtol=2e-3)
    assert readers[2].model.backend == "onnxruntime" and readers[2].info["contextual"]["layers"] == [1, 2]
    # Two thread pools on the same cores: only the encoder's spins; a server's (spin=False) neither.
    assert readers[2].encoder.runner.spin and not readers[2].model.spin
    served = rckit.Reader.load(ctx_files[1], spin=False)
    assert not served.encoder.runner.spin and not served.model.spin


def test_evaluation_reads_the_states_as_training_did(ctx_run, ctx_files, capsys):
    dev = ctx_run.parent / "dev.json"
    scores = []
    for source in (ctx_run, *ctx_files):
        capsys.readouterr()
        assert main(["evaluate", str(source), "--data", str(dev)]) == 0
        scores.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1])["f1"])
    assert scores[0] == pytest.approx(scores[1], abs=1e-6) == pytest.approx(scores[2], abs=1e-6)


def test_a_passage_asked_again_is_not_read_by_the_encoder_again(ctx_files):
    """The page's user asks one question, then another on the same passage: the encoder reads
    the passage once, and the answers are those of a reader that reads it afresh."""
    import rckit

    reader, fresh = rckit.Reader.load(ctx_files[1]), rckit.Reader.load(ctx_files[1])
    widths = []
    runner = reader.encoder.runner
    reader.encoder.runner = lambda ids, mask: widths.append(ids.shape[1]) or runner(ids, mask)
    first = reader.answer(CONTEXT, QUESTIONS[0], top_k=2)
    second = reader.answer(CONTEXT, QUESTIONS[1], top_k=2)
    passage = len(reader.encoder.tokenizer.pieces([CONTEXT])[0][0]) + 2
    assert widths.count(passage) == 1 and len(widths) == 3  # the passage once, each question once
    for got, question in ((first, QUESTIONS[0]), (second, QUESTIONS[1])):
        want = fresh.answer(CONTEXT, question, top_k=2)
        assert [a["answer"] for a in got] == [a["answer"] for a in want]
        assert [a["score"] for a in got] == pytest.approx([a["score"] for a in want], abs=1e-6)


def test_a_context_longer_than_the_window_is_read_in_windows(ctx_files):
    import rckit

    reader = rckit.Reader.load(ctx_files[0])
    long = " ".join([CONTEXT] * 30)  # 210 tokens, past the run's window and the encoder's 64 positions
    reader.window = 40
    answers = reader.answer(long, QUESTIONS[0], top_k=2)
    assert answers and long[answers[0]["start"] : answers[0]["end"]] == answers[0]["answer"]
    onnx = rckit.Reader.load(ctx_files[1])
    onnx.window = 40
    assert [a["answer"] for a in onnx.answer(long, QUESTIONS[0], top_k=2)] == [a["answer"] for a in answers]


def test_text_the_tokenizer_cannot_spell_still_answers(ctx_files):
    import rckit

    reader = rckit.Reader.load(ctx_files[1])
    got = reader.answer("alpha 😀 beta 北京 gamma.", "what follows beta ?")
    assert got[0]["answer"] and got[0]["start"] is not None


def test_the_explanation_covers_the_whole_input_vector(ctx_files):
    import rckit

    reader = rckit.Reader.load(ctx_files[0])
    why = reader.explain(CONTEXT, QUESTIONS[0], steps=64)
    ig = why["saliency"]["integrated_gradients"]
    gap = ig["score"] - ig["baseline_score"]
    assert abs(ig["sum"] - gap) <= 0.05 * abs(gap) + 1e-3  # completeness: word vectors and states together


def test_a_model_refuses_an_encoder_other_than_its_own(ctx_run, ctx_files, tmp_path):
    import rckit

    meta = json.loads((ctx_run / "config.json").read_text())
    enc = Path(meta["model_config"]["contextual"])
    backup = tmp_path / "weights"
    shutil.copy(enc / "model.safetensors", backup)
    try:
        write_tiny_encoder(enc, GREEK + ["what", "follows"], seed=7)  # the same folder, other weights
        for source in ctx_files:
            with pytest.raises(ValueError, match="trained on the contextual encoder .* with digest"):
                rckit.Reader.load(source)
    finally:
        shutil.copy(backup, enc / "model.safetensors")


def test_an_onnx_file_may_answer_with_the_encoder_in_int8(ctx_run, tmp_path, capsys):
    import rckit

    out = tmp_path / "m-int8.onnx"
    assert main(["export", str(ctx_run), "--out", str(out), "--encoder-int8"]) == 0
    reader = rckit.Reader.load(out)
    assert reader.info["contextual"]["int8"] is True and reader.encoder.runner.path.name.endswith("-int8row.onnx")
    assert reader.answer(CONTEXT, QUESTIONS[0])[0]["answer"]
    assert main(["export", str(ctx_run), "--out", str(tmp_path / "m.safetensors"), "--encoder-int8"]) == 2
    assert "are for --format onnx" in capsys.readouterr().err


def test_the_onnx_file_answers_where_torch_cannot_be_imported(ctx_files, cache, tmp_path):
    import os

    from tests.export.test_onnx import run_without_torch

    graphs = tmp_path / "fresh-cache"  # the encoder's graph built anew, from the package's weights, without torch
    os.environ["RCKIT_CACHE"] = str(graphs)
    try:
        got = run_without_torch(f"""
            import json, sys
            import rckit
            reader = rckit.Reader.load({str(ctx_files[1])!r})
            print(json.dumps(reader.answer({CONTEXT!r}, {QUESTIONS[0]!r})))
            assert not any(m == "torch" or m.startswith("torch.") for m in sys.modules), "torch was imported"
        """)
    finally:
        os.environ["RCKIT_CACHE"] = str(cache)
    assert got.returncode == 0, got.stderr
    import rckit

    assert (
        json.loads(got.stdout.splitlines()[0])[0]["answer"]
        == rckit.Reader.load(ctx_files[1]).answer(CONTEXT, QUESTIONS[0])[0]["answer"]
    )
    assert list((graphs / "encoders").glob("*.onnx"))
    said = [line for line in got.stderr.splitlines() if "encoder's ONNX graph" in line]
    assert len(said) == 1 and said[0].startswith("rckit: building the ") and said[0].endswith(" s")  # one line
