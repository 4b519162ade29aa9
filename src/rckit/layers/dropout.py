"""Dropout whose random mask is cheap to draw on CPU.

``F.dropout`` on CPU draws one Bernoulli sample per element from the serial mt19937 generator:
about 5 ms for a (32, 192, 128) tensor on this project's 2-core machines, and QANet calls it
about 100 times a training step (every sublayer output), ~15 % of the step. Here one 64-bit
draw feeds four elements: its 16-bit lanes are uniform integers ``u`` in [-2^15, 2^15), and an
element is kept when ``u >= -2^15 + round(p * 2^16)``. The drop probability is therefore ``p``
rounded to a multiple of 2^-16 (off by at most 7.7e-6); kept elements are scaled by the exact
inverse of the rounded keep probability, so ``E[dropout(x)] = x`` as with ``F.dropout``.
Autograd saves only the mask (1 byte an element). Products take the mask as its 0/1 bytes
(:func:`as_factor`), not as ``bool``.

On other devices ``F.dropout`` is used: its fused kernel is already fast there.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

_LANES = 2**16


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, device: torch.device) -> tuple[torch.Tensor, float]:
    """A boolean mask (``True`` = keep, probability about ``1 - p``) and the inverse keep rate.

    ``p`` that rounds to 1 keeps nothing (the rate is then 0: nothing is left to scale).
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    n = math.prod(shape)
    cut = round(p * _LANES)
    if cut == _LANES:
        return torch.zeros(shape, dtype=torch.bool, device=device), 0.0
    bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=device)
    bits.random_(torch.iinfo(torch.int64).min, None)  # all 64 bits uniform (to=None: the full range)
    lanes = bits.view(torch.int16)[:n].view(shape)  # four 16-bit uniforms per draw
    return lanes >= cut - _LANES // 2, _LANES / (_LANES - cut)


def as_factor(mask: torch.Tensor) -> torch.Tensor:
    """A boolean mask as the factor of a product: its bytes viewed as 0/1 ``uint8`` (no copy).

    ``x * mask`` gives the same values either way, but on CPU PyTorch 2.13 turns ``bool`` into
    a float type in a slow elementwise loop: at (32, 250, 128), 687 us to bf16 against 67 us
    from ``uint8``, so ``x * mask`` took 819 us in bf16 against 160 us, and 1,844 against
    458 us with its backward (the backward multiplies by the mask again; BENCHMARKS.md, QANet
    round 6).
    """
    return mask.view(torch.uint8)


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, True)
    keep, inv_keep = keep_mask(x.shape, p, x.device)
    return (x * as_factor(keep)).mul_(inv_keep)  # in place on the fresh product: one allocation, not two


class Dropout(nn.Module):
    """Drop-in for ``nn.Dropout`` that uses :func:`dropout`."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
