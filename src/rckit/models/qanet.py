"""QANet (Yu et al. 2018, "QANet: Combining Local Convolution with Global Self-Attention").

Layers, with the paper's symbols (context C, question Q, hidden size d):

1. Input embedding (:class:`~rckit.layers.embedding.InputEmbedding`): fixed GloVe word vector
   + char-CNN vector, 2-layer highway, projected to d (the paper's 1x1 conv, done here).
2. Embedding encoder: ``emb_enc_blocks`` encoder blocks, shared by C and Q. One block::

       x <- x + PE                                  sinusoidal, computed for any length
       x <- x + f(layernorm(x))   for f in [conv]*n + [self-attention, feed-forward]

   ``conv`` is a depthwise-separable conv + ReLU, the feed-forward is
   ``W_2 relu(W_1 x)`` at width d. Padded positions are zeroed after the layer norm and
   before every conv (layernorm(0) is its bias, not 0), so padding never reaches a real
   position: the outputs at real positions do not depend on how far a batch is padded.
3. Context-query attention (:class:`~rckit.layers.attention.ContextQueryAttention`):
   ``[c; a; c*a; c*b]`` (4d), then a linear projection back to d.
4. Model encoder: ``model_enc_blocks`` blocks applied three times with the same weights,
   ``M0 = enc(x), M1 = enc(M0), M2 = enc(M1)``.
5. Output: ``p1 = softmax(W_1 [M0; M1])``, ``p2 = softmax(W_2 [M0; M2])``; we return the
   logits, with padded positions at ``finfo(dtype).min``. ``W_1``/``W_2`` have no bias: a
   constant added to every position cancels in the softmax.

Regularisation (Sec. 3.1): dropout 0.1 on word vectors and on every sublayer output (not on
attention weights: the paper does not ask for it, and on CPU any SDPA dropout falls back to
the unfused kernel, 10x slower with the (B, h, T, T) weights kept for backward), 0.05 on
char vectors, and stochastic depth inside each encoder stack: sublayer ``l`` of the ``L`` in
a stack survives with probability ``p_l = 1 - (l / L)(1 - p_L)``, ``p_L = 0.9``. The
embedding encoder has ``L = 1 * (4 + 2) = 6``; the model encoder restarts the count at each of
its three passes, ``L = 7 * (2 + 2) = 28``. A dropped sublayer is decided per example (a
(B, 1, 1) Bernoulli mask, survivors scaled by ``1 / p_l`` so eval needs no rescaling); the
sublayer is still computed, which keeps the graph static for DDP and ``torch.compile``.

Readings taken where the paper is loose: model-encoder convs use kernel 5 (training details,
Sec. 3.1.1) while the embedding encoder uses 7; the char CNN has width 5 and keeps the char
width (200), so the highway runs at 300 + 200 = 500 as in the paper's "500 -> 128".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from rckit.data.batching import Batch
from rckit.data.embeddings import EmbeddingInfo
from rckit.layers.attention import ContextQueryAttention, MultiHeadSelfAttention
from rckit.layers.conv import DepthwiseSeparableConv1d
from rckit.layers.embedding import InputEmbedding
from rckit.layers.masking import mask_logits, zero_padding


@dataclass
class QANetConfig:
    d_model: int = 128
    n_heads: int = 8
    char_dim: int = 200  # ignored when EmbeddingInfo.char_vectors is given (its width wins)
    char_conv_width: int = 5
    highway_layers: int = 2
    emb_enc_blocks: int = 1
    emb_enc_convs: int = 4
    emb_enc_kernel: int = 7
    model_enc_blocks: int = 7
    model_enc_convs: int = 2
    model_enc_kernel: int = 5  # paper Sec. 3.1.1; the model section says "same as before" (7)
    dropout: float = 0.1  # word vectors, highway, every sublayer output
    attention_dropout: float = 0.0  # on attention weights; >0 forces SDPA's slow unfused path
    char_dropout: float = 0.05
    layer_survival: float = 0.9  # p_L of stochastic depth; 1.0 turns it off
    freeze_pretrained_words: bool = True  # rows >= EmbeddingInfo.n_trainable_words stay fixed


@dataclass
class QANetOutput:
    start_logits: torch.Tensor  # (B, Tc), padded positions at finfo(dtype).min
    end_logits: torch.Tensor  # (B, Tc)


def positional_encoding(T: int, d: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Sinusoids ``[sin(t / 10000^(2i/d)); cos(t / 10000^(2i/d))]``, i < d/2, as (T, d)."""
    t = torch.arange(T, device=device, dtype=torch.float32).unsqueeze(1)  # (T, 1)
    inv_freq = torch.exp(torch.arange(0, d, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / d))
    angles = t * inv_freq  # (T, d/2)
    return torch.cat([angles.sin(), angles.cos()], dim=1).to(dtype)  # (T, d)


class EncoderBlock(nn.Module):
    def __init__(self, d: int, n_convs: int, kernel: int, n_heads: int, dropout: float, attention_dropout: float = 0.0):
        super().__init__()
        if d % 2 != 0:
            raise ValueError(f"d_model must be even for the positional encoding, got {d}")
        self.conv_norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(n_convs))
        self.convs = nn.ModuleList(DepthwiseSeparableConv1d(d, d, kernel) for _ in range(n_convs))
        self.att_norm = nn.LayerNorm(d)
        self.att = MultiHeadSelfAttention(d, n_heads, attention_dropout)
        self.ffn_norm = nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d))
        self.dropout = nn.Dropout(dropout)

    @property
    def n_sublayers(self) -> int:
        return len(self.convs) + 2

    def residual(self, x: torch.Tensor, y: torch.Tensor, survival: float) -> torch.Tensor:
        y = self.dropout(y)
        if self.training and survival < 1.0:
            keep = torch.rand(x.shape[0], 1, 1, device=x.device) < survival  # (B, 1, 1)
            y = y * keep.to(y.dtype) / survival
        return x + y

    def forward(self, x: torch.Tensor, mask: torch.Tensor, survival: list[float]) -> torch.Tensor:
        """``x`` (B, T, d), ``mask`` (B, T); ``survival`` holds ``p_l`` for each sublayer."""
        _, T, d = x.shape
        x = x + positional_encoding(T, d, x.device, x.dtype)
        p = iter(survival)
        for norm, conv in zip(self.conv_norms, self.convs):
            x = self.residual(x, torch.relu(conv(zero_padding(norm(x), mask))), next(p))
        x = self.residual(x, self.att(self.att_norm(x), mask), next(p))
        x = self.residual(x, self.ffn(self.ffn_norm(x)), next(p))
        return x


class EncoderStack(nn.Module):
    """``n_blocks`` encoder blocks with stochastic depth counted over the whole stack."""

    def __init__(self, n_blocks: int, d: int, n_convs: int, kernel: int, n_heads: int,
                 dropout: float, layer_survival: float, attention_dropout: float = 0.0):
        super().__init__()
        self.blocks = nn.ModuleList(EncoderBlock(d, n_convs, kernel, n_heads, dropout, attention_dropout) for _ in range(n_blocks))
        L = n_blocks * (n_convs + 2)
        self.survival = [1.0 - (l / L) * (1.0 - layer_survival) for l in range(1, L + 1)]

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        start = 0
        for block in self.blocks:
            x = block(x, mask, self.survival[start:start + block.n_sublayers])
            start += block.n_sublayers
        return x


class QANet(nn.Module):
    def __init__(self, config: QANetConfig, emb: EmbeddingInfo):
        super().__init__()
        self.config = config
        c, d = config, config.d_model
        self.embed = InputEmbedding(emb, d, c.char_dim, c.char_conv_width, c.highway_layers, c.dropout,
                                    c.char_dropout, c.freeze_pretrained_words)
        self.emb_enc = EncoderStack(c.emb_enc_blocks, d, c.emb_enc_convs, c.emb_enc_kernel, c.n_heads,
                                    c.dropout, c.layer_survival, c.attention_dropout)
        self.cq_att = ContextQueryAttention(d)
        self.cq_proj = nn.Linear(4 * d, d)
        self.model_enc = EncoderStack(c.model_enc_blocks, d, c.model_enc_convs, c.model_enc_kernel, c.n_heads,
                                      c.dropout, c.layer_survival, c.attention_dropout)
        self.w1 = nn.Linear(2 * d, 1, bias=False)
        self.w2 = nn.Linear(2 * d, 1, bias=False)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, batch: Batch) -> QANetOutput:
        c_mask, q_mask = batch.c_mask, batch.q_mask
        C = self.emb_enc(self.embed(batch.c_words, batch.c_chars), c_mask)  # (B, Tc, d)
        Q = self.emb_enc(self.embed(batch.q_words, batch.q_chars), q_mask)  # (B, Tq, d)
        x = self.cq_att(C, Q, c_mask, q_mask)  # (B, Tc, 4d)
        x = self.dropout(self.cq_proj(x))  # (B, Tc, d)
        M0 = self.model_enc(x, c_mask)
        M1 = self.model_enc(M0, c_mask)
        M2 = self.model_enc(M1, c_mask)
        start = self.w1(torch.cat([M0, M1], dim=-1)).squeeze(-1)  # (B, Tc)
        end = self.w2(torch.cat([M0, M2], dim=-1)).squeeze(-1)  # (B, Tc)
        return QANetOutput(start_logits=mask_logits(start, c_mask), end_logits=mask_logits(end, c_mask))
