"""The contextual encoder as a plain PyTorch module: BERT's encoder (Devlin et al. 2019), read
from the encoder's ``model.safetensors``; frozen when it gives a reader its states, fine-tuned
when it is rckit's own reader (:mod:`rckit.models.encoder_reader`).

For pieces ``x_1..x_P`` (with [CLS] and [SEP]), segments ``s_t`` (0 for every piece, unless a
second text follows the first [SEP]) and layer ``l = 1..L``::

    h^0 = LayerNorm(E_word[x] + E_position[t] + E_type[s])
    a^l = LayerNorm(h^{l-1} + W_O MultiHead(h^{l-1}))          heads of width d / n_heads,
                                                               softmax(Q K^T / sqrt(d_h)) V, padding masked
    h^l = LayerNorm(a^l + W_2 GELU(W_1 a^l))                   GELU with erf, as BERT's

:meth:`BertEncoder.forward` returns the states of the layers asked for (0 = the embeddings' output),
running no layer above the highest of them: a reader that mixes the lower layers pays for them
only. :meth:`BertEncoder.encode` starts from the word vectors ``E_word[x]`` already looked up (as
:meth:`rckit.models.encoder_reader.EncoderReader.point` reads them). Dropout (``hidden_dropout_prob`` after each
sub-layer's projection, ``attention_probs_dropout_prob`` on the attention weights, as BERT's) acts
only in training mode. The weights' names are those of the Hugging Face BERT checkpoints (``embeddings.*``,
``encoder.layer.N.*``), so the module loads any such file; its pooler is not used.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from rckit.contextual.bert_names import hf_names_to_ours


class BertLayer(nn.Module):
    def __init__(self, d: int, n_heads: int, d_ff: int, eps: float, dropout: float = 0.0, attn_dropout: float = 0.0):
        super().__init__()
        if d % n_heads:
            raise ValueError(f"hidden_size {d} is not a multiple of num_attention_heads {n_heads}")
        self.n_heads = n_heads
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.attn_out = nn.Linear(d, d)
        self.attn_norm = nn.LayerNorm(d, eps=eps)
        self.ff_in = nn.Linear(d, d_ff)
        self.ff_out = nn.Linear(d_ff, d)
        self.ff_norm = nn.LayerNorm(d, eps=eps)
        self.dropout = nn.Dropout(dropout)
        self.attn_dropout = nn.Dropout(attn_dropout)

    def forward(self, h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """``h`` (B, P, d); ``bias`` (B, 1, 1, P): 0 on real pieces, ``finfo.min`` on padding."""
        B, P, d = h.shape
        H = self.n_heads

        def heads(x: torch.Tensor) -> torch.Tensor:
            return x.view(B, P, H, d // H).transpose(1, 2)  # (B, H, P, d/H)

        q, k, v = heads(self.query(h)), heads(self.key(h)), heads(self.value(h))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // H) + bias  # (B, H, P, P)
        ctx = (self.attn_dropout(scores.softmax(-1)) @ v).transpose(1, 2).reshape(B, P, d)  # (B, P, d)
        a = self.attn_norm(h + self.dropout(self.attn_out(ctx)))
        return self.ff_norm(a + self.dropout(self.ff_out(F.gelu(self.ff_in(a)))))


class BertEncoder(nn.Module):
    """BERT's embeddings and encoder layers, built from a ``config.json`` dict."""

    def __init__(self, config: dict):
        super().__init__()
        d, eps = int(config["hidden_size"]), float(config.get("layer_norm_eps", 1e-12))
        self.word = nn.Embedding(int(config["vocab_size"]), d)
        self.position = nn.Embedding(int(config["max_position_embeddings"]), d)
        self.token_type = nn.Embedding(int(config.get("type_vocab_size", 2)), d)
        self.norm = nn.LayerNorm(d, eps=eps)
        self.dropout = nn.Dropout(float(config.get("hidden_dropout_prob", 0.0)))
        self.layers = nn.ModuleList(
            BertLayer(
                d,
                int(config["num_attention_heads"]),
                int(config["intermediate_size"]),
                eps,
                float(config.get("hidden_dropout_prob", 0.0)),
                float(config.get("attention_probs_dropout_prob", 0.0)),
            )
            for _ in range(int(config["num_hidden_layers"]))
        )

    @classmethod
    def load(cls, root: str | Path, config: dict) -> BertEncoder:
        """The encoder with the weights of ``root/model.safetensors``, in eval mode, frozen."""
        from rckit.contextual.encoders import encoder_weights

        model = cls(config)
        weights = {k: torch.from_numpy(v) for k, v in encoder_weights(root).items()}
        model.load_state_dict(hf_names_to_ours(weights))
        model.eval().requires_grad_(False)
        return model

    def forward(
        self, ids: torch.Tensor, mask: torch.Tensor, layers: tuple[int, ...], types: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``ids`` (B, P) pieces, ``mask`` (B, P) True on real ones, ``types`` (B, P) their
        segments (None: all 0) -> (B, P, K, d) the states of ``layers`` (K of them, 0 = the
        embeddings' output), in that order."""
        return self.encode(self.word(ids), mask, layers, types)

    def encode(
        self, words: torch.Tensor, mask: torch.Tensor, layers: tuple[int, ...], types: torch.Tensor | None = None
    ) -> torch.Tensor:
        """:meth:`forward` from the word vectors ``words`` (B, P, d) = ``E_word[ids]``."""
        P = words.shape[1]
        pos = torch.arange(P, device=words.device)
        segment = self.token_type.weight[0] if types is None else self.token_type(types)  # (d,) or (B, P, d)
        h = self.dropout(self.norm(words + self.position(pos) + segment))  # (B, P, d)
        bias = torch.zeros(mask.shape, dtype=h.dtype, device=h.device)
        bias = bias.masked_fill(~mask, torch.finfo(h.dtype).min)[:, None, None, :]  # (B, 1, 1, P)
        states = {0: h}
        for index, layer in enumerate(self.layers[: max(layers)], 1):
            h = layer(h, bias)
            states[index] = h
        return torch.stack([states[index] for index in layers], dim=2)  # (B, P, K, d)
