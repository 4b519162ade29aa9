"""Numeric tests for the shared layers in rckit.layers."""

from __future__ import annotations

import math

import pytest

import torch
import torch.nn.functional as F

from rckit.layers.attention import ContextQueryAttention, MultiHeadSelfAttention
from rckit.layers.conv import DepthwiseSeparableConv1d, depthwise_conv1d
from rckit.layers.embedding import CharCNN, PartiallyFrozenEmbedding
from rckit.layers.highway import Highway
from rckit.layers.masking import mask_logits, masked_softmax


def test_masked_softmax_zeroes_masked_entries_and_full_rows():
    torch.manual_seed(0)
    logits = torch.randn(3, 5)
    mask = torch.tensor([[True, True, False, True, False], [True] * 5, [False] * 5])
    p = masked_softmax(logits, mask, dim=-1)
    assert torch.isfinite(p).all()
    assert (p[~mask] == 0).all()
    torch.testing.assert_close(p[0, [0, 1, 3]], torch.softmax(logits[0, [0, 1, 3]], dim=0))
    torch.testing.assert_close(p[1], torch.softmax(logits[1], dim=0))
    assert (p[2] == 0).all()  # a fully masked row is all zeros, not NaN or uniform


def test_masked_softmax_low_precision_uses_dtype_min():
    logits = torch.randn(2, 4).to(torch.bfloat16)
    mask = torch.tensor([[True, False, True, False], [False] * 4])
    filled = mask_logits(logits, mask)
    assert filled.dtype == torch.bfloat16
    assert (filled[~mask] == torch.finfo(torch.bfloat16).min).all()
    assert torch.isfinite(masked_softmax(logits, mask)).all()


def test_highway_keeps_shape():
    x = torch.randn(2, 7, 10)
    assert Highway(10, n_layers=2)(x).shape == (2, 7, 10)


def test_depthwise_separable_conv_equals_plain_conv():
    torch.manual_seed(0)
    conv = DepthwiseSeparableConv1d(6, 4, kernel_size=5)
    x = torch.randn(2, 9, 6)  # (B, T, C)
    dw = conv.depthwise.weight  # (C_in, 1, k)
    pw = conv.pointwise.weight  # (C_out, C_in, 1)
    full = pw[:, :, 0].unsqueeze(2) * dw[:, 0, :].unsqueeze(0)  # (C_out, C_in, k)
    expected = F.conv1d(x.transpose(1, 2), full, conv.pointwise.bias, padding=2).transpose(1, 2)
    torch.testing.assert_close(conv(x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k", [1, 5, 7])
def test_depthwise_conv1d_matches_grouped_conv_forward_and_backward(k):
    torch.manual_seed(0)
    C = 6
    x = torch.randn(3, 11, C, dtype=torch.float64, requires_grad=True)  # (B, T, C)
    w = torch.randn(C, 1, k, dtype=torch.float64, requires_grad=True)
    ours = depthwise_conv1d(x, w)
    ref = F.conv1d(x.transpose(1, 2), w, padding=k // 2, groups=C).transpose(1, 2)
    torch.testing.assert_close(ours, ref)
    g = torch.randn_like(ref)
    gx, gw = torch.autograd.grad(ours, (x, w), g)
    rx, rw = torch.autograd.grad(ref, (x, w), g)
    torch.testing.assert_close(gx, rx)
    torch.testing.assert_close(gw, rw)


def test_depthwise_conv1d_inference_paths_match_grouped_conv(monkeypatch):
    import rckit.layers.conv as conv_mod

    torch.manual_seed(0)
    calls, shifted_sum = [], conv_mod._shifted_sum
    monkeypatch.setattr(conv_mod, "_shifted_sum", lambda *a: calls.append("shifted") or shifted_sum(*a))
    for B, T, k in [(1, 1, 5), (1, 2, 7), (1, 30, 7), (1, 700, 5), (2, 200, 5), (3, 4, 3)]:
        x, w = torch.randn(B, T, 8), torch.randn(8, 1, k)
        ref = F.conv1d(x.transpose(1, 2), w, padding=k // 2, groups=8).transpose(1, 2)
        calls.clear()
        with torch.inference_mode():
            torch.testing.assert_close(depthwise_conv1d(x, w), ref, rtol=1e-5, atol=1e-5)
        assert calls == (["shifted"] if B == 1 else []), (B, T)


def test_depthwise_conv1d_in_bf16_matches_fp32_and_autocast_runs_the_conv_in_bf16():
    torch.manual_seed(0)
    x, w = torch.randn(2, 9, 4), torch.randn(4, 1, 5)
    ref = F.conv1d(x.transpose(1, 2), w, padding=2, groups=4).transpose(1, 2)
    y16 = depthwise_conv1d(x.bfloat16(), w)
    assert y16.dtype == torch.bfloat16
    torch.testing.assert_close(y16.float(), ref, rtol=3e-2, atol=3e-2)
    # bf16 input: the input gradient comes back in bf16, the weight gradient (fp32 sums) in fp32
    xb = x.bfloat16().requires_grad_()
    wb = w.clone().requires_grad_()
    g = torch.randn(2, 9, 4)
    gx, gw = torch.autograd.grad(depthwise_conv1d(xb, wb), (xb, wb), g.bfloat16())
    rx, rw = torch.autograd.grad(depthwise_conv1d(xb.float(), wb), (xb, wb), g)
    assert gx.dtype == torch.bfloat16 and gw.dtype == torch.float32
    torch.testing.assert_close(gx.float(), rx.float(), rtol=3e-2, atol=3e-2)
    torch.testing.assert_close(gw, rw, rtol=1e-2, atol=1e-2)
    # the module under CPU autocast computes in bf16, like nn.Conv1d would, and matches fp32
    conv = DepthwiseSeparableConv1d(4, 3, kernel_size=5)
    with torch.autocast("cpu", torch.bfloat16):
        out = conv(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), conv(x), rtol=5e-2, atol=5e-2)


def test_trilinear_similarity_equals_naive_concat():
    torch.manual_seed(0)
    d, Tc, Tq = 5, 4, 3
    att = ContextQueryAttention(d)
    c, q = torch.randn(2, Tc, d), torch.randn(2, Tq, d)
    w = torch.cat([att.w_c, att.w_q, att.w_cq])  # (3d,)
    c_i = c.unsqueeze(2).expand(-1, -1, Tq, -1)  # (B, Tc, Tq, d)
    q_j = q.unsqueeze(1).expand(-1, Tc, -1, -1)  # (B, Tc, Tq, d)
    naive = torch.cat([c_i, q_j, c_i * q_j], dim=-1) @ w  # (B, Tc, Tq)
    torch.testing.assert_close(att.similarity(c, q), naive)


def test_context_query_attention_matches_definition():
    torch.manual_seed(0)
    d, Tc, Tq = 4, 5, 3
    att = ContextQueryAttention(d)
    c, q = torch.randn(1, Tc, d), torch.randn(1, Tq, d)
    c_mask = torch.tensor([[True, True, True, True, False]])
    q_mask = torch.tensor([[True, True, False]])
    out = att(c, q, c_mask, q_mask)
    s = att.similarity(c, q)[0, :4, :2]  # real rows and columns only
    C, Q = c[0, :4], q[0, :2]
    A = torch.softmax(s, dim=1) @ Q
    Bm = torch.softmax(s, dim=1) @ torch.softmax(s, dim=0).T @ C
    torch.testing.assert_close(out[0, :4], torch.cat([C, A, C * A, C * Bm], dim=-1))


def test_self_attention_ignores_masked_keys():
    torch.manual_seed(0)
    att = MultiHeadSelfAttention(8, n_heads=2).eval()
    x = torch.randn(2, 6, 8)
    mask = torch.tensor([[True] * 6, [True, True, True, True, False, False]])
    y = att(x, mask)
    x2 = x.clone()
    x2[1, 4:] = 100.0 * torch.randn(2, 8)
    y2 = att(x2, mask)
    torch.testing.assert_close(y2[1, :4], y[1, :4])
    torch.testing.assert_close(y2[0], y[0])
    # And it is ordinary masked multi-head attention.
    q, k, v = att.qkv(x[1:]).view(1, 6, 3, 2, 4).permute(2, 0, 3, 1, 4)  # 3 x (1, H, T, d_h)
    scores = mask_logits(q @ k.transpose(-1, -2) / math.sqrt(4), mask[1:, None, None, :])  # (1, H, T, T)
    heads = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(1, 6, 8)  # (1, T, d)
    torch.testing.assert_close(y[1:], att.out(heads))


def test_partially_frozen_embedding_looks_up_both_parts():
    vectors = torch.randn(10, 3)
    emb = PartiallyFrozenEmbedding(vectors, n_trainable=4)
    ids = torch.tensor([[0, 3, 4, 9], [1, 5, 2, 8]])
    torch.testing.assert_close(emb(ids), vectors[ids])
    assert [name for name, _ in emb.named_parameters()] == ["trainable"]
    assert emb.frozen.shape == (6, 3)
    emb(ids).sum().backward()
    assert emb.trainable.grad[[0, 1, 2, 3]].abs().sum() > 0


def test_char_cnn_ignores_char_padding():
    torch.manual_seed(0)
    cnn = CharCNN(n_chars=12, char_dim=6, out_dim=5, width=3)
    chars = torch.tensor([[[3, 4, 5, 0], [7, 0, 0, 0], [0, 0, 0, 0]]])  # (B=1, T=3, W=4)
    wider = F.pad(chars, (0, 3))  # same words padded to W=7
    out = cnn(chars)
    torch.testing.assert_close(cnn(wider), out)
    assert (out[0, 2] == 0).all()  # an all-padding token gives a zero vector


def test_dropout_keeps_about_1_minus_p_and_preserves_the_mean():
    from rckit.layers.dropout import Dropout, dropout, keep_mask

    torch.manual_seed(0)
    keep, inv_keep = keep_mask((1000, 1000), 0.1, torch.device("cpu"))
    assert keep.dtype == torch.uint8 and set(torch.unique(keep).tolist()) == {0, 1}
    assert abs(keep.float().mean().item() - 0.9) < 2e-3
    assert abs(inv_keep - 1 / 0.9) < 1e-4  # the rate is p rounded to a multiple of 2^-16
    x = torch.ones(1000, 1000)
    y = dropout(x, 0.1)
    assert set(torch.unique(y).tolist()) == {0.0, torch.tensor(inv_keep).item()}  # float32
    assert abs(y.mean().item() - 1.0) < 3e-3
    # Gradient: the same mask and scale.
    x = torch.randn(50, 40, requires_grad=True)
    y = dropout(x, 0.3)
    y.sum().backward()
    kept = y != 0
    assert 0.55 < kept.float().mean().item() < 0.85
    torch.testing.assert_close(y, x * kept / 0.7, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(x.grad, kept.float() / 0.7, rtol=1e-4, atol=1e-6)
    # Eval, p = 0, p = 1 and the module.
    assert dropout(x, 0.5, training=False) is x and dropout(x, 0.0) is x
    assert (dropout(x, 1.0) == 0).all()
    m = Dropout(0.2).eval()
    assert m(x) is x and "p=0.2" in repr(m)


def test_dropout_in_bf16_keeps_dtype():
    from rckit.layers.dropout import dropout

    x = torch.randn(8, 16, dtype=torch.bfloat16)
    assert dropout(x, 0.1).dtype == torch.bfloat16


def test_positive_mask_is_y_greater_than_zero_in_every_float_type():
    from rckit.layers.dropout import positive_mask

    torch.manual_seed(0)
    special = [0.0, -0.0, 1e-40, -1e-40, float("inf"), float("-inf"), 1.0, -1.0]  # 1e-40: subnormal in fp32
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        y = torch.cat([torch.tensor(special), torch.randn(1000)]).to(dtype)
        bits = y.clone()
        m = positive_mask(y)
        assert m.dtype == torch.uint8 and torch.equal(m.bool(), y > 0), dtype
        assert torch.equal(y.view(torch.uint8), bits.view(torch.uint8))  # y itself is untouched, bit for bit


def test_as_factor_multiplies_like_the_boolean_mask_without_a_copy():
    from rckit.layers.dropout import as_factor

    torch.manual_seed(0)
    mask = torch.rand(3, 5, 4) > 0.4
    f = as_factor(mask)
    assert f.dtype == torch.uint8 and f.data_ptr() == mask.data_ptr()  # the same bytes
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(3, 5, 4, dtype=dtype, requires_grad=True)
        y = x * f
        assert y.dtype == dtype and torch.equal(y, x * mask)
        g = torch.randn_like(y)
        assert torch.equal(torch.autograd.grad(y, x, g)[0], g * mask)
    per_example = mask[:, :1, :1]  # strided (B, 1, 1), as stochastic depth's masks broadcast
    assert torch.equal(torch.ones(3, 5, 4) * as_factor(per_example), torch.ones(3, 5, 4) * per_example)


def dense_char_cnn(cnn: CharCNN, chars: torch.Tensor) -> torch.Tensor:
    """The char CNN written densely over every char slot (the definition)."""
    B, T, W = chars.shape
    char_mask = (chars != 0).reshape(B * T, 1, W)  # (B*T, 1, W)
    x = cnn.embed(chars).reshape(B * T, W, -1).transpose(1, 2).masked_fill(~char_mask, 0.0)  # (B*T, Dc, W)
    x = torch.relu(cnn.conv(x)).masked_fill(~char_mask, 0.0).amax(dim=2)  # (B*T, C)
    return x.view(B, T, -1)  # (B, T, C)


def test_char_cnn_on_real_chars_equals_dense_conv():
    torch.manual_seed(0)
    cnn = CharCNN(n_chars=30, char_dim=6, out_dim=5, width=5)
    chars = torch.randint(1, 30, (3, 7, 9))
    lengths = torch.randint(0, 10, (3, 7))
    chars = chars * (torch.arange(9) < lengths.unsqueeze(-1))  # words of 0-9 chars, 0 = padding token
    chars[0, 0] = torch.tensor([0, 3, 4, 0, 0, 5, 6, 0, 0])  # leading pad, a gap wider than the kernel
    chars[0, 1] = torch.tensor([7, 0, 8, 0, 0, 0, 0, 0, 0])  # a one-char gap
    chars[2] = 0  # an all-padding example
    ref_grads = []
    out = dense_char_cnn(cnn, chars)
    out.pow(2).sum().backward()
    ref_grads = [p.grad.clone() for p in cnn.parameters()]
    cnn.zero_grad()
    packed = cnn(chars)
    torch.testing.assert_close(packed, out, rtol=1e-5, atol=1e-6)
    packed.pow(2).sum().backward()
    for g, ref in zip((p.grad for p in cnn.parameters()), ref_grads):
        torch.testing.assert_close(g, ref, rtol=1e-5, atol=1e-6)
    assert (packed[2] == 0).all()
    assert (cnn(torch.zeros(2, 3, 4, dtype=torch.long)) == 0).all()  # a batch without a single char
    cnn.eval()  # outside training: the products of each distinct char id, gathered
    torch.testing.assert_close(cnn(chars), out, rtol=1e-5, atol=1e-6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(cnn(chars).float(), out, rtol=2e-2, atol=2e-2)
    assert (cnn(torch.zeros(2, 3, 4, dtype=torch.long)) == 0).all()


def test_input_embedding_embeds_each_distinct_token_once_outside_training():
    from rckit.data.embeddings import EmbeddingInfo
    from rckit.layers.embedding import InputEmbedding

    torch.manual_seed(0)
    emb = EmbeddingInfo(word_vectors=torch.randn(40, 6), n_trainable_words=3, n_chars=20)
    layer = InputEmbedding(emb, d_model=8, char_dim=5, char_conv_width=3, dropout=0.2, char_dropout=0.1)
    words = torch.randint(0, 40, (3, 11))
    words[1, 4:] = words[0, :7]  # repeats across rows, and padding (id 0) in rows 0 and 2
    words[0, 9:], words[2, 6:] = 0, 0
    chars = torch.where((words > 0).unsqueeze(-1), (words.unsqueeze(-1) * torch.tensor([1, 3, 7]) + 1) % 20, 0)
    chars[2, 0] = torch.tensor([5, 6, 0])  # one word id spelled two ways: two distinct tokens
    chars[2, 1] = torch.tensor([5, 7, 0])
    words[2, 1] = words[2, 0]
    n_distinct = len(torch.unique(torch.cat([words.reshape(-1, 1), chars.reshape(33, -1)], 1), dim=0))
    assert n_distinct < 33
    seen = []
    layer.char.register_forward_hook(lambda mod, args, out: seen.append(args[0].shape[:2]))
    layer.eval()
    with torch.no_grad():
        out = layer(words, chars)
        assert seen == [(1, n_distinct)]  # the char CNN saw each distinct token once
        torch.testing.assert_close(out, layer.embed_positions(words, chars), rtol=1e-5, atol=1e-6)
    layer.train()  # training: every position on its own, with its own dropout masks
    seen.clear()
    out = layer(words, chars)
    assert seen == [(3, 11)]
    assert not torch.equal(out[1, 4], out[0, 0])


@pytest.mark.parametrize("masked", [False, True])
def test_fp32_attention_function_matches_fp32_sdpa_to_bf16_precision(masked):
    from rckit.layers.attention import Fp32Attention, _additive, _heads

    torch.manual_seed(0)
    B, H, T, dh = 2, 3, 7, 4
    qkv = torch.randn(B, T, 3 * H * dh).bfloat16().requires_grad_()
    mask = torch.ones(B, 1, 1, T, dtype=torch.bool)
    mask[1, ..., 5:] = False
    key_mask = mask if masked else None
    ref = F.scaled_dot_product_attention(*_heads(qkv.double(), H), attn_mask=key_mask)  # (B, H, T, dh)
    ref = ref.transpose(1, 2).reshape(B, T, H * dh)
    ours = Fp32Attention.apply(qkv, H, _additive(mask) if masked else None)
    assert ours.dtype == torch.bfloat16 and ours.shape == (B, T, H * dh)
    torch.testing.assert_close(ours, ref.to(torch.bfloat16))  # the forward is the fp32 kernel's, rounded once
    g = torch.randn_like(ours)
    (grad,) = torch.autograd.grad(ours, qkv, g)
    (ref_grad,) = torch.autograd.grad(ref, qkv, g.double())  # float64 all the way, rounded to bf16 at the leaf
    assert grad.dtype == torch.bfloat16
    for a, b in zip(_heads(grad, H), _heads(ref_grad, H)):
        # The backward reads the bf16 output (D = dO . O): q and k gradients are off by about bf16 rounding
        # (2^-9 = 0.2 %; measured 0.2-0.4 %), v's gradient does not use it.
        assert float((a.double() - b.double()).norm() / b.double().norm()) < 1e-2
    torch.testing.assert_close(_heads(grad, H)[2], _heads(ref_grad, H)[2])


def test_self_attention_under_bf16_autocast_runs_attention_in_fp32():
    torch.manual_seed(0)
    att = MultiHeadSelfAttention(16, n_heads=2)
    x = torch.randn(2, 5, 16, requires_grad=True)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = att(x, mask)
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()
    y.float().sum().backward()
    assert torch.isfinite(x.grad).all()
    torch.testing.assert_close(y.float(), att(x, mask), rtol=0.05, atol=0.05)


def test_unique_rows_groups_equal_rows_exactly_even_when_hashes_collide(monkeypatch):
    import rckit.layers.dedupe as dedupe

    g = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 4, (300, 3), generator=g)  # at most 64 distinct rows: many repeats
    rows[10] = rows[200]
    n_distinct = len(torch.unique(rows, dim=0))
    for weights in (dedupe._weights, lambda n, device: torch.zeros(n, dtype=torch.long)):  # the second: all collide
        monkeypatch.setattr(dedupe, "_weights", weights)
        rep, inverse = dedupe.unique_rows(rows)
        assert len(rep) == n_distinct and inverse.shape == (300,)
        assert torch.equal(rows[rep][inverse], rows)
        assert inverse[10] == inverse[200]
    rep, inverse = dedupe.unique_rows(rows[:1])
    assert rep.tolist() == [0] and inverse.tolist() == [0]
    rep, inverse = dedupe.unique_rows(rows[:0])
    assert len(rep) == 0 and len(inverse) == 0
