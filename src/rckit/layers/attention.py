"""Attention layers: multi-head self-attention and trilinear context-query attention.

Multi-head self-attention (Vaswani et al. 2017)::

    head_h = softmax(Q_h K_h^T / sqrt(d_h) + mask) V_h,   out = W_o [head_1; ...; head_H]

computed by ``torch.nn.functional.scaled_dot_product_attention`` with a boolean key mask so
PyTorch can pick a fused kernel; on CPU under bf16 autocast the kernel ``attention``
(:func:`rckit.kernels.cpu.attention`) runs it in fp32. The Q/K/V projections have no bias: a
key bias adds ``q . b_k`` to every logit of a row, which the softmax cancels, so it could
never learn.

Context-query attention (BiDAF, Seo et al. 2017; QANet, Yu et al. 2018, Sec. 2.2)::

    S_ij = w^T [c_i; q_j; c_i * q_j]                     trilinear similarity, (B, Tc, Tq)
    S_bar  = softmax over j (question positions) of S
    S_bbar = softmax over i (context positions) of S
    A = S_bar Q                                          context-to-query, (B, Tc, d)
    B = S_bar S_bbar^T C                                 query-to-context, (B, Tc, d)
    out = [C; A; C * A; C * B]                           (B, Tc, 4d)

Splitting ``w = [w_c; w_q; w_cq]`` gives ``S = C w_c + (Q w_q)^T + (C * w_cq) Q^T``, three
matmuls instead of a (B, Tc, Tq, 3d) tensor. ``B`` is computed as ``S_bar (S_bbar^T C)`` so no
(B, Tc, Tc) matrix is formed either. There is no scalar bias in ``S``: both softmaxes would
cancel it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from rckit import kernels
from rckit.kernels import cpu, graph
from rckit.layers.masking import masked_softmax


def _heads(qkv: torch.Tensor, n_heads: int) -> tuple[torch.Tensor, ...]:
    """(B, T, 3d) -> q, k, v, each (B, H, T, d_h), views (no copy)."""
    B, T, _ = qkv.shape
    return qkv.view(B, T, 3, n_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """``x`` (B, T, d), ``mask`` (B, T) True on real tokens, or ``None`` when nothing is
        padded (SDPA then runs without a mask); returns (B, T, d).

        Padded queries still attend to the real keys, so every row has at least one key as
        long as each sequence has one real token; their outputs are junk that callers mask.
        """
        B, T, d = x.shape
        qkv = self.qkv(x)  # (B, T, 3d)
        key_mask = None if mask is None else mask[:, None, None, :]  # (B, 1, 1, T), broadcast over heads and queries
        dropout_p = self.dropout if self.training else 0.0
        if qkv.device.type == "cpu" and qkv.dtype != torch.float32 and kernels.enabled("attention"):
            y = cpu.attention(qkv, self.n_heads, key_mask, dropout_p)  # (B, T, d)
        elif torch.compiler.is_exporting() and kernels.enabled("graph_attention") and dropout_p == 0.0:
            y = graph.attention(qkv, self.n_heads, key_mask)  # (B, T, d)
        else:
            y = F.scaled_dot_product_attention(
                *_heads(qkv, self.n_heads), attn_mask=key_mask, dropout_p=dropout_p
            )  # (B, H, T, d_h)
            y = y.transpose(1, 2).reshape(B, T, d)  # (B, T, d)
        return self.out(y)


class ContextQueryAttention(nn.Module):
    def __init__(self, d_model: int):
        super().__init__()
        bound = 1.0 / math.sqrt(d_model)
        self.w_c = nn.Parameter(torch.empty(d_model).uniform_(-bound, bound))
        self.w_q = nn.Parameter(torch.empty(d_model).uniform_(-bound, bound))
        self.w_cq = nn.Parameter(torch.empty(d_model).uniform_(-bound, bound))

    def similarity(self, c: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """Trilinear ``S_ij = w^T [c_i; q_j; c_i * q_j]`` for ``c`` (B, Tc, d), ``q`` (B, Tq, d)."""
        s_c = c @ self.w_c.unsqueeze(1)  # (B, Tc, 1)
        s_q = (q @ self.w_q.unsqueeze(1)).transpose(1, 2)  # (B, 1, Tq)
        s_cq = (c * self.w_cq) @ q.transpose(1, 2)  # (B, Tc, Tq)
        return s_c + s_q + s_cq

    def forward(self, c: torch.Tensor, q: torch.Tensor, c_mask: torch.Tensor, q_mask: torch.Tensor) -> torch.Tensor:
        """Returns ``[C; A; C * A; C * B]``, (B, Tc, 4d)."""
        s = self.similarity(c, q)  # (B, Tc, Tq)
        s_bar = masked_softmax(s, q_mask.unsqueeze(1), dim=2)  # (B, Tc, Tq), rows over question
        s_bbar = masked_softmax(s, c_mask.unsqueeze(2), dim=1)  # (B, Tc, Tq), columns over context
        a = s_bar @ q  # (B, Tc, d)
        b = s_bar @ (s_bbar.transpose(1, 2) @ c)  # (B, Tc, Tq) @ (B, Tq, d) -> (B, Tc, d)
        return torch.cat([c, a, c * a, c * b], dim=-1)
