"""Span decoding: from start/end logits to answer token spans and answer text.

A span model gives, for every context token ``i``, a start logit and an end logit. With
``p_start = softmax(start_logits)`` and ``p_end = softmax(end_logits)``, both taken over the
real tokens only, the answer is the span ``(s, e)`` that maximises

    p_start[s] * p_end[e]   subject to   s <= e  and  e - s + 1 <= max_answer_len     (BiDAF / QANet)

which is decoded here as the maximum of ``log p_start[s] + log p_end[e]``.

``max_answer_len`` is the answer length in tokens, counting both ends: ``max_answer_len=1``
allows only single-token answers and ``max_answer_len=30`` (the QANet setting) allows
``e <= s + 29``. A run keeps it in its :class:`DecodeConfig` (``decode`` in ``config.json`` and
in the checkpoint, read back by :func:`rckit.saved.runs.decode_config_of`;
``--set decode.max_answer_len=N`` at training time), and evaluation,
prediction, ``rckit bench`` and the training-time dev evaluation all decode with that.

A span is *valid* when every token in it is real (``mask`` True), so a span never crosses
padding, or a hole in the mask. With the usual right padding this is simply
``e < length``.

Conventions, as everywhere in rckit: ``mask`` is bool with True = real token, token spans are
inclusive ``(start, end)``, character spans are half-open ``[start, end)``.

Numerics: whatever the input dtype (float32, bfloat16, float16), logits are cast to float32
before the masked log-softmax, and all scores are float32. Softmax masking fills with
``torch.finfo(torch.float32).min``. Logits of real tokens are assumed finite; logits at
padded positions may be anything (huge, inf, nan): they are overwritten before use.

Rows with no valid span (an all-padding mask) decode to ``start = end = -1`` and ``score = -inf``.

Memory is O(B * T * max_answer_len): scores are only formed on the band
``s <= e < s + max_answer_len``, never on the full (T, T) matrix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F



@dataclass
class DecodeConfig:
    """How answers are read off a span model's logits; saved with the run as ``decode``.

    A cloze model's answer is the argmax over its entities, whatever this says.
    """

    max_answer_len: int = 30  # tokens, both ends counted (the QANet setting)
    # A model that can abstain (SpanOutput.start_null) answers "" where the null's score beats
    # the best span's by more than this (log-probability margin; chosen on held-out data).
    no_answer_threshold: float = 0.0


@dataclass
class SpanPrediction:
    """Decoded spans. Shapes are (B,) from :func:`best_spans`, (B, k) from :func:`topk_spans`."""

    start: torch.Tensor  # long, inclusive token index, -1 where there is no valid span
    end: torch.Tensor  # long, inclusive token index, -1 where there is no valid span
    score: torch.Tensor  # float32, log p_start[start] + log p_end[end], -inf where no span


def _check_inputs(
    start_logits: torch.Tensor, end_logits: torch.Tensor, mask: torch.Tensor, max_answer_len: int
) -> None:
    if start_logits.dim() != 2 or start_logits.shape != end_logits.shape or start_logits.shape != mask.shape:
        raise ValueError(
            "start_logits, end_logits and mask must all be (B, T); got "
            f"{tuple(start_logits.shape)}, {tuple(end_logits.shape)}, {tuple(mask.shape)}"
        )
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be bool (True = real token), got {mask.dtype}")
    if not start_logits.is_floating_point() or not end_logits.is_floating_point():
        raise ValueError("start_logits and end_logits must be floating point")
    if max_answer_len < 1:
        raise ValueError(f"max_answer_len must be >= 1, got {max_answer_len}")


def _masked_log_softmax(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log-softmax over the real tokens of each row, in float32. Padded entries are meaningless."""
    logits = logits.float().masked_fill(~mask, torch.finfo(torch.float32).min)
    return logits.log_softmax(dim=-1)  # (B, T)


def _band_scores(
    log_p_start: torch.Tensor, log_p_end: torch.Tensor, span_mask: torch.Tensor, max_answer_len: int
) -> torch.Tensor:
    """Scores of all spans on the band, ``-inf`` where the span is not valid.

    Entry ``[b, s, d]`` is the span ``(s, s + d)``, so ``d = end - start`` in ``[0, L)`` with
    ``L = min(max_answer_len, T)`` (a longer band could only hold spans running past the end).
    """
    B, T = log_p_start.shape
    L = min(max_answer_len, T)
    d = torch.arange(L, device=log_p_start.device)  # (L,)

    # unfold gives a strided view: band[b, s, d] = padded[b, s + d], no copy until the add below.
    end_band = F.pad(log_p_end, (0, L - 1), value=torch.finfo(torch.float32).min).unfold(1, L, 1)  # (B, T, L)
    scores = log_p_start.unsqueeze(2) + end_band  # (B, T, L)

    # A span is valid iff all of its d + 1 tokens are real. Rather than checking only the two
    # ends, measure the run of real tokens starting at each s, so holes in the mask count too.
    position = torch.arange(T, device=span_mask.device)  # (T,)
    pad_position = torch.where(span_mask, T, position)  # (B, T), T on real tokens
    next_pad = pad_position.flip(1).cummin(1).values.flip(1)  # (B, T), first pad at or after s
    run = next_pad - position  # (B, T), 0 where s itself is padding; never runs past T
    invalid = d >= run.unsqueeze(2)  # (B, T, L)
    return scores.masked_fill_(invalid, float("-inf"))


def _empty(shape: tuple[int, ...], device: torch.device) -> SpanPrediction:
    return SpanPrediction(
        start=torch.full(shape, -1, dtype=torch.long, device=device),
        end=torch.full(shape, -1, dtype=torch.long, device=device),
        score=torch.full(shape, float("-inf"), dtype=torch.float32, device=device),
    )


def _decode_best(scores: torch.Tensor) -> SpanPrediction:
    """Best span per row of a (B, T, L) band."""
    B, T, L = scores.shape
    flat = scores.reshape(B, T * L)  # (B, T * L)
    # argmax returns the first maximum: ties go to the smallest start, then the shortest span.
    index = flat.argmax(dim=1)  # (B,)
    score = flat.gather(1, index.unsqueeze(1)).squeeze(1)  # (B,)
    start = torch.div(index, L, rounding_mode="floor")
    end = start + index % L
    found = score > float("-inf")
    return SpanPrediction(
        start=torch.where(found, start, -1),
        end=torch.where(found, end, -1),
        score=score,
    )


@torch.no_grad()
def best_spans(
    start_logits: torch.Tensor, end_logits: torch.Tensor, mask: torch.Tensor, max_answer_len: int = 30
) -> SpanPrediction:
    """The most likely answer span of every example.

    Args:
        start_logits, end_logits: (B, T) raw logits, any float dtype, any device.
        mask: (B, T) bool, True = real token.
        max_answer_len: longest answer in tokens, both ends included: ``end - start + 1 <= max_answer_len``.

    Returns:
        :class:`SpanPrediction` with (B,) tensors on the input device. ``score`` is float32
        ``log p_start[start] + log p_end[end]``. Ties go to the smallest start, then the
        shortest span. A row with no real token gives ``(-1, -1)`` and score ``-inf``.
    """
    _check_inputs(start_logits, end_logits, mask, max_answer_len)
    B, T = start_logits.shape
    if T == 0:
        return _empty((B,), start_logits.device)
    log_p_start = _masked_log_softmax(start_logits, mask)
    log_p_end = _masked_log_softmax(end_logits, mask)
    return _decode_best(_band_scores(log_p_start, log_p_end, mask, max_answer_len))


@torch.no_grad()
def topk_spans(
    start_logits: torch.Tensor, end_logits: torch.Tensor, mask: torch.Tensor, k: int, max_answer_len: int = 30
) -> SpanPrediction:
    """The ``k`` most likely answer spans of every example, best first.

    Same inputs and scores as :func:`best_spans`. Returns (B, k) tensors sorted by score,
    descending; the order among equal scores is unspecified. Where an example has fewer
    than ``k`` valid spans, its last entries are padding: ``start = end = -1`` and
    ``score = -inf``.
    """
    _check_inputs(start_logits, end_logits, mask, max_answer_len)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    B, T = start_logits.shape
    if T == 0:
        return _empty((B, k), start_logits.device)
    log_p_start = _masked_log_softmax(start_logits, mask)
    log_p_end = _masked_log_softmax(end_logits, mask)
    scores = _band_scores(log_p_start, log_p_end, mask, max_answer_len)  # (B, T, L)
    L = scores.shape[2]

    flat = scores.reshape(B, T * L)  # (B, T * L)
    n = min(k, T * L)
    score, index = flat.topk(n, dim=1, sorted=True)  # (B, n)
    start = torch.div(index, L, rounding_mode="floor")
    end = start + index % L
    found = score > float("-inf")
    out = _empty((B, k), start_logits.device)
    out.start[:, :n] = torch.where(found, start, -1)
    out.end[:, :n] = torch.where(found, end, -1)
    out.score[:, :n] = score
    return out


@torch.no_grad()
def null_scores(
    start_logits: torch.Tensor, end_logits: torch.Tensor, mask: torch.Tensor,
    start_null: torch.Tensor, end_null: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(null, shift)`` (B,) of a model that can abstain, for spans decoded over the tokens alone.

    ``null = log p_start[null] + log p_end[null]`` with the softmaxes over ``[null, tokens]``,
    and ``shift = log(1 - p_start[null]) + log(1 - p_end[null])``: a span's score from
    :func:`best_spans`/:func:`topk_spans` (softmaxes over the tokens) plus ``shift`` is its score
    over ``[null, tokens]``, comparable with ``null``. Exact, since dropping the null from a
    softmax rescales every token's probability by ``1 / (1 - p[null])``.
    """
    B = start_logits.shape[0]
    with_null = torch.cat([mask.new_ones(B, 1), mask], dim=1)
    log_p_start = _masked_log_softmax(torch.cat([start_null.unsqueeze(1), start_logits], dim=1), with_null)[:, 0]
    log_p_end = _masked_log_softmax(torch.cat([end_null.unsqueeze(1), end_logits], dim=1), with_null)[:, 0]
    # log(1 - p) from log p, accurate near both ends.
    shift = torch.log(-torch.expm1(log_p_start)) + torch.log(-torch.expm1(log_p_end))
    return log_p_start + log_p_end, shift


@torch.no_grad()
def spans_and_null(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    mask: torch.Tensor,
    start_null: torch.Tensor,
    end_null: torch.Tensor,
    max_answer_len: int = 30,
) -> tuple[SpanPrediction, torch.Tensor]:
    """The best span and the null's score of a model that can abstain (``SpanOutput.start_null``).

    The span is :func:`best_spans`' (context token indices; the null is never among them), its
    score moved onto the ``[null, tokens]`` softmaxes by :func:`null_scores`, so ``exp(null)`` is
    the probability of "no answer" and ``null - span.score`` the margin that
    ``DecodeConfig.no_answer_threshold`` is compared with.
    """
    span = best_spans(start_logits, end_logits, mask, max_answer_len)
    null, shift = null_scores(start_logits, end_logits, mask, start_null, end_null)
    span.score = span.score + shift
    return span, null


def _offset_pair(offsets, index: int) -> tuple[int, int]:
    pair = offsets[index]
    return int(pair[0]), int(pair[1])


def char_span(offsets: Sequence[tuple[int, int]] | torch.Tensor, start: int, end: int) -> tuple[int, int]:
    """Half-open character span ``[first char of token start, end of token end)``.

    ``offsets`` holds one half-open ``(char_start, char_end)`` per token: a sequence of pairs
    or a (T, 2) numpy array / tensor. ``start`` and ``end`` are an inclusive token span;
    -1 (no span) and other out-of-range indices raise ValueError rather than wrapping around.
    """
    start, end = int(start), int(end)
    n_tokens = len(offsets)
    if not 0 <= start <= end < n_tokens:
        raise ValueError(f"token span ({start}, {end}) is not valid for {n_tokens} tokens")
    char_start, _ = _offset_pair(offsets, start)
    _, char_end = _offset_pair(offsets, end)
    if char_start > char_end:
        raise ValueError(f"offsets give a reversed character span [{char_start}, {char_end})")
    return char_start, char_end


def span_to_text(context: str, offsets: Sequence[tuple[int, int]] | torch.Tensor, start: int, end: int) -> str:
    """The exact substring of ``context`` covered by the inclusive token span ``(start, end)``.

    Offsets count Python ``str`` characters (code points), as ``re.Match.span`` gives them,
    so whatever lies between the tokens (several spaces, newlines) is kept verbatim.
    """
    char_start, char_end = char_span(offsets, start, end)
    if char_end > len(context):
        raise ValueError(f"character span [{char_start}, {char_end}) runs past the context ({len(context)} chars)")
    return context[char_start:char_end]
