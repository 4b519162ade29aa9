"""Distilling the small encoder on a tiny random teacher written here: the student starts as the
teacher's first layers, pools onto words as the answering path does, is saved as an encoder folder
that loads back, and distillation steps lower the held-out error; a resumed run continues exactly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from rckit.contextual.bert import BertEncoder
from rckit.contextual.bert_names import hf_names_to_ours, ours_to_hf_names
from rckit.contextual.encoders import encoder_weights, find_encoder
from rckit.contextual.pieces import PieceTokenizer, pool, token_pieces
from rckit.contextual.spec import ContextualSpec
from rckit.contextual.states import ContextualEncoder
from rckit.contextual.student import new_student, save_student, student_config, student_layers
from rckit.data.sources import DataSource, prepare_data
from rckit.data.split import SquadSplit
from rckit.training.distill import DistillConfig, batches, distill, student_states, texts_of
from tests.conftest import GREEK, greek_paragraphs, squad_json, write_json, write_tiny_encoder

LAYERS = (2, 3)  # the tiny teacher's layers a reader would read


@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> Path:
    return write_tiny_encoder(tmp_path_factory.mktemp("teacher") / "t", [*GREEK, "what", "follows"], layers=3, dim=8)


@pytest.fixture(scope="module")
def splits(teacher, tmp_path_factory) -> tuple[SquadSplit, SquadSplit]:
    """A tiny SQuAD (Greek letters), prepared, its splits carrying the teacher's states of LAYERS."""
    root = tmp_path_factory.mktemp("distill-data")
    train_f = write_json(root / "train.json", squad_json(greek_paragraphs(12)))
    dev_f = write_json(root / "dev.json", squad_json(greek_paragraphs(3)))
    glove = root / "glove.txt"
    glove.write_text("".join(f"{w} {i * 0.1:.1f} 0.5 1.0 -0.5\n" for i, w in enumerate(GREEK)))
    prepared = prepare_data(DataSource(train=train_f, dev=dev_f, embeddings=glove, cache_dir=root / "cache"))
    encoder = ContextualEncoder.load(ContextualSpec(str(teacher), LAYERS))
    return tuple(
        prepared.split(name).with_encoder(prepared.states_root, encoder, name, progress=False)
        for name in ("train", "dev")
    )


def test_token_pieces_are_the_runs_pool_averages():
    piece_offsets = np.array([[0, 4], [4, 7], [8, 9], [10, 12], [12, 13]])  # "read##ing a U.S"-like pieces
    token_offsets = np.array([[0, 7], [8, 9], [9, 10], [10, 13]])  # the third touches no piece
    lo, hi = token_pieces(piece_offsets, token_offsets)
    assert lo.tolist() == [0, 2, 3, 3] and hi.tolist() == [2, 3, 3, 5]
    states = np.arange(10, dtype=np.float32).reshape(5, 2)
    means = [states[a:b].mean(0) if b > a else np.zeros(2) for a, b in zip(lo, hi)]
    np.testing.assert_allclose(pool(states, piece_offsets, token_offsets), np.stack(means))


def test_the_student_starts_as_the_teachers_first_layers(teacher):
    files = find_encoder(str(teacher))
    config = student_config(files, 2, LAYERS)
    assert student_layers(2, LAYERS) == (1, 2) and student_layers(3, (6,)) == (3,)
    assert config["num_hidden_layers"] == 2 and config["rckit_student"]["teacher_layers"] == [2, 3]
    student, full = new_student(files, config), BertEncoder.load(files.root, files.config)
    ids, mask = torch.tensor([[2, 10, 11, 12, 3]]), torch.ones(1, 5, dtype=torch.bool)
    with torch.no_grad():
        torch.testing.assert_close(student(ids, mask, (1, 2)), full(ids, mask, (1, 2)))
    with pytest.raises(ValueError, match="between 1 and the teacher's 3"):
        student_config(files, 4, LAYERS)
    with pytest.raises(ValueError, match="cannot stand for"):
        student_layers(1, LAYERS)


def test_the_names_go_back_to_hugging_faces(teacher):
    from safetensors.torch import load_file

    hf = {k: v for k, v in load_file(str(teacher / "model.safetensors")).items() if not k.startswith("pooler")}
    back = ours_to_hf_names(hf_names_to_ours(hf))
    assert sorted(back) == sorted(hf)
    assert all(torch.equal(back[k], hf[k]) for k in hf)


def test_the_students_pooled_states_are_what_the_answering_path_reads(teacher, tmp_path):
    """What training pulls towards the teacher is what a reader later reads from the saved student:
    the same pieces, the same pooling onto words (the ContextualEncoder of the saved folder)."""
    files = find_encoder(str(teacher))
    config = student_config(files, 2, LAYERS)
    model = new_student(files, config)
    with torch.no_grad():  # not the teacher any more: every weight moved
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    folder = save_student(model, config, files, tmp_path / "student")
    texts = ["alpha beta gamma.", "what follows delta ?", "epsilon's zeta-eta theta"]
    reader = ContextualEncoder(find_encoder(str(folder)), (1, 2))
    tok = PieceTokenizer(teacher / "tokenizer.json")
    token_offsets = [np.array([[0, 5], [6, 10], [11, 16], [16, 17]]), np.array([[0, 4], [5, 12], [13, 18], [19, 20]])]
    token_offsets.append(np.array([[0, 7], [7, 9], [10, 18], [19, 24]]))
    expected = reader.states(texts, token_offsets)
    batch = []
    for (ids, piece_offsets), offsets, start in zip(tok.pieces(texts), token_offsets, (0, 4, 8)):
        from rckit.training.distill import Text

        batch.append(Text(ids, np.arange(start, start + len(offsets)), *token_pieces(piece_offsets, offsets)))
    saved = BertEncoder.load(folder, find_encoder(str(folder)).config)  # its weights as stored: in int8
    with torch.no_grad():
        pooled, rows = student_states(saved, (1, 2), batch, tok.cls, tok.sep)
    assert rows.tolist() == list(range(12))  # every word here touches a piece
    np.testing.assert_allclose(pooled.numpy(), np.concatenate(expected), atol=1e-5)


def test_the_student_is_saved_in_int8_a_scale_a_row_and_read_back_as_floats(teacher, tmp_path):
    from safetensors.numpy import load_file

    files = find_encoder(str(teacher))
    config = student_config(files, 2, LAYERS)
    model = new_student(files, config)
    folder = save_student(model, config, files, tmp_path / "student")
    stored = load_file(str(folder / "model.safetensors"))
    assert stored["encoder.layer.0.intermediate.dense.weight"].dtype == np.int8
    assert np.abs(stored["encoder.layer.0.intermediate.dense.weight"]).max() == 63  # 7 bits a channel
    assert np.abs(stored["embeddings.word_embeddings.weight"]).max() == 127  # 8 bits a word
    assert stored["encoder.layer.1.output.LayerNorm.weight"].dtype == np.float32
    back = encoder_weights(folder)
    assert not any(k.endswith("_scale") for k in back)
    ours = {k: v.numpy() for k, v in ours_to_hf_names(model.state_dict()).items()}
    for name, value in ours.items():
        if value.ndim == 2:  # within half a step of its row's scale
            step = stored[name + "_scale"][:, None]
            assert np.all(np.abs(back[name] - value) <= step / 2 + 1e-6), name
        else:
            np.testing.assert_array_equal(back[name], value)
    damaged = dict(stored)
    del damaged["encoder.layer.0.intermediate.dense.weight_scale"]
    from safetensors.numpy import save_file

    save_file(damaged, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match="intermediate.dense.weight has no .*_scale"):
        encoder_weights(folder)


def test_texts_longer_than_the_window_are_left_out_and_batches_keep_to_one_kind(teacher, splits):
    train, _ = splits
    tok = PieceTokenizer(teacher / "tokenizer.json")
    contexts, questions, left_out = texts_of(train, tok, 64)
    assert len(contexts) == len(train.contexts) and len(questions) == len(train.questions) and left_out == 0
    short, _, left_out = texts_of(train, tok, 16)  # contexts of 11-22 words, one piece a word
    assert 0 < len(short) < len(train.contexts) and left_out > 0
    texts, kinds = [*contexts, *questions], [0] * len(contexts) + [1] * len(questions)
    got = batches(texts, 200, 0, kinds)
    assert sorted(i for b in got for i in b) == list(range(len(texts)))
    assert all(len({kinds[i] for i in b}) == 1 for b in got)
    assert all(len(b) * (max(len(texts[i].ids) for i in b) + 2) <= 200 for b in got)


def test_distilling_lowers_the_held_out_error_and_a_resumed_run_continues_exactly(teacher, splits, tmp_path):
    train, dev = splits
    files = find_encoder(str(teacher))
    config = DistillConfig(
        n_layers=2, teacher_layers=LAYERS, lr=3e-3, epochs=6, batch_pieces=256, max_pieces=64, eval_every=1000
    )
    whole = distill(files, train, dev, tmp_path / "whole", config, log=lambda m: None, progress=False)
    assert whole["done"] and whole["step"] == whole["planned"] > 10
    lines = [json.loads(x) for x in (tmp_path / "whole" / "log.jsonl").read_text().splitlines()]
    assert lines[0]["step"] == 0 and lines[-1]["step"] == whole["step"]  # the start, then the end
    assert sum(lines[-1]["mse"]) < 0.8 * sum(lines[0]["mse"])
    assert whole["best"]["step"] > 0
    half = distill(
        files,
        train,
        dev,
        tmp_path / "half",
        config,
        max_steps=whole["planned"] // 2,
        log=lambda m: None,
        progress=False,
    )
    assert not half["done"]
    with pytest.raises(ValueError, match="--resume"):
        distill(files, train, dev, tmp_path / "half", config, log=lambda m: None, progress=False)
    other = find_encoder(str(write_tiny_encoder(tmp_path / "other", [*GREEK, "what"], layers=3, dim=8, seed=1)))
    with pytest.raises(ValueError, match="resume with that teacher"):
        distill(other, train, dev, tmp_path / "half", resume=True, log=lambda m: None, progress=False)
    before = torch.load(tmp_path / "half" / "last.pt", weights_only=True)["seconds"]
    rest = distill(files, train, dev, tmp_path / "half", resume=True, log=lambda m: None, progress=False)
    assert rest["done"] and rest["step"] == whole["step"]
    ended = json.loads((tmp_path / "half" / "log.jsonl").read_text().splitlines()[-1])
    assert before > 0 and ended["seconds"] >= before  # the run's time, counted across the resume
    a = torch.load(tmp_path / "whole" / "last.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "half" / "last.pt", weights_only=True)["model"]
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    encoder = find_encoder(str(tmp_path / "whole" / "encoder"))
    assert encoder.n_layers == 2 and encoder.config["rckit_student"]["teacher_digest"] == files.digest


def test_the_command_distils_into_an_encoder_folder_and_resumes(teacher, tmp_path, capsys):
    from rckit.cli import main

    train_f = write_json(tmp_path / "train.json", squad_json(greek_paragraphs(6)))
    dev_f = write_json(tmp_path / "dev.json", squad_json(greek_paragraphs(2)))
    glove = tmp_path / "glove.txt"
    glove.write_text("".join(f"{w} {i * 0.1:.1f} 0.5 1.0 -0.5\n" for i, w in enumerate(GREEK)))
    data = [
        "--train",
        str(train_f),
        "--dev",
        str(dev_f),
        "--embeddings",
        str(glove),
        "--cache-dir",
        str(tmp_path / "c"),
    ]
    args = ["distill", *data, "--teacher", str(teacher), "--teacher-layers", "2,3", "--out", str(tmp_path / "run")]
    assert main([*args, "--max-steps", "3", "--no-progress"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["step"] == 3 and not got["done"]
    assert main([*args, "--resume", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["done"]
    student = find_encoder(str(tmp_path / "run" / "encoder"))
    assert student.config["rckit_student"]["layers"] == [1, 2]
    assert (
        main(["distill", *data, "--teacher", str(teacher), "--teacher-layers", "two", "--out", str(tmp_path / "x")])
        == 2
    )
    assert "--teacher-layers 'two'" in capsys.readouterr().err
