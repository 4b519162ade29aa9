"""Depthwise-separable 1-D convolution (Chollet 2017), QANet's convolution sublayer.

A depthwise conv (one length-k filter per input channel, no bias) followed by a pointwise
1x1 conv (``in -> out``, with bias). It equals a plain conv whose weight is
``W[o, i, t] = P[o, i] * D[i, t]`` with ``k * in + in * out`` parameters instead of
``k * in * out``.

Every model in rckit keeps sequences channels-last, (B, T, C), and so does this module. On
CPU the depthwise conv runs as a 2-D depthwise conv over a (B, C, 1, T) view of the
channels-last tensor: oneDNN takes that layout (NHWC) without a reorder and its depthwise
kernel is 10-60x faster there than on (B, C, T) 1-D input (BENCHMARKS.md, QANet round 3;
``benchmarks/qanet_ablation.py`` row ``-nhwc_conv``).
Its backward is written by hand: the input gradient is the same conv with the taps flipped,
the weight gradient ``k`` sums of shifted products in fp32 (autograd's conv backward is
several times slower in this layout). Under CPU autocast the conv runs in the autocast dtype,
as ``nn.Conv1d`` would. The pointwise conv is a matmul with its (out, in) weight. On GPUs the
module uses ``nn.Conv1d`` on (B, C, T) (cuDNN; the 2-D view is unmeasured there). The
parameters are ``nn.Conv1d`` modules either way (``depthwise.weight`` (C, 1, k),
``pointwise.weight`` (out, in, 1)).

Outside autograd, one fp32 sequence (batch 1: one question's context) skips oneDNN: the
conv is ``k`` multiply-adds of shifted rows of the padded input, each tap's weights a
contiguous (C,) row. oneDNN builds a kernel for every new length (903 us the first time, 80
us after, at batch 1) and, once built, is still slower inside the model: QANet over 200 dev
questions one at a time, paired, took 0.88 / 0.90 of oneDNN's time with this path (first
pass: new lengths; second: every length seen), and 0.96 / 0.97 of the time of the window
sum over a strided (B, T, C, k) view that it replaced (BENCHMARKS.md, QANet rounds 5 and 6).
The taps' weights must be contiguous: read as columns of the (C, k) weight (stride k),
five multiply-adds at T = 151 took 75 us against 44. It loses at batch 2 and more (in isolation
70 against 47 us at batch 2, 493 against 109 at batch 32) and in bf16.

Padding is ``k // 2`` zeros on each side (same length out), so callers must zero padded
positions first if they want padding not to leak into real ones.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _conv_nhwc(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Depthwise conv of (B, T, C) ``x`` with (C, 1, k) ``weight`` (same dtype) through the
    (B, C, 1, T) channels-last view; returns (B, T, C) contiguous."""
    k = weight.shape[-1]
    y = F.conv2d(x.transpose(1, 2).unsqueeze(2), weight.unsqueeze(2), padding=(0, k // 2), groups=x.shape[2])
    return y.squeeze(2).transpose(1, 2).contiguous()  # (B, T, C); a view when oneDNN kept NHWC


class _DepthwiseConv1d(torch.autograd.Function):
    """Saves the input and the weight; the weight gradient is accumulated in fp32."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return _conv_nhwc(x, weight.to(x.dtype))

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        k, T = weight.shape[-1], x.shape[1]
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:  # the transposed conv: the same taps, flipped
            grad_x = _conv_nhwc(grad.to(x.dtype), weight.flip(-1).to(x.dtype))
        if ctx.needs_input_grad[1]:  # grad_w[c, j] = sum_{b,t} grad[b, t, c] * x[b, t + j - k//2, c]
            acc = torch.promote_types(x.dtype, torch.float32)
            g, xp = grad.to(acc), F.pad(x.to(acc), (0, 0, k // 2, k // 2))  # (B, T, C), (B, T + k - 1, C)
            gw = torch.stack([(g * xp[:, j:j + T]).sum((0, 1)) for j in range(k)])  # (k, C)
            grad_w = gw.t().unsqueeze(1).to(weight.dtype)  # (C, 1, k)
        return grad_x, grad_w


def _shifted_sum(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The depthwise conv as ``sum_j w[c, j] * x[t + j - k//2, c]``: one multiply-add of a
    shifted (B, T, C) slice of the padded input per tap ``j``."""
    k, T = weight.shape[-1], x.shape[1]
    xp = F.pad(x, (0, 0, k // 2, k // 2))  # (B, T + k - 1, C)
    taps = weight[:, 0].t().contiguous()  # (k, C): each tap's weights contiguous
    y = xp[:, :T] * taps[0]
    for j in range(1, k):
        y.addcmul_(xp[:, j:j + T], taps[j])
    return y  # (B, T, C)


def depthwise_conv1d(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x`` (B, T, C) channels-last, ``weight`` (C, 1, k) with k odd; returns (B, T, C).

    Equal to ``F.conv1d(x.transpose(1, 2), weight, padding=k // 2, groups=C).transpose(1, 2)``
    up to float summation order, computed (and returned) in ``x``'s dtype.
    """
    if not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)):
        # Inference: no autograd.Function to go through.
        if x.dtype == torch.float32 and x.shape[0] == 1:
            return _shifted_sum(x, weight.to(x.dtype))
        return _conv_nhwc(x, weight.to(x.dtype))
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
        if x.device.type != "cpu":  # cuDNN's depthwise kernels
            return self.pointwise(self.depthwise(x.transpose(1, 2))).transpose(1, 2)
        if torch.is_autocast_enabled("cpu"):  # what autocast would do to a conv: compute in its dtype
            x = x.to(torch.get_autocast_dtype("cpu"))
        with torch.autocast("cpu", enabled=False):
            y = depthwise_conv1d(x, self.depthwise.weight)  # (B, T, C_in)
        return F.linear(y, self.pointwise.weight[:, :, 0], self.pointwise.bias)  # (B, T, C_out)
