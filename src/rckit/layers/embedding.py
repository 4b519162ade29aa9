"""Word + character input embedding (QANet Sec. 2.2 "Input Embedding Layer", after BiDAF).

For each token: a word vector ``x_w`` (GloVe, fixed, except the first ``n_trainable_words``
rows: ``<pad>``, ``<unk>`` and training words without a pretrained vector), and a character
vector ``x_c``: the token's characters embedded, (W, Dc), convolved over the word (width
``char_conv_width``, ReLU) and max-pooled over the real characters (padded char slots are
zeros for the conv and left out of the max). The paper only max-pools the character
embeddings; the convolution follows the authors' released code and BiDAF. Then ``[x_w; x_c]``
goes through a 2-layer highway network and a linear projection to ``d_model`` (the paper's 1x1
conv at the start of the embedding encoder; we do it here so the encoder block only sees
``d_model``). On CPU the kernel ``char_cnn`` (:func:`rckit.kernels.cpu.char_cnn`) computes the
char CNN at the real characters only.

Contextual vectors (``contextual_dim`` > 0; :mod:`rckit.contextual`): a frozen encoder's states
of K layers for each token, ``h_{t,k}``, mixed as ELMo does (Peters et al. 2018, eq. 1),
``e_t = gamma * sum_k softmax(s)_k h_{t,k}``, with ``s`` and ``gamma`` learned, then dropout,
and joined to the word's other vectors before the projection: ``proj([highway([x_w; x_c]); e_t])``.
DCN+'s CoVe baseline concatenates CoVe to GloVe as the LSTM's input; here the highway, which gates
the context-free word and character features, is left at its paper's width (500 at QANet's sizes),
and the already contextual ``e_t`` joins after it (the highway at 500 + 384 would cost 3x).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rckit import kernels
from rckit.kernels import cpu, graph
from rckit.layers.highway import Highway


class PartiallyFrozenEmbedding(nn.Module):
    """Word table whose first ``n_trainable`` rows are a parameter and the rest a fixed buffer.

    The fixed rows live in a (persistent) buffer, so they are saved with the model, moved by
    ``.to()``, and never seen by the optimiser, weight decay or an EMA over ``parameters()``.
    """

    def __init__(self, vectors: torch.Tensor, n_trainable: int):
        super().__init__()
        V, _ = vectors.shape
        if not 1 <= n_trainable <= V:
            raise ValueError(f"n_trainable={n_trainable} must be in [1, {V}]")
        self.n_trainable = n_trainable
        vectors = vectors.detach().float()
        self.trainable = nn.Parameter(vectors[:n_trainable].clone())  # (n, Dw)
        # clone() so the buffer does not keep (and save) the whole source storage alive.
        self.register_buffer("frozen", vectors[n_trainable:].clone())  # (V - n, Dw)

    @property
    def embedding_dim(self) -> int:
        return self.trainable.shape[1]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        n = self.n_trainable
        trainable = F.embedding(ids.clamp(max=n - 1), self.trainable)  # (..., Dw)
        if self.frozen.shape[0] == 0:
            return trainable
        frozen = F.embedding((ids - n).clamp(min=0), self.frozen)  # (..., Dw)
        return torch.where((ids < n).unsqueeze(-1), trainable, frozen)


class CharCNN(nn.Module):
    """Characters -> one vector per word: embed, conv over the word, ReLU, max over real chars."""

    def __init__(
        self,
        n_chars: int,
        char_dim: int,
        out_dim: int,
        width: int,
        char_vectors: torch.Tensor | None = None,
        dropout: float = 0.0,
    ):
        super().__init__()
        if width % 2 != 1:
            raise ValueError(f"char_conv_width must be odd, got {width}")
        self.embed = nn.Embedding(n_chars, char_dim)
        if char_vectors is not None:
            self.embed.weight.data.copy_(char_vectors)
        self.conv = nn.Conv1d(char_dim, out_dim, width, padding=width // 2)
        self.dropout = nn.Dropout(dropout)

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        """``chars`` (B, T, W) long, 0 = <pad>; returns (B, T, out_dim)."""
        if torch.compiler.is_exporting() and kernels.enabled("graph_char_cnn") and not self.training:
            return graph.char_cnn(chars, self.embed.weight, self.conv.weight, self.conv.bias)
        if chars.device.type == "cpu" and kernels.enabled("char_cnn"):
            return cpu.char_cnn(
                chars, lambda ids: self.dropout(self.embed(ids)), self.conv.weight, self.conv.bias, self.training
            )
        B, T, W = chars.shape
        pad = (chars == 0).reshape(B * T, W, 1)  # (B*T, W, 1)
        x = self.dropout(self.embed(chars.reshape(B * T, W))).masked_fill(pad, 0.0)  # (B*T, W, Dc)
        y = torch.relu(self.conv(x.transpose(1, 2))).transpose(1, 2)  # (B*T, W, C)
        # After the ReLU every value is >= 0: filling padded slots with 0 leaves the max over the
        # real chars, and a token without any (a padded position) comes out as zeros.
        return y.masked_fill(pad, 0.0).amax(1).view(B, T, -1)  # (B, T, C)


class ScalarMix(nn.Module):
    """``gamma * sum_k softmax(s)_k h_k`` over the K layers of ``h`` (..., K, D) -> (..., D) (ELMo)."""

    def __init__(self, K: int):
        super().__init__()
        self.s = nn.Parameter(torch.zeros(K))
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        w = torch.softmax(self.s, 0).to(h.dtype)  # (K,)
        return self.gamma.to(h.dtype) * (h * w[:, None]).sum(-2)  # (..., D)


class InputEmbedding(nn.Module):
    """Token ids + char ids -> (B, T, d_model); shared by the context and the question.

    ``word_vectors`` (V, Dw): rows ``>= n_trainable_words`` stay fixed. ``char_vectors``
    (n_chars, Dc), if given, initialise the char table and set its width (``char_dim`` then
    ignored). The char CNN keeps the char width (the paper's p2 = 200), so ``[x_w; x_c]`` is
    300 + 200 wide at the paper's sizes.
    """

    def __init__(
        self,
        word_vectors: torch.Tensor,
        n_trainable_words: int,
        n_chars: int,
        d_model: int,
        char_dim: int,
        char_conv_width: int,
        highway_layers: int = 2,
        dropout: float = 0.1,
        char_dropout: float = 0.05,
        char_vectors: torch.Tensor | None = None,
        contextual_layers: int = 0,
        contextual_dim: int = 0,
    ):
        super().__init__()
        self.word = PartiallyFrozenEmbedding(word_vectors, n_trainable_words)
        if char_vectors is not None:
            char_dim = char_vectors.shape[1]
        self.char = CharCNN(n_chars, char_dim, char_dim, char_conv_width, char_vectors, char_dropout)
        d_in = self.word.embedding_dim + char_dim
        self.word_dropout = nn.Dropout(dropout)
        self.highway = Highway(d_in, highway_layers, dropout)
        self.mix = ScalarMix(contextual_layers) if contextual_dim else None
        self.proj = nn.Linear(d_in + contextual_dim, d_model)

    def word_features(self, words: torch.Tensor, chars: torch.Tensor) -> torch.Tensor:
        """``highway([x_w; x_c])``: what the word's spelling and GloVe row say, (B, T, Dw + Dc)."""
        x_w = self.word_dropout(self.word(words))  # (B, T, Dw)
        x_c = self.char(chars)  # (B, T, Dc)
        return self.highway(torch.cat([x_w, x_c], dim=-1))

    def join(self, x: torch.Tensor, states: torch.Tensor | None) -> torch.Tensor:
        """The projection of the word features ``x`` (B, T, Dw + Dc), with the mixed contextual
        ``states`` (B, T, K, D) beside them where the embedding reads them -> (B, T, d_model)."""
        if self.mix is None:
            return self.proj(x)
        if states is None:
            raise ValueError("this model reads contextual states beside its word vectors, and none were given")
        e = self.word_dropout(self.mix(states.to(x.dtype)))  # (B, T, D)
        return self.proj(torch.cat([x, e], dim=-1))  # (B, T, d_model)

    def forward(self, words: torch.Tensor, chars: torch.Tensor, states: torch.Tensor | None = None) -> torch.Tensor:
        """``words`` (B, T), ``chars`` (B, T, W), ``states`` (B, T, K, D) or None -> (B, T, d_model)."""
        return self.join(self.word_features(words, chars), states)
