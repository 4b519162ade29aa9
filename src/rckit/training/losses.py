"""Losses over model logits; plain functions, independent of any model."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def span_loss(start_logits: torch.Tensor, end_logits: torch.Tensor,
              y_start: torch.Tensor, y_end: torch.Tensor) -> torch.Tensor:
    """Mean over answerable examples of ``CE(start) + CE(end)``, in float32.

    ``*_logits`` are (B, T) (padded positions already at ``finfo.min``), ``y_*`` (B,) inclusive
    token indices; an example with ``y_start`` or ``y_end`` equal to -1 is left out. With no
    example left the result is a zero that still carries a (zero) gradient, so a training step
    on such a batch needs no special case.
    """
    valid = (y_start >= 0) & (y_end >= 0)  # (B,)
    # Ignored rows are scored against position 0 and then dropped by the where(), with no
    # data-dependent branch (no host sync on GPU). Multiplying by 0 instead could hit inf * 0.
    ce_start = F.cross_entropy(start_logits.float(), y_start.clamp(min=0), reduction="none")  # (B,)
    ce_end = F.cross_entropy(end_logits.float(), y_end.clamp(min=0), reduction="none")  # (B,)
    ce = torch.where(valid, ce_start + ce_end, torch.zeros_like(ce_start))  # (B,)
    return ce.sum() / valid.sum().clamp(min=1)
