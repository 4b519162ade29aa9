"""Masking helpers shared by every model.

Masks are ``True`` on real tokens. Masked logits are filled with ``torch.finfo(dtype).min`` of
the tensor's own dtype, so the same code works in float32 and under bf16/fp16 autocast (a
literal ``-1e30`` overflows to ``-inf`` in half precision and turns fully masked rows into NaN).
"""

from __future__ import annotations

import torch


def mask_logits(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Replace logits where ``mask`` is False (broadcastable) by the dtype's smallest value."""
    return logits.masked_fill(~mask, torch.finfo(logits.dtype).min)


def masked_softmax(logits: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax over ``dim`` that gives masked entries exactly zero probability.

    A row whose entries are all masked comes back as all zeros rather than NaN or a uniform
    distribution: with every entry at ``finfo.min`` the softmax is uniform, and multiplying by
    the mask clears it. Rows with at least one real entry are unaffected by that product,
    because ``exp(finfo.min - max)`` is already exactly zero.
    """
    probs = torch.softmax(mask_logits(logits, mask), dim=dim)
    return probs * mask.to(probs.dtype)


def zero_padding(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Zero the feature vectors of padded positions: ``x`` (B, T, d), ``mask`` (B, T).

    A product with the 0/1 mask rather than ``masked_fill``: on CPU the broadcast masked_fill
    (and its backward) is several times slower. Equal for finite ``x`` (a padded entry may come
    out as -0.0).
    """
    return x * mask.unsqueeze(-1).to(x.dtype)


def with_null(null: torch.Tensor, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One learned vector ``null`` (d,) before every sequence of ``x`` (B, T, d), as a real
    position: (B, 1 + T, d) and its mask (B, 1 + T). Span models that can say "no answer" point
    at it (SQuAD v2.0, :class:`rckit.models.contract.SpanOutput`)."""
    B = x.shape[0]
    return torch.cat([null.to(x.dtype).expand(B, 1, -1), x], dim=1), torch.cat([mask.new_ones(B, 1), mask], dim=1)
