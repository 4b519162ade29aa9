"""Depthwise-separable 1-D convolution (Chollet 2017), QANet's convolution sublayer.

A depthwise conv (one length-k filter per input channel, no bias) followed by a pointwise
1x1 conv (``in -> out``, with bias). It equals a plain conv whose weight is
``W[o, i, t] = P[o, i] * D[i, t]`` with ``k * in + in * out`` parameters instead of
``k * in * out``.

Every model in rckit keeps sequences channels-last, (B, T, C), and so does this module. In
fp32 the depthwise conv is ``k`` shifted multiply-adds over the zero-padded input,
``y[t] = sum_j D[:, j] * x[t + j - k//2]`` (cross-correlation, as ``F.conv1d``), with a
hand-written backward that keeps only the input, and the pointwise conv is a matmul with its
(out, in) weight: no transposes, and oneDNN's depthwise 1-D conv is slow for one question at a
time (``benchmarks/qanet_ablation.py``, BENCHMARKS.md). Under autocast, for 16-bit input and
on GPUs the module uses ``nn.Conv1d`` on (B, C, T) as before: there the shifted adds (16-bit elementwise
arithmetic, or fp32 with casts around it) measured no faster than oneDNN's bf16 conv. The
parameters are ``nn.Conv1d`` modules either way (``depthwise.weight`` (C, 1, k),
``pointwise.weight`` (out, in, 1)).

Padding is ``k // 2`` zeros on each side (same length out), so callers must zero padded
positions first if they want padding not to leak into real ones.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _shifted_taps(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``sum_j weight[:, 0, j] * x[:, t + j - k//2]`` over zero-padded (B, T, C) ``x``."""
    k, T = weight.shape[-1], x.shape[1]
    taps = weight[:, 0, :].t().to(x.dtype)  # (k, C)
    xp = F.pad(x, (0, 0, k // 2, k // 2))  # (B, T + k - 1, C)
    y = xp[:, :T] * taps[0]  # (B, T, C), a fresh tensor
    for j in range(1, k):
        y.addcmul_(xp[:, j:j + T], taps[j])
    return y


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    # 16-bit elementwise arithmetic is slower than fp32 on CPU.
    return torch.float32 if x.device.type == "cpu" and x.dtype in (torch.bfloat16, torch.float16) else x.dtype


class _DepthwiseConv1d(torch.autograd.Function):
    """Saves the input as given (a 16-bit input: half the bytes of the fp32 copy it computes
    with) and the weight; backward recomputes the padded input."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return _shifted_taps(x.to(_compute_dtype(x)), weight)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        xc = x.to(_compute_dtype(x))
        g = grad.to(xc.dtype)
        k, T = weight.shape[-1], x.shape[1]
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:  # the transposed conv: the same taps, flipped
            grad_x = _shifted_taps(g, weight.flip(-1)).to(x.dtype)
        if ctx.needs_input_grad[1]:
            xp = F.pad(xc, (0, 0, k // 2, k // 2))  # (B, T + k - 1, C)
            gw = torch.stack([(g * xp[:, j:j + T]).sum((0, 1)) for j in range(k)])  # (k, C)
            grad_w = gw.t().unsqueeze(1).to(weight.dtype)  # (C, 1, k)
        return grad_x, grad_w


def depthwise_conv1d(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x`` (B, T, C) channels-last, ``weight`` (C, 1, k) with k odd; returns (B, T, C).

    Equal to ``F.conv1d(x.transpose(1, 2), weight, padding=k // 2, groups=C).transpose(1, 2)``
    up to float summation order; on CPU a 16-bit ``x`` is computed (and returned) in fp32.
    """
    return _DepthwiseConv1d.apply(x, weight)


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
        if x.device.type != "cpu" or torch.is_autocast_enabled("cpu") or x.dtype != torch.float32:
            # 16-bit on CPU: oneDNN's grouped conv on (B, C, T) measured as fast or faster
            # (BENCHMARKS.md); on GPUs cuDNN's depthwise kernels (the shifted adds are unmeasured there).
            return self.pointwise(self.depthwise(x.transpose(1, 2))).transpose(1, 2)
        y = depthwise_conv1d(x, self.depthwise.weight)  # (B, T, C_in)
        return F.linear(y, self.pointwise.weight[:, :, 0], self.pointwise.bias)  # (B, T, C_out)
