"""Dynamic Coattention Networks: DCN (Xiong, Zhong & Socher 2017) and DCN+ (Xiong et al. 2018).

Document ``m`` tokens, question ``n``, hidden ``l``; input (:class:`TokenInput`): fixed GloVe rows,
optionally ``[x_w; char-CNN]``, and with ``contextual`` a frozen encoder's states mixed over its
layers, ``[x_w; (char-CNN;) e_t]`` (:mod:`rckit.contextual`): the place of CoVe in DCN+'s baseline
("DCN w/ CoVe"), which concatenates CoVe to GloVe as the encoder LSTM's input.
Encoders (:mod:`rckit.layers.coattention`) and the shared decoder (:class:`DynamicDecoder`)::

    DCN   D = LSTM(x^D), Q = tanh(W LSTM(x^Q) + b)          one shared unidirectional LSTM, width l
          S^D, S^Q, C^D = coattn(D, Q);  U = BiLSTM([D; S^D; C^D])          (DCN's C^D = [S^D; C^D])
    DCN+  E_1 = biLSTM_1(x), l/2 per direction;  S_1, C_1^D = coattn_1(E_1^D, tanh(W E_1^Q + b))
          E_2 = biLSTM_2(S_1), width 2l;  S_2, C_2^D = coattn_2(E_2^D, E_2^Q)   own sentinels
          U = biLSTM([E_1^D; E_2^D; S_1^D; S_2^D; C_1^D; C_2^D])       input 9l; U is (B, m, 2l)
    dec   h_i = LSTM_dec(h_{i-1}, [u_{s_{i-1}}; u_{e_{i-1}}])    nn.LSTMCell, h_0 = 0, s_0 = e_0 = 0
          s_i = argmax_t HMN_start(u_t, h_i, u_{s_{i-1}}, u_{e_{i-1}}), e_i likewise with HMN_end
    HMN   r = tanh(W_D [h_i; u_s; u_e]), m1 = max(W1 [u_t; r] + b1), m2 = max(W2 m1 + b2),
          HMN = max(W3 [m1; m2] + b3), maxout pool ``pool``; i = 1 .. ``iterations``

Readings taken where the papers are loose: both HMNs take the previous span (some reimplementations
feed s_i to the end HMN); only E_1^Q gets the tanh projection, as DCN+ writes it; ``dropout`` acts
on the encoder outputs and U. Early stop is per example, in training as in evaluation: once its span
repeats, an example's later logits are copies and ``DCNOutput.active`` drops it. DCN+'s HMNs open
with a sparse top-2 mixture of maxout experts (ours: :class:`~rckit.layers.maxout.MixtureOfMaxouts`,
balance ``moe_balance``); ``word_dropout`` drops whole token vectors.

Loss: DCN :func:`~rckit.models.losses.iterative_span_loss`, the cross-entropy summed over each
example's active iterations. DCN+ with ``mixed_objective`` (Sec. 3), ``log sigma^2`` learned::

    loss = L_ce / (2 sigma_ce^2) + L_rl / (2 sigma_rl^2) + log sigma_ce^2 + log sigma_rl^2
    grad L_rl = -mean_b R_b * grad sum_i [log p_i^start(s^_i) + log p_i^end(e^_i)]     (eq. 16)
    R = F1(s^_T, e^_T) - F1(s_T, e_T)        a sampled rollout (draws fed back) minus greedy
    R_s = F1(s^, e) - F1(s, e), R_e = F1(s, e^) - F1(s, e)    ours: reward_credit="pointer"

Reading of L_rl's value: positive, as weights that settle at ``sigma^2 = L / 2`` need (the paper's
``-E[R]`` is not). :func:`~rckit.models.losses.self_critical_loss` returns ``V + (S - S.detach())``:
``sigma_rl`` sees ``V = mean_b (1 - F1(s^, e^))`` (per pointer ``(1-F1(s^, e)) + (1-F1(s, e^))``),
the model the REINFORCE surrogate S's gradient. ``log sigma^2`` has a soft floor
``log_sigma2_floor``; ``train.reward_from`` keeps the loss at L_ce alone before that step.

No answer (``no_answer``, SQuAD v2.0): a learned null ``U <- [u_0; U]`` (B, 1 + m, 2l) that both
HMNs score like a token; the decoder starts there (s_0 = e_0 = 0 is the null), an unanswerable
question's targets are the null at every iteration, and ``p(no answer)`` shares the last
iteration's softmaxes with the spans. DCN+'s reward counts answerable questions only (null F1 0).

Presets: ``paper`` the papers' sizes (l 200, pool 16, 4 iterations); ``cpu-small`` smaller for 45
minutes on 2 cores; ``contextual-cpu`` as small, reading all-MiniLM-L6-v2's states (the installed
``dcn``). Why: docs/investigations/model-design-notes.md; measured: RESULTS.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from rckit import kernels
from rckit.contextual.encoders import DEFAULT_LAYERS
from rckit.data.batching import Batch
from rckit.data.embeddings import EmbeddingInfo
from rckit.kernels import cpu
from rckit.layers.coattention import Coattention
from rckit.layers.embedding import CharCNN, PartiallyFrozenEmbedding, ScalarMix
from rckit.layers.lstm import PeepholeLSTM
from rckit.layers.masking import mask_logits, with_null, zero_padding
from rckit.layers.maxout import Maxout, MixtureOfMaxouts
from rckit.models.contract import ReadingModel, SpanOutput, check_contextual
from rckit.models.losses import (
    REWARD_CREDITS,
    iteration_log_probs,
    iterative_span_loss,
    null_targets,
    self_critical_loss,
    uncertainty_weighted,
)


@dataclass
class DCNConfig:
    hidden: int = 200  # l
    pool: int = 16  # maxout pool size
    iterations: int = 4  # most decoder iterations
    dropout: float = 0.3  # encoder outputs and U
    use_chars: bool = False  # concatenate a char-CNN vector to the word vector
    char_dim: int = 100  # ignored when EmbeddingInfo.char_vectors is given (its width wins)
    char_conv_width: int = 5
    contextual: str = "none"  # a frozen encoder's states beside GloVe: "none", "minilm" or a folder (rckit.contextual)
    # the encoder's layers mixed as ELMo's (0: the embeddings)
    contextual_layers: list[int] = field(default_factory=lambda: list(DEFAULT_LAYERS))
    freeze_pretrained_words: bool = True  # rows >= EmbeddingInfo.n_trainable_words stay fixed
    no_answer: bool = False  # a learned null position before U (SQuAD v2.0; see docstring)


@dataclass
class DCNPlusConfig(DCNConfig):
    word_dropout: float = 0.075  # drop whole token vectors
    n_experts: int = 8  # mixture of maxout experts in the HMNs' first layer; 0 = plain maxout
    moe_balance: float = 0.01  # weight of the load-balancing term
    mixed_objective: bool = True  # CE + self-critical RL with learned weights
    log_sigma2_floor: float = -2.0  # soft floor of the learned log sigma^2
    # "joint": eq. 16, one reward for the sampled span; "pointer": each pointer's draw scored beside the other's
    # greedy choice
    reward_credit: str = "joint"


@dataclass
class SampledRollout:
    start: torch.Tensor  # (B,) long, s^_T
    end: torch.Tensor  # (B,) long, e^_T
    log_prob: torch.Tensor  # (B,) float32, sum over active iterations of log p(s^_i) + log p(e^_i)
    start_log_prob: torch.Tensor | None = None  # (B,) its start part, sum of log p(s^_i)
    end_log_prob: torch.Tensor | None = None  # (B,) its end part, sum of log p(e^_i)


@dataclass(kw_only=True)
class DCNOutput(SpanOutput):
    """The span output (the final iteration's logits) and the decoder's trace, for the loss."""

    start_iters: torch.Tensor  # (I, B, m) every iteration (frozen copies after an example stops)
    end_iters: torch.Tensor  # (I, B, m)
    starts: torch.Tensor  # (I, B) long, greedy s_i
    ends: torch.Tensor  # (I, B) long, greedy e_i
    active: torch.Tensor  # (I, B) bool, example still running at iteration i
    balance: torch.Tensor | None = None  # MoE load-balancing term (scalar), DCN+ only
    sample: SampledRollout | None = None  # DCN+ mixed objective, training only


class TokenInput(nn.Module):
    """Per token ``[GloVe; char-CNN?; contextual?]`` with optional whole-token dropout."""

    def __init__(self, emb: EmbeddingInfo, c: DCNConfig, word_dropout: float = 0.0):
        super().__init__()
        check_contextual(c, emb)
        V = emb.word_vectors.shape[0]
        self.word = PartiallyFrozenEmbedding(
            emb.word_vectors, emb.n_trainable_words if c.freeze_pretrained_words else V
        )
        self.char = None
        char_dim = 0
        if c.use_chars:
            char_dim = emb.char_vectors.shape[1] if emb.char_vectors is not None else c.char_dim
            self.char = CharCNN(emb.n_chars, char_dim, char_dim, c.char_conv_width, emb.char_vectors)
        self.mix = ScalarMix(len(c.contextual_layers)) if emb.contextual_dim else None
        self.out_dim = self.word.embedding_dim + char_dim + emb.contextual_dim
        self.word_dropout = word_dropout

    def forward(self, words: torch.Tensor, chars: torch.Tensor, states: torch.Tensor | None = None) -> torch.Tensor:
        """``words`` (B, T), ``chars`` (B, T, W), ``states`` (B, T, K, D) for a model with ``contextual``."""
        parts = [self.word(words)]  # (B, T, Dw)
        if self.char is not None:
            parts.append(self.char(chars))  # (B, T, Dc)
        if self.mix is not None:
            if states is None:
                raise ValueError("this model reads contextual states beside its word vectors, and none were given")
            parts.append(self.mix(states.to(parts[0].dtype)))  # (B, T, D), CoVe's place
        x = torch.cat(parts, dim=-1)  # (B, T, out_dim)
        if self.training and self.word_dropout > 0.0:
            keep = torch.rand(x.shape[:2], device=x.device) >= self.word_dropout  # (B, T)
            x = x * keep.unsqueeze(-1).to(x.dtype) / (1.0 - self.word_dropout)
        return x


def encode_documents(embed: TokenInput, encoder: PeepholeLSTM, batch: Batch) -> torch.Tensor:
    """``encoder(embed(document))`` outputs, (B, m, h).

    Outside training on CPU the kernel ``dedupe`` encodes each distinct document of the batch
    once (:func:`rckit.kernels.cpu.once_per_distinct_text`): this encoder never sees the
    question, and SQuAD asks several questions about each paragraph.
    """
    words, chars, mask, states = batch.c_words, batch.c_chars, batch.c_mask, batch.c_states
    if not encoder.training and words.device.type == "cpu" and kernels.enabled("dedupe"):
        # A document's contextual states are its own whatever the question: the same text, the same states.
        return cpu.once_per_distinct_text(
            lambda i: encoder(embed(words[i], chars[i], None if states is None else states[i]), mask[i])[0],
            words,
            chars,
        )
    return encoder(embed(words, chars, states), mask)[0]


class HighwayMaxout(nn.Module):
    """HMN(u_t, h_i, u_s, u_e) for every position t at once; ``n_experts > 0``: MoE first layer."""

    def __init__(self, hidden: int, pool: int, n_experts: int = 0):
        super().__init__()
        self.l = hidden
        self.W_D = nn.Linear(5 * hidden, hidden, bias=False)
        self.m1 = (
            MixtureOfMaxouts(3 * hidden, hidden, pool, n_experts) if n_experts > 0 else Maxout(3 * hidden, hidden, pool)
        )
        self.m2 = Maxout(hidden, hidden, pool)
        self.m3 = Maxout(2 * hidden, 1, pool)

    def precompute(self, U: torch.Tensor) -> torch.Tensor | None:
        """``W1_u u_t + b1`` (B, m, l*pool), the part of the first layer fixed across iterations."""
        if isinstance(self.m1, MixtureOfMaxouts):
            return None
        lin = self.m1.linear
        return F.linear(U, lin.weight[:, : 2 * self.l], lin.bias)

    def forward(
        self,
        U: torch.Tensor,
        U_pre: torch.Tensor | None,
        h: torch.Tensor,
        u_s: torch.Tensor,
        u_e: torch.Tensor,
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits (B, m) at every position (padding not yet masked) and the MoE balance term."""
        r = torch.tanh(self.W_D(torch.cat([h, u_s, u_e], dim=-1)))  # (B, l)
        balance = None
        if U_pre is None:
            x = torch.cat([U, r.unsqueeze(1).expand(-1, U.shape[1], -1)], dim=-1)  # (B, m, 3l)
            m1, balance = self.m1(x, mask)  # (B, m, l)
        else:
            r_part = F.linear(r, self.m1.linear.weight[:, 2 * self.l :])  # (B, l*pool)
            m1 = self.m1.pool_max(U_pre + r_part.unsqueeze(1))  # (B, m, l)
        m2 = self.m2(m1)  # (B, m, l)
        return self.m3(torch.cat([m1, m2], dim=-1)).squeeze(-1), balance  # (B, m)


def _gather(U: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``U[b, idx[b]]``: (B, m, d), (B,) -> (B, d)."""
    return U.gather(1, idx.view(-1, 1, 1).expand(-1, 1, U.shape[2])).squeeze(1)


class DynamicDecoder(nn.Module):
    """Iterative start/end pointing over U; greedy (argmax) or sampled spans."""

    def __init__(self, hidden: int, pool: int, iterations: int, n_experts: int = 0):
        super().__init__()
        self.l, self.iterations = hidden, iterations
        self.cell = nn.LSTMCell(4 * hidden, hidden)
        self.start_hmn = HighwayMaxout(hidden, pool, n_experts)
        self.end_hmn = HighwayMaxout(hidden, pool, n_experts)

    def forward(
        self,
        U: torch.Tensor,
        mask: torch.Tensor,
        sample: bool = False,
        follow: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> dict:
        """``follow``: the starts and ends (I, B) to point at in each iteration instead of choosing
        them, as a trace's ``starts`` and ``ends``: an explanation holds the decoder to the path the
        real input took, so that the final logits are a smooth function of the input (an argmax
        that switches along the way makes integrated gradients miss the score by several times)."""
        B = U.shape[0]
        s = e = torch.zeros(B, dtype=torch.long, device=U.device)
        h = c = U.new_zeros(B, self.l)
        done = torch.zeros(B, dtype=torch.bool, device=U.device)
        pre_s, pre_e = self.start_hmn.precompute(U), self.end_hmn.precompute(U)
        alphas, betas, starts, ends, active, balances = [], [], [], [], [], []
        for i in range(self.iterations):
            u_s, u_e = _gather(U, s), _gather(U, e)  # (B, 2l) each
            h_new, c_new = self.cell(torch.cat([u_s, u_e], dim=-1), (h, c))  # (B, l) each
            row_mask = mask & ~done.unsqueeze(1)  # rows that count for the MoE balance
            alpha, bal_s = self.start_hmn(U, pre_s, h_new, u_s, u_e, row_mask)
            beta, bal_e = self.end_hmn(U, pre_e, h_new, u_s, u_e, row_mask)
            alpha, beta = mask_logits(alpha, mask), mask_logits(beta, mask)  # (B, m) each
            if follow is not None:
                s_new, e_new = follow[0][i], follow[1][i]  # (B,)
            elif sample:
                s_new = torch.distributions.Categorical(logits=alpha.detach().float()).sample()  # (B,)
                e_new = torch.distributions.Categorical(logits=beta.detach().float()).sample()
            else:
                s_new, e_new = alpha.detach().argmax(1), beta.detach().argmax(1)  # (B,)
            if i > 0:  # a finished example keeps its last logits, span and state
                keep = done.unsqueeze(1)  # (B, 1)
                alpha, beta = torch.where(keep, alphas[-1], alpha), torch.where(keep, betas[-1], beta)
                s_new, e_new = torch.where(done, s, s_new), torch.where(done, e, e_new)
                h, c = torch.where(keep, h, h_new), torch.where(keep, c, c_new)
            else:
                h, c = h_new, c_new
            active.append(~done)
            done = done | ((s_new == s) & (e_new == e))
            s, e = s_new, e_new
            alphas.append(alpha)
            betas.append(beta)
            starts.append(s)
            ends.append(e)
            balances += [b for b in (bal_s, bal_e) if b is not None]
            if i + 1 < self.iterations and bool(done.all()):
                break
        for _ in range(self.iterations - len(alphas)):  # everyone stopped early: pad with copies
            alphas.append(alphas[-1])
            betas.append(betas[-1])
            starts.append(s)
            ends.append(e)
            active.append(torch.zeros_like(done))
        return {
            "start_iters": torch.stack(alphas),
            "end_iters": torch.stack(betas),  # (I, B, m) each
            "starts": torch.stack(starts),
            "ends": torch.stack(ends),
            "active": torch.stack(active),  # (I, B)
            "balance": torch.stack(balances).mean() if balances else None,
        }


def decode_with_null(model: nn.Module, U: torch.Tensor, batch: Batch, sample: bool = False) -> dict:
    """``model.decoder`` over U, or over ``[null; U]`` for a model that can abstain."""
    if model.null is None:
        return model.decoder(U, batch.c_mask, sample)
    U, mask = with_null(model.null, U, batch.c_mask)  # (B, 1 + m, 2l), (B, 1 + m)
    return model.decoder(U, mask, sample)


def span_output(run: dict, no_answer: bool, sample: SampledRollout | None = None) -> DCNOutput:
    """The final iteration's logits as the span output; the null's apart for a model that can abstain."""
    start, end = run["start_iters"][-1], run["end_iters"][-1]  # (B, m) or (B, 1 + m)
    if not no_answer:
        return DCNOutput(start_logits=start, end_logits=end, sample=sample, **run)
    return DCNOutput(
        start_logits=start[:, 1:],
        end_logits=end[:, 1:],
        start_null=start[:, 0],
        end_null=end[:, 0],
        sample=sample,
        **run,
    )


def decoder_targets(model: nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """The gold (start, end) in the decoder's positions: shifted past the null where there is one."""
    if model.null is None:
        return batch.y_start, batch.y_end
    return null_targets(batch.y_start, batch.y_end, batch.answerable)


class DCN(ReadingModel):
    READS_CONTEXTUAL = True

    def __init__(self, config: DCNConfig, emb: EmbeddingInfo):
        super().__init__(config)
        c = config
        hidden = c.hidden
        self.embed = TokenInput(emb, c)
        self.encoder = PeepholeLSTM(self.embed.out_dim, hidden, peephole=None)
        self.coattention = Coattention(hidden, project_question=True)
        self.fusion = PeepholeLSTM(3 * hidden, hidden, bidirectional=True, peephole=None)
        self.decoder = DynamicDecoder(hidden, c.pool, c.iterations)
        self.dropout = nn.Dropout(c.dropout)
        self.no_answer = c.no_answer
        self.null = nn.Parameter(torch.randn(2 * hidden) * 0.1) if c.no_answer else None  # u_0, after the others

    def encode(self, batch: Batch) -> torch.Tensor:
        """U (B, m, 2l), zero at padding."""
        c_mask, q_mask = batch.c_mask, batch.q_mask
        D = self.dropout(encode_documents(self.embed, self.encoder, batch))  # (B, m, l)
        Q = self.dropout(self.encoder(self.embed(batch.q_words, batch.q_chars, batch.q_states), q_mask)[0])  # (B, n, l)
        co = self.coattention(D, Q, c_mask, q_mask)
        U = self.fusion(torch.cat([D, co.S_D, co.C_D], dim=-1), c_mask)[0]  # (B, m, 2l)
        return zero_padding(self.dropout(U), c_mask)

    def forward(self, batch: Batch) -> DCNOutput:
        return span_output(decode_with_null(self, self.encode(batch), batch), self.no_answer)

    def loss(self, out: DCNOutput, batch: Batch, reward_fn=None) -> torch.Tensor:
        """Cross-entropy summed over decoder iterations; ``reward_fn`` is not used."""
        self.loss_terms = {}
        return iterative_span_loss(out, *decoder_targets(self, batch))


class DCNPlus(ReadingModel):
    READS_CONTEXTUAL = True

    def __init__(self, config: DCNPlusConfig, emb: EmbeddingInfo):
        super().__init__(config)
        if config.hidden % 2:
            raise ValueError(f"DCN+ hidden must be even (biLSTM_1 has hidden/2 per direction), got {config.hidden}")
        c = config
        hidden = c.hidden
        self.embed = TokenInput(emb, c, c.word_dropout)
        self.enc1 = PeepholeLSTM(self.embed.out_dim, hidden // 2, bidirectional=True, peephole=None)  # E_1: l
        self.coattn1 = Coattention(hidden, project_question=True)
        self.enc2 = PeepholeLSTM(hidden, hidden, bidirectional=True, peephole=None)  # E_2: 2l
        self.coattn2 = Coattention(2 * hidden, project_question=False)
        self.fusion = PeepholeLSTM(9 * hidden, hidden, bidirectional=True, peephole=None)  # U: 2l
        self.decoder = DynamicDecoder(hidden, c.pool, c.iterations, c.n_experts)
        self.dropout = nn.Dropout(c.dropout)
        # For the engine: the mixed objective needs the F1 reward; experts without rows in a
        # batch get no gradient, so DistributedDataParallel must look for unused parameters.
        if c.reward_credit not in REWARD_CREDITS:
            raise ValueError(f"reward_credit must be one of {REWARD_CREDITS}, got {c.reward_credit!r}")
        self.uses_reward = c.mixed_objective  # reward_on: the loop clears it before train.reward_from (CE alone)
        self.find_unused_parameters = c.n_experts > 0 or c.mixed_objective  # sigma gets no gradient before reward_from
        if c.mixed_objective:
            # raw parameters of log sigma^2 for (ce, rl), set so that log sigma^2 starts at 0
            raw = math.log(math.expm1(-c.log_sigma2_floor)) if c.log_sigma2_floor < 0 else 0.0
            self.log_sigma2_raw = nn.Parameter(torch.full((2,), raw))
        self.no_answer = c.no_answer
        self.null = nn.Parameter(torch.randn(2 * hidden) * 0.1) if c.no_answer else None  # u_0, after the others

    def encode(self, batch: Batch) -> torch.Tensor:
        """U (B, m, 2l), zero at padding."""
        c_mask, q_mask = batch.c_mask, batch.q_mask
        E1_D = self.dropout(encode_documents(self.embed, self.enc1, batch))  # (B, m, l)
        E1_Q = self.dropout(self.enc1(self.embed(batch.q_words, batch.q_chars, batch.q_states), q_mask)[0])  # (B, n, l)
        co1 = self.coattn1(E1_D, E1_Q, c_mask, q_mask)
        E2_D = self.dropout(self.enc2(co1.S_D, c_mask)[0])  # (B, m, 2l)
        E2_Q = self.dropout(self.enc2(co1.S_Q, q_mask)[0])  # (B, n, 2l)
        co2 = self.coattn2(E2_D, E2_Q, c_mask, q_mask)
        x = torch.cat([E1_D, E2_D, co1.S_D, co2.S_D, co1.C_D, co2.C_D], dim=-1)  # (B, m, 9l)
        U = self.fusion(x, c_mask)[0]  # (B, m, 2l)
        return zero_padding(self.dropout(U), c_mask)

    def forward(self, batch: Batch) -> DCNOutput:
        U = self.encode(batch)
        run = decode_with_null(self, U, batch)
        sample = None
        if self.training and self.config.mixed_objective and self.reward_on:
            rl = decode_with_null(self, U, batch, sample=True)
            lp_s, lp_e = (
                torch.where(rl["active"], iteration_log_probs(rl[f"{k}_iters"], rl[f"{k}s"]), 0.0).sum(0)
                for k in ("start", "end")
            )  # (B,) each
            sample = SampledRollout(
                start=rl["starts"][-1], end=rl["ends"][-1], log_prob=lp_s + lp_e, start_log_prob=lp_s, end_log_prob=lp_e
            )
        return span_output(run, self.no_answer, sample)

    def log_sigma2(self) -> torch.Tensor:
        """(log sigma_ce^2, log sigma_rl^2), softly kept above ``log_sigma2_floor``."""
        return self.config.log_sigma2_floor + F.softplus(self.log_sigma2_raw)

    def loss(self, out: DCNOutput, batch: Batch, reward_fn=None) -> torch.Tensor:
        """CE (+ self-critical RL with learned weights when training with ``mixed_objective``) + MoE balance.

        ``reward_fn(batch.index (B,), starts (B, K), ends (B, K)) -> (B, K)`` F1 of each span.
        Without a sampled rollout (evaluation mode) the loss is the cross-entropy alone.
        """
        c = self.config
        ce = iterative_span_loss(out, *decoder_targets(self, batch))
        loss = ce
        self.loss_terms = {}
        if out.sample is not None:
            if reward_fn is None:
                raise ValueError("DCN+ with mixed_objective needs reward_fn in training")
            if self.no_answer:  # decoder positions are one past token positions; the null (-1) has no text
                reward_fn = shifted_reward(reward_fn)
            rl = self_critical_loss(out, batch, reward_fn, c.reward_credit)
            loss, w = uncertainty_weighted(ce, rl, self.log_sigma2())
            self.loss_terms = {"ce": ce.detach(), "rl": rl.detach(), "w_ce": w[0].detach(), "w_rl": w[1].detach()}
        if out.balance is not None:
            loss = loss + c.moe_balance * out.balance.float()
        return loss.float()


def shifted_reward(reward_fn):
    """``reward_fn`` of token spans, called with decoder positions over ``[null, tokens]``."""
    return lambda index, starts, ends: reward_fn(index, starts - 1, ends - 1)
