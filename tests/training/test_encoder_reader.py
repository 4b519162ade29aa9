"""rckit's own reader on a tiny random encoder written here: its windows and targets, the pointer's
decoding against brute force, the model's contract, and fine-tuning (the loss falls, a stopped run
resumed from last.pt ends where an unbroken one ends, a run continued from its carry alone goes on
from the same weights, step and learning curve; the refusals)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from rckit.answering.pointer import no_answer_probability, point
from rckit.contextual.encoders import find_encoder
from rckit.contextual.pieces import PieceTokenizer
from rckit.data.pair_windows import MAX_QUESTION, padded, pair_windows
from rckit.model_files.carry import load_carry, save_carry
from rckit.models.encoder_reader import EncoderReader, EncoderReaderConfig, pretrained_weights
from rckit.models.losses import span_loss
from rckit.training.encoder_reader import (
    Items,
    ReaderTrainConfig,
    calibrate,
    fine_tune,
    length_batches,
    make_items,
    pairs_of,
    tensors,
)
from tests.conftest import GREEK, greek_paragraphs, squad_json, write_json, write_tiny_encoder


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path:
    return write_tiny_encoder(tmp_path_factory.mktemp("reader-enc") / "tiny", [*GREEK, "what", "follows"], dim=8)


@pytest.fixture(scope="module")
def tokenizer(encoder) -> PieceTokenizer:
    return PieceTokenizer(encoder / "tokenizer.json")


def tiny_model(encoder: Path, dropout: float = 0.0) -> EncoderReader:
    files = find_encoder(str(encoder))
    config = EncoderReaderConfig(dropout=dropout)
    return EncoderReader.from_encoder(pretrained_weights(encoder / "model.safetensors"), files.config, config)


PASSAGE = " ".join(GREEK * 3) + "."  # 36 words: longer than one window of 24 pieces


# ---------------------------------------------------------------- 1. windows and targets


def test_windows_cover_the_passage_and_each_piece_answers_from_one(tokenizer):
    q = tokenizer.pieces(["what follows beta ?"])[0][0]
    windows = pair_windows(q, tokenizer.pieces([PASSAGE])[0], tokenizer.cls, tokenizer.sep, 24, stride=6)
    n = len(windows.pieces)
    assert len(windows.ids) > 1 and windows.spans[0][0] == 0 and windows.spans[-1][1] == n
    for w, (ids, (lo, hi)) in enumerate(zip(windows.ids, windows.spans)):
        assert len(ids) <= 24 and ids[0] == tokenizer.cls and ids[windows.q_len + 1] == tokenizer.sep
        assert list(ids[windows.first : -1]) == list(windows.pieces[lo:hi]) and ids[-1] == tokenizer.sep
        assert list(windows.types(w)) == [0] * windows.first + [1] * (len(ids) - windows.first)
        assert windows.allowed(w)[0] and not windows.allowed(w)[1 : windows.first].any()
    # each piece answers from a window that holds it
    for piece, w in enumerate(windows.owner):
        lo, hi = windows.spans[w]
        assert lo <= piece < hi
    long_q = tokenizer.pieces([" ".join(["alpha"] * 100)])[0][0]
    assert pair_windows(long_q, tokenizer.pieces([PASSAGE])[0], 2, 3, 64 + 20).q_len == MAX_QUESTION
    with pytest.raises(ValueError, match="leaves"):
        pair_windows(long_q, tokenizer.pieces([PASSAGE])[0], 2, 3, 64)


def test_targets_point_at_the_answer_where_the_window_holds_it_else_at_cls(tokenizer):
    q = tokenizer.pieces(["what follows beta ?"])[0][0]
    windows = pair_windows(q, tokenizer.pieces([PASSAGE])[0], tokenizer.cls, tokenizer.sep, 24, stride=6)
    start = PASSAGE.index("gamma")
    end = start + len("gamma delta")
    targets = windows.targets(start, end)
    holding = [w for w, (lo, hi) in enumerate(windows.spans) if targets[w, 0] > 0]
    assert holding and len(holding) < len(windows.ids)
    for w in range(len(windows.ids)):
        if w in holding:
            lo = windows.spans[w][0]
            first, last = lo + targets[w, 0] - windows.first, lo + targets[w, 1] - windows.first
            assert PASSAGE[windows.offsets[first, 0] : windows.offsets[last, 1]] == "gamma delta"
        else:
            assert list(targets[w]) == [0, 0]
    assert not windows.targets(None, None).any()


def test_a_batch_pads_and_marks_where_pointers_may_stand(tokenizer):
    rows = [np.array([2, 10, 3, 20, 21, 3]), np.array([2, 10, 11, 3, 20, 3])]
    x = padded(rows, [1, 2])
    assert x["ids"].shape == (2, 6) and x["mask"].all()
    assert list(x["allowed"][0]) == [True, False, False, True, True, False]
    assert list(x["allowed"][1]) == [True, False, False, False, True, False]
    assert list(x["types"][1]) == [0, 0, 0, 0, 1, 1]


# ---------------------------------------------------------------- 2. the pointer


def test_the_best_spans_and_the_null_are_those_brute_force_finds(tokenizer):
    rng = np.random.default_rng(0)
    q = tokenizer.pieces(["what follows beta ?"])[0][0]
    windows = pair_windows(q, tokenizer.pieces([PASSAGE])[0], tokenizer.cls, tokenizer.sep, 24, stride=6)
    start = [rng.normal(size=len(ids)) for ids in windows.ids]
    end = [rng.normal(size=len(ids)) for ids in windows.ids]
    got = point(windows, start, end, np.zeros(len(tokenizer.continues), bool), top_k=3, max_answer=4)
    best = []
    for w, (lo, hi) in enumerate(windows.spans):
        for i, j in itertools.product(range(lo, hi), repeat=2):
            if i <= j < i + 4 and windows.owner[i] == w:
                best.append((start[w][windows.first + i - lo] + end[w][windows.first + j - lo], i, j))
    best.sort(reverse=True)
    assert [(s.first, s.last) for s in got.spans] == [(i, j) for _, i, j in best[:3]]
    assert got.spans[0].score == pytest.approx(best[0][0])
    null = min(s[0] + e[0] for s, e in zip(start, end))
    assert got.null == pytest.approx(null) and got.margin == pytest.approx(null - best[0][0])
    assert 0 < got.spans[0].probability < 1


def test_a_span_never_ends_inside_a_word(tokenizer):
    passage = "alpha betazz gamma"  # "betazz": beta ##z ##z
    ids, offsets = tokenizer.pieces([passage])[0]
    windows = pair_windows(np.array([5]), (ids, offsets), tokenizer.cls, tokenizer.sep, 24)
    inner = [k for k in range(len(ids)) if tokenizer.continues[ids[k]]][0]  # the first ##z
    start = [np.full(len(windows.ids[0]), -5.0)]
    end = [np.full(len(windows.ids[0]), -5.0)]
    start[0][windows.first + inner] = end[0][windows.first + inner] = 5.0
    got = point(windows, start, end, tokenizer.continues)
    assert passage[got.spans[0].start : got.spans[0].end] == "betazz"


def test_the_margin_is_calibrated_to_the_share_unanswerable():
    rng = np.random.default_rng(1)
    unanswerable = rng.random(4000) < 0.4
    margins = np.where(unanswerable, 2.0, -2.0) + rng.normal(size=4000) * 2
    a, b = calibrate(margins, unanswerable)
    p = no_answer_probability(margins, a, b)
    assert a > 0 and abs(p.mean() - unanswerable.mean()) < 0.01
    high = margins > 4
    assert p[high].mean() > 0.9 and unanswerable[high].mean() > 0.9
    assert calibrate(margins, np.zeros(4000, bool)) == (1.0, 0.0)


# ---------------------------------------------------------------- 3. the model


def test_the_model_scores_only_cls_and_the_passage_and_learns_everywhere_but_the_words(encoder, tokenizer):
    torch.manual_seed(0)  # the head's draw: one in a dozen leaves a gradient exactly 0 on this tiny batch
    model = tiny_model(encoder)
    params = model.trainable()
    assert all(p is not model.bert.word.weight for p in params)
    rows = [np.array([2, 40, 41, 3, 50, 51, 52, 3]), np.array([2, 40, 3, 50, 3])]
    x = tensors(rows, [2, 1])
    out = model(x["ids"], x["mask"], x["types"], x["allowed"])
    low = torch.finfo(out.start.dtype).min
    assert (out.start[~x["allowed"]] == low).all() and (out.start[x["allowed"]] > low).all()
    span_loss(out.start, out.end, torch.tensor([5, 0]), torch.tensor([6, 0])).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in params)
    assert model.bert.word.weight.grad is None
    # padding changes nothing: the second row alone scores as in the batch
    alone = tensors(rows[1:], [1])
    one = model(alone["ids"], alone["mask"], alone["types"], alone["allowed"])
    torch.testing.assert_close(one.start[0], out.start[1, :5], rtol=1e-5, atol=1e-5)


def test_fine_tuning_steps_fit_a_small_batch(tmp_path):
    # 16 wide: at 8 the tiny model stalls on the uniform answer (loss 2 log 8) under some thread counts
    wide = write_tiny_encoder(tmp_path / "wide", [*GREEK, "what", "follows"], dim=16)
    tokenizer = PieceTokenizer(wide / "tokenizer.json")
    torch.manual_seed(0)
    passage = " ".join(GREEK)
    qas = []
    for k in range(1, 9):  # "what follows alpha ?" -> beta, ...: every question once in the passage
        start = len(" ".join(GREEK[:k])) + 1
        qas.append((f"q{k}", f"what follows {GREEK[k - 1]} ?", [(GREEK[k], start)]))
    pairs, _, kinds = pairs_of(squad_json([(passage, qas)]))
    items = make_items(tokenizer, pairs, kinds, 48, 16, progress=False)
    model = tiny_model(wide)
    opt = torch.optim.AdamW(model.trainable(), 3e-3)
    idx = list(range(len(items)))
    y = torch.from_numpy(items.target.astype(np.int64))
    losses = []
    for _ in range(120):
        x = tensors(items.rows(idx), items.q_len[idx].tolist())
        out = model(x["ids"], x["mask"], x["types"], x["allowed"])
        loss = span_loss(out.start, out.end, y[:, 0], y[:, 1])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.1 * losses[0]


def test_windows_are_kept_and_batched_by_length(tmp_path, tokenizer):
    raw = squad_json(greek_paragraphs(4), version="2.0")
    raw["data"][0]["paragraphs"][0]["qas"][0].update(answers=[], is_impossible=True, kind="sentence_removed")
    pairs, ids, kinds = pairs_of(raw)
    assert pairs[0][2:] == (None, None) and kinds[0] == "sentence_removed" and kinds[1] == "squad"
    items = make_items(tokenizer, pairs, kinds, 40, 12, progress=False)
    assert items.counts()["sentence_removed"]["no_answer"] == items.counts()["sentence_removed"]["windows"] >= 1
    items.save(tmp_path / "items.npz")
    again = Items.load(tmp_path / "items.npz")
    assert all(np.array_equal(getattr(items, f), getattr(again, f)) for f in ("ids", "bounds", "q_len", "target"))
    assert again.kinds == items.kinds
    lengths = np.diff(items.bounds)
    order = length_batches(lengths, 3, seed=1)
    assert sorted(i for b in order for i in b) == list(range(len(items)))
    assert order == length_batches(lengths, 3, seed=1) and order != length_batches(lengths, 3, seed=2)


# ---------------------------------------------------------------- 4. the run


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """A training file (with unanswerable questions), a v1.1 dev file and a v2.0 dev file of four
    articles (training quarter 0, tuning quarter 2), half its questions unanswerable."""
    root = tmp_path_factory.mktemp("reader-data")
    train = squad_json(greek_paragraphs(5), version="2.0")
    for para in train["data"][0]["paragraphs"]:
        para["qas"][2].update(answers=[], is_impossible=True, question="what follows omega ?", kind="near_miss")
    articles = []
    for a in range(4):
        doc = squad_json([(c, [(f"{a}{q}", t, ans) for q, t, ans in qas]) for c, qas in greek_paragraphs(2 + a)[a:]])
        for para in doc["data"][0]["paragraphs"]:
            for qa in para["qas"]:
                qa["is_impossible"] = False
            for qa in para["qas"][1:]:
                qa.update(question=qa["question"].replace("follows", "follows omega"), answers=[], is_impossible=True)
        articles.append({"title": f"A{a}", "paragraphs": doc["data"][0]["paragraphs"]})
    return {
        "train": write_json(root / "train.json", train),
        "dev": write_json(root / "dev.json", squad_json(greek_paragraphs(3))),
        "v2": write_json(root / "v2.json", {"version": "v2.0", "data": articles}),
    }


CONFIG = dict(max_pieces=48, stride=16, batch_size=4, epochs=3, eval_every=3, dev_questions=5)


def _run(encoder, files, out, **kw):
    return fine_tune(
        find_encoder(str(encoder)),
        files["train"],
        files["dev"],
        files["v2"],
        out,
        config=ReaderTrainConfig(**CONFIG),
        progress=False,
        **kw,
    )


def test_a_run_stopped_and_resumed_ends_where_an_unbroken_run_ends(encoder, files, tmp_path):
    whole = _run(encoder, files, tmp_path / "whole")
    assert whole["done"] and whole["step"] == whole["planned"] > 6
    first = _run(encoder, files, tmp_path / "cut", max_steps=4)
    assert first["step"] == 4 and not first["done"]
    with pytest.raises(ValueError, match="already holds a run"):
        _run(encoder, files, tmp_path / "cut")
    rest = _run(encoder, files, tmp_path / "cut", resume=True)
    assert rest["done"] and rest["step"] == whole["step"]
    a = torch.load(tmp_path / "whole" / "last.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "cut" / "last.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    log = [json.loads(line) for line in (tmp_path / "whole" / "log.jsonl").read_text().splitlines()]
    assert [line["step"] for line in log][:2] == [3, 6]
    for line in log:
        assert 0 <= line["tune_auc"] <= 1 and 0 <= line["dev_f1"] <= 100 and line["tune_hasans_f1"] is not None
    best = torch.load(tmp_path / "whole" / "best.pt", weights_only=True)
    assert best["best"]["tune_f1"] == max(line["tune_f1"] for line in log)
    with pytest.raises(ValueError, match="positions"):
        fine_tune(
            find_encoder(str(encoder)),
            files["train"],
            files["dev"],
            files["v2"],
            tmp_path / "long",
            config=ReaderTrainConfig(**{**CONFIG, "max_pieces": 65}),
            progress=False,
        )


def test_a_run_goes_on_from_its_carry_alone(encoder, files, tmp_path):
    carry = tmp_path / "state" / "reader.carry.safetensors"
    first = _run(encoder, files, tmp_path / "machine1", max_steps=6, carry=carry)
    assert first["step"] == 6 and carry.is_file()
    kept = torch.load(tmp_path / "machine1" / "last.pt", weights_only=True)["model"]
    # another machine: the run's folder is gone, only the carry travelled
    with pytest.raises(ValueError, match="already holds a run's carry"):
        _run(encoder, files, tmp_path / "machine2", carry=carry)
    rest = _run(encoder, files, tmp_path / "machine2", resume=True, carry=carry, max_steps=7)
    assert rest["step"] == 7
    other = json.loads(files["train"].read_text())
    other["data"][0]["paragraphs"] = other["data"][0]["paragraphs"][1:]
    moved = {**files, "train": write_json(tmp_path / "other-train.json", other)}
    with pytest.raises(ValueError, match="trained on another file"):
        _run(encoder, moved, tmp_path / "machine3", resume=True, carry=carry)
    log = [json.loads(line)["step"] for line in (tmp_path / "machine2" / "log.jsonl").read_text().splitlines()]
    assert log == [3, 6, 7]  # the curve came with the carry
    start = pretrained_weights(encoder / "model.safetensors")
    tensors_, meta = load_carry(carry, start)
    assert meta["step"] == 7
    # the carry of step 6 rebuilt the weights to within int8 of a change a row
    six, _ = _carry_of(kept, start, tmp_path)
    for name, value in six.items():
        change = (kept[name] - start.get(name, 0)).abs().max()
        assert (value - kept[name]).abs().max() <= change / 127 + 1e-6, name


def _carry_of(model_state: dict, start: dict, tmp_path: Path):
    path = tmp_path / "again.safetensors"
    trained = {k: v for k, v in model_state.items() if k != "bert.word.weight"}
    save_carry(path, trained, start, {"step": 6})
    return load_carry(path, start)


def test_a_damaged_carry_is_refused_naming_it(encoder, files, tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a carry at all")
    with pytest.raises(ValueError, match="bad.safetensors: not a fine-tuning run's carry"):
        _run(encoder, files, tmp_path / "run", resume=True, carry=bad)
