"""The answer verifier's cross-encoder: BERT fine-tuned to say whether a span answers a question.

The input is one sequence (:func:`rckit.answering.cross_verifier.cross_inputs`)::

    x = [CLS] question [SEP] candidate [SEP] passage window [SEP]

read by the encoder (:class:`rckit.contextual.bert.BertEncoder`, all-MiniLM-L6-v2's weights to
start from), and the first piece's last state ``h^L_1`` gives the logit::

    z = w . dropout(h^L_1) + b            p(the span answers) = sigmoid(z)

as BERT's sentence-pair classifiers do, without its pooler (all-MiniLM-L6-v2 ships none that was
trained). The word table ``E_word`` is frozen (:meth:`CrossEncoder.trainable`): with a few
thousand written unanswerable questions to learn from, the words keep their pretrained meaning,
and the exported graph starts from the word vectors, so the model file does not carry the table
(:meth:`CrossEncoder.forward` takes ``E_word[x]``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from rckit.contextual.bert import BertEncoder, hf_names_to_ours


@dataclass
class CrossEncoderConfig:
    dropout: float = 0.1  # BERT's hidden and attention dropout, and the head's
    train_layers: int = 0  # fine-tune only the top N layers (0: every layer); the embeddings stay frozen
    pool: str = "first"  # the state the head reads: "first" piece's, or the "mean" over the real pieces

    def __post_init__(self):
        if self.pool not in ("first", "mean"):
            raise ValueError(f"pool: 'first' or 'mean', got {self.pool!r}")


class CrossEncoder(nn.Module):
    """BERT with a logit on its first piece; ``bert_config`` is the encoder's ``config.json``."""

    def __init__(self, bert_config: dict, config: CrossEncoderConfig | None = None):
        super().__init__()
        self.config = config or CrossEncoderConfig()
        p = self.config.dropout
        self.bert_config = {**bert_config, "hidden_dropout_prob": p, "attention_probs_dropout_prob": p}
        self.bert = BertEncoder(self.bert_config)
        self.dropout = nn.Dropout(p)
        self.head = nn.Linear(int(bert_config["hidden_size"]), 1)
        self.top = len(self.bert.layers)

    @classmethod
    def from_encoder(cls, state: dict[str, torch.Tensor], bert_config: dict, config=None) -> CrossEncoder:
        """The cross-encoder started from a Hugging Face BERT state dict (the encoder's
        ``model.safetensors``), its head at zero: every input starts at p = 0.5."""
        model = cls(bert_config, config)
        model.bert.load_state_dict(hf_names_to_ours(state))
        nn.init.zeros_(model.head.weight)
        nn.init.zeros_(model.head.bias)
        return model

    def trainable(self) -> list[nn.Parameter]:
        """What fine-tuning changes: the head and the encoder's layers (the top ``train_layers``
        of them where set); the embeddings (words, positions, segments, their norm) stay as
        pretrained."""
        self.requires_grad_(False)
        layers = self.bert.layers if not self.config.train_layers else self.bert.layers[-self.config.train_layers :]
        for module in [*layers, self.head]:
            module.requires_grad_(True)
        return [p for p in self.parameters() if p.requires_grad]

    def forward(self, vectors: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        """``vectors`` (B, P, d) = ``E_word[x]``, ``mask`` (B, P) True on real pieces, ``types``
        (B, P) segments -> the logits (B,) that the candidate answers the question."""
        h = self.bert.encode(vectors, mask, (self.top,), types)[:, :, 0]  # (B, P, d): the last layer
        if self.config.pool == "mean":
            m = mask[:, :, None].to(h.dtype)
            h = (h * m).sum(1) / m.sum(1).clamp(min=1.0)  # (B, d)
        else:
            h = h[:, 0]  # (B, d)
        return self.head(self.dropout(h))[:, 0]

    def read(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` from piece ids (B, P)."""
        return self(self.bert.word(ids), mask, types)
