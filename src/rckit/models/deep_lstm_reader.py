"""The Deep LSTM Reader (Hermann et al. 2015, "Teaching Machines to Read and Comprehend").

The document and the query are read as one sequence around a delimiter, query first in the
``qca`` form (the paper's best) or document first in ``cqa``::

    x(t)     = embed(q_1 .. q_|q| ||| d_1 .. d_|d|)                       (qca)
    x'(t, k) = x(t) || y'(t, k - 1)                 (x'(t, 1) = x(t): skip from the input)
    h(t, k)  = LSTM_k(x'(t, k), h(t - 1, k))         peephole LSTM cells, rckit.layers.lstm
    y'(t, k) = W_ky h(t, k) + b_ky
    y(t)     = y'(t, 1) || ... || y'(t, K)          (skip from every layer to the output)
    g        = y(|d| + |q|)                          the output after the last real token

Cloze head (``head="cloze"``): ``p(a | d, q) ∝ exp(W(a) g)`` over the anonymised entity
markers ``@entity0 .. @entity{N-1}``, restricted to the entities that occur in the document
(the paper scores the whole output vocabulary; only entities can be answers, and the
candidates restriction is what later readers all use). With ``tied_output`` (default) the
rows are ``W(a) = e(a)^T M``, ``e(a)`` the marker's input embedding: one map ``M`` learns to
read an entity back out of ``g`` for every marker at once, where free rows must each learn it
from the examples that use their number, and with many numbers the readers memorised the
synthetic task's training set instead (RESULTS.md, cloze readers).

Span head (``head="span"``, SQuAD; our design, the paper has none). The pointers read the
deep LSTM's outputs ``y(t)`` at the document positions. A forward LSTM at a document token
has read the question (in ``qca``) and the document up to that token but not what follows,
and a start pointer needs to know where the phrase goes; so the head first reads the
document's ``y`` backwards with one more LSTM, ``z_t = [y_t; LSTM_back(y)_t]``, then::

    p_start(t) ∝ exp(z_t^T W_s g)
    c_s        = sum_t p_start(t) z_t                       (the expected start)
    p_end(t)   ∝ exp(z_t^T W_e [g; c_s])

``g`` carries what the reader concluded after the whole sequence; bilinear scores let each
position be compared with it. In ``cqa`` form the document is read before the question, so
``y`` at document tokens knows nothing of the question and only ``g`` does; ``qca`` is the
sensible form for spans (it is also the default).

Learning, and what was changed for it (RESULTS.md, "Cloze readers: why they did not learn").
On the synthetic cloze task (:mod:`rckit.data.cloze_synthetic`: the entity after the query's
marker word) the reader first learns to copy an entity out of the document, then, after a
plateau, to pick the marker the query names. Three things held it back: random word rows at
std 0.1 (the data side's default without pretrained vectors; now N(0, 1)), whose input
projections are faint next to the cells' biases (copying was learned slowly); the ``|||``
vector at std 0.1 among GloVe rows of std ~0.7 (now drawn at the word vectors' own spread);
and entity numbers fixed per example with a free output row per number, which with ~100
numbers let the readers memorise the training set rather than read (now redrawn for every
training batch, :func:`rckit.data.cloze.renumber_entities`, and the rows tied, above).
Peepholes off gave identical curves.

Memory. The cells start at the forget bias 1 (:mod:`rckit.layers.lstm`), a memory time of
about 3.7 steps. A squad-cloze answer is last mentioned a median 63 tokens before the end, and
with that initialisation the reader could not carry even an entity flagged by an oracle to
``g``; ``chrono = T`` (> 2) chrono-initialises the gate biases for memories of 2 .. T steps,
and then it could. It stays off by default: on the synthetic task it was not reliably faster,
and on squad-cloze neither setting lets this reader learn which entity to keep (RESULTS.md,
"holding an entity across a document").

The seed notes write the forget gate over ``x(t)`` and repeat ``W_kxo`` in the output gate;
the cells follow the paper (every gate reads ``x'(t, k)``, the output gate has its own
weights), see :mod:`rckit.layers.lstm`. The delimiter ``|||`` is a learned vector rather
than a vocabulary row, so SQuAD and cloze vocabularies need no special token. Dropout is
applied to the input of every layer and to ``g``. Training per the paper: RMSProp with
momentum 0.9 and decay 0.95 (``TrainConfig.optimizer = "rmsprop"``, in the presets).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from rckit.data.cloze import ENTITY_OFFSET
from rckit.data.embeddings import EmbeddingInfo
from rckit.layers.embedding import PartiallyFrozenEmbedding
from rckit.layers.lstm import PeepholeLSTM, chrono_init_
from rckit.layers.masking import mask_logits
from rckit.models.contract import ClozeOutput, ReadingModel, SpanOutput

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
    chrono: float = 0.0  # > 2: chrono initialisation of the cells' gate biases, memories up to this many steps; 0: forget bias 1


def entity_logits(answer: nn.Linear, g: torch.Tensor, entity_vectors: torch.Tensor | None,
                  candidates: torch.Tensor) -> torch.Tensor:
    """``W(a) g`` for every entity marker a, non-candidates at finfo.min: (B, G) -> (B, N).

    Free rows: ``answer`` is (G -> N). Tied: ``answer`` is M (G -> E) and ``entity_vectors``
    (N, E) the markers' input embeddings, so ``W(a) g = e(a)^T M g``.
    """
    logits = answer(g)  # (B, N), or (B, E) when tied
    if entity_vectors is not None:
        logits = logits @ entity_vectors.to(logits.dtype).T  # (B, N)
    return mask_logits(logits, candidates)


def join_sequences(a: torch.Tensor, a_len: torch.Tensor, b: torch.Tensor, b_len: torch.Tensor,
                   delim: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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
        if config.head == "cloze" and emb.n_entities < 1:
            raise ValueError("the cloze head needs data with entity markers (EmbeddingInfo.n_entities >= 1)")
        V, E = emb.word_vectors.shape
        n_trainable = emb.n_trainable_words if config.freeze_pretrained_words else V
        self.embed = PartiallyFrozenEmbedding(emb.word_vectors, n_trainable)
        # the ||| token, as spread as the word vectors around it (at 0.1 it was a faint signal
        # among GloVe rows of std ~0.7)
        self.delim = nn.Parameter(torch.randn(E) * float(emb.word_vectors.std()))
        H, S, K = config.hidden, config.skip_dim or config.hidden, config.depth
        self.layers = nn.ModuleList(
            PeepholeLSTM(E if k == 0 else E + S, H, peephole=config.peephole) for k in range(K)
        )
        if config.chrono:
            for lstm in self.layers:
                chrono_init_(lstm, config.chrono)
        self.skips = nn.ModuleList(nn.Linear(H, S) for _ in range(K))  # W_ky, b_ky
        self.dropout = nn.Dropout(config.dropout)
        G = K * S  # size of y(t) and g
        if config.head == "cloze":
            self.answer = nn.Linear(G, E if config.tied_output else emb.n_entities)  # M, or W(a) over the markers
            self.register_buffer("entity_ids", ENTITY_OFFSET + torch.arange(emb.n_entities), persistent=False)
        else:
            self.back = PeepholeLSTM(G, S, peephole=config.peephole)
            Z = G + S
            self.w_start = nn.Linear(G, Z, bias=False)  # W_s g
            self.w_end = nn.Linear(G + Z, Z, bias=False)  # W_e [g; c_s]

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
        start = torch.einsum("btz,bz->bt", z, self.w_start(g))  # (B, Td)
        start = mask_logits(start, d_mask)
        p_start = torch.softmax(start.float(), dim=-1).to(z.dtype)  # (B, Td)
        c_s = torch.einsum("bt,btz->bz", p_start, z)  # (B, Z)
        end = torch.einsum("btz,bz->bt", z, self.w_end(torch.cat([g, c_s], dim=-1)))  # (B, Td)
        return SpanOutput(start_logits=start, end_logits=mask_logits(end, d_mask))

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
