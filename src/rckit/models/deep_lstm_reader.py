"""The Deep LSTM Reader (Hermann et al. 2015, "Teaching Machines to Read and Comprehend").

The document and the query are read as one sequence around a delimiter, query first in the
``qca`` form (the paper's best) or document first in ``cqa``::

    x(t)     = embed(q_1 .. q_|q| ||| d_1 .. d_|d|)                       (qca)
    x'(t, k) = x(t) || y'(t, k - 1)                 (x'(t, 1) = x(t): skip from the input)
    h(t, k)  = LSTM_k(x'(t, k), h(t - 1, k))         peephole LSTM cells, rckit.layers.lstm
    y'(t, k) = W_ky h(t, k) + b_ky
    y(t)     = y'(t, 1) || ... || y'(t, K)          (skip from every layer to the output)
    g        = y(|q| + 1 + |d|)                      the output at the last real token

Cloze head (``head="cloze"``): ``p(a | d, q) ∝ exp(W(a) g)`` over the anonymised entity markers
``@entity0 .. @entity{N-1}`` that occur in the document. With ``tied_output`` (default) the rows
are ``W(a) = e(a)^T M``, ``e(a)`` the marker's input embedding: one map ``M`` learns to read any
entity back out of ``g``, where a free row per number learns only from the examples using that
number. Loss: :func:`rckit.models.losses.cloze_loss` (:class:`~rckit.models.contract.ClozeOutput`).

Span head (``head="span"``, SQuAD; our design, the paper has none). A forward LSTM at a document
token has read the question (in ``qca``) and the document up to that token but not what
follows, and a start pointer needs to know where the phrase goes; so the head reads the
document's ``y`` backwards with one more LSTM, ``z_t = [y_t; LSTM_back(y)_t]``, then::

    p_start(t) ∝ exp(z_t^T W_s g)
    c_s        = sum_t p_start(t) z_t                       (the expected start)
    p_end(t)   ∝ exp(z_t^T W_e [g; c_s])

Bilinear scores compare each position with what the reader concluded after the whole
sequence. In ``cqa`` the document is read before the question, so only ``g`` knows the
question: ``qca`` is the form for spans (the default). Loss: :func:`~rckit.models.losses.span_loss`.
With ``no_answer`` (SQuAD v2.0) a learned ``z_0`` goes before the document's ``z`` and both
pointers score it like a token, so ``p(no answer) = p_start(0) p_end(0)`` shares their softmaxes.
With ``contextual`` (span head) each token's input is ``[e(w_t); mix_k h_{t,k}]``, a frozen
encoder's states mixed over its layers beside the word vector (:mod:`rckit.contextual`), and the
delimiter is as wide.

Readings taken where the paper is loose: the scores run over the candidate entities only (the
paper's softmax is over the whole output vocabulary; only entities can be answers); ``g`` is read at
the last real token, the delimiter counted (the paper writes ``y(|d| + |q|)``); the cells read
``x'(t, k)`` in every gate (see :mod:`rckit.layers.lstm`); ``|||`` is a learned vector drawn at the
word vectors' spread, not a vocabulary row, so SQuAD and cloze vocabularies need no special token;
dropout acts on every layer's input, on ``g`` and on ``z``. The cells start at forget bias 1 (a
memory of about 3.7 steps); ``chrono = T`` (> 2; off by default) chrono-initialises them to 2 .. T.

Presets: ``paper`` 2 x 256 cells, RMSProp lr 5e-4, momentum 0.9, decay 0.95 (the paper's);
``cloze-cpu``/``squad-cpu`` 2 x 128 cells, documents cut at 300 tokens in training, EMA 0.999.
Design notes: docs/investigations/model-design-notes.md; measured: RESULTS.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from rckit.contextual.encoders import DEFAULT_LAYERS
from rckit.data.cloze.examples import ENTITY_OFFSET
from rckit.data.embeddings import EmbeddingInfo
from rckit.layers.embedding import PartiallyFrozenEmbedding, ScalarMix
from rckit.layers.lstm import PeepholeLSTM, chrono_init_
from rckit.layers.masking import mask_logits, with_null
from rckit.models.contract import ClozeOutput, ReadingModel, SpanOutput, check_contextual

HEADS = ("cloze", "span")
FORMS = ("qca", "cqa")


@dataclass
class DeepLSTMReaderConfig:
    head: str = "cloze"  # "cloze" (entity answer) or "span" (SQuAD start/end pointers)
    form: str = "qca"  # "qca": query ||| document; "cqa": document ||| query
    hidden: int = 256  # LSTM cells per layer
    depth: int = 2  # K stacked layers
    skip_dim: int = 0  # size of each y'(t, k); 0 = hidden
    dropout: float = 0.1
    peephole: str | None = "diagonal"  # "diagonal", "full" or None
    freeze_pretrained_words: bool = False  # the paper trains every embedding
    tied_output: bool = True  # cloze: W(a) = e(a)^T M through the markers' embeddings; False: a free row per number
    no_answer: bool = False  # span head: a learned null position before the document (SQuAD v2.0)
    chrono: float = (
        0.0  # > 2: chrono initialisation of the cells' gate biases, memories up to this many steps; 0: forget bias 1
    )
    contextual: str = "none"  # span head: a frozen encoder's states beside the word vectors (rckit.contextual)
    # the encoder's layers mixed as ELMo's (0: the embeddings)
    contextual_layers: list[int] = field(default_factory=lambda: list(DEFAULT_LAYERS))


def entity_logits(
    answer: nn.Linear, g: torch.Tensor, entity_vectors: torch.Tensor | None, candidates: torch.Tensor
) -> torch.Tensor:
    """``W(a) g`` for every entity marker a, non-candidates at finfo.min: (B, G) -> (B, N).

    Free rows: ``answer`` is (G -> N). Tied: ``answer`` is M (G -> E) and ``entity_vectors``
    (N, E) the markers' input embeddings, so ``W(a) g = e(a)^T M g``.
    """
    logits = answer(g)  # (B, N), or (B, E) when tied
    if entity_vectors is not None:
        logits = logits @ entity_vectors.to(logits.dtype).T  # (B, N)
    return mask_logits(logits, candidates)


def join_sequences(
    a: torch.Tensor, a_len: torch.Tensor, b: torch.Tensor, b_len: torch.Tensor, delim: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``a_1 .. a_la ||| b_1 .. b_lb`` per row, right-padded: (B, T, E) and its (B, T) mask.

    ``a`` (B, Ta, E), ``b`` (B, Tb, E) are right-padded with lengths ``a_len``, ``b_len`` (B,);
    ``delim`` (E,). T = max(la + 1 + lb); padded positions are zero.
    """
    B, Ta, E = a.shape
    src = torch.cat([a, delim.to(a.dtype).expand(B, 1, E), b], dim=1)  # (B, Ta + 1 + Tb, E)
    total = a_len + 1 + b_len  # (B,)
    T = int(total.max())
    j = torch.arange(T, device=a.device).unsqueeze(0)  # (1, T)
    la = a_len.unsqueeze(1)  # (B, 1)
    # Position j reads a[j] before the delimiter, the delimiter at la, then b[j - la - 1].
    idx = torch.where(j < la, j, torch.where(j == la, torch.full_like(j, Ta), j - la - 1 + Ta + 1))  # (B, T)
    mask = j < total.unsqueeze(1)  # (B, T)
    idx = torch.where(mask, idx, torch.zeros_like(idx))
    x = src.gather(1, idx.unsqueeze(-1).expand(B, T, E)) * mask.unsqueeze(-1).to(src.dtype)  # (B, T, E)
    return x, mask


class DeepLSTMReader(ReadingModel):
    READS_CONTEXTUAL = True
    cpu_bf16 = True  # trains faster under bf16 autocast on CPU (BENCHMARKS.md)

    @classmethod
    def task_of(cls, config: DeepLSTMReaderConfig) -> str:
        return config.head  # "cloze" or "span", the names of the two tasks

    def __init__(self, config: DeepLSTMReaderConfig, emb: EmbeddingInfo):
        super().__init__(config)
        if config.head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}, got {config.head!r}")
        if config.form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {config.form!r}")
        if config.chrono and config.chrono <= 2:
            raise ValueError(f"chrono must be 0 (forget bias 1) or a memory length > 2 steps, got {config.chrono!r}")
        if config.no_answer and config.head != "span":
            raise ValueError("no_answer is for the span head (SQuAD v2.0); a cloze answer is always an entity")
        if config.head == "cloze" and emb.n_entities < 1:
            raise ValueError("the cloze head needs data with entity markers (EmbeddingInfo.n_entities >= 1)")
        if config.contextual != "none" and config.head != "span":
            raise ValueError("contextual states are for the span head (SQuAD); cloze documents are anonymised")
        check_contextual(config, emb)
        V, E_w = emb.word_vectors.shape
        n_trainable = emb.n_trainable_words if config.freeze_pretrained_words else V
        self.embed = PartiallyFrozenEmbedding(emb.word_vectors, n_trainable)
        self.mix = ScalarMix(len(config.contextual_layers)) if emb.contextual_dim else None
        E = E_w + emb.contextual_dim  # x(t) = [e(w_t); contextual state?]
        # the ||| token, drawn at the word vectors' own spread so that it is as strong a signal
        # as the words around it (docs/investigations/model-design-notes.md)
        self.delim = nn.Parameter(torch.randn(E) * float(emb.word_vectors.std()))
        H, S, K = config.hidden, config.skip_dim or config.hidden, config.depth
        self.layers = nn.ModuleList(PeepholeLSTM(E if k == 0 else E + S, H, peephole=config.peephole) for k in range(K))
        if config.chrono:
            for lstm in self.layers:
                chrono_init_(lstm, config.chrono)
        self.skips = nn.ModuleList(nn.Linear(H, S) for _ in range(K))  # W_ky, b_ky
        self.dropout = nn.Dropout(config.dropout)
        G = K * S  # size of y(t) and g
        if config.head == "cloze":
            self.answer = nn.Linear(G, E_w if config.tied_output else emb.n_entities)  # M, or W(a) over the markers
            self.register_buffer("entity_ids", ENTITY_OFFSET + torch.arange(emb.n_entities), persistent=False)
        else:
            self.back = PeepholeLSTM(G, S, peephole=config.peephole)
            Z = G + S
            self.w_start = nn.Linear(G, Z, bias=False)  # W_s g
            self.w_end = nn.Linear(G + Z, Z, bias=False)  # W_e [g; c_s]
        self.no_answer = config.no_answer
        self.null = nn.Parameter(torch.randn(G + S) * 0.1) if config.no_answer else None  # z_0

    def read(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The deep LSTM with skip connections: ``x`` (B, T, E) -> ``y`` (B, T, K * S)."""
        ys = []
        inp = x
        for lstm, skip in zip(self.layers, self.skips):
            h, _ = lstm(self.dropout(inp), mask)  # (B, T, H)
            y_k = skip(h)  # (B, T, S)
            ys.append(y_k)
            inp = torch.cat([x, y_k], dim=-1)  # x'(t, k + 1) = x(t) || y'(t, k)
        return torch.cat(ys, dim=-1) * mask.unsqueeze(-1).to(x.dtype)  # (B, T, K * S)

    def forward(self, batch) -> ClozeOutput | SpanOutput:
        d_ids, d_mask, q_ids, q_mask = batch.c_words, batch.c_mask, batch.q_words, batch.q_mask
        d_len, q_len = d_mask.sum(1), q_mask.sum(1)  # (B,)
        d, q = self.embed(d_ids), self.embed(q_ids)  # (B, Td, E), (B, Tq, E)
        if self.mix is not None:  # [e(w_t); mixed contextual state]
            if batch.c_states is None:
                raise ValueError("this model reads contextual states beside its word vectors, and none were given")
            d = torch.cat([d, self.mix(batch.c_states.to(d.dtype))], dim=-1)
            q = torch.cat([q, self.mix(batch.q_states.to(q.dtype))], dim=-1)
        if self.config.form == "qca":
            x, mask = join_sequences(q, q_len, d, d_len, self.delim)  # (B, T, E)
            doc_start = q_len + 1  # (B,)
        else:
            x, mask = join_sequences(d, d_len, q, q_len, self.delim)
            doc_start = torch.zeros_like(d_len)
        y = self.read(x, mask)  # (B, T, G)
        last = (mask.sum(1) - 1).clamp(min=0)  # (B,)
        g = self.dropout(y[torch.arange(y.shape[0], device=y.device), last])  # (B, G)

        if self.config.head == "cloze":
            e = self.embed(self.entity_ids) if self.config.tied_output else None  # (N, E)
            return ClozeOutput(logits=entity_logits(self.answer, g, e, batch.candidates))  # (B, N)

        B, Td = d_mask.shape
        pos = (doc_start.unsqueeze(1) + torch.arange(Td, device=y.device)).clamp(max=y.shape[1] - 1)  # (B, Td)
        y_doc = y.gather(1, pos.unsqueeze(-1).expand(B, Td, y.shape[-1])) * d_mask.unsqueeze(-1).to(y.dtype)
        back = self._backward(y_doc, d_mask, d_len)  # (B, Td, S)
        z = self.dropout(torch.cat([y_doc, back], dim=-1))  # (B, Td, Z)
        z_mask = d_mask
        if self.no_answer:
            z, z_mask = with_null(self.null, z, d_mask)  # (B, 1 + Td, Z), (B, 1 + Td)
        start = torch.einsum("btz,bz->bt", z, self.w_start(g))  # (B, Td) or (B, 1 + Td)
        start = mask_logits(start, z_mask)
        p_start = torch.softmax(start.float(), dim=-1).to(z.dtype)
        c_s = torch.einsum("bt,btz->bz", p_start, z)  # (B, Z)
        end = mask_logits(torch.einsum("btz,bz->bt", z, self.w_end(torch.cat([g, c_s], dim=-1))), z_mask)
        if self.no_answer:
            return SpanOutput(
                start_logits=start[:, 1:], end_logits=end[:, 1:], start_null=start[:, 0], end_null=end[:, 0]
            )
        return SpanOutput(start_logits=start, end_logits=end)

    def _backward(self, y_doc: torch.Tensor, d_mask: torch.Tensor, d_len: torch.Tensor) -> torch.Tensor:
        """Run ``self.back`` over each document from its last real token to its first."""
        B, Td, G = y_doc.shape
        t = torch.arange(Td, device=y_doc.device).unsqueeze(0)  # (1, Td)
        rev = (d_len.unsqueeze(1) - 1 - t).clamp(min=0)  # (B, Td): reversed within each length
        rev = torch.where(d_mask, rev, t)
        flipped = y_doc.gather(1, rev.unsqueeze(-1).expand(B, Td, G))  # (B, Td, G)
        out, _ = self.back(flipped, d_mask)  # (B, Td, S)
        back = out.gather(1, rev.unsqueeze(-1).expand(B, Td, out.shape[-1]))  # (B, Td, S), in reading order
        return back * d_mask.unsqueeze(-1).to(out.dtype)
