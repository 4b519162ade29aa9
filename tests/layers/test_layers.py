"""Numeric tests for the shared layers in rckit.layers."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from rckit import kernels
from rckit.layers.attention import ContextQueryAttention, MultiHeadSelfAttention
from rckit.layers.conv import DepthwiseSeparableConv1d
from rckit.layers.embedding import CharCNN, InputEmbedding, PartiallyFrozenEmbedding
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


@pytest.mark.parametrize("spec", ["none", "all"])
def test_depthwise_separable_conv_equals_plain_conv(spec):
    torch.manual_seed(0)
    conv = DepthwiseSeparableConv1d(6, 4, kernel_size=5)
    x = torch.randn(2, 9, 6)  # (B, T, C)
    dw = conv.depthwise.weight  # (C_in, 1, k)
    pw = conv.pointwise.weight  # (C_out, C_in, 1)
    full = pw[:, :, 0].unsqueeze(2) * dw[:, 0, :].unsqueeze(0)  # (C_out, C_in, k)
    expected = F.conv1d(x.transpose(1, 2), full, conv.pointwise.bias, padding=2).transpose(1, 2)
    with kernels.use(spec):
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


@pytest.mark.parametrize("spec", ["none", "all"])
def test_char_cnn_ignores_char_padding(spec):
    torch.manual_seed(0)
    cnn = CharCNN(n_chars=12, char_dim=6, out_dim=5, width=3)
    chars = torch.tensor([[[3, 4, 5, 0], [7, 0, 0, 0], [0, 0, 0, 0]]])  # (B=1, T=3, W=4)
    wider = F.pad(chars, (0, 3))  # same words padded to W=7
    with kernels.use(spec):
        out = cnn(chars)
        torch.testing.assert_close(cnn(wider), out)
    assert (out[0, 2] == 0).all()  # an all-padding token gives a zero vector
    # The definition: embed, conv over the word, ReLU, max over the real chars.
    x = cnn.embed(torch.tensor([3, 4, 5])).T.unsqueeze(0)  # (1, Dc, 3)
    torch.testing.assert_close(out[0, 0], torch.relu(cnn.conv(x))[0].amax(1))


def test_input_embedding_keeps_pretrained_rows_fixed_and_takes_the_char_width_from_char_vectors():
    torch.manual_seed(0)
    words, char_vectors = torch.randn(40, 6), torch.randn(20, 7)
    layer = InputEmbedding(
        words, n_trainable_words=3, n_chars=20, d_model=8, char_dim=5, char_conv_width=3, char_vectors=char_vectors
    )
    assert layer.char.embed.weight.shape == (20, 7) and torch.equal(layer.char.embed.weight.detach(), char_vectors)
    assert layer.proj.in_features == 6 + 7
    ids = torch.randint(0, 40, (2, 5))
    chars = torch.randint(0, 20, (2, 5, 4))
    out = layer(ids, chars)
    assert out.shape == (2, 5, 8)
    out.sum().backward()
    assert layer.word.trainable.grad is not None and "word.frozen" in dict(layer.named_buffers())


def test_layers_import_only_torch():
    import subprocess
    import sys

    code = (
        "import sys, pkgutil, importlib, rckit.layers as L\n"
        "for m in pkgutil.iter_modules(L.__path__): importlib.import_module('rckit.layers.' + m.name)\n"
        "print(sorted(n for n in sys.modules if n.startswith('rckit.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    outside = [n for n in eval(out) if not n.startswith(("rckit.layers", "rckit.kernels"))]
    assert outside == [], outside


@pytest.mark.parametrize("spec", ["none", "all"])
def test_self_attention_under_bf16_autocast_is_close_to_fp32(spec):
    torch.manual_seed(0)
    att = MultiHeadSelfAttention(16, n_heads=2)
    x = torch.randn(2, 5, 16, requires_grad=True)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    with kernels.use(spec), torch.autocast("cpu", dtype=torch.bfloat16):
        y = att(x, mask)
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()
    y.float().sum().backward()
    assert torch.isfinite(x.grad).all()
    torch.testing.assert_close(y.float(), att(x, mask), rtol=0.05, atol=0.05)
