"""Span decoding against a brute-force search, plus padding, null and text round trips.

The decoder takes NumPy arrays (it is shared by the PyTorch and the onnxruntime paths); cases are
drawn with torch, whose bf16 and fp16 make the ties real logits have, and handed over as a model's
caller does, ``logits.float().numpy()``.
"""

from __future__ import annotations

import math
import random
import re

import numpy as np
import pytest
import torch

from rckit.answering import decoding
from rckit.answering.decoding import SpanPrediction, char_span, span_to_text


def as_numpy(x):
    return x.detach().float().cpu().numpy() if x.is_floating_point() else x.cpu().numpy()


def best_spans(start_logits, end_logits, mask, max_answer_len=30):
    return decoding.best_spans(as_numpy(start_logits), as_numpy(end_logits), as_numpy(mask), max_answer_len)


def topk_spans(start_logits, end_logits, mask, k, max_answer_len=30):
    return decoding.topk_spans(as_numpy(start_logits), as_numpy(end_logits), as_numpy(mask), k, max_answer_len)


def brute_force(start_logits, end_logits, mask, max_answer_len, span_mask=None):
    """Every valid span of every row as a list of (score, s, e), best first, in float64."""
    span_mask = mask if span_mask is None else span_mask
    rows = []
    for b in range(start_logits.shape[0]):
        real = mask[b]
        lp_s = torch.full(real.shape, -math.inf, dtype=torch.float64)
        lp_e = lp_s.clone()
        if real.any():
            lp_s[real] = start_logits[b][real].double().log_softmax(0)
            lp_e[real] = end_logits[b][real].double().log_softmax(0)
        ok = span_mask[b].tolist()
        lp_s, lp_e = lp_s.tolist(), lp_e.tolist()
        spans = []
        for s in range(len(ok)):
            for e in range(s, min(len(ok), s + max_answer_len)):
                if all(ok[s : e + 1]):
                    spans.append((lp_s[s] + lp_e[e], s, e))
        spans.sort(key=lambda t: -t[0])
        rows.append(spans)
    return rows


def random_case(rng: random.Random, dtype: torch.dtype, holes: bool = False):
    B, T = rng.randint(1, 6), rng.randint(1, 60)
    scale = rng.choice([0.5, 3.0, 10.0])
    start_logits = (torch.randn(B, T) * scale).to(dtype)
    end_logits = (torch.randn(B, T) * scale).to(dtype)
    lengths = torch.tensor([rng.randint(0, T) for _ in range(B)])
    mask = torch.arange(T)[None, :] < lengths[:, None]  # (B, T), right padding
    if holes:
        mask &= torch.rand(B, T) > 0.2
    return start_logits, end_logits, mask, rng.randint(1, 40)


def assert_spans_valid(start, end, mask, max_answer_len):
    for b in range(mask.shape[0]):
        s, e = int(start[b]), int(end[b])
        assert 0 <= s <= e < s + max_answer_len
        assert bool(mask[b, s : e + 1].all()), "span crosses padding"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("holes", [False, True])
def test_best_spans_matches_brute_force(dtype, holes):
    rng = random.Random(0)
    torch.manual_seed(0)
    for _ in range(60):
        start_logits, end_logits, mask, max_answer_len = random_case(rng, dtype, holes)
        pred = best_spans(start_logits, end_logits, mask, max_answer_len=max_answer_len)
        assert pred.start.dtype == np.int64 and pred.score.dtype == np.float32
        assert pred.start.shape == pred.end.shape == pred.score.shape == (mask.shape[0],)
        for b, spans in enumerate(brute_force(start_logits, end_logits, mask, max_answer_len)):
            s, e, score = int(pred.start[b]), int(pred.end[b]), float(pred.score[b])
            if not spans:
                assert (s, e, score) == (-1, -1, -math.inf)
                continue
            assert_spans_valid(pred.start[b : b + 1], pred.end[b : b + 1], mask[b : b + 1], max_answer_len)
            assert score == pytest.approx(spans[0][0], abs=1e-4, rel=1e-5)
            # bf16 logits tie often; float32 ties only when two spans are nearly equal.
            margin = spans[0][0] - spans[1][0] if len(spans) > 1 else math.inf
            if dtype == torch.float32 and margin > 1e-4:
                assert (s, e) == spans[0][1:]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("holes", [False, True])
def test_topk_matches_brute_force(dtype, holes):
    rng = random.Random(1)
    torch.manual_seed(1)
    for _ in range(40):
        start_logits, end_logits, mask, max_answer_len = random_case(rng, dtype, holes)
        k = rng.randint(1, 12)
        pred = topk_spans(start_logits, end_logits, mask, k, max_answer_len=max_answer_len)
        assert pred.start.shape == pred.end.shape == pred.score.shape == (mask.shape[0], k)
        for b, spans in enumerate(brute_force(start_logits, end_logits, mask, max_answer_len)):
            n = min(k, len(spans))
            expected = [t[0] for t in spans[:n]]
            assert pred.score[b, :n].tolist() == pytest.approx(expected, abs=1e-4, rel=1e-5)
            assert (pred.score[b, 1:] <= pred.score[b, :-1]).all()
            by_span = {(s, e): score for score, s, e in spans}
            for j in range(n):
                s, e = int(pred.start[b, j]), int(pred.end[b, j])
                assert float(pred.score[b, j]) == pytest.approx(by_span[(s, e)], abs=1e-4, rel=1e-5)
            assert len({(int(pred.start[b, j]), int(pred.end[b, j])) for j in range(n)}) == n
            # Fewer valid spans than k: the rest is padding.
            assert (pred.start[b, n:] == -1).all() and (pred.end[b, n:] == -1).all()
            assert (pred.score[b, n:] == -math.inf).all()


def test_topk_scores_are_log_span_probabilities():
    """``exp(score) = p_start[s] * p_end[e]`` with both softmaxes over the real tokens: what
    rckit.Reader reports as an answer's score."""
    torch.manual_seed(3)
    start_logits, end_logits = torch.randn(3, 20), torch.randn(3, 20)
    mask = torch.arange(20)[None, :] < torch.tensor([[20], [11], [1]])
    top = topk_spans(start_logits, end_logits, mask, 5, max_answer_len=4)
    for b in range(3):
        p_start = start_logits[b][mask[b]].softmax(0)
        p_end = end_logits[b][mask[b]].softmax(0)
        for s, e, score in zip(top.start[b].tolist(), top.end[b].tolist(), top.score[b].tolist()):
            if s >= 0:
                assert math.exp(score) == pytest.approx(float(p_start[s] * p_end[e]), rel=1e-5)


def test_best_equals_top1():
    torch.manual_seed(2)
    start_logits, end_logits = torch.randn(8, 50), torch.randn(8, 50)
    mask = torch.arange(50)[None, :] < torch.randint(1, 51, (8, 1))
    best = best_spans(start_logits, end_logits, mask, max_answer_len=7)
    top = topk_spans(start_logits, end_logits, mask, 3, max_answer_len=7)
    assert np.array_equal(best.start, top.start[:, 0]) and np.array_equal(best.end, top.end[:, 0])
    assert np.allclose(best.score, top.score[:, 0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_padding_invariance(dtype):
    torch.manual_seed(3)
    B, T, P = 5, 30, 17
    start_logits, end_logits = torch.randn(B, T).to(dtype), torch.randn(B, T).to(dtype)
    mask = torch.arange(T)[None, :] < torch.tensor([[30], [1], [12], [29], [5]])
    base = best_spans(start_logits, end_logits, mask, max_answer_len=10)
    base_top = topk_spans(start_logits, end_logits, mask, 4, max_answer_len=10)

    big = torch.finfo(dtype).max
    for value in (big, -big, math.inf, math.nan):
        # Padded positions (both the old padding and P new columns) get absurd logits.
        junk_s = start_logits.masked_fill(~mask, value)
        junk_e = end_logits.masked_fill(~mask, -value)
        pad = torch.full((B, P), value, dtype=dtype)
        s2, e2 = torch.cat([junk_s, pad], 1), torch.cat([junk_e, pad], 1)
        m2 = torch.cat([mask, torch.zeros(B, P, dtype=torch.bool)], 1)
        pred = best_spans(s2, e2, m2, max_answer_len=10)
        assert np.array_equal(pred.start, base.start) and np.array_equal(pred.end, base.end)
        assert np.allclose(pred.score, base.score, atol=1e-5)
        top = topk_spans(s2, e2, m2, 4, max_answer_len=10)
        assert np.array_equal(top.start, base_top.start) and np.array_equal(top.end, base_top.end)
        assert np.allclose(top.score, base_top.score, atol=1e-5)


def test_max_len_one_gives_single_tokens_and_spans_stay_inside_mask():
    torch.manual_seed(4)
    B, T = 16, 40
    start_logits, end_logits = torch.randn(B, T), torch.randn(B, T)
    mask = torch.arange(T)[None, :] < torch.randint(1, T + 1, (B, 1))
    pred = best_spans(start_logits, end_logits, mask, max_answer_len=1)
    assert np.array_equal(pred.start, pred.end)
    # Make the padding look like the best possible answer: it must still be ignored.
    start_logits = start_logits.masked_fill(~mask, 1e4)
    end_logits = end_logits.masked_fill(~mask, 1e4)
    for max_answer_len in (1, 3, 30, 100):
        pred = best_spans(start_logits, end_logits, mask, max_answer_len=max_answer_len)
        assert_spans_valid(pred.start, pred.end, mask, max_answer_len)


def test_max_len_counts_both_ends():
    start_logits = torch.tensor([[9.0, 0.0, 0.0, 0.0, 0.0]])
    end_logits = torch.tensor([[0.0, 0.0, 5.0, 0.0, 9.0]])
    mask = torch.ones(1, 5, dtype=torch.bool)
    # (0, 4) is 5 tokens long: allowed with max_answer_len=5, not with max_answer_len=4.
    assert best_spans(start_logits, end_logits, mask, max_answer_len=5).end.item() == 4
    assert best_spans(start_logits, end_logits, mask, max_answer_len=4).end.item() == 2


def test_single_real_token_and_empty_rows():
    start_logits, end_logits = torch.randn(3, 6) * 5, torch.randn(3, 6) * 5
    mask = torch.tensor([[True] + [False] * 5, [False] * 6, [True] * 6])
    pred = best_spans(start_logits, end_logits, mask)
    assert (pred.start[0].item(), pred.end[0].item()) == (0, 0)
    assert pred.score[0].item() == pytest.approx(0.0, abs=1e-6)  # log 1 + log 1
    assert (pred.start[1].item(), pred.end[1].item(), pred.score[1].item()) == (-1, -1, -math.inf)
    top = topk_spans(start_logits, end_logits, mask, 3)
    assert top.start[0].tolist() == [0, -1, -1] and top.start[1].tolist() == [-1, -1, -1]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_any_float_dtype_gives_float32_scores_and_equal_spans(dtype):
    rng = np.random.default_rng(5)
    start_logits, end_logits = rng.normal(size=(4, 20)) * 3, rng.normal(size=(4, 20)) * 3
    mask = np.arange(20)[None, :] < np.array([[20], [7], [1], [13]])
    pred = decoding.best_spans(start_logits.astype(dtype), end_logits.astype(dtype), mask)
    assert isinstance(pred, SpanPrediction)
    assert pred.score.dtype == np.float32 and np.isfinite(pred.score).all()
    # fp16 rounds the logits: compare with the rounded values decoded in float32.
    same = decoding.best_spans(
        start_logits.astype(dtype).astype(np.float32), end_logits.astype(dtype).astype(np.float32), mask
    )
    assert np.array_equal(pred.start, same.start) and np.array_equal(pred.end, same.end)


def test_ties_go_to_the_smallest_start_then_the_shortest_span_in_best_and_topk():
    start_logits = np.zeros((1, 6), np.float32)
    end_logits = np.zeros((1, 6), np.float32)
    mask = np.ones((1, 6), bool)
    best = decoding.best_spans(start_logits, end_logits, mask, max_answer_len=3)
    assert (best.start[0], best.end[0]) == (0, 0)
    top = decoding.topk_spans(start_logits, end_logits, mask, 4, max_answer_len=3)
    assert list(zip(top.start[0].tolist(), top.end[0].tolist())) == [(0, 0), (0, 1), (0, 2), (1, 1)]


def test_bad_arguments():
    x, mask = np.zeros((2, 5), np.float32), np.ones((2, 5), bool)
    with pytest.raises(ValueError, match="max_answer_len"):
        decoding.best_spans(x, x, mask, max_answer_len=0)
    with pytest.raises(ValueError, match="mask must be bool"):
        decoding.best_spans(x, x, mask.astype(np.int64))
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        decoding.best_spans(x, x[:, :4], mask)
    with pytest.raises(ValueError, match="k must be"):
        decoding.topk_spans(x, x, mask, k=0)
    with pytest.raises(ValueError, match="floating point"):
        decoding.best_spans(x.astype(np.int64), x, mask)


CONTEXT = "Zürich   is  a city in Switzerland.\n東京 (Tōkyō)    hosts   2020 🏅 games."


def whitespace_offsets(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in re.finditer(r"\S+", text)]


def test_span_to_text_round_trip():
    offsets = whitespace_offsets(CONTEXT)
    tokens = CONTEXT.split()
    for i, token in enumerate(tokens):
        assert span_to_text(CONTEXT, offsets, i, i) == token
    assert span_to_text(CONTEXT, offsets, 0, 2) == "Zürich   is  a"
    assert span_to_text(CONTEXT, offsets, 5, 7) == "Switzerland.\n東京 (Tōkyō)"
    assert span_to_text(CONTEXT, offsets, 8, 11) == "hosts   2020 🏅 games."
    assert char_span(offsets, 0, 0) == (0, 6)
    # Every token span maps back to text that re-tokenises to exactly those tokens.
    for s in range(len(tokens)):
        for e in range(s, len(tokens)):
            assert span_to_text(CONTEXT, offsets, s, e).split() == tokens[s : e + 1]


def test_span_to_text_accepts_arrays_tensors_and_tensor_indices():
    offsets = whitespace_offsets(CONTEXT)
    expected = span_to_text(CONTEXT, offsets, 1, 6)
    as_array = np.array(offsets, dtype=np.int64)  # (T, 2)
    as_tensor = torch.tensor(offsets)  # (T, 2)
    assert span_to_text(CONTEXT, as_array, 1, 6) == expected
    assert span_to_text(CONTEXT, as_tensor, torch.tensor(1), torch.tensor(6)) == expected
    assert char_span(as_tensor, 1, 6) == char_span(offsets, 1, 6)


def test_span_to_text_rejects_invalid_spans():
    offsets = whitespace_offsets(CONTEXT)
    for start, end in [(-1, -1), (3, 2), (0, len(offsets))]:
        with pytest.raises(ValueError):
            span_to_text(CONTEXT, offsets, start, end)
    with pytest.raises(ValueError):
        span_to_text("short", offsets, 0, 3)


def test_decoding_end_to_end_with_text():
    offsets = whitespace_offsets(CONTEXT)
    T = len(offsets)
    start_logits, end_logits = torch.zeros(1, T + 3), torch.zeros(1, T + 3)
    start_logits[0, 6], end_logits[0, 7] = 8.0, 8.0
    mask = torch.arange(T + 3)[None, :] < T
    pred = best_spans(start_logits, end_logits, mask)
    assert span_to_text(CONTEXT, offsets, pred.start[0], pred.end[0]) == "東京 (Tōkyō)"


def test_large_batch_runs():
    torch.manual_seed(6)
    B, T = 64, 400
    start_logits, end_logits = torch.randn(B, T), torch.randn(B, T)
    mask = torch.arange(T)[None, :] < torch.randint(1, T + 1, (B, 1))
    pred = best_spans(start_logits, end_logits, mask, max_answer_len=30)
    assert pred.start.shape == (B,)
    assert_spans_valid(pred.start, pred.end, mask, 30)
    top = topk_spans(start_logits, end_logits, mask, 20, max_answer_len=30)
    assert top.start.shape == (B, 20)
