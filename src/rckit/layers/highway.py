"""Highway network (Srivastava et al. 2015), as used on word+char embeddings by BiDAF and QANet.

Each layer computes ``g = sigmoid(W_g x + b_g)``, ``t = relu(W_t x + b_t)`` and
``x <- g * t + (1 - g) * x``; the width never changes.
"""

from __future__ import annotations

import torch
from torch import nn


class Highway(nn.Module):
    def __init__(self, dim: int, n_layers: int = 2, dropout: float = 0.0):
        super().__init__()
        self.gates = nn.ModuleList(nn.Linear(dim, dim) for _ in range(n_layers))
        self.transforms = nn.ModuleList(nn.Linear(dim, dim) for _ in range(n_layers))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for gate, transform in zip(self.gates, self.transforms):
            g = torch.sigmoid(gate(x))
            t = self.dropout(torch.relu(transform(x)))
            x = g * t + (1.0 - g) * x
        return x
