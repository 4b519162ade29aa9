"""Dropout (Srivastava et al. 2014) for every rckit model: ``F.dropout``, or on CPU the byte-mask
dropout of :func:`rckit.kernels.cpu.dropout` (same distribution, kernel name ``dropout``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rckit import kernels
from rckit.kernels import cpu


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``."""
    if training and x.device.type == "cpu" and kernels.enabled("dropout"):
        return cpu.dropout(x, p)
    return F.dropout(x, p, training)


class Dropout(nn.Dropout):
    """``nn.Dropout`` through :func:`dropout`, so that the switch reaches every model."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)
