"""Word + character input embedding (QANet Sec. 2.2 "Input Embedding Layer", after BiDAF).

For each token: a word vector ``x_w`` (GloVe, fixed, except the trainable rows of
:class:`~rckit.data.embeddings.EmbeddingInfo`), and a character vector ``x_c`` obtained by
embedding the token's characters, convolving over them (width ``char_conv_width``, ReLU) and
max-pooling over the real characters. The paper only max-pools the character embeddings; the
convolution follows the authors' released code and BiDAF. Then ``[x_w; x_c]`` goes through a
2-layer highway network and a linear projection to ``d_model`` (the paper's 1x1 conv at the
start of the embedding encoder; we do it here so the encoder block only sees ``d_model``).

The char CNN only computes at real characters. Batches pad every word to the longest one
(16 characters) while SQuAD words average about 4, so a dense conv over (B*T, W) spends three
quarters of its work, and a third of a QANet training step, on padding whose outputs are then
masked away. Instead the real characters are gathered in reading order (a word's characters
are adjacent), one (R, Dc) x (Dc, k*C) matmul gives every character's product with each of
the ``k`` taps, and each output sums its ``k`` neighbours' products for the matching tap
(``_TapSum``, with a backward that writes each tap's gradient in place),
leaving out neighbours from another word exactly as the padding would have been; the max over
each word is a segment max. Same numbers as the dense conv up to float summation order.
Backward keeps only the (R, Dc) characters, not ``k``-times-wider unfolded patches (the
earlier form here, BENCHMARKS.md round 3).
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from rckit.data.embeddings import EmbeddingInfo
from rckit.layers.dedupe import unique_texts
from rckit.layers.dropout import Dropout
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


class _TapSum(torch.autograd.Function):
    """``y[r] = sum_j keep[r, j] * z[r + j, j]`` for ``z`` (R + k - 1, k, C), ``keep`` (R, k).

    Autograd through ``k`` slices of ``z`` would build ``k`` zero-filled copies of ``z``'s
    gradient and add them up; here it is one zero fill and ``k`` strided writes.
    """

    @staticmethod
    def forward(ctx, z, keep):
        R, k = keep.shape
        ctx.save_for_backward(keep)
        ctx.z_shape = z.shape
        y = z[0:R, 0] * keep[:, 0:1]  # (R, C), a fresh tensor
        for j in range(1, k):
            y.addcmul_(z[j:j + R, j], keep[:, j:j + 1])
        return y

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        R, k = keep.shape
        grad_z = grad.new_zeros(ctx.z_shape)  # (R + k - 1, k, C)
        for j in range(k):
            torch.mul(grad, keep[:, j:j + 1], out=grad_z[j:j + R, j])
        return grad_z, None


class CharCNN(nn.Module):
    """Characters -> one vector per word: embed, conv over the word, ReLU, max over real chars."""

    def __init__(self, n_chars: int, char_dim: int, out_dim: int, width: int,
                 char_vectors: torch.Tensor | None = None, dropout: float = 0.0):
        super().__init__()
        if width % 2 != 1:
            raise ValueError(f"char_conv_width must be odd, got {width}")
        self.embed = nn.Embedding(n_chars, char_dim)
        if char_vectors is not None:
            self.embed.weight.data.copy_(char_vectors)
        # Only its weight (C, Dc, k) and bias are used; the module keeps the state-dict names.
        self.conv = nn.Conv1d(char_dim, out_dim, width, padding=width // 2)
        self.dropout = Dropout(dropout)

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        """``chars`` (B, T, W) long, 0 = <pad>; returns (B, T, out_dim)."""
        B, T, W = chars.shape
        C, _, k = self.conv.weight.shape
        h = k // 2
        flat = chars.reshape(B * T, W)  # (N, W)
        real = flat != 0
        # Keep each word's span from its first to its last real char, so that inside the packed
        # list a char's neighbour at offset s is the entry s places away. Pads inside a span
        # (none in collated batches) ride along as zero vectors and are left out of the max.
        span = (real.cumsum(1) > 0) & (real.flip(1).cumsum(1).flip(1) > 0)  # (N, W)
        word, pos = span.nonzero(as_tuple=True)  # (R,), (R,), row-major: words in order
        R = word.shape[0]
        if R == 0:  # no characters anywhere in the batch
            return self.conv.weight.new_zeros(B, T, C)
        ids = flat[word, pos]  # (R,)
        is_real = (ids != 0).unsqueeze(1)  # (R, 1)
        # Every tap's product first, one (R, Dc) x (Dc, k*C) matmul: z[r, j] = W_j^T x[r]. Then
        # y[r] = b + sum_j z[r + j - h, j], counting tap j only where entry r + j - h is in the
        # same word as r (the dense conv would have seen a zero there).
        weight = self.conv.weight.permute(1, 2, 0).reshape(-1, k * C)  # (Dc, k*C), column j*C + c = W[c, :, j]
        dtype = torch.get_autocast_dtype(chars.device.type) if torch.is_autocast_enabled(chars.device.type) else None
        if self.training:
            x = self.dropout(self.embed(ids)) * is_real  # (R, Dc)
            x = x if dtype is None else x.to(dtype)
            z = (F.pad(x, (0, 0, h, h)) @ weight.to(x.dtype)).view(R + 2 * h, k, C)  # row r + h: entry r's products
        else:
            # Without dropout a char's products depend on its id alone: a SQuAD dev context
            # has a median of 590 characters and 44 distinct ones, so the matmul runs over
            # those and the entries gather their rows. Id 0 (the <pad> char, and the h padding rows at each
            # end) gets a row of zeros.
            distinct, inverse = torch.unique(F.pad(ids, (h, h)), return_inverse=True)  # (U,), (R + 2h,)
            x = self.embed(distinct) * (distinct != 0).unsqueeze(1)  # (U, Dc)
            x = x if dtype is None else x.to(dtype)
            z = (x @ weight.to(x.dtype))[inverse].view(R + 2 * h, k, C)  # row r + h: entry r's products
        nb_word = F.pad(word, (h, h), value=-1).unfold(0, k, 1)  # (R, k): word of entry r + j - h
        same_word = (nb_word == word.unsqueeze(1)).to(z.dtype)  # (R, k)
        y = _TapSum.apply(z, same_word) + self.conv.bias.to(z.dtype)  # (R, C)
        # After ReLU every real value is >= 0, so a max that starts from 0 equals a masked max,
        # and words without chars (padded tokens) come out as zeros, as does a pad in a span.
        y = torch.relu(y) * is_real  # (R, C)
        with warnings.catch_warnings():  # index_reduce is marked beta; amax and its grad are stable
            warnings.simplefilter("ignore", UserWarning)
            out = y.new_zeros(B * T, C).index_reduce(0, word, y, "amax")  # (N, C)
        return out.view(B, T, C)  # (B, T, C)


class InputEmbedding(nn.Module):
    """Token ids + char ids -> (B, T, d_model); shared by the context and the question."""

    def __init__(self, emb: EmbeddingInfo, d_model: int, char_dim: int, char_conv_width: int,
                 highway_layers: int = 2, dropout: float = 0.1, char_dropout: float = 0.05,
                 freeze_pretrained_words: bool = True):
        super().__init__()
        V = emb.word_vectors.shape[0]
        self.word = PartiallyFrozenEmbedding(emb.word_vectors, emb.n_trainable_words if freeze_pretrained_words else V)
        if emb.char_vectors is not None:
            char_dim = emb.char_vectors.shape[1]
        # The char CNN keeps the char width (the paper's p2 = 200), so [x_w; x_c] is 300 + 200.
        self.char = CharCNN(emb.n_chars, char_dim, char_dim, char_conv_width, emb.char_vectors, char_dropout)
        d_in = self.word.embedding_dim + char_dim
        self.word_dropout = Dropout(dropout)
        self.highway = Highway(d_in, highway_layers, dropout)
        self.proj = nn.Linear(d_in, d_model)

    def forward(self, words: torch.Tensor, chars: torch.Tensor) -> torch.Tensor:
        """``words`` (B, T), ``chars`` (B, T, W) -> (B, T, d_model).

        Outside training a token's embedding depends on its word id and characters alone, so
        each distinct token of the batch is embedded once and copied to its positions (a
        SQuAD dev context repeats "the", "," and its names: 36 % of its tokens are repeats at
        the median, 28-46 % from the 10th to the 90th percentile; the char CNN + highway are
        most of the embedding's work). In training
        every position keeps its own dropout masks.
        """
        if not self.training:
            B, T = words.shape
            flat_w, flat_c = words.reshape(B * T), chars.reshape(B * T, -1)  # (B*T,), (B*T, W)
            rep, inverse = unique_texts(flat_w.unsqueeze(1), flat_c.unsqueeze(1))  # (U,), (B*T,)
            if len(rep) < B * T:
                x = self.embed_positions(flat_w[rep].unsqueeze(0), flat_c[rep].unsqueeze(0))  # (1, U, d_model)
                return x[0, inverse].view(B, T, -1)  # (B, T, d_model)
        return self.embed_positions(words, chars)

    def embed_positions(self, words: torch.Tensor, chars: torch.Tensor) -> torch.Tensor:
        """Every position on its own: (B, T), (B, T, W) -> (B, T, d_model)."""
        x_w = self.word_dropout(self.word(words))  # (B, T, Dw)
        x_c = self.char(chars)  # (B, T, Dc)
        return self.proj(self.highway(torch.cat([x_w, x_c], dim=-1)))  # (B, T, d_model)
