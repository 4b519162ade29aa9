"""Depthwise-separable 1-D convolution (Chollet 2017), QANet's convolution sublayer.

A depthwise conv (one length-k filter per input channel, no bias) followed by a pointwise
1x1 conv (``in -> out``, with bias). It equals a plain conv whose weight is
``W[o, i, t] = P[o, i] * D[i, t]`` with ``k * in + in * out`` parameters instead of
``k * in * out``.

Every model in rckit keeps sequences channels-last, (B, T, C), and so does this module, all
the way through. The depthwise conv is computed as ``k`` shifted multiply-adds over the
zero-padded input, ``y[t] = sum_j D[:, j] * x[t + j - k//2]`` (cross-correlation, as
``F.conv1d``), and the pointwise conv as a matmul with its (out, in) weight. On CPU this is
several times faster than ``nn.Conv1d(groups=C)`` (oneDNN's depthwise 1-D conv, which also
needs the tensor transposed to (B, C, T) and back): numbers in BENCHMARKS.md,
``benchmarks/qanet_ablation.py`` row ``-dw_conv``. Under autocast the depthwise taps run in
the autocast dtype, as ``F.conv1d`` would. The parameters are still ``nn.Conv1d`` modules
(``depthwise.weight`` (C, 1, k), ``pointwise.weight`` (out, in, 1)), so state dicts are those
of the plain layers.

Padding is ``k // 2`` zeros on each side (same length out), so callers must zero padded
positions first if they want padding not to leak into real ones.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def depthwise_conv1d(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x`` (B, T, C) channels-last, ``weight`` (C, 1, k) with k odd; returns (B, T, C).

    Equal to ``F.conv1d(x.transpose(1, 2), weight, padding=k // 2, groups=C).transpose(1, 2)``
    up to float summation order. Autograd works through the in-place adds: each saves a view
    of the padded input and one tap, so backward keeps one padded copy of ``x``.
    """
    if torch.is_autocast_enabled(x.device.type):
        x = x.to(torch.get_autocast_dtype(x.device.type))
    k, T = weight.shape[-1], x.shape[1]
    taps = weight[:, 0, :].t().to(x.dtype)  # (k, C)
    xp = F.pad(x, (0, 0, k // 2, k // 2))  # (B, T + k - 1, C)
    y = xp[:, :T] * taps[0]  # (B, T, C), a fresh tensor
    for j in range(1, k):
        y.addcmul_(xp[:, j:j + T], taps[j])
    return y


class DepthwiseSeparableConv1d(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        if kernel_size % 2 != 1:
            raise ValueError(f"kernel_size must be odd to keep the length, got {kernel_size}")
        self.depthwise = nn.Conv1d(
            in_channels, in_channels, kernel_size, padding=kernel_size // 2, groups=in_channels, bias=False
        )
        self.pointwise = nn.Conv1d(in_channels, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (B, T, C_in) -> (B, T, C_out)."""
        y = depthwise_conv1d(x, self.depthwise.weight)  # (B, T, C_in)
        return F.linear(y, self.pointwise.weight[:, :, 0], self.pointwise.bias)  # (B, T, C_out)
