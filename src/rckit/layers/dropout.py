"""Dropout whose random mask is cheap to draw on CPU.

``F.dropout`` on CPU draws one Bernoulli sample per element from the serial mt19937 generator:
about 5 ms for a (32, 192, 128) tensor on this project's 2-core machines, and QANet calls it
about 100 times a training step (every sublayer output), ~15 % of the step. Here one 64-bit
draw feeds four elements: its 16-bit lanes are uniform integers ``u`` in [-2^15, 2^15), and an
element is kept when ``u >= -2^15 + round(p * 2^16)``. The drop probability is therefore ``p``
rounded to a multiple of 2^-16 (off by at most 7.7e-6); kept elements are scaled by the exact
inverse of the rounded keep probability, so ``E[dropout(x)] = x`` as with ``F.dropout``.
Masks are 0/1 ``uint8`` tensors, not ``bool``: autograd saves the mask (1 byte an element)
and products with it convert ``uint8`` to the float type, which on CPU is several times
faster than converting ``bool``, and the comparisons run in place on integer tensors, several
times faster than writing a ``bool`` result (see :func:`as_factor`, :func:`keep_mask`,
:func:`positive_mask`).

On other devices ``F.dropout`` is used: its fused kernel is already fast there.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

_LANES = 2**16


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, device: torch.device) -> tuple[torch.Tensor, float]:
    """A 0/1 ``uint8`` mask (1 = keep, probability about ``1 - p``) and the inverse keep rate.

    ``p`` that rounds to 1 keeps nothing (the rate is then 0: nothing is left to scale). The
    comparison runs in place on the 16-bit lanes and the result is narrowed to bytes: at
    (32, 250, 128) 16 + 26 us against 179 us for ``lanes >= cut`` written as ``bool``
    (BENCHMARKS.md, QANet round 6).
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    n = math.prod(shape)
    cut = round(p * _LANES)
    if cut == _LANES:
        return torch.zeros(shape, dtype=torch.uint8, device=device), 0.0
    bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=device)
    bits.random_(torch.iinfo(torch.int64).min, None)  # all 64 bits uniform (to=None: the full range)
    lanes = bits.view(torch.int16)[:n].view(shape)  # four 16-bit uniforms per draw
    return lanes.ge_(cut - _LANES // 2).to(torch.uint8), _LANES / (_LANES - cut)


_SAME_WIDTH_INT = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16,
                   torch.float64: torch.int64}


def positive_mask(y: torch.Tensor) -> torch.Tensor:
    """``y > 0`` as a 0/1 ``uint8`` mask (the ReLU's derivative), for the float types above.

    Compares the bits read as a signed integer of the same width: a float is > 0 exactly when
    its sign bit is clear and some other bit is set, i.e. when that integer is > 0 (a NaN with
    a clear sign bit counts as positive; its product with the mask is NaN either way). In place
    on a copy of the bits and narrowed to bytes: at (32, 250, 128) in bf16 about 70 us against
    418-574 us for ``y > 0`` written as ``bool``.
    """
    return y.view(_SAME_WIDTH_INT[y.dtype]).clone().gt_(0).to(torch.uint8)


def as_factor(mask: torch.Tensor) -> torch.Tensor:
    """A boolean mask as the factor of a product: its bytes viewed as 0/1 ``uint8`` (no copy).

    ``x * mask`` gives the same values either way, but on CPU PyTorch 2.13 turns ``bool`` into
    a float type in a slow elementwise loop: at (32, 250, 128), 687 us to bf16 against 67 us
    from ``uint8``, so ``x * mask`` took 819 us in bf16 against 160 us, and 1,844 against
    458 us with its backward (the backward multiplies by the mask again); ``&`` of a full
    boolean mask with a broadcast (32, 1, 1) one took 440 us against 14 us as bytes
    (BENCHMARKS.md, QANet round 6).
    """
    return mask.view(torch.uint8)


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, True)
    keep, inv_keep = keep_mask(x.shape, p, x.device)
    return (x * keep).mul_(inv_keep)  # in place on the fresh product: one allocation, not two


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
