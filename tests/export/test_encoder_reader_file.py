"""rckit's own reader as one file, on a tiny random encoder written here: exported from a run or its
carry (int8 a row, the tokenizer inside), answered by :class:`PointerReader` as the run's own
evaluation reads it, the same alone and batched, abstaining by its threshold, and a damaged file
refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from rckit.answering.pointer_reader import PointerReader
from rckit.contextual.encoders import find_encoder
from rckit.contextual.pieces import PieceTokenizer
from rckit.export.encoder_reader import export_reader
from rckit.model_files.carry import save_carry
from rckit.model_files.errors import CheckpointError
from rckit.model_files.reader_file import is_reader_file, read_reader_file
from rckit.models.encoder_reader import EncoderReader, EncoderReaderConfig, pretrained_weights
from rckit.training.encoder_reader import ReaderTrainConfig, config_dict, read
from tests.conftest import GREEK, write_tiny_encoder

PASSAGE = " ".join(GREEK * 2) + "."
QUESTIONS = ["what follows beta ?", "what follows kappa ?", "what follows mu ?", "what follows omega ?"]
CONFIG = ReaderTrainConfig(max_pieces=40, stride=12)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path:
    return write_tiny_encoder(tmp_path_factory.mktemp("file-enc") / "tiny", [*GREEK, "what", "follows"], dim=8)


@pytest.fixture(scope="module")
def run(encoder, tmp_path_factory) -> tuple[Path, EncoderReader]:
    """A run folder whose best.pt holds a tiny reader with a random head (as ``rckit finetune`` writes it)."""
    torch.manual_seed(3)
    files = find_encoder(str(encoder))
    model = EncoderReader.from_encoder(pretrained_weights(encoder / "model.safetensors"), files.config)
    torch.nn.init.normal_(model.head.weight, std=1.0)
    folder = tmp_path_factory.mktemp("run")
    best = {"step": 7, "tune_f1": 50.0, "tune_auc": 0.6, "calibration": [0.8, -0.2]}
    torch.save({"model": model.state_dict(), "config": config_dict(CONFIG), "best": best}, folder / "best.pt")
    return folder, model.eval()


def test_the_file_answers_as_the_runs_own_evaluation(encoder, run, tmp_path):
    folder, model = run
    meta = export_reader(folder, find_encoder(str(encoder)), tmp_path / "reader.safetensors", threshold=0.7)
    assert is_reader_file(tmp_path / "reader.safetensors") and meta["calibration"] == [0.8, -0.2]
    assert (tmp_path / "reader.safetensors").stat().st_mode & 0o044  # an ordinary file others may read
    assert meta["max_pieces"] == 40 and meta["step"] == 7 and meta["tokenizer"]["model"]["type"] == "WordPiece"
    state, _ = read_reader_file(tmp_path / "reader.safetensors")
    for name, value in model.state_dict().items():  # int8 a row: within half a step of each row's largest
        v = value.numpy()
        bound = np.abs(v).max(axis=-1, keepdims=True) / 254 + 1e-7 if v.ndim == 2 else 0
        assert np.all(np.abs(state[name] - v) <= bound), name
    reader = PointerReader.load(tmp_path / "reader.safetensors", always_answer=True)
    tokenizer = PieceTokenizer(encoder / "tokenizer.json")
    file_model = EncoderReader(find_encoder(str(encoder)).config, EncoderReaderConfig(dropout=0.0))
    file_model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    want = read(file_model, tokenizer, [(PASSAGE, q, None, None) for q in QUESTIONS], 40, 12, top_k=2)
    got = reader.pointed([(PASSAGE, q) for q in QUESTIONS], top_k=2)
    for a, b in zip(got, want):
        assert [(s.start, s.end) for s in a.spans] == [(s.start, s.end) for s in b.spans]
        assert a.margin == pytest.approx(b.margin, abs=1e-5)


def test_answers_are_the_same_alone_and_batched_and_abstain_by_the_threshold(encoder, run, tmp_path):
    folder, _ = run
    path = tmp_path / "reader.safetensors"
    export_reader(folder, find_encoder(str(encoder)), path, threshold=0.7)
    reader = PointerReader.load(path)
    other = "alpha beta gamma. " * 7 + "delta epsilon."
    pairs = [(PASSAGE, q) for q in QUESTIONS] + [(other, q) for q in QUESTIONS]
    batched = reader.answer_batch(pairs, top_k=2)
    alone = [reader.answer(c, q, top_k=2) for c, q in pairs]
    assert batched == alone
    for (context, _), answers in zip(pairs, batched):
        first = answers[0]
        p = first["no_answer_probability"]
        assert 0 < p < 1
        if p > 0.7:
            assert first["answer"] == "" and first["start"] is None and first["score"] == p
            assert first["reason"]["text"] == context[first["reason"]["start"] : first["reason"]["end"]]
        else:
            assert context[first["start"] : first["end"]] == first["answer"] != ""
    never = PointerReader.load(path, no_answer_threshold=1.0).answer_batch(pairs)
    always = PointerReader.load(path, no_answer_threshold=0.0).answer_batch(pairs)
    assert all(a[0]["answer"] for a in never) and not any(a[0]["answer"] for a in always)
    for (context, question), (first, *_) in zip(pairs, always):  # each abstention with its reason
        if question.split()[2] in context:  # the nearest sentence: here the passage, one sentence
            assert first["reason"] == {"text": context, "start": 0, "end": len(context)}
        else:  # "omega": no sentence shares a word with the question
            assert first["reason"] is None
    assert not any("reason" in a for a in batched[0] + never[0])  # a span has none
    with pytest.raises(ValueError, match="between 0 and 1"):
        PointerReader.load(path, no_answer_threshold=1.5)


def test_the_file_is_written_from_the_carry_alone(encoder, run, tmp_path):
    folder, model = run
    carry = tmp_path / "reader.carry.safetensors"
    start = pretrained_weights(encoder / "model.safetensors")
    trained = {k: v for k, v in model.state_dict().items() if k != "bert.word.weight"}
    best = {"step": 5, "tune_f1": 51.0, "calibration": [1.0, 0.0]}
    save_carry(carry, trained, start, {"config": config_dict(CONFIG), "step": 5, "best": best, "log": [best]})
    meta = export_reader(carry, find_encoder(str(encoder)), tmp_path / "from-carry.safetensors")
    assert meta["step"] == 5 and meta["calibration"] == [1.0, 0.0] and meta["tuning"] == {"tune_f1": 51.0}
    state, _ = read_reader_file(tmp_path / "from-carry.safetensors")
    assert np.allclose(state["head.weight"], model.head.weight.detach().numpy(), atol=0.05)
    # Two steps on, the carry holds step 7's weights: its best is gone, its last is judged by its own line.
    later = {"step": 7, "tune_f1": 49.0, "tune_auc": 0.55, "calibration": [0.9, 0.1]}
    meta = {"config": config_dict(CONFIG), "step": 7, "best": best, "log": [best, later]}
    save_carry(carry, trained, start, meta)
    with pytest.raises(ValueError, match="holds step 7's weights and the run's best was step 5"):
        export_reader(carry, find_encoder(str(encoder)), tmp_path / "x.safetensors")
    meta = export_reader(carry, find_encoder(str(encoder)), tmp_path / "last.safetensors", step="last")
    assert meta["step"] == 7 and meta["calibration"] == [0.9, 0.1]
    assert meta["tuning"] == {"tune_f1": 49.0, "tune_auc": 0.55}
    save_carry(carry, trained, start, {"config": config_dict(CONFIG), "step": 8, "best": best, "log": [best, later]})
    with pytest.raises(ValueError, match="step 8 was not judged on the tuning quarter"):
        export_reader(carry, find_encoder(str(encoder)), tmp_path / "x.safetensors", step="last")


def test_rckit_export_writes_a_runs_best_or_last_step(encoder, run, tmp_path, capsys):
    """``rckit export RUN --out FILE``: a folder of rckit finetune, as a person would export it."""
    from rckit.cli import main
    from rckit.export.encoder_reader import is_reader_run

    best_folder, model = run
    folder = tmp_path / "run"
    folder.mkdir()
    best = torch.load(best_folder / "best.pt", weights_only=True)
    torch.save(best, folder / "best.pt")
    torch.nn.init.normal_(model.head.weight, std=1.0)  # the weights moved on after the best step
    last_line = {"step": 9, "tune_f1": 48.0, "dev_f1": 30.0, "calibration": [0.5, 0.25]}
    state = {"model": model.state_dict(), "config": config_dict(CONFIG), "step": 9, "best": best["best"]}
    torch.save({**state, "encoder": find_encoder(str(encoder)).digest}, folder / "last.pt")
    (folder / "log.jsonl").write_text(json.dumps(best["best"]) + "\n" + json.dumps(last_line) + "\n")
    assert is_reader_run(folder) and is_reader_run(folder / "last.pt")
    args = ["export", str(folder), "--encoder", str(encoder), "--threshold", "0.6", "--out"]
    assert main([*args, str(tmp_path / "best.safetensors")]) == 0
    assert "step 7: " in capsys.readouterr().out
    assert main([*args, str(tmp_path / "last.safetensors"), "--step", "last"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote {tmp_path / 'last.safetensors'}: ") and "step 9: v1.1 dev subset F1 30.00" in out
    got = {k: read_reader_file(tmp_path / f"{k}.safetensors") for k in ("best", "last")}
    assert got["best"][1]["calibration"] == [0.8, -0.2] and got["last"][1]["calibration"] == [0.5, 0.25]
    assert got["best"][1]["threshold"] == got["last"][1]["threshold"] == 0.6
    assert np.allclose(got["last"][0]["head.weight"], model.head.weight.detach().numpy(), atol=0.05)
    assert not np.allclose(got["best"][0]["head.weight"], got["last"][0]["head.weight"], atol=0.05)
    assert main([*args, str(tmp_path / "x.onnx")]) == 2  # the graph comes from the file
    assert "its ONNX graph is built from that file" in capsys.readouterr().err
    (folder / "config.json").write_text("{}")  # a reading model's run folder is not taken for one
    assert not is_reader_run(folder)
    assert main(["export", str(folder), "--step", "last", "--out", str(tmp_path / "y.safetensors")]) == 2
    assert "--step, --threshold and --encoder are for a run of rckit finetune" in capsys.readouterr().err
    other = tmp_path / "distilled"  # rckit distill's run folder: refused, not half-read
    other.mkdir()
    torch.save({"model": {}, "config": {"max_pieces": 40, "n_layers": 2}, "step": 3}, other / "last.pt")
    (other / "log.jsonl").write_text(json.dumps({"step": 3}) + "\n")
    assert (
        main(
            [
                "export",
                str(other),
                "--step",
                "last",
                "--encoder",
                str(encoder),
                "--out",
                str(tmp_path / "d.safetensors"),
            ]
        )
        == 2
    )
    assert "not a run of rckit finetune" in capsys.readouterr().err


def test_a_damaged_or_foreign_file_is_refused_in_one_line(encoder, run, tmp_path, tiny_export):
    folder, _ = run
    path = tmp_path / "reader.safetensors"
    export_reader(folder, find_encoder(str(encoder)), path)
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="cut.safetensors: truncated or damaged"):
        PointerReader.load(cut)
    assert not is_reader_file(cut) and not is_reader_file(tiny_export)
    with pytest.raises(CheckpointError, match="format 'rckit-export-1', expected 'rckit-pointer-1'"):
        PointerReader.load(tiny_export)
    with pytest.raises(FileNotFoundError, match="no fine-tuning run here"):
        export_reader(tmp_path / "nothing", find_encoder(str(encoder)), tmp_path / "x.safetensors")


@pytest.mark.parametrize("int8", [False, True])
def test_the_onnx_graph_answers_as_pytorch_without_it(encoder, run, tmp_path, monkeypatch, int8):
    folder, _ = run
    monkeypatch.setenv("RCKIT_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "reader.safetensors"
    export_reader(folder, find_encoder(str(encoder)), path, threshold=0.7)
    other = "alpha beta gamma. " * 7 + "delta epsilon."
    pairs = [(PASSAGE, q) for q in QUESTIONS] + [(other, q) for q in QUESTIONS]
    by_torch = PointerReader.load(path, backend="torch").pointed(pairs, top_k=2)
    reader = PointerReader.load(path, backend="onnx", int8=int8)
    assert reader.info["backend"] == "onnxruntime" and list((tmp_path / "cache" / "readers").glob("*.onnx"))
    by_onnx = reader.pointed(pairs, top_k=2)
    for a, b in zip(by_onnx, by_torch):
        assert a.margin == pytest.approx(b.margin, abs=0.2 if int8 else 1e-4)
        if not int8:
            assert [(s.start, s.end) for s in a.spans] == [(s.start, s.end) for s in b.spans]
    assert reader.answer_batch(pairs, top_k=2) == [reader.answer(c, q, top_k=2) for c, q in pairs]


def test_the_commands_answer_with_the_file_and_those_that_cannot_say_so(encoder, run, tmp_path, capsys):
    from rckit.answering.reader import Reader
    from rckit.cli import main
    from tests.conftest import squad_json, write_json

    folder, _ = run
    path = tmp_path / "reader.safetensors"
    export_reader(folder, find_encoder(str(encoder)), path, threshold=0.7)
    assert isinstance(Reader.load(path), PointerReader)
    assert main(["predict", str(path), "--context", PASSAGE, "--question", QUESTIONS[0], "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert set(got) == {"answer", "score", "start", "end", "no_answer_probability"}
    want = PointerReader.load(path).answer(PASSAGE, QUESTIONS[0])[0]
    assert got == want
    qas = [(f"q{k}", q, [("beta", PASSAGE.index("beta"))]) for k, q in enumerate(QUESTIONS)]
    data = write_json(tmp_path / "dev.json", squad_json([(PASSAGE, qas)]))
    assert main(["evaluate", str(path), "--data", str(data), "--always-answer", "--out", str(tmp_path / "p.json")]) == 0
    scores = json.loads(capsys.readouterr().out)
    preds = json.loads((tmp_path / "p.json").read_text())
    assert scores["total"] == 4 and set(preds) == {"q0", "q1", "q2", "q3"}
    spans = PointerReader.load(path, always_answer=True).best_spans([(PASSAGE, q) for q in QUESTIONS])
    assert [preds[f"q{k}"] for k in range(4)] == [text for text, _ in spans]
    assert main(["models", str(tmp_path)]) == 0  # listed with what it is, not as unreadable
    assert "reader.safetensors  encoder_reader  " in capsys.readouterr().out
    assert main(["explain", str(path), "--context", PASSAGE, "--question", QUESTIONS[0]]) == 2
    assert "rckit explain does not take rckit's own reader yet" in capsys.readouterr().err


def test_a_collection_is_asked_with_the_file(encoder, run, tmp_path):
    from rckit.retrieval.collection import Collection

    folder, _ = run
    path = tmp_path / "reader.safetensors"
    export_reader(folder, find_encoder(str(encoder)), path, threshold=1.0)  # never abstains
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "greek.txt").write_text(PASSAGE)
    (docs / "other.txt").write_text("alpha beta gamma. " * 7 + "delta epsilon.")
    with Collection.open(tmp_path / "index.sqlite", path) as index:
        index.add([docs])
        found = index.ask(QUESTIONS[0], top_k=2)
    assert found and found[0]["answer"] and found[0]["source"].endswith(".txt")
    best = PointerReader.load(path).answer(Path(found[0]["source"]).read_text(), QUESTIONS[0], top_k=2)
    assert found[0]["answer"] in {a["answer"] for a in best}
