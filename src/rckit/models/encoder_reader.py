"""rckit's own reader: the encoder fine-tuned end to end to point at the answer, or at [CLS] for none.

BERT's SQuAD reader (Devlin et al. 2019, sections 4.2 and 4.3), on all-MiniLM-L6-v2's weights.
The encoder (:class:`rckit.contextual.bert.BertEncoder`) reads one sequence
(:mod:`rckit.data.pair_windows`)::

    x = [CLS] question [SEP] passage window [SEP]

and a linear head on its last layer ``h^L`` scores every position as the answer's start and end::

    s_i = S . h^L_i + b_S        e_j = E . h^L_j + b_E

Training maximises ``log softmax(s)_start + log softmax(e)_end`` over the positions a pointer may
take ([CLS] and the passage's pieces; the question's are masked to ``finfo.min``), the target both
at [CLS] (position 0) where the window holds no answer: the span cross-entropy every span model
trains with (:func:`rckit.models.losses.span_loss`), over a window's positions.
Answering (:mod:`rckit.answering.pointer`) scores "no answer" as BERT's SQuAD 2.0 reader does:
``s_0 + e_0`` of the window that least believes in it, against the best span ``max_{i<=j} s_i + e_j``
over every window; the difference, calibrated on held-out questions, is ``p(no answer)``.

The word table ``E_word`` stays as pretrained (:meth:`EncoderReader.trainable`): the reader learns
from SQuAD's vocabulary, a fraction of the encoder's 30,522 pieces, and the words it never sees
keep their meaning; the positions, segments, every layer and the head are fine-tuned.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from rckit.contextual.bert import BertEncoder
from rckit.contextual.bert_names import hf_names_to_ours


def pretrained_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """An encoder's ``model.safetensors`` (Hugging Face BERT's names) in this model's names
    (``bert.*``): the weights fine-tuning starts from, and a carry's changes are added to."""
    from safetensors.torch import load_file

    return {f"bert.{k}": v for k, v in hf_names_to_ours(load_file(str(path))).items()}


@dataclass
class EncoderReaderConfig:
    dropout: float = 0.1  # BERT's hidden and attention dropout
    freeze_words: bool = True  # keep E_word as pretrained


@dataclass
class PointerOutput:
    """Start and end scores over a window's positions (B, P); positions a pointer may not take
    (the question, [SEP], padding) at ``finfo(dtype).min``."""

    start: torch.Tensor
    end: torch.Tensor


class EncoderReader(nn.Module):
    """The encoder with a start/end head; ``bert_config`` is the encoder's ``config.json``."""

    def __init__(self, bert_config: dict, config: EncoderReaderConfig | None = None):
        super().__init__()
        self.config = config or EncoderReaderConfig()
        p = self.config.dropout
        self.bert_config = {**bert_config, "hidden_dropout_prob": p, "attention_probs_dropout_prob": p}
        self.bert = BertEncoder(self.bert_config)
        self.head = nn.Linear(int(bert_config["hidden_size"]), 2)  # (S; E), (b_S; b_E)
        self.top = len(self.bert.layers)

    @classmethod
    def from_encoder(cls, state: dict[str, torch.Tensor], bert_config: dict, config=None) -> EncoderReader:
        """The reader started from an encoder's weights (:func:`pretrained_weights`), its head
        small and random, as BERT's."""
        model = cls(bert_config, config)
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or set(missing) - {"head.weight", "head.bias"}:
            raise ValueError(f"not this encoder's weights: missing {missing[:3]}, unexpected {unexpected[:3]}")
        nn.init.normal_(model.head.weight, std=0.02)
        nn.init.zeros_(model.head.bias)
        return model

    def trainable(self) -> list[nn.Parameter]:
        """What fine-tuning changes: everything but the word table where it is frozen."""
        self.requires_grad_(True)
        self.bert.word.requires_grad_(not self.config.freeze_words)
        return [p for p in self.parameters() if p.requires_grad]

    def forward(
        self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor, allowed: torch.Tensor
    ) -> PointerOutput:
        """``ids`` (B, P) pieces, ``mask`` (B, P) True on real ones, ``types`` (B, P) segments,
        ``allowed`` (B, P) True where a pointer may stand -> the start and end scores."""
        return self.point(self.bert.word(ids), mask, types, allowed)

    def point(
        self, words: torch.Tensor, mask: torch.Tensor, types: torch.Tensor, allowed: torch.Tensor
    ) -> PointerOutput:
        """:meth:`forward` from the word vectors ``words`` (B, P, d) = ``E_word[ids]``."""
        h = self.bert.encode(words, mask, (self.top,), types)[:, :, 0]  # (B, P, d): the last layer
        logits = self.head(h)  # (B, P, 2)
        fill = torch.finfo(logits.dtype).min
        start = logits[..., 0].masked_fill(~allowed, fill)  # (B, P)
        end = logits[..., 1].masked_fill(~allowed, fill)  # (B, P)
        return PointerOutput(start, end)
