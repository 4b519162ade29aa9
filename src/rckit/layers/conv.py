"""Depthwise-separable 1-D convolution (Chollet 2017), QANet's convolution sublayer.

A depthwise conv (one length-k filter per input channel, no bias) followed by a pointwise
1x1 conv (``in -> out``, with bias). It equals a plain conv whose weight is
``W[o, i, t] = P[o, i] * D[i, t]`` with ``k * in + in * out`` parameters instead of
``k * in * out``.

Sequences are channels-last, (B, T, C), in every rckit model and in this module; the convs
run on the (B, C, T) transpose. Padding is ``k // 2`` zeros on each side (same length out), so
callers must zero padded positions first if they want padding not to leak into real ones.
On CPU the kernel ``conv`` (:func:`rckit.kernels.cpu.separable_conv`) computes the same thing; in an
exported graph ``graph_conv`` (:func:`rckit.kernels.graph.separable_conv`).
"""

from __future__ import annotations

import torch
from torch import nn

from rckit import kernels
from rckit.kernels import cpu, graph


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
        if torch.compiler.is_exporting() and kernels.enabled("graph_conv"):
            return graph.separable_conv(x, self.depthwise.weight, self.pointwise.weight, self.pointwise.bias)
        if x.device.type == "cpu" and kernels.enabled("conv"):
            return cpu.separable_conv(x, self.depthwise.weight, self.pointwise.weight, self.pointwise.bias)
        return self.pointwise(self.depthwise(x.transpose(1, 2))).transpose(1, 2)  # (B, C, T) inside
