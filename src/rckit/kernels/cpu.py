"""CPU fast paths: the same computations as the plain layers, done faster on CPU.

Each is called by one layer behind ``kernels.enabled(name)`` (see :mod:`rckit.kernels`) and has
an equality test against that layer's plain path in ``tests/kernels/test_kernels.py``; what each
is worth is measured in BENCHMARKS.md, "CPU kernels" (``benchmarks/qanet_ablation.py``).

================  ==============================================  ===========================
name              computes                                         called by
================  ==============================================  ===========================
``residual``      :func:`residual`                                 ``EncoderBlock.residual``
``conv``          :func:`separable_conv`                           ``DepthwiseSeparableConv1d``
``attention``     :func:`attention`                                ``MultiHeadSelfAttention``
``char_cnn``      :func:`char_cnn`                                 ``CharCNN``
``dedupe``        :func:`encode_shared_contexts`,                  ``QANet.encode``,
                  :func:`once_per_distinct_text`                   DCN's ``encode_documents``
================  ==============================================  ===========================
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

# --- QANet's residual ---------------------------------------------------------------------------

_LANES = 2**16


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, device: torch.device) -> tuple[torch.Tensor, float]:
    """A 0/1 ``uint8`` mask (1 = keep, probability about ``1 - p``) and the inverse keep rate.

    One 64-bit draw feeds four elements: its 16-bit lanes are uniform integers ``u`` in
    [-2^15, 2^15), and an element is kept when ``u >= -2^15 + round(p * 2^16)``. The drop rate
    is ``p`` rounded to a multiple of 2^-16; the returned scale is the exact inverse of the
    rounded keep rate, so ``E[x * mask * scale] = x``. ``p`` that rounds to 1 keeps nothing
    (scale 0). Faster than ``F.dropout``'s one Bernoulli draw an element from the serial
    generator, and the comparison runs in place on the lanes (BENCHMARKS.md, "CPU kernels").
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


_SAME_WIDTH_INT = {
    torch.float32: torch.int32,
    torch.bfloat16: torch.int16,
    torch.float16: torch.int16,
    torch.float64: torch.int64,
}


def positive_mask(y: torch.Tensor) -> torch.Tensor:
    """``y > 0`` (the ReLU's derivative) as a 0/1 ``uint8`` mask.

    A float is > 0 exactly when its bits, read as a signed integer of the same width, are > 0
    (a NaN with a clear sign bit counts as positive; its product with the mask is NaN either
    way). Compared in place on a copy of the bits, which is faster than writing a ``bool``
    result (BENCHMARKS.md, "CPU kernels").
    """
    return y.view(_SAME_WIDTH_INT[y.dtype]).clone().gt_(0).to(torch.uint8)


def as_factor(mask: torch.Tensor) -> torch.Tensor:
    """A ``bool`` mask as the factor of a product: its bytes viewed as 0/1 ``uint8``, no copy.

    ``x * mask`` gives the same values either way, but on CPU converting ``uint8`` to a float
    type is much faster than converting ``bool`` (BENCHMARKS.md, "CPU kernels").
    """
    return mask.view(torch.uint8)


def residual(
    x: torch.Tensor, y: torch.Tensor, p: float, survival: float, keep: torch.Tensor | None = None, relu: bool = False
) -> torch.Tensor:
    """``x + dropout_p(f(y)) * keep / survival``, ``f`` the ReLU if ``relu`` else the identity,
    ``keep`` a ``bool`` per-example stochastic-depth mask (B, 1, 1) or None.

    The dropout mask, ``keep``, the ReLU's ``y > 0`` and every scale are folded into one 0/1
    byte mask, one product and the ``alpha`` of the add: two passes over (B, T, d), and backward
    keeps that one mask where a ReLU would also keep its output (BENCHMARKS.md, "CPU kernels").
    """
    scale = 1.0 / survival
    keep = None if keep is None else as_factor(keep)
    if p > 0.0:
        drop, inv_keep = keep_mask(y.shape, p, y.device)  # (B, T, d) 0/1 bytes, a fresh tensor
        keep, scale = drop if keep is None else drop.bitwise_and_(keep), scale * inv_keep
        if relu:
            keep.bitwise_and_(positive_mask(y))  # the ReLU, folded into the mask
    elif relu:
        y = torch.relu(y)
    return torch.add(x, y if keep is None else y * keep, alpha=scale)


# --- depthwise-separable conv -------------------------------------------------------------------


def _conv_nhwc(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Depthwise conv of (B, T, C) ``x`` with (C, 1, k) ``weight`` (same dtype) through the
    (B, C, 1, T) channels-last view; returns (B, T, C) contiguous."""
    k = weight.shape[-1]
    y = F.conv2d(x.transpose(1, 2).unsqueeze(2), weight.unsqueeze(2), padding=(0, k // 2), groups=x.shape[2])
    return y.squeeze(2).transpose(1, 2).contiguous()  # (B, T, C); a view when oneDNN kept NHWC


class _DepthwiseConv1d(torch.autograd.Function):
    """:func:`_conv_nhwc` with a hand-written backward: the input gradient is the same conv with
    the taps flipped, the weight gradient ``k`` sums of shifted products accumulated in fp32."""

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
            gw = torch.stack([(g * xp[:, j : j + T]).sum((0, 1)) for j in range(k)])  # (k, C)
            grad_w = gw.t().unsqueeze(1).to(weight.dtype)  # (C, 1, k)
        return grad_x, grad_w


def _shifted_sum(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The depthwise conv as ``sum_j w[c, j] * x[t + j - k//2, c]``: one multiply-add of a
    shifted (B, T, C) slice of the padded input per tap ``j``, each tap's weights contiguous."""
    k, T = weight.shape[-1], x.shape[1]
    xp = F.pad(x, (0, 0, k // 2, k // 2))  # (B, T + k - 1, C)
    taps = weight[:, 0].t().contiguous()  # (k, C): each tap's weights contiguous
    y = xp[:, :T] * taps[0]
    for j in range(1, k):
        y.addcmul_(xp[:, j : j + T], taps[j])
    return y  # (B, T, C)


def depthwise_conv1d(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x`` (B, T, C) channels-last, ``weight`` (C, 1, k), k odd -> (B, T, C) in ``x``'s dtype;
    equals ``F.conv1d(x.transpose(1, 2), weight, padding=k // 2, groups=C).transpose(1, 2)``.

    oneDNN's depthwise kernel is much faster on the (B, C, 1, T) channels-last view than on
    (B, C, T) 1-D input, and autograd's conv backward is slow in that layout, hence the
    hand-written one. Outside autograd one fp32 sequence (one question) is :func:`_shifted_sum`:
    oneDNN builds a kernel for every new length (BENCHMARKS.md, "CPU kernels").
    """
    if not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)):
        if x.dtype == torch.float32 and x.shape[0] == 1:
            return _shifted_sum(x, weight.to(x.dtype))
        return _conv_nhwc(x, weight.to(x.dtype))
    return _DepthwiseConv1d.apply(x, weight)


def separable_conv(
    x: torch.Tensor, depthwise_weight: torch.Tensor, pointwise_weight: torch.Tensor, pointwise_bias: torch.Tensor | None
) -> torch.Tensor:
    """``DepthwiseSeparableConv1d`` on (B, T, C_in) -> (B, T, C_out): :func:`depthwise_conv1d`,
    then the pointwise conv as a matmul with its (out, in) weight. Under CPU autocast the conv
    runs in the autocast dtype, as ``nn.Conv1d`` would. (BENCHMARKS.md, "CPU kernels".)"""
    if torch.is_autocast_enabled("cpu"):
        x = x.to(torch.get_autocast_dtype("cpu"))
    with torch.autocast("cpu", enabled=False):
        y = depthwise_conv1d(x, depthwise_weight)  # (B, T, C_in)
    return F.linear(y, pointwise_weight[:, :, 0], pointwise_bias)  # (B, T, C_out)


# --- self-attention -----------------------------------------------------------------------------

_CPU_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_CPU_FLASH_BACKWARD = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)


def _additive(key_mask: torch.Tensor) -> torch.Tensor:
    """Boolean key mask -> the additive fp32 mask the flash kernel takes (0 or ``finfo.min``,
    as ``mask_logits``: a row with every key masked stays finite)."""
    return torch.zeros(key_mask.shape, dtype=torch.float32, device=key_mask.device).masked_fill_(
        ~key_mask, torch.finfo(torch.float32).min
    )


def _heads(qkv: torch.Tensor, n_heads: int) -> tuple[torch.Tensor, ...]:
    """(B, T, 3d) -> q, k, v, each (B, H, T, d_h), views (no copy)."""
    B, T, _ = qkv.shape
    return qkv.view(B, T, 3, n_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)


class Fp32Attention(torch.autograd.Function):
    """Multi-head SDPA in fp32 on the 16-bit ``qkv`` (B, T, 3d); returns (B, T, d) in its dtype.

    Calls the CPU flash kernel and its backward
    (``aten::_scaled_dot_product_flash_attention_for_cpu[_backward]``) directly, saving only the
    16-bit ``qkv`` and output, where autograd through ``sdpa(q.float(), ...)`` would keep four
    fp32 tensors; the backward writes the q, k, v gradients straight into one (B, T, 3d) tensor.
    The backward reads the output at 16-bit precision (``D_i = dO_i . O_i``), as bf16 flash
    kernels on GPUs do: gradients change by about bf16 rounding. The log-sum-exp stays fp32.
    ``bias``: additive fp32 mask broadcastable to (B, H, T, T), or None.
    """

    @staticmethod
    def forward(ctx, qkv, n_heads, bias):
        B, T, _ = qkv.shape
        out, lse = _CPU_FLASH(*_heads(qkv.float(), n_heads), attn_mask=bias)  # (B, H, T, d_h), (B, H, T)
        y = out.transpose(1, 2).reshape(B, T, -1).to(qkv.dtype)  # (B, T, d)
        ctx.n_heads = n_heads
        ctx.save_for_backward(qkv, bias, y, lse)
        return y

    @staticmethod
    def backward(ctx, grad):
        qkv, bias, y, lse = ctx.saved_tensors
        B, T, d3 = qkv.shape
        H = ctx.n_heads

        def heads(t):  # (B, T, d) -> fp32 (B, H, T, d_h)
            return t.float().view(B, T, H, -1).transpose(1, 2)

        gq, gk, gv = _CPU_FLASH_BACKWARD(
            heads(grad), *_heads(qkv.float(), H), heads(y), lse, 0.0, False, attn_mask=bias
        )
        g = qkv.new_empty(B, T, 3, H, d3 // (3 * H))
        for i, gi in enumerate((gq, gk, gv)):
            g[:, :, i].copy_(gi.transpose(1, 2))
        return g.view(B, T, d3), None, None


def attention(qkv: torch.Tensor, n_heads: int, key_mask: torch.Tensor | None, dropout_p: float = 0.0) -> torch.Tensor:
    """Multi-head SDPA of a 16-bit ``qkv`` (B, T, 3d) computed in fp32; (B, T, d) in ``qkv``'s dtype.

    ``key_mask`` (B, 1, 1, T) True on real keys, or None. On CPU the bf16 SDPA backward is
    several times slower than fp32's, so fp32 is faster and more precise; in training without
    attention dropout it goes through :class:`Fp32Attention` (BENCHMARKS.md, "CPU kernels").
    """
    B, T, _ = qkv.shape
    if dropout_p == 0.0 and torch.is_grad_enabled() and _CPU_FLASH is not None:
        return Fp32Attention.apply(qkv, n_heads, None if key_mask is None else _additive(key_mask))
    with torch.autocast("cpu", enabled=False):
        y = F.scaled_dot_product_attention(
            *_heads(qkv.float(), n_heads), attn_mask=key_mask, dropout_p=dropout_p
        )  # (B, H, T, d_h)
    return y.transpose(1, 2).reshape(B, T, -1).to(qkv.dtype)  # (B, T, d)


# --- char CNN -----------------------------------------------------------------------------------


class _TapSum(torch.autograd.Function):
    """``y[r] = sum_j keep[r, j] * z[r + j, j]`` for ``z`` (R + k - 1, k, C), ``keep`` (R, k).

    Autograd through ``k`` slices of ``z`` would build ``k`` zero-filled copies of ``z``'s
    gradient and add them up; here it is one zero fill and ``k`` strided writes.
    """

    @staticmethod
    def forward(ctx, z, keep):
        R, k = keep.shape
        ctx.save_for_backward(keep)
        ctx.z_shape = z.shape
        y = z[0:R, 0] * keep[:, 0:1]  # (R, C), a fresh tensor
        for j in range(1, k):
            y.addcmul_(z[j : j + R, j], keep[:, j : j + 1])
        return y

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        R, k = keep.shape
        grad_z = grad.new_zeros(ctx.z_shape)  # (R + k - 1, k, C)
        for j in range(k):
            torch.mul(grad, keep[:, j : j + 1], out=grad_z[j : j + R, j])
        return grad_z, None


def char_cnn(
    chars: torch.Tensor,
    embed: Callable[[torch.Tensor], torch.Tensor],
    weight: torch.Tensor,
    bias: torch.Tensor,
    training: bool,
) -> torch.Tensor:
    """``CharCNN``: ``chars`` (B, T, W), 0 = <pad> -> (B, T, C), computed at real characters only.

    ``embed`` maps char ids (R,) to (R, Dc) with the char dropout applied; ``weight`` (C, Dc, k)
    and ``bias`` (C,) are the conv's. Batches pad every word to the longest one, so a dense conv
    spends most of its work on padding. Here the characters are gathered in reading order, one
    (R, Dc) x (Dc, k*C) matmul gives each character's product with every tap, and each output
    sums its ``k`` neighbours' products (:class:`_TapSum`), leaving out neighbours from another
    word as the padding would have; the max over a word is a segment max. Outside training the
    matmul runs over the distinct char ids only (BENCHMARKS.md, "CPU kernels").
    """
    B, T, W = chars.shape
    C, _, k = weight.shape
    h = k // 2
    flat = chars.reshape(B * T, W)  # (N, W)
    real = flat != 0
    # Keep each word's span from its first to its last real char, so that inside the packed
    # list a char's neighbour at offset s is the entry s places away. Pads inside a span
    # (none in collated batches) ride along as zero vectors and are left out of the max.
    span = (real.cumsum(1) > 0) & (real.flip(1).cumsum(1).flip(1) > 0)  # (N, W)
    word, pos = span.nonzero(as_tuple=True)  # (R,), (R,), row-major: words in order
    R = word.shape[0]
    if R == 0:  # no characters anywhere in the batch
        return weight.new_zeros(B, T, C)
    ids = flat[word, pos]  # (R,)
    is_real = (ids != 0).unsqueeze(1)  # (R, 1)
    # Every tap's product first: z[r, j] = W_j^T x[r]. Then y[r] = b + sum_j z[r + j - h, j],
    # counting tap j only where entry r + j - h is in the same word as r.
    w = weight.permute(1, 2, 0).reshape(-1, k * C)  # (Dc, k*C), column j*C + c = W[c, :, j]
    dtype = torch.get_autocast_dtype(chars.device.type) if torch.is_autocast_enabled(chars.device.type) else None
    if training:
        x = embed(ids) * is_real  # (R, Dc)
        x = x if dtype is None else x.to(dtype)
        z = (F.pad(x, (0, 0, h, h)) @ w.to(x.dtype)).view(R + 2 * h, k, C)  # row r + h: entry r's products
    else:
        # Without dropout a char's products depend on its id alone: the matmul runs over the
        # distinct ids and the entries gather their rows. Id 0 (the <pad> char, and the h
        # padding rows at each end) gets a row of zeros.
        distinct, inverse = torch.unique(F.pad(ids, (h, h)), return_inverse=True)  # (U,), (R + 2h,)
        x = embed(distinct) * (distinct != 0).unsqueeze(1)  # (U, Dc)
        x = x if dtype is None else x.to(dtype)
        z = (x @ w.to(x.dtype))[inverse].view(R + 2 * h, k, C)  # row r + h: entry r's products
    nb_word = F.pad(word, (h, h), value=-1).unfold(0, k, 1)  # (R, k): word of entry r + j - h
    same_word = (nb_word == word.unsqueeze(1)).to(z.dtype)  # (R, k)
    y = _TapSum.apply(z, same_word) + bias.to(z.dtype)  # (R, C)
    # After ReLU every real value is >= 0, so a max that starts from 0 equals a masked max,
    # and words without chars (padded tokens) come out as zeros, as does a pad in a span.
    y = torch.relu(y) * is_real  # (R, C)
    with warnings.catch_warnings():  # index_reduce is marked beta; amax and its grad are stable
        warnings.simplefilter("ignore", UserWarning)
        out = y.new_zeros(B * T, C).index_reduce(0, word, y, "amax")  # (N, C)
    return out.view(B, T, C)  # (B, T, C)


# --- dedupe: equal inputs computed once, outside training ---------------------------------------


def _weights(n: int, device: torch.device) -> torch.Tensor:
    """``n`` fixed odd int64 multipliers (a seeded draw: the same in every process)."""
    return _draw(max(64, 1 << (n - 1).bit_length()), device)[:n]  # rows of every length share a few draws


@functools.lru_cache(maxsize=16)
def _draw(n: int, device: torch.device) -> torch.Tensor:
    g = torch.Generator().manual_seed(0x5EED)
    w = torch.randint(-(2**62), 2**62, (n,), generator=g, dtype=torch.int64) | 1
    return w.to(device)


def unique_rows(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` (N, M) integer -> ``(rep, inverse)``: ``rep`` (U,) the index of one row of each
    distinct value, ``inverse`` (N,) the group of each row, so ``rows[rep][inverse]`` equals
    ``rows``. Groups come in no particular order.

    ``torch.unique(dim=0)`` sorts rows lexicographically, slowly on CPU; here each row is hashed
    to one int64 key, the keys are grouped by a 1-D ``torch.unique``, and every row is checked
    against its group's representative: a collision falls back to ``torch.unique(dim=0)``, so
    the result is always exact (BENCHMARKS.md, "CPU kernels").
    """
    N, M = rows.shape
    arange = torch.arange(N, device=rows.device)
    if N <= 1:
        return arange, torch.zeros(N, dtype=torch.long, device=rows.device)
    key = (rows.long() * _weights(M, rows.device)).sum(1)  # (N,), wraps modulo 2^64
    _, inverse = torch.unique(key, return_inverse=True)  # (N,)
    rep = inverse.new_empty(int(inverse.max()) + 1).scatter_(0, inverse, arange)  # (U,)
    if not torch.equal(rows[rep][inverse], rows):  # a collision: let the exact sort decide
        _, inverse = torch.unique(rows, dim=0, return_inverse=True)
        rep = inverse.new_empty(int(inverse.max()) + 1).scatter_(0, inverse, arange)
    return rep, inverse


def unique_texts(words: torch.Tensor, chars: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`unique_rows` over texts: ``words`` (N, T), ``chars`` (N, T, W); two texts are equal
    when their word ids and characters are (a token is a text of length 1)."""
    N = words.shape[0]
    return unique_rows(torch.cat([words, chars.reshape(N, -1)], dim=1))


def once_per_distinct_text(
    fn: Callable[[torch.Tensor | slice], torch.Tensor], words: torch.Tensor, chars: torch.Tensor
) -> torch.Tensor:
    """``fn(index)``, a (B, ...) result for the rows ``index`` of the batch, computed once per
    distinct text of ``words`` (B, T), ``chars`` (B, T, W) and copied to the rows that repeat
    it: equals ``fn(slice(None))`` when a row's result depends on its own text alone (no
    dropout, no other row). SQuAD asks several questions about each paragraph, so a batch
    holds few distinct contexts (BENCHMARKS.md, "CPU kernels").
    """
    first, inverse = unique_texts(words, chars)  # (U,), (B,)
    if len(first) == words.shape[0]:  # nothing to share
        return fn(slice(None))
    return fn(first)[inverse]


def encode_shared_contexts(
    embed: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    encoder: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor],
    c_words: torch.Tensor,
    c_chars: torch.Tensor,
    c_mask: torch.Tensor,
    q_words: torch.Tensor,
    q_chars: torch.Tensor,
    q_mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """QANet's ``encoder(embed(context))`` and ``encoder(embed(question))`` outside training:
    (B, Tc, d), (B, Tq, d); ``encoder`` takes a mask, or None when nothing is padded.

    Each distinct context of the batch is encoded once, and the tokens of those contexts and
    of the questions are embedded in one call over the distinct tokens only (a context
    repeats its common words, and questions reuse their paragraph's words). The same values
    as the plain path: outside training nothing is random, and neither the embedding nor the
    embedding encoder looks beyond its own sequence (BENCHMARKS.md, "CPU kernels").
    """
    (B, Tc), Tq, W = c_words.shape, q_words.shape[1], c_chars.shape[2]
    first, inverse = unique_texts(c_words, c_chars)  # (U,), (B,): one example of each distinct context
    n_c = len(first) * Tc
    words = torch.cat([c_words[first].reshape(-1), q_words.reshape(-1)])  # (n_c + B * Tq,)
    chars = torch.cat([c_chars[first].reshape(-1, W), q_chars.reshape(-1, W)])  # (n_c + B * Tq, W)
    rep, tokens = unique_texts(words.unsqueeze(1), chars.unsqueeze(1))  # (N,), (n_c + B * Tq,)
    x = embed(words[rep].unsqueeze(0), chars[rep].unsqueeze(0))[0, tokens]  # (n_c + B * Tq, d)
    c_pad = c_mask[first]
    C = encoder(x[:n_c].view(len(first), Tc, -1), None if bool(c_pad.all()) else c_pad)  # (U, Tc, d)
    Q = encoder(x[n_c:].view(B, Tq, -1), None if bool(q_mask.all()) else q_mask)  # (B, Tq, d)
    return C[inverse], Q
