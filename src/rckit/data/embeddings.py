"""Word and character embedding tables handed from data preparation to models."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rckit.contextual.spec import ContextualSpec


@dataclass
class EmbeddingInfo:
    """What a model needs to build its input embeddings.

    Word ids ``[0, n_trainable_words)`` are ``<pad>`` (0), ``<unk>`` (1) and training words
    without a pretrained vector; their rows in ``word_vectors`` are random and meant to be
    trained. Ids ``>= n_trainable_words`` have pretrained vectors, which models like QANet
    keep fixed.
    """

    word_vectors: torch.Tensor  # (V, Dw) float32
    n_trainable_words: int
    n_chars: int  # char vocabulary size, 0 = <pad>, 1 = <unk>
    char_vectors: torch.Tensor | None = None  # (n_chars, Dc) float32 pretrained init, or None
    n_entities: int = 0  # cloze data: entity markers @entity0..@entity{n-1}, the answer classes
    contextual: ContextualSpec | None = None  # the encoder whose states the data carries (its dim: their width)

    @property
    def contextual_dim(self) -> int:
        return 0 if self.contextual is None else int(self.contextual.dim)
