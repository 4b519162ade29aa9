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
its three passes, ``L = 7 * (2 + 2) = 28``. Survivors are scaled by ``1 / p_l`` so eval needs
no rescaling (the authors' code does the same). ``layer_dropout`` picks who is dropped; both
are readings of "layer dropout", and they agree in expectation:

- ``"example"`` (default): each example draws its own keep/drop per sublayer, a (B, 1, 1)
  Bernoulli mask folded into the sublayer's dropout mask. Every sublayer is computed, so
  every parameter gets a gradient every step and DDP's graph is static.
- ``"batch"``: as in the paper's source (stochastic depth, Huang et al. 2016) and the authors'
  code, the whole batch keeps or skips the sublayer, and a skipped one is not computed (about
  5 % less work at ``p_L = 0.9``). The draws come from :class:`LayerDropDraws`, identical on
  every DDP rank and saved in the state dict (a resumed run continues the sequence). DDP must
  then be built with ``find_unused_parameters=True``: a skipped sublayer's parameters get no
  gradient that step.

Presets (``src/rckit/presets/qanet-*.json``). ``paper``: everything above at the paper's sizes
(d 128, 8 heads, char dim 200, 1 x 4 embedding convs of width 7, 7 x 2 model blocks, warm-up
1000 steps, EMA 0.9999). ``cpu-small`` is for a 45-minute run on 2 CPU cores, where about
4,600 steps of batch 32 fit (1.7 epochs): d 64 and 4 heads (the cost of every conv, attention
and feed-forward falls about 4x), char dim 64, 1 x 2 embedding convs, 3 x 2 model blocks (a
third of the depth, still three shared passes), no stochastic depth (it regularises a model
that trains for many epochs; here every step should count), warm-up 500 steps, and no EMA
(``ema_decay`` 0): a 0.9999 average, even with its warm-up, lags the raw weights by about 500
steps, which at step 4,611 of the 45-minute run cost 9 F1 (45.7 against 54.7 on the full dev
set, same checkpoint; RESULTS.md). Dropout stays as in the paper.

Readings taken where the paper is loose: model-encoder convs use kernel 5 (training details,
Sec. 3.1.1) while the embedding encoder uses 7; the char CNN has width 5 and keeps the char
width (200), so the highway runs at 300 + 200 = 500 as in the paper's "500 -> 128".

Implementation choices that keep the function but not the exact float path (CPU numbers in
``benchmarks/qanet_ablation.py``): the char CNN only computes at real characters (same
values up to summation order); dropout masks come from 16-bit uniforms, so the drop rate is
``p`` rounded to a multiple of 2^-16 (:mod:`rckit.layers.dropout`); under bf16 autocast on
CPU self-attention runs in fp32 (faster there, and more precise; its backward reads the bf16
output, :class:`~rckit.layers.attention.Fp32Attention`); each conv sublayer's ReLU is folded into
its dropout mask, so backward keeps one 1-byte mask (``EncoderBlock.residual``); the sinusoids are cached;
on CPU the depthwise convs run as oneDNN's 2-D depthwise kernel on a channels-last view, with
a hand-written backward, and for one question in fp32 as shifted multiply-adds
(:func:`~rckit.layers.conv.depthwise_conv1d`); a side of the batch with no padding at all
(always, for one question) skips the padding products and the attention mask; outside training
questions of one batch that share a context share its embedding and embedding-encoder pass,
and each distinct token of the batch is embedded once (:meth:`QANet.encode`).
``checkpoint_blocks`` (off by default) recomputes each model-encoder block in the backward
pass instead of keeping its activations: the same gradients (the RNG is replayed), about
half the peak memory, about a third more training time.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from rckit.data.batching import Batch
from rckit.data.embeddings import EmbeddingInfo
from rckit.layers.attention import ContextQueryAttention, MultiHeadSelfAttention
from rckit.layers.conv import DepthwiseSeparableConv1d
from rckit.layers.dedupe import unique_texts
from rckit.layers.dropout import Dropout, as_factor, dropout, keep_mask, positive_mask
from rckit.layers.embedding import InputEmbedding
from rckit.layers.masking import mask_logits, zero_padding

LAYER_DROPOUT = ("example", "batch")


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
    layer_dropout: str = "example"  # stochastic depth per "example" or per "batch" (see docstring)
    checkpoint_blocks: bool = False  # recompute model-encoder blocks in backward: less memory, more time
    freeze_pretrained_words: bool = True  # rows >= EmbeddingInfo.n_trainable_words stay fixed


@dataclass
class QANetOutput:
    start_logits: torch.Tensor  # (B, Tc), padded positions at finfo(dtype).min
    end_logits: torch.Tensor  # (B, Tc)


def positional_encoding(T: int, d: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Sinusoids ``[sin(t / 10000^(2i/d)); cos(t / 10000^(2i/d))]``, i < d/2, as (T, d).

    Read-only: rows of a cached table (every block of every forward asks for it), which holds
    a power of two >= 512 positions.
    """
    n = max(512, 1 << (T - 1).bit_length())
    return _sinusoids(n, d, torch.device(device), dtype)[:T]  # (T, d)


@functools.lru_cache(maxsize=16)
def _sinusoids(T: int, d: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    with torch.inference_mode(False), torch.no_grad():  # a normal tensor even if first asked for in inference mode
        t = torch.arange(T, device=device, dtype=torch.float32).unsqueeze(1)  # (T, 1)
        inv_freq = torch.exp(torch.arange(0, d, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / d))
        angles = t * inv_freq  # (T, d/2)
        return torch.cat([angles.sin(), angles.cos()], dim=1).to(dtype)  # (T, d)


def padding_mask(mask: torch.Tensor) -> torch.Tensor | None:
    """``mask`` if any position is padded, else ``None`` (what the encoders take for "no padding")."""
    return None if bool(mask.all()) else mask


class LayerDropDraws(nn.Module):
    """Uniform draws for per-batch stochastic depth, identical on every DDP rank.

    The global RNG is no use for this: ranks see batches of different lengths, so their dropout
    masks use up different amounts of it. Draw number ``k`` (one per encoder pass) comes from a
    generator seeded with ``seed + k``; ``seed`` is drawn from the global RNG at construction
    (the engine seeds it identically on every rank). ``(seed, k)`` is saved with the weights.
    """

    def __init__(self):
        super().__init__()
        self.seed = int(torch.randint(2**62, ()))
        self.count = 0

    def draw(self, n: int) -> list[float]:
        g = torch.Generator().manual_seed(self.seed + self.count)
        self.count += 1
        return torch.rand(n, generator=g).tolist()

    def get_extra_state(self) -> dict:
        return {"seed": self.seed, "count": self.count}

    def set_extra_state(self, state: dict) -> None:
        self.seed, self.count = int(state["seed"]), int(state["count"])


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
        self.p = dropout

    @property
    def n_sublayers(self) -> int:
        return len(self.convs) + 2

    def residual(self, x: torch.Tensor, y: torch.Tensor, survival: float, per_example: bool,
                 relu: bool = False) -> torch.Tensor:
        """``x + dropout(f(y)) * keep / p_l``, ``keep`` a per-example Bernoulli(p_l) or 1, ``f``
        the ReLU if ``relu`` else the identity.

        On CPU the dropout mask, the per-example mask, the ReLU's ``y > 0`` and all the scales
        are folded into one 0/1 byte mask, one product and the ``alpha`` of the add: two passes
        over (B, T, d), and backward keeps that one mask (1 byte an element) where a ReLU would
        keep its 16- or 32-bit output as well.
        """
        if not self.training:
            return x + (torch.relu(y) if relu else y)
        keep, scale = None, 1.0 / survival
        if per_example and survival < 1.0:
            keep = as_factor(torch.rand(x.shape[0], 1, 1, device=x.device) < survival)  # (B, 1, 1) 0/1 bytes
        if self.p > 0.0 and x.device.type == "cpu":
            drop, inv_keep = keep_mask(y.shape, self.p, y.device)  # (B, T, d) 0/1 bytes, a fresh tensor
            keep, scale = drop if keep is None else drop.bitwise_and_(keep), scale * inv_keep
            if relu:
                keep.bitwise_and_(positive_mask(y))  # the ReLU, folded into the mask
        else:
            if relu:
                y = torch.relu(y)
            if self.p > 0.0:
                y = dropout(y, self.p)
        return torch.add(x, y if keep is None else y * keep, alpha=scale)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, survival: list[float],
                draws: list[float] | None = None) -> torch.Tensor:
        """``x`` (B, T, d), ``mask`` (B, T), or ``None`` when no position is padded (nothing to
        zero, no attention mask); ``survival`` holds ``p_l`` for each sublayer.

        ``draws`` (per-batch stochastic depth, training only): one uniform per sublayer; the
        sublayer is skipped when its draw is ``>= p_l``. ``None``: per-example masks.
        """
        _, T, d = x.shape
        x = x + positional_encoding(T, d, x.device, x.dtype)
        per_example = draws is None
        if per_example:
            draws = [0.0] * len(survival)  # never skips
        p, u = iter(survival), iter(draws)
        for norm, conv in zip(self.conv_norms, self.convs):
            p_l = next(p)
            if next(u) < p_l:
                h = norm(x) if mask is None else zero_padding(norm(x), mask)
                x = self.residual(x, conv(h), p_l, per_example, relu=True)
        p_l = next(p)
        if next(u) < p_l:
            x = self.residual(x, self.att(self.att_norm(x), mask), p_l, per_example)
        p_l = next(p)
        if next(u) < p_l:
            x = self.residual(x, self.ffn(self.ffn_norm(x)), p_l, per_example)
        return x


class EncoderStack(nn.Module):
    """``n_blocks`` encoder blocks with stochastic depth counted over the whole stack."""

    def __init__(self, n_blocks: int, d: int, n_convs: int, kernel: int, n_heads: int, dropout: float,
                 layer_survival: float, attention_dropout: float = 0.0, checkpoint_blocks: bool = False):
        super().__init__()
        self.blocks = nn.ModuleList(
            EncoderBlock(d, n_convs, kernel, n_heads, dropout, attention_dropout) for _ in range(n_blocks)
        )
        self.L = n_blocks * (n_convs + 2)
        self.survival = [1.0 - (l / self.L) * (1.0 - layer_survival) for l in range(1, self.L + 1)]
        self.checkpoint_blocks = checkpoint_blocks

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, draws: list[float] | None = None) -> torch.Tensor:
        """``draws``: ``L`` uniforms for per-batch stochastic depth, or ``None`` (per example)."""
        recompute = self.checkpoint_blocks and self.training and torch.is_grad_enabled()
        start = 0
        for block in self.blocks:
            end = start + block.n_sublayers
            args = (x, mask, self.survival[start:end], None if draws is None else draws[start:end])
            # The checkpoint restores the RNG state for the recompute, so dropout masks match.
            x = checkpoint(block, *args, use_reentrant=False) if recompute else block(*args)
            start = end
        return x


class QANet(nn.Module):
    def __init__(self, config: QANetConfig, emb: EmbeddingInfo):
        super().__init__()
        if config.layer_dropout not in LAYER_DROPOUT:
            raise ValueError(f"layer_dropout must be one of {LAYER_DROPOUT}, got {config.layer_dropout!r}")
        self.config = config
        # Per-batch layer dropout skips whole sublayers: DDP must look for unused parameters.
        self.find_unused_parameters = config.layer_dropout == "batch"
        c, d = config, config.d_model
        self.embed = InputEmbedding(emb, d, c.char_dim, c.char_conv_width, c.highway_layers, c.dropout,
                                    c.char_dropout, c.freeze_pretrained_words)
        self.emb_enc = EncoderStack(c.emb_enc_blocks, d, c.emb_enc_convs, c.emb_enc_kernel, c.n_heads,
                                    c.dropout, c.layer_survival, c.attention_dropout)
        self.cq_att = ContextQueryAttention(d)
        self.cq_proj = nn.Linear(4 * d, d)
        self.model_enc = EncoderStack(c.model_enc_blocks, d, c.model_enc_convs, c.model_enc_kernel, c.n_heads,
                                      c.dropout, c.layer_survival, c.attention_dropout, c.checkpoint_blocks)
        self.w1 = nn.Linear(2 * d, 1, bias=False)
        self.w2 = nn.Linear(2 * d, 1, bias=False)
        self.dropout = Dropout(c.dropout)
        # Last, so that drawing its seed leaves the weight initialisation as it was.
        self.layer_drops = LayerDropDraws() if c.layer_dropout == "batch" else None

    def draws(self, stack: EncoderStack) -> list[float] | None:
        """Per-batch stochastic depth: one uniform per sublayer of ``stack``, fresh for each pass."""
        return self.layer_drops.draw(stack.L) if self.training and self.layer_drops is not None else None

    def encode(self, batch: Batch, c_pad: torch.Tensor | None,
               q_pad: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Embedding + embedding encoder of the contexts and the questions: (B, Tc, d), (B, Tq, d).

        Outside training each distinct context of the batch is encoded once and shared: these
        layers do not see the question, and questions on one paragraph share it (SQuAD v1.1 dev
        has about 5 a paragraph; its length-sorted batches of 32 hold 7 distinct contexts on
        average, the bench's slice 2-7). The tokens of those contexts and of the questions then
        go through the input embedding in one call, which embeds each distinct token once
        (``InputEmbedding``; 62 % of a dev question's tokens at the median are words of its
        paragraph). In training every example keeps its own dropout masks.
        """
        if self.training:
            C = self.emb_enc(self.embed(batch.c_words, batch.c_chars), c_pad, self.draws(self.emb_enc))
            Q = self.emb_enc(self.embed(batch.q_words, batch.q_chars), q_pad, self.draws(self.emb_enc))
            return C, Q
        (B, Tc), Tq, W = batch.c_words.shape, batch.q_words.shape[1], batch.c_chars.shape[2]
        # One example of each distinct context (which one does not matter: their rows are equal).
        first, inverse = unique_texts(batch.c_words, batch.c_chars)  # (U,), (B,)
        n_c = len(first) * Tc
        words = torch.cat([batch.c_words[first].reshape(-1), batch.q_words.reshape(-1)])  # (n_c + B * Tq,)
        chars = torch.cat([batch.c_chars[first].reshape(-1, W), batch.q_chars.reshape(-1, W)])  # (n_c + B * Tq, W)
        x = self.embed(words[None], chars[None])[0]  # (n_c + B * Tq, d)
        C = self.emb_enc(x[:n_c].view(len(first), Tc, -1), padding_mask(batch.c_mask[first]))
        Q = self.emb_enc(x[n_c:].view(B, Tq, -1), q_pad)
        return C[inverse], Q  # (B, Tc, d), (B, Tq, d)

    def forward(self, batch: Batch) -> QANetOutput:
        c_mask, q_mask = batch.c_mask, batch.q_mask
        c_pad, q_pad = padding_mask(c_mask), padding_mask(q_mask)
        C, Q = self.encode(batch, c_pad, q_pad)  # (B, Tc, d), (B, Tq, d)
        x = self.cq_att(C, Q, c_mask, q_mask)  # (B, Tc, 4d)
        x = self.dropout(self.cq_proj(x))  # (B, Tc, d)
        M0 = self.model_enc(x, c_pad, self.draws(self.model_enc))
        M1 = self.model_enc(M0, c_pad, self.draws(self.model_enc))
        M2 = self.model_enc(M1, c_pad, self.draws(self.model_enc))
        start = self.w1(torch.cat([M0, M1], dim=-1)).squeeze(-1)  # (B, Tc)
        end = self.w2(torch.cat([M0, M2], dim=-1)).squeeze(-1)  # (B, Tc)
        return QANetOutput(start_logits=mask_logits(start, c_mask), end_logits=mask_logits(end, c_mask))
