"""The Attentive Reader and the Impatient Reader (Hermann et al. 2015, Sec. 3.2).

Both read the document and the query with separate bidirectional LSTMs (``||`` concatenates)::

    y_d(t) = fwd_d(t) || bwd_d(t)                 the document encoding at token t
    y_q(i) = fwd_q(i) || bwd_q(i)                 the query encoding at token i
    u      = fwd_q(|q|) || bwd_q(1)               each direction's state after the whole query

Attentive Reader: one attention over the document, conditioned on the whole query::

    m(t) = tanh(W_ym y_d(t) + W_um u)
    s(t) ∝ exp(w_ms^T m(t))                       softmax over the real document tokens
    r    = y_d s                                  = sum_t s(t) y_d(t)
    g    = tanh(W_rg r + W_ug u)

Impatient Reader: re-reads the document as each query token ``i = 1 .. |q|`` is read::

    m(i, t) = tanh(W_dm y_d(t) + W_rm r(i - 1) + W_qm y_q(i))
    s(i, t) ∝ exp(w_ms^T m(i, t))
    r(i)    = y_d^T s(i) + tanh(W_rr r(i - 1)),    r(0) = 0
    g       = tanh(W_rg r(|q|) + W_qg u)

Cloze head (the only one): ``p(a | d, q) ∝ exp(W(a) g)`` over the document's entity markers, rows
tied as in :mod:`rckit.models.deep_lstm_reader`. Loss: :func:`~rckit.models.losses.cloze_loss`.

Readings taken where the paper is loose:

- ``r(0) = r_0`` is not given; we take the zero vector, so ``r(1) = y_d^T s(1)``.
- No biases are written: ``m`` and ``g`` get one each (on ``W_ym``/``W_dm`` and ``W_rg``), ``w_ms``
  none (a softmax ignores it), nor ``W_rr``, so that ``tanh(W_rr r(0)) = 0`` adds nothing.
- ``g`` has the size of ``r`` and ``u``, 2 x ``hidden``; ``m`` has ``attention`` units.
- Padded query steps leave ``r`` unchanged; their attention rows are returned as zeros.
- Dropout on the word embeddings and on ``g``; plain LSTM cells (``peephole=None``) by default,
  as the paper names peepholes only for the deep reader.

Copy task (``train.copy_steps``, training only): at one random entity mention ``t`` per document,
``g_copy = tanh(W_rg y_d(t) + W_ug u)`` (``W_qg u`` in the Impatient Reader) must name the entity
at ``t`` through the same head (``ClozeOutput.copy_logits``); its cross-entropy (weight
``train.copy_weight``) joins the answer's for ``copy_steps`` steps, training ``y_d -> g -> W(a)``.

Presets: ``paper`` 256 cells per direction, attention 256, RMSProp lr 5e-4 (momentum 0.9, decay
0.95); ``cloze-cpu`` 128 and 128, Adam 1e-3, the copy task for 1,000 steps (the squad-cloze runs'
settings). What was measured: RESULTS.md ("Cloze readers on squad-cloze"),
docs/investigations/cloze-readers.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from rckit.data.cloze.examples import ENTITY_OFFSET
from rckit.data.embeddings import EmbeddingInfo
from rckit.layers.embedding import PartiallyFrozenEmbedding
from rckit.layers.lstm import PeepholeLSTM
from rckit.layers.masking import masked_softmax
from rckit.models.contract import ClozeOutput, ReadingModel
from rckit.models.deep_lstm_reader import entity_logits


@dataclass
class AttentiveReaderConfig:
    head: str = "cloze"  # the only head: an entity answer
    hidden: int = 256  # LSTM cells per direction; y_d, y_q, u, r and g have 2 x hidden
    attention: int = 256  # size of m(t)
    dropout: float = 0.1  # on the word embeddings and on g
    peephole: str | None = None  # "diagonal", "full" or None (plain LSTM cells)
    freeze_pretrained_words: bool = False  # the paper trains every embedding
    tied_output: bool = True  # W(a) = e(a)^T M through the markers' embeddings; False: a free row per number


@dataclass
class ImpatientReaderConfig(AttentiveReaderConfig):
    pass


@dataclass
class Encoded:
    y_d: torch.Tensor  # (B, Td, 2H), zero at padding
    d_mask: torch.Tensor  # (B, Td) bool
    y_q: torch.Tensor  # (B, Tq, 2H), zero at padding
    q_mask: torch.Tensor  # (B, Tq) bool
    u: torch.Tensor  # (B, 2H)


@dataclass
class Attended:
    g: torch.Tensor  # (B, 2H) the joint document-query embedding, before dropout
    s: torch.Tensor  # attention over the document: (B, Td), or (B, Tq, Td) for the Impatient Reader
    encoded: Encoded  # what g was computed from


class Encoders(nn.Module):
    """Embedding, dropout and the two bidirectional LSTMs that both readers share."""

    def __init__(self, config: AttentiveReaderConfig, emb: EmbeddingInfo):
        super().__init__()
        V, E = emb.word_vectors.shape
        n_trainable = emb.n_trainable_words if config.freeze_pretrained_words else V
        self.embed = PartiallyFrozenEmbedding(emb.word_vectors, n_trainable)
        self.dropout = nn.Dropout(config.dropout)
        self.doc_lstm = PeepholeLSTM(E, config.hidden, bidirectional=True, peephole=config.peephole)
        self.query_lstm = PeepholeLSTM(E, config.hidden, bidirectional=True, peephole=config.peephole)

    def forward(self, batch) -> Encoded:
        d_mask, q_mask = batch.c_mask, batch.q_mask
        y_d, _ = self.doc_lstm(self.dropout(self.embed(batch.c_words)), d_mask)  # (B, Td, 2H)
        y_q, (h_n, _) = self.query_lstm(self.dropout(self.embed(batch.q_words)), q_mask)  # (B, Tq, 2H), (2, B, H)
        # h_n[0]: forward after the last real token; h_n[1]: backward after reading back to token 1.
        u = torch.cat([h_n[0], h_n[1]], dim=-1).to(y_q.dtype)  # (B, 2H)
        return Encoded(y_d, d_mask, y_q, q_mask, u)


def check_config(config: AttentiveReaderConfig, emb: EmbeddingInfo) -> None:
    if config.head != "cloze":
        raise ValueError(f"head must be 'cloze' (the only head of this reader), got {config.head!r}")
    if emb.n_entities < 1:
        raise ValueError("the cloze head needs data with entity markers (EmbeddingInfo.n_entities >= 1)")


def attention_weights(m: torch.Tensor, w_ms: nn.Linear, d_mask: torch.Tensor) -> torch.Tensor:
    """``s ∝ exp(w_ms^T m)`` over the real document tokens: ``m`` (B, Td, A) -> (B, Td)."""
    scores = w_ms(m).squeeze(-1)  # (B, Td)
    return masked_softmax(scores.float(), d_mask).to(m.dtype)


def entity_output(config: AttentiveReaderConfig, emb: EmbeddingInfo, D: int, model: nn.Module) -> nn.Linear:
    """M (D -> E) when tied, else W(a) (D -> N); the marker ids go in the model's ``entity_ids`` buffer."""
    model.register_buffer("entity_ids", ENTITY_OFFSET + torch.arange(emb.n_entities), persistent=False)
    return nn.Linear(D, emb.word_vectors.shape[1] if config.tied_output else emb.n_entities)


def answer_entities(model: nn.Module, batch) -> ClozeOutput:
    """The cloze head of both readers: dropout on g, then ``W(a) g`` over the candidate markers.

    With ``batch.copy_at`` (training's copy task) also the head's scores when the attention is
    replaced by the one position ``t = copy_at``: ``g_copy = tanh(W_rg y_d(t) + W_ug u)``.
    """
    att = model.attend(batch)
    e = model.encode.embed(model.entity_ids) if model.config.tied_output else None  # (N, E)

    def head(g: torch.Tensor) -> torch.Tensor:  # (B, 2H) -> (B, N)
        return entity_logits(model.answer, model.encode.dropout(g), e, batch.candidates)

    copy = None
    if batch.copy_at is not None:
        y_d, u = att.encoded.y_d, att.encoded.u
        r = y_d[torch.arange(y_d.shape[0], device=y_d.device), batch.copy_at.clamp(min=0)]  # (B, 2H)
        copy = head(model.joint(r, u))
    return ClozeOutput(logits=head(att.g), copy_logits=copy)


class AttentiveReader(ReadingModel):
    TASK = "cloze"
    cpu_bf16 = True  # trains faster under bf16 autocast on CPU (BENCHMARKS.md)

    def __init__(self, config: AttentiveReaderConfig, emb: EmbeddingInfo):
        super().__init__(config)
        check_config(config, emb)
        D, A = 2 * config.hidden, config.attention
        self.encode = Encoders(config, emb)
        self.W_ym = nn.Linear(D, A)
        self.W_um = nn.Linear(D, A, bias=False)
        self.w_ms = nn.Linear(A, 1, bias=False)
        self.W_rg = nn.Linear(D, D)
        self.W_ug = nn.Linear(D, D, bias=False)
        self.answer = entity_output(config, emb, D, self)

    def attend(self, batch) -> Attended:
        e = self.encode(batch)
        m = torch.tanh(self.W_ym(e.y_d) + self.W_um(e.u).unsqueeze(1))  # (B, Td, A)
        s = attention_weights(m, self.w_ms, e.d_mask)  # (B, Td)
        r = torch.einsum("bt,btd->bd", s, e.y_d)  # (B, 2H)
        return Attended(g=self.joint(r, e.u), s=s, encoded=e)

    def joint(self, r: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """``g = tanh(W_rg r + W_ug u)``: (B, 2H), (B, 2H) -> (B, 2H)."""
        return torch.tanh(self.W_rg(r) + self.W_ug(u))

    def forward(self, batch) -> ClozeOutput:
        return answer_entities(self, batch)


class ImpatientReader(ReadingModel):
    TASK = "cloze"
    cpu_bf16 = True  # trains faster under bf16 autocast on CPU (BENCHMARKS.md)

    def __init__(self, config: ImpatientReaderConfig, emb: EmbeddingInfo):
        super().__init__(config)
        check_config(config, emb)
        D, A = 2 * config.hidden, config.attention
        self.encode = Encoders(config, emb)
        self.W_dm = nn.Linear(D, A)
        self.W_rm = nn.Linear(D, A, bias=False)
        self.W_qm = nn.Linear(D, A, bias=False)
        self.w_ms = nn.Linear(A, 1, bias=False)
        self.W_rr = nn.Linear(D, D, bias=False)
        self.W_rg = nn.Linear(D, D)
        self.W_qg = nn.Linear(D, D, bias=False)
        self.answer = entity_output(config, emb, D, self)

    def attend(self, batch) -> Attended:
        e = self.encode(batch)
        B, Tq, D = e.y_q.shape
        dm = self.W_dm(e.y_d)  # (B, Td, A): W_dm y_d(t), the same at every query step
        qm = self.W_qm(e.y_q)  # (B, Tq, A)
        r = e.y_d.new_zeros(B, D)  # r(0)
        rows = []
        for i in range(Tq):
            m = torch.tanh(dm + (self.W_rm(r) + qm[:, i]).unsqueeze(1))  # (B, Td, A)
            s = attention_weights(m, self.w_ms, e.d_mask)  # (B, Td)
            r_i = torch.einsum("bt,btd->bd", s, e.y_d) + torch.tanh(self.W_rr(r))  # (B, 2H)
            real = e.q_mask[:, i : i + 1]  # (B, 1)
            r = torch.where(real, r_i, r)  # a padded query step leaves r(i) = r(i - 1)
            rows.append(s * real.to(s.dtype))
        return Attended(g=self.joint(r, e.u), s=torch.stack(rows, dim=1), encoded=e)  # s: (B, Tq, Td)

    def joint(self, r: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """``g = tanh(W_rg r(|q|) + W_qg u)``: (B, 2H), (B, 2H) -> (B, 2H)."""
        return torch.tanh(self.W_rg(r) + self.W_qg(u))

    def forward(self, batch) -> ClozeOutput:
        return answer_entities(self, batch)
