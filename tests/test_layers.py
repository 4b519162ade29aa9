"""Numeric tests for the shared layers in rckit.layers."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from rckit.layers.attention import ContextQueryAttention, MultiHeadSelfAttention
from rckit.layers.conv import DepthwiseSeparableConv1d
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
