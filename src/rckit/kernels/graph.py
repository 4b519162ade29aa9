"""Forms of rckit's layers for an exported graph (ONNX on onnxruntime), switched in where the
layer is traced for export (``torch.compiler.is_exporting()``) and the fast path is on
(:mod:`rckit.kernels`; ``rckit export --format onnx`` turns on these and none of :mod:`.cpu`).
Each computes what the plain layer does (tested equal, ``tests/test_onnx.py``) in operations that
onnxruntime runs well; what each gains: BENCHMARKS.md, "Answering without PyTorch".

- ``graph_attention``: self-attention with its key mask as an additive float bias spelled out to
  (B, 1, T, T), which the exporter writes as one ONNX ``Attention`` node (opset 23) that
  onnxruntime runs fused; the plain layer's boolean (B, 1, 1, T) mask is refused by that kernel,
  so without this form the export falls back to opset 18 and SDPA's decomposition (a NaN guard on
  every score). On 10 windows of 400 tokens: 170 ms against 255 for the decomposed form.
- ``graph_char_cnn``: the char CNN as look-ups in per-tap tables of the char table times the conv
  weights (one-hot characters make the conv a sum of rows), folded when the model loads.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def attention(qkv: torch.Tensor, n_heads: int, key_mask: torch.Tensor | None) -> torch.Tensor:
    """Multi-head attention of ``qkv`` (B, T, 3d) with ``key_mask`` (B, 1, 1, T) True on real keys,
    or None; (B, T, d). SDPA with an additive float mask spelled out to (B, 1, T, T), the shape
    ONNX's Attention operator (opset 23) takes: the exporter writes one fused node."""
    B, T, d3 = qkv.shape
    q, k, v = qkv.view(B, T, 3, n_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)  # (B, H, T, d_h) each
    bias = None
    if key_mask is not None:
        bias = ((~key_mask).to(qkv.dtype) * torch.finfo(qkv.dtype).min).expand(B, 1, T, T)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # (B, H, T, d_h)
    return y.transpose(1, 2).reshape(B, T, d3 // 3)


def char_cnn(chars: torch.Tensor, embedding: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The char CNN of ``chars`` (B, T, W) as table look-ups: a conv over one-hot characters is the
    sum over taps ``j`` of the row ``chars[t + j - k // 2]`` of ``E W_j`` (``E`` the char table with
    the padding row 0 zeroed, as the plain layer zeroes padded slots; ``weight`` (C, Dc, k)). The
    tables are products of weights: onnxruntime folds them once when it loads the model. Then ReLU,
    and the max over the real characters; (B, T, C)."""
    n_chars, k, W = embedding.shape[0], weight.shape[-1], chars.shape[2]
    table = embedding * (torch.arange(n_chars) != 0).to(embedding.dtype).unsqueeze(1)  # (n_chars, Dc)
    taps = torch.einsum("cd,odk->kco", table, weight)  # (k, n_chars, C)
    padded = F.pad(chars, (k // 2, k // 2))  # (B, T, W + k - 1), id 0 beyond the word
    y = bias + F.embedding(padded[:, :, 0:W], taps[0])
    for j in range(1, k):
        y = y + F.embedding(padded[:, :, j:j + W], taps[j])  # (B, T, W, C)
    return torch.relu(y).masked_fill((chars == 0).unsqueeze(-1), 0.0).amax(2)  # (B, T, C)
