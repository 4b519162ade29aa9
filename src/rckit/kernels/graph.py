"""Forms of rckit's layers for an exported graph (ONNX on onnxruntime), switched in where the
layer is traced for export (``torch.compiler.is_exporting()``) and the fast path is on
(:mod:`rckit.kernels`; ``rckit export --format onnx`` turns on these and none of :mod:`.cpu`).
Each computes what the plain layer does (tested equal, ``tests/export/test_onnx.py``) in
operations that onnxruntime runs well; what each gains in the installed model
(``benchmarks/graph_forms.py``: exported with each left out in turn): docs/benchmark-history.md,
"Answering without PyTorch (issue 30)".

- ``graph_attention``: self-attention as one ONNX ``Attention`` node (opset 23) on the (B, T, d)
  projections, heads split inside the node (``q_num_heads``), with the key mask as an additive
  float bias spelled out to (B, 1, T, T): onnxruntime runs it fused, and the head reshapes and
  transposes around it (nine nodes a layer) are gone. PyTorch has no 3-D multi-head SDPA, so the
  form is a custom op, ``rckit::graph_attention``, that computes SDPA in PyTorch and is written
  to ONNX by :func:`onnx_translations`. Without it the plain layer's boolean (B, 1, 1, T) mask
  exports at opset 18 as SDPA's decomposition (a NaN guard on every score).
- ``graph_char_cnn``: the char CNN as look-ups in per-tap tables of the char table times the conv
  weights (one-hot characters make the conv a sum of rows), folded when the model loads; a padded
  character slot reads a huge negative value from its centre tap, so the max over the word skips
  it without a mask pass, and the bias and ReLU come after the max, on one vector a word.
- ``graph_conv``: the depthwise-separable conv as two 2-D convs over (B, C, 1, T) with (1, k) and
  (1, 1) kernels: onnxruntime runs 2-D convs in its blocked (NCHWc) layout, with a depthwise
  kernel, where a 1-D depthwise conv goes through a per-channel matrix product.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


@torch.library.custom_op("rckit::graph_attention", mutates_args=())
def _attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None, n_heads: int
) -> torch.Tensor:
    """Multi-head attention of ``q``, ``k``, ``v`` (B, T, d), heads split from d; ``bias``
    additive (B, 1, T, T) or None; (B, T, d). ONNX: one ``Attention`` node (:func:`onnx_translations`)."""
    B, T, d = q.shape
    q, k, v = (x.reshape(B, T, n_heads, d // n_heads).transpose(1, 2) for x in (q, k, v))  # (B, H, T, d_h)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias).transpose(1, 2).reshape(B, T, d)


@_attention.register_fake
def _(q, k, v, bias, n_heads):
    return torch.empty_like(q)


def attention(qkv: torch.Tensor, n_heads: int, key_mask: torch.Tensor | None) -> torch.Tensor:
    """Multi-head attention of ``qkv`` (B, T, 3d) with ``key_mask`` (B, 1, 1, T) True on real keys,
    or None; (B, T, d). The additive mask is spelled out to (B, 1, T, T), the shape ONNX's
    Attention operator (opset 23) takes."""
    B, T, d3 = qkv.shape
    q, k, v = qkv.split(d3 // 3, dim=-1)  # (B, T, d) each, heads side by side as the plain layer's view
    bias = None
    if key_mask is not None:
        bias = ((~key_mask).to(qkv.dtype) * torch.finfo(qkv.dtype).min).expand(B, 1, T, T)
    return _attention(q, k, v, bias, n_heads)


def onnx_translations() -> dict:
    """How ``torch.onnx.export`` writes rckit's custom ops: ``{op: onnxscript function}``."""
    from onnxscript import opset23 as op

    def attention_node(q, k, v, bias, n_heads: int):
        y, _, _, _ = op.Attention(q, k, v, bias, q_num_heads=n_heads, kv_num_heads=n_heads)
        return y

    return {torch.ops.rckit.graph_attention.default: attention_node}


def char_cnn(chars: torch.Tensor, embedding: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The char CNN of ``chars`` (B, T, W) as table look-ups: a conv over one-hot characters is the
    sum over taps ``j`` of the row ``chars[t + j - k // 2]`` of ``E W_j`` (``E`` the char table with
    the padding row 0 zeroed, as the plain layer zeroes padded slots; ``weight`` (C, Dc, k)). The
    tables are products of weights: onnxruntime folds them once when it loads the model.

    The plain layer takes ``max_t relu(y_t + b)`` over the real characters (0 for a token with
    none). The ReLU and ``+ b`` are monotone, so that is ``relu(max_t y_t + b)``; a padded slot
    reads ``-huge`` from the centre tap's row 0, so it never wins the max, and a token without
    characters comes out ``relu(-huge) = 0``. (B, T, C)."""
    n_chars, k, W = embedding.shape[0], weight.shape[-1], chars.shape[2]
    table = embedding * (torch.arange(n_chars) != 0).to(embedding.dtype).unsqueeze(1)  # (n_chars, Dc)
    taps = torch.einsum("cd,odk->kco", table, weight)  # (k, n_chars, C)
    pad_row = (torch.arange(n_chars) == 0).to(taps.dtype).unsqueeze(1)  # (n_chars, 1)
    tables = list(taps.unbind(0))
    tables[k // 2] = tables[k // 2] + pad_row * (torch.finfo(taps.dtype).min / 2)  # one such term a slot: no overflow
    padded = F.pad(chars, (k // 2, k // 2))  # (B, T, W + k - 1), id 0 beyond the word
    y = F.embedding(padded[:, :, 0:W], tables[0])
    for j in range(1, k):
        y = y + F.embedding(padded[:, :, j : j + W], tables[j])  # (B, T, W, C)
    return torch.relu(y.amax(2) + bias)  # (B, T, C)


def separable_conv(
    x: torch.Tensor, depthwise: torch.Tensor, pointwise: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """The depthwise-separable conv of ``x`` (B, T, C_in) as 2-D convs over (B, C, 1, T):
    ``depthwise`` (C_in, 1, k), ``pointwise`` (C_out, C_in, 1), ``bias`` (C_out,); (B, T, C_out).
    The layout changes are written as NHWC <-> NCHW transposes of (B, 1, T, C), which onnxruntime
    folds into its reorders to and from the blocked layout."""
    k = depthwise.shape[-1]
    y = F.conv2d(x.unsqueeze(1).permute(0, 3, 1, 2), depthwise.unsqueeze(2), padding=(0, k // 2), groups=x.shape[2])
    return F.conv2d(y, pointwise.unsqueeze(2), bias).permute(0, 2, 3, 1).squeeze(1)
