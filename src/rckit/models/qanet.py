"""QANet (Yu et al. 2018, "QANet: Combining Local Convolution with Global Self-Attention").

Layers, with the paper's symbols (context C, question Q, hidden size d):

1. Input embedding (:class:`~rckit.layers.embedding.InputEmbedding`): fixed GloVe word vector
   + char-CNN vector, 2-layer highway, projected to d (the paper's 1x1 conv, done here).
2. Embedding encoder: ``emb_enc_blocks`` encoder blocks, shared by C and Q. One block::

       x <- x + PE                                  sinusoidal, for any length
       x <- x + f(layernorm(x))   for f in [relu . conv]*n + [self-attention, feed-forward]

   ``conv`` is depthwise-separable, the feed-forward ``W_2 relu(W_1 x)`` at width d. Padded
   positions are zeroed after the layer norm, before every conv (layernorm(0) is its bias),
   so outputs at real positions do not depend on how far a batch is padded.
3. Context-query attention (:class:`~rckit.layers.attention.ContextQueryAttention`):
   ``[c; a; c*a; c*b]`` (4d), then a linear projection back to d.
4. Model encoder: ``model_enc_blocks`` blocks applied three times with the same weights,
   ``M0 = enc(x), M1 = enc(M0), M2 = enc(M1)``.
5. Output: ``p1 = softmax(W_1 [M0; M1])``, ``p2 = softmax(W_2 [M0; M2])``, returned as
   :class:`~rckit.models.contract.SpanOutput` logits (padding at ``finfo(dtype).min``; no bias,
   it cancels in the softmax). Loss: :func:`rckit.models.losses.span_loss`, the default.
6. No answer (``no_answer``, SQuAD v2.0): a learned null ``C <- [n; C]`` after the embedding encoder,
   read on like a token, scored by both pointers (``SpanOutput.start_null``); in the spans' softmax
   (BiDAF-No-Answer) rather than a separate classifier, so there is no second loss to weigh.

Regularisation (Sec. 3.1): dropout 0.1 on word vectors and every sublayer output, 0.05 on char
vectors, none on attention weights (the paper names none; ``attention_dropout``). Stochastic
depth: sublayer ``l`` of the ``L`` in a stack survives with ``p_l = 1 - (l / L)(1 - p_L)``,
``p_L = 0.9``, survivors scaled by ``1 / p_l`` (as the authors' code; eval needs no rescaling);
``L = 1 * (4 + 2)`` in the embedding encoder, ``7 * (2 + 2)`` in the model encoder, counted
afresh at each pass. ``layer_dropout="example"`` (default) draws keep/drop per example and
sublayer, a (B, 1, 1) mask: every sublayer runs and DDP's graph is static. ``"batch"`` (Huang et
al. 2016, the authors' code) keeps or skips a sublayer for the whole batch, drawn by
:class:`LayerDropDraws` (the same on every DDP rank, saved in the state dict; DDP needs
``find_unused_parameters``).

Readings taken where the paper is loose: model-encoder convs use kernel 5 (Sec. 3.1.1; the model
section's "same as before" would give 7), the embedding encoder 7; the char CNN has width 5 and
keeps the char width (200), so the highway runs at 300 + 200 = 500, the paper's "500 -> 128".
Presets (``src/rckit/preset_files/qanet-*.json``): ``paper`` has the paper's sizes (d 128, 8 heads,
1 x 4 embedding convs, 7 x 2 model blocks, warm-up 1000, EMA 0.9999); ``cpu-small`` fits 45
minutes on 2 cores: d 64, 4 heads, char dim 64, 1 x 2 and 3 x 2 blocks, warm-up 500, no
stochastic depth, no EMA (so slow an average lags the raw weights in so short a run).
``checkpoint_blocks`` recomputes model-encoder blocks in backward (same gradients, less memory).
CPU fast paths: :mod:`rckit.kernels` (``RCKIT_KERNELS=none`` off). Measured: BENCHMARKS.md, RESULTS.md.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from rckit import kernels
from rckit.contextual.encoders import DEFAULT_LAYERS
from rckit.data.batching import Batch
from rckit.data.embeddings import EmbeddingInfo
from rckit.kernels import cpu
from rckit.layers.attention import ContextQueryAttention, MultiHeadSelfAttention
from rckit.layers.conv import DepthwiseSeparableConv1d
from rckit.layers.embedding import InputEmbedding
from rckit.layers.masking import mask_logits, with_null, zero_padding
from rckit.models.contract import ReadingModel, SpanOutput, check_contextual

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
    no_answer: bool = False  # a learned null position before the context (SQuAD v2.0; see docstring)
    contextual: str = "none"  # a frozen encoder's states beside GloVe: "none", "minilm" or a folder (rckit.contextual)
    # the encoder's layers mixed as ELMo's (0: the embeddings)
    contextual_layers: list[int] = field(default_factory=lambda: list(DEFAULT_LAYERS))


def positional_encoding(T: int, d: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Sinusoids ``[sin(t / 10000^(2i/d)); cos(t / 10000^(2i/d))]``, i < d/2, as (T, d).

    Read-only: rows of a cached table (every block of every forward asks for it), which holds
    a power of two >= 512 positions. While exporting (ONNX: ``T`` is symbolic) the sinusoids
    are part of the graph.
    """
    if torch.compiler.is_exporting():
        return sinusoids(T, d, device).to(dtype)
    n = max(512, 1 << (T - 1).bit_length())
    return _sinusoids(n, d, torch.device(device), dtype)[:T]  # (T, d)


def sinusoids(T: int, d: int, device: torch.device) -> torch.Tensor:
    """The (T, d) float32 table of :func:`positional_encoding`."""
    t = torch.arange(T, device=device, dtype=torch.float32).unsqueeze(1)  # (T, 1)
    inv_freq = torch.exp(torch.arange(0, d, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / d))
    angles = t * inv_freq  # (T, d/2)
    return torch.cat([angles.sin(), angles.cos()], dim=1)  # (T, d)


@functools.lru_cache(maxsize=16)
def _sinusoids(T: int, d: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    with torch.inference_mode(False), torch.no_grad():  # a normal tensor even if first asked for in inference mode
        return sinusoids(T, d, device).to(dtype)


def padding_mask(mask: torch.Tensor) -> torch.Tensor | None:
    """``mask`` if any position is padded, else ``None`` (what the encoders take for "no padding").
    While exporting (ONNX) always ``mask``: a graph serves inputs padded or not."""
    return mask if torch.compiler.is_exporting() or not bool(mask.all()) else None


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

    def residual(
        self, x: torch.Tensor, y: torch.Tensor, survival: float, per_example: bool, relu: bool = False
    ) -> torch.Tensor:
        """``x + dropout(f(y)) * keep / p_l``: ``f`` the ReLU if ``relu`` else the identity,
        ``keep`` each example's Bernoulli(p_l) draw (per-example stochastic depth) or 1."""
        if not self.training:
            return x + (torch.relu(y) if relu else y)
        keep = None
        if per_example and survival < 1.0:
            keep = torch.rand(x.shape[0], 1, 1, device=x.device) < survival  # (B, 1, 1)
        if x.device.type == "cpu" and kernels.enabled("residual"):
            return cpu.residual(x, y, self.p, survival, keep, relu)
        y = F.dropout(torch.relu(y) if relu else y, self.p)
        return x + (y if keep is None else y * keep) / survival

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None, survival: list[float], draws: list[float] | None = None
    ) -> torch.Tensor:
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

    def __init__(
        self,
        n_blocks: int,
        d: int,
        n_convs: int,
        kernel: int,
        n_heads: int,
        dropout: float,
        layer_survival: float,
        attention_dropout: float = 0.0,
        checkpoint_blocks: bool = False,
    ):
        super().__init__()
        self.blocks = nn.ModuleList(
            EncoderBlock(d, n_convs, kernel, n_heads, dropout, attention_dropout) for _ in range(n_blocks)
        )
        self.L = n_blocks * (n_convs + 2)
        self.survival = [1.0 - (layer / self.L) * (1.0 - layer_survival) for layer in range(1, self.L + 1)]
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


class QANet(ReadingModel):
    READS_CONTEXTUAL = True
    cpu_bf16 = True  # trains faster under bf16 autocast on CPU (BENCHMARKS.md)

    def __init__(self, config: QANetConfig, emb: EmbeddingInfo):
        super().__init__(config)
        if config.layer_dropout not in LAYER_DROPOUT:
            raise ValueError(f"layer_dropout must be one of {LAYER_DROPOUT}, got {config.layer_dropout!r}")
        # Per-batch layer dropout skips whole sublayers: DDP must look for unused parameters.
        self.find_unused_parameters = config.layer_dropout == "batch"
        c, d = config, config.d_model
        n_trainable = emb.n_trainable_words if c.freeze_pretrained_words else emb.word_vectors.shape[0]
        check_contextual(c, emb)
        self.embed = InputEmbedding(
            emb.word_vectors,
            n_trainable,
            emb.n_chars,
            d,
            c.char_dim,
            c.char_conv_width,
            c.highway_layers,
            c.dropout,
            c.char_dropout,
            emb.char_vectors,
            len(c.contextual_layers),
            emb.contextual_dim,
        )
        self.emb_enc = EncoderStack(
            c.emb_enc_blocks,
            d,
            c.emb_enc_convs,
            c.emb_enc_kernel,
            c.n_heads,
            c.dropout,
            c.layer_survival,
            c.attention_dropout,
        )
        self.cq_att = ContextQueryAttention(d)
        self.cq_proj = nn.Linear(4 * d, d)
        self.model_enc = EncoderStack(
            c.model_enc_blocks,
            d,
            c.model_enc_convs,
            c.model_enc_kernel,
            c.n_heads,
            c.dropout,
            c.layer_survival,
            c.attention_dropout,
            c.checkpoint_blocks,
        )
        self.w1 = nn.Linear(2 * d, 1, bias=False)
        self.w2 = nn.Linear(2 * d, 1, bias=False)
        self.dropout = nn.Dropout(c.dropout)
        self.no_answer = c.no_answer
        # After the other weights, so that a no-answer model starts from a v1.1 model's initialisation.
        self.null = nn.Parameter(torch.randn(d)) if c.no_answer else None
        # Last, so that drawing its seed does not change the weights' initialisation.
        self.layer_drops = LayerDropDraws() if c.layer_dropout == "batch" else None

    def draws(self, stack: EncoderStack) -> list[float] | None:
        """Per-batch stochastic depth: one uniform per sublayer of ``stack``, fresh for each pass."""
        return self.layer_drops.draw(stack.L) if self.training and self.layer_drops is not None else None

    def encode(
        self, batch: Batch, c_pad: torch.Tensor | None, q_pad: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Embedding + embedding encoder of the contexts and the questions: (B, Tc, d), (B, Tq, d).

        Outside training on CPU the kernel ``dedupe`` shares work between questions on one
        context and between repeated tokens (:func:`rckit.kernels.cpu.encode_shared_contexts`).
        """
        if (
            not self.training
            and batch.c_words.device.type == "cpu"
            and kernels.enabled("dedupe")
            and batch.c_states is None
        ):  # a token's contextual state is its own at each place: nothing to share
            return cpu.encode_shared_contexts(
                self.embed,
                self.emb_enc,
                batch.c_words,
                batch.c_chars,
                batch.c_mask,
                batch.q_words,
                batch.q_chars,
                batch.q_mask,
            )
        C = self.emb_enc(self.embed(batch.c_words, batch.c_chars, batch.c_states), c_pad, self.draws(self.emb_enc))
        Q = self.emb_enc(self.embed(batch.q_words, batch.q_chars, batch.q_states), q_pad, self.draws(self.emb_enc))
        return C, Q

    def forward(self, batch: Batch) -> SpanOutput:
        C, Q = self.encode(batch, padding_mask(batch.c_mask), padding_mask(batch.q_mask))  # (B, Tc, d), (B, Tq, d)
        return self.read(C, Q, batch.c_mask, batch.q_mask)

    def answer_pass(
        self,
        words: torch.Tensor,
        chars: torch.Tensor,
        c_tokens: torch.Tensor,
        c_mask: torch.Tensor,
        q_tokens: torch.Tensor,
        q_mask: torch.Tensor,
        q_context: torch.Tensor,
        c_states: torch.Tensor | None = None,
        q_states: torch.Tensor | None = None,
    ) -> SpanOutput:
        """Each distinct token's word features once, each distinct window encoded once (the embedding and
        the embedding encoder look no further than their own token or sequence), then read with
        each question on its window: the same values as ``forward`` on the (question, window) batch.
        A token's contextual state belongs to its place: ``c_states`` (U, Tc, K, D) per window."""
        x = self.embed.word_features(words.unsqueeze(0), chars.unsqueeze(0))[0]  # (N, Dw + Dc)
        C = self.emb_enc(self.embed.join(x[c_tokens], c_states), padding_mask(c_mask))  # (U, Tc, d)
        Q = self.emb_enc(self.embed.join(x[q_tokens], q_states), padding_mask(q_mask))  # (B, Tq, d)
        return self.read(C[q_context], Q, c_mask[q_context], q_mask)

    def read(self, C: torch.Tensor, Q: torch.Tensor, c_mask: torch.Tensor, q_mask: torch.Tensor) -> SpanOutput:
        """Context-query attention, the model encoder and the pointers over encoded ``C`` (B, Tc, d)
        and ``Q`` (B, Tq, d)."""
        tokens_mask, c_pad = c_mask, padding_mask(c_mask)
        if self.no_answer:  # the null position: one learned vector before every context
            C, c_mask = with_null(self.null, C, c_mask)  # (B, 1 + Tc, d), (B, 1 + Tc)
            c_pad = padding_mask(c_mask)
        x = self.cq_att(C, Q, c_mask, q_mask)  # (B, Tc, 4d)
        x = self.dropout(self.cq_proj(x))  # (B, Tc, d)
        M0 = self.model_enc(x, c_pad, self.draws(self.model_enc))
        M1 = self.model_enc(M0, c_pad, self.draws(self.model_enc))
        M2 = self.model_enc(M1, c_pad, self.draws(self.model_enc))
        start = self.w1(torch.cat([M0, M1], dim=-1)).squeeze(-1)  # (B, Tc)
        end = self.w2(torch.cat([M0, M2], dim=-1)).squeeze(-1)  # (B, Tc)
        if self.no_answer:
            return SpanOutput(
                start_logits=mask_logits(start[:, 1:], tokens_mask),
                end_logits=mask_logits(end[:, 1:], tokens_mask),
                start_null=start[:, 0],
                end_null=end[:, 0],
            )
        return SpanOutput(start_logits=mask_logits(start, c_mask), end_logits=mask_logits(end, c_mask))
