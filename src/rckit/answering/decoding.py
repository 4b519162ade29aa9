"""Span decoding: from start/end logits to answer token spans and answer text.

A span model gives, for every context token ``i``, a start logit and an end logit. With
``p_start = softmax(start_logits)`` and ``p_end = softmax(end_logits)``, both taken over the
real tokens only, the answer is the span ``(s, e)`` that maximises

    p_start[s] * p_end[e]   subject to   s <= e  and  e - s + 1 <= max_answer_len     (BiDAF / QANet)

which is decoded here as the maximum of ``log p_start[s] + log p_end[e]``.

``max_answer_len`` is the answer length in tokens, counting both ends: ``max_answer_len=1``
allows only single-token answers and ``max_answer_len=30`` (the QANet setting) allows
``e <= s + 29``. A run keeps it in its :class:`DecodeConfig` (``decode`` in ``config.json`` and
in the checkpoint, read back by :func:`rckit.answering.decoding.decode_config_of`;
``--set decode.max_answer_len=N`` at training time), and evaluation,
prediction, ``rckit bench`` and the training-time dev evaluation all decode with that.

A span is *valid* when every token in it is real (``mask`` True), so a span never crosses
padding, or a hole in the mask. With the usual right padding this is simply
``e < length``.

Conventions, as everywhere in rckit: ``mask`` is bool with True = real token, token spans are
inclusive ``(start, end)``, character spans are half-open ``[start, end)``.

Inputs are NumPy arrays, so that answering without PyTorch (an ONNX model on onnxruntime,
:mod:`rckit.answering.onnx_backend`) decodes with this same code: a PyTorch caller hands over
``logits.float().cpu().numpy()``. Whatever the float dtype, logits are cast to float32 before
the masked log-softmax, and all scores are float32. Softmax masking fills with the float32
minimum. Logits of real tokens are assumed finite; logits at
padded positions may be anything (huge, inf, nan): they are overwritten before use.

Rows with no valid span (an all-padding mask) decode to ``start = end = -1`` and ``score = -inf``.

Memory is O(B * T * max_answer_len): scores are only formed on the band
``s <= e < s + max_answer_len``, never on the full (T, T) matrix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rckit.config import from_dict

_MIN = np.finfo(np.float32).min


@dataclass
class DecodeConfig:
    """How answers are read off a span model's logits; saved with the run as ``decode``.

    A cloze model's answer is the argmax over its entities, whatever this says.
    """

    max_answer_len: int = 30  # tokens, both ends counted (the QANet setting)
    # A model that can abstain (SpanOutput.start_null) answers "" where the null's score beats
    # the best span's by more than this (log-probability margin; chosen on held-out data).
    no_answer_threshold: float = 0.0


def abstains(margin: float | None, threshold: float) -> bool:
    """The no-answer rule, for every path to an answer: abstain where ``margin`` is above
    ``threshold``. ``margin`` is the null's score less the best span's (log-probability) for a
    model that can abstain, or a verifier's probability of no answer; None (a model that can do
    neither) never abstains."""
    return margin is not None and margin > threshold


def decode_config_of(record: dict) -> DecodeConfig:
    """The decode settings a model was saved with, from its checkpoint, ``config.json``, an
    exported file's metadata or :func:`rckit.model_files.load.load_model`'s.

    Runs saved before decoding had its own ``decode`` section kept ``max_answer_len`` in
    ``train_config``; runs older still kept neither and decoded with the default.
    """
    if record.get("decode") is not None:
        return from_dict(DecodeConfig, record["decode"])
    old = (record.get("train_config") or {}).get("max_answer_len")
    return DecodeConfig() if old is None else DecodeConfig(max_answer_len=int(old))


@dataclass
class SpanPrediction:
    """Decoded spans. Shapes are (B,) from :func:`best_spans`, (B, k) from :func:`topk_spans`."""

    start: np.ndarray  # int64, inclusive token index, -1 where there is no valid span
    end: np.ndarray  # int64, inclusive token index, -1 where there is no valid span
    score: np.ndarray  # float32, log p_start[start] + log p_end[end], -inf where no span


def _check_inputs(start_logits: np.ndarray, end_logits: np.ndarray, mask: np.ndarray, max_answer_len: int) -> None:
    if start_logits.ndim != 2 or start_logits.shape != end_logits.shape or start_logits.shape != mask.shape:
        raise ValueError(
            "start_logits, end_logits and mask must all be (B, T); got "
            f"{tuple(start_logits.shape)}, {tuple(end_logits.shape)}, {tuple(mask.shape)}"
        )
    if mask.dtype != np.bool_:
        raise ValueError(f"mask must be bool (True = real token), got {mask.dtype}")
    if not np.issubdtype(start_logits.dtype, np.floating) or not np.issubdtype(end_logits.dtype, np.floating):
        raise ValueError("start_logits and end_logits must be floating point")
    if max_answer_len < 1:
        raise ValueError(f"max_answer_len must be >= 1, got {max_answer_len}")


def _masked_log_softmax(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """log-softmax over the real tokens (``mask`` (B, T)) of each row of ``logits`` (..., B, T), in
    float32. Padded entries are meaningless."""
    x = np.where(mask, logits.astype(np.float32, copy=False), _MIN)
    x = x - x.max(axis=-1, keepdims=True)
    with np.errstate(under="ignore"):
        return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))  # (B, T)


def _band_scores(
    log_p_start: np.ndarray, log_p_end: np.ndarray, span_mask: np.ndarray, max_answer_len: int
) -> np.ndarray:
    """Scores of all spans on the band, ``-inf`` where the span is not valid.

    Entry ``[b, s, d]`` is the span ``(s, s + d)``, so ``d = end - start`` in ``[0, L)`` with
    ``L = min(max_answer_len, T)`` (a longer band could only hold spans running past the end).
    """
    B, T = log_p_start.shape
    L = min(max_answer_len, T)
    # A strided view: band[b, s, d] = padded[b, s + d], no copy until the add below (as_strided
    # rather than np.pad and sliding_window_view, whose checks cost more than the arithmetic here).
    padded = np.full((B, T + L - 1), _MIN, np.float32)
    padded[:, :T] = log_p_end
    end_band = np.lib.stride_tricks.as_strided(
        padded, (B, T, L), (padded.strides[0],) + padded.strides[1:] * 2, writeable=False
    )  # (B, T, L)
    with np.errstate(over="ignore"):  # padding + padding overflows to -inf: invalid spans either way
        scores = log_p_start[:, :, None] + end_band  # (B, T, L)

    # A span is valid iff all of its d + 1 tokens are real. Rather than checking only the two
    # ends, measure the run of real tokens starting at each s, so holes in the mask count too.
    position = np.arange(T)
    pad_position = np.where(span_mask, T, position)  # (B, T), T on real tokens
    next_pad = np.minimum.accumulate(pad_position[:, ::-1], axis=1)[:, ::-1]  # (B, T), first pad at or after s
    run = next_pad - position  # (B, T), 0 where s itself is padding; never runs past T
    scores[np.arange(L) >= run[:, :, None]] = -np.inf
    return scores


def _empty(shape: tuple[int, ...]) -> SpanPrediction:
    return SpanPrediction(
        start=np.full(shape, -1, np.int64), end=np.full(shape, -1, np.int64), score=np.full(shape, -np.inf, np.float32)
    )


def topk_spans(
    start_logits: np.ndarray, end_logits: np.ndarray, mask: np.ndarray, k: int, max_answer_len: int = 30
) -> SpanPrediction:
    """The ``k`` most likely answer spans of every example, best first.

    Args:
        start_logits, end_logits: (B, T) raw logits, any float dtype.
        mask: (B, T) bool, True = real token.
        k: how many spans per row.
        max_answer_len: longest answer in tokens, both ends included: ``end - start + 1 <= max_answer_len``.

    Returns:
        :class:`SpanPrediction` of (B, k) arrays sorted by score, descending; ``score`` is
        float32 ``log p_start[start] + log p_end[end]``. Equal scores go to the smallest start,
        then the shortest span. Where an example has fewer than ``k`` valid spans, its last
        entries are padding: ``start = end = -1`` and ``score = -inf``.
    """
    start_logits, end_logits, mask = np.asarray(start_logits), np.asarray(end_logits), np.asarray(mask)
    _check_inputs(start_logits, end_logits, mask, max_answer_len)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    B, T = start_logits.shape
    out = _empty((B, k))
    if T == 0 or B == 0:
        return out
    log_p_start, log_p_end = _masked_log_softmax(np.stack([start_logits, end_logits]), mask)  # one pass for both
    scores = _band_scores(log_p_start, log_p_end, mask, max_answer_len)  # (B, T, L)
    L = scores.shape[2]
    flat = scores.reshape(B, T * L)
    n = min(k, T * L)
    if n == 1:
        index = flat.argmax(axis=1)[:, None]  # the first maximum: smallest start, then shortest span
    else:
        index = _top_indices(scores, n)
    score = np.take_along_axis(flat, index, 1)  # (B, n)
    found = score > -np.inf
    out.start[:, :n] = np.where(found, index // L, -1)
    out.end[:, :n] = np.where(found, index // L + index % L, -1)
    out.score[:, :n] = score
    return out


def _top_indices(scores: np.ndarray, n: int) -> np.ndarray:
    """The flat indices ``s * L + d`` of the ``n`` best spans of each row of a (B, T, L) band,
    best first, equal scores in index order; (B, n).

    The ``n`` best spans are n distinct spans, so the n-th best score is at least the n-th best of
    the per-start maxima: only spans scoring that much are candidates (a handful, where a partial
    sort of all T * L would touch every one).
    """
    B, T, L = scores.shape
    flat = scores.reshape(B, T * L)
    per_start = scores.max(axis=2)  # (B, T)
    floor = -np.partition(-per_start, n - 1, axis=1)[:, n - 1] if T >= n else np.full(B, -np.inf, np.float32)
    out = np.empty((B, n), np.int64)
    for b in range(B):
        candidates = np.flatnonzero(flat[b] >= floor[b])  # in index order
        if len(candidates) < n:  # fewer valid spans than n: the invalid ones (-inf) fill the row
            candidates = np.arange(T * L)
        order = np.argsort(-flat[b, candidates], kind="stable")[:n]
        out[b] = candidates[order]
    return out


def best_spans(
    start_logits: np.ndarray, end_logits: np.ndarray, mask: np.ndarray, max_answer_len: int = 30
) -> SpanPrediction:
    """The most likely answer span of every example: :func:`topk_spans` with ``k = 1``, as (B,)
    arrays. A row with no real token gives ``(-1, -1)`` and score ``-inf``."""
    top = topk_spans(start_logits, end_logits, mask, 1, max_answer_len)
    return SpanPrediction(start=top.start[:, 0], end=top.end[:, 0], score=top.score[:, 0])


def null_scores(
    start_logits: np.ndarray, end_logits: np.ndarray, mask: np.ndarray, start_null: np.ndarray, end_null: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(null, shift)`` (B,) of a model that can abstain, for spans decoded over the tokens alone.

    ``null = log p_start[null] + log p_end[null]`` with the softmaxes over ``[null, tokens]``,
    and ``shift = log(1 - p_start[null]) + log(1 - p_end[null])``: a span's score from
    :func:`best_spans`/:func:`topk_spans` (softmaxes over the tokens) plus ``shift`` is its score
    over ``[null, tokens]``, comparable with ``null``. Exact, since dropping the null from a
    softmax rescales every token's probability by ``1 / (1 - p[null])``.
    """
    mask = np.asarray(mask)
    with_null = np.concatenate([np.ones((mask.shape[0], 1), bool), mask], axis=1)

    def log_p_null(null, logits):
        both = np.concatenate([np.asarray(null, np.float32)[:, None], np.asarray(logits, np.float32)], axis=1)
        return _masked_log_softmax(both, with_null)[:, 0]

    log_p_start, log_p_end = log_p_null(start_null, start_logits), log_p_null(end_null, end_logits)
    with np.errstate(divide="ignore"):  # log(1 - p) from log p, accurate near both ends
        shift = np.log(-np.expm1(log_p_start)) + np.log(-np.expm1(log_p_end))
    return log_p_start + log_p_end, shift


def spans_and_null(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    mask: np.ndarray,
    start_null: np.ndarray,
    end_null: np.ndarray,
    max_answer_len: int = 30,
) -> tuple[SpanPrediction, np.ndarray]:
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


def char_span(offsets: Sequence[tuple[int, int]] | np.ndarray, start: int, end: int) -> tuple[int, int]:
    """Half-open character span ``[first char of token start, end of token end)``.

    ``offsets`` holds one half-open ``(char_start, char_end)`` per token: a sequence of pairs
    or a (T, 2) array. ``start`` and ``end`` are an inclusive token span;
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


def span_to_text(context: str, offsets: Sequence[tuple[int, int]] | np.ndarray, start: int, end: int) -> str:
    """The exact substring of ``context`` covered by the inclusive token span ``(start, end)``.

    Offsets count Python ``str`` characters (code points), as ``re.Match.span`` gives them,
    so whatever lies between the tokens (several spaces, newlines) is kept verbatim.
    """
    char_start, char_end = char_span(offsets, start, end)
    if char_end > len(context):
        raise ValueError(f"character span [{char_start}, {char_end}) runs past the context ({len(context)} chars)")
    return context[char_start:char_end]
