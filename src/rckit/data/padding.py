"""Input arrays of span examples in NumPy: what a span model reads, before any framework.

:func:`padded_inputs` cuts examples out of a prepared split's flat arrays (form ids looked up
into word and character ids) and pads them: training and evaluation batches
(:func:`rckit.data.batching.assemble` wraps them as tensors).

:func:`answer_inputs` is what the answering path reads (:class:`rckit.answering.reader.Reader`, with
PyTorch or onnxruntime; an ONNX model file takes these arrays by name, :data:`INPUTS`): each
distinct token of a batch once, each distinct window of context once, and the questions, each
pointing at its window, so a model embeds a token and encodes a window once however many
questions share them (:meth:`rckit.models.contract.ReadingModel.answer_pass`):

- ``words`` (N,) and ``chars`` (N, W): the word ids and character ids of the distinct tokens, row 0
  the padding token (id 0, no characters), W the longest word's length (at most ``max_word_len``);
- ``c_tokens`` (U, Tc) rows of ``words``, ``c_mask`` (U, Tc): the distinct windows;
- ``q_tokens`` (B, Tq), ``q_mask`` (B, Tq): the questions; ``q_context`` (B,): each one's window.

- ``c_states`` (U, Tc, K, D) and ``q_states`` (B, Tq, K, D), float32, for a model that reads
  contextual states (:mod:`rckit.contextual`), where the arrays hold them (``ctx_state_rows``,
  ``q_state_rows``: (N, K, D), one row a token): a token's state belongs to its place, not its form.

Masks are True on real tokens; padding is id (or row) 0.
"""

from __future__ import annotations

import numpy as np

INPUTS = ("words", "chars", "c_tokens", "c_mask", "q_tokens", "q_mask", "q_context")  # answer_inputs, in order
STATE_INPUTS = ("c_states", "q_states")  # and for a model that reads contextual states, these after them


def padded_inputs(a: dict[str, np.ndarray], c_lo, c_len, q_lo, q_len) -> dict[str, np.ndarray]:
    """Example ``b`` = context tokens ``ctx_forms[c_lo[b]:c_lo[b] + c_len[b]]`` and question
    tokens ``q_forms[q_lo[b]:q_lo[b] + q_len[b]]`` of the arrays ``a``, padded: ``c_words``
    (B, Tc) int64, ``c_chars`` (B, Tc, W) int64, ``c_mask`` (B, Tc) bool, and the same for ``q``."""
    c_forms, c_mask = _rows(a["ctx_forms"], np.asarray(c_lo, np.int64), np.asarray(c_len, np.int64))  # (B, Tc)
    q_forms, q_mask = _rows(a["q_forms"], np.asarray(q_lo, np.int64), np.asarray(q_len, np.int64))  # (B, Tq)
    # Form id 0 stands in for padding; the masks zero the ids there.
    out = {
        "c_words": np.where(c_mask, a["form_words"][c_forms], 0).astype(np.int64),
        "c_chars": (a["form_chars"][c_forms] * c_mask[..., None]).astype(np.int64),  # (B, Tc, W)
        "c_mask": c_mask,
        "q_words": np.where(q_mask, a["form_words"][q_forms], 0).astype(np.int64),
        "q_chars": (a["form_chars"][q_forms] * q_mask[..., None]).astype(np.int64),  # (B, Tq, W)
        "q_mask": q_mask,
    }
    if "ctx_state_rows" in a:  # contextual states, (N, K, D) rows aligned with the tokens
        out["c_states"] = _state_rows(a["ctx_state_rows"], np.asarray(c_lo, np.int64), c_mask)  # (B, Tc, K, D)
        out["q_states"] = _state_rows(a["q_state_rows"], np.asarray(q_lo, np.int64), q_mask)  # (B, Tq, K, D)
    return out


def _state_rows(states: np.ndarray, lo: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Rows ``states[lo[b] + t]`` where ``mask[b, t]``, zeros elsewhere: (B, T, K, D) float32.
    Each example's rows are one contiguous run, read as such (``states`` may be memory-mapped)."""
    out = np.zeros(mask.shape + states.shape[1:], np.float32)
    for b, n in enumerate(mask.sum(1).tolist()):
        out[b, :n] = states[lo[b] : lo[b] + n]
    return out


def answer_inputs(a: dict[str, np.ndarray], items: list[tuple[int, int, int, int]]) -> dict[str, np.ndarray]:
    """The inputs (module docstring) of ``items`` ``(question, context, lo, hi)``: question ``i`` of
    the arrays ``a`` on tokens ``[lo, hi)`` of their context ``c``."""
    i, c, lo, hi = (np.array(col, np.int64) for col in zip(*items))
    window_of: dict[tuple[int, int, int], int] = {}
    q_context = np.array(
        [window_of.setdefault(w, len(window_of)) for w in zip(c.tolist(), lo.tolist(), hi.tolist())], np.int64
    )
    wc, wlo, whi = (np.array(col, np.int64) for col in zip(*window_of))
    c_forms, c_mask = _rows(a["ctx_forms"], a["ctx_ptr"][wc] + wlo, whi - wlo)  # (U, Tc)
    q_forms, q_mask = _rows(a["q_forms"], a["q_ptr"][i], a["q_ptr"][i + 1] - a["q_ptr"][i])  # (B, Tq)
    forms = np.unique(np.concatenate([c_forms[c_mask], q_forms[q_mask]]))  # (N - 1,) the distinct tokens
    chars = a["form_chars"][forms]
    W = max(1, int((chars != 0).sum(1).max(initial=1)))  # the longest word's characters: the rest is padding
    out = {
        "words": np.concatenate([[0], a["form_words"][forms]]).astype(np.int64),  # row 0: padding
        "chars": np.concatenate([np.zeros((1, W), np.int64), chars[:, :W]]).astype(np.int64),
        "c_tokens": np.where(c_mask, 1 + np.searchsorted(forms, c_forms), 0),
        "c_mask": c_mask,
        "q_tokens": np.where(q_mask, 1 + np.searchsorted(forms, q_forms), 0),
        "q_mask": q_mask,
        "q_context": q_context,
    }
    if "ctx_state_rows" in a:
        out["c_states"] = _state_rows(a["ctx_state_rows"], a["ctx_ptr"][wc] + wlo, c_mask)  # (U, Tc, K, D)
        out["q_states"] = _state_rows(a["q_state_rows"], a["q_ptr"][i], q_mask)  # (B, Tq, K, D)
    return out


def _rows(flat: np.ndarray, lo: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``flat[lo[b]:lo[b] + n[b]]`` for every b, padded with 0: (B, T) values and mask."""
    T = max(1, int(n.max(initial=1)))
    mask = np.arange(T) < n[:, None]
    if not len(flat):
        return np.zeros(mask.shape, np.int64), mask
    return np.where(mask, flat[np.minimum(lo[:, None] + np.arange(T), len(flat) - 1)], 0), mask


def merge_answer_inputs(groups: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The inputs of several :func:`answer_inputs` (each of its own arrays: jobs planned apart)
    as one, rows renumbered and padded to the longest window, question and word: what a server
    reads in one forward pass when the items come from several requests."""
    if len(groups) == 1:
        return groups[0]
    Tc = max(g["c_tokens"].shape[1] for g in groups)
    Tq = max(g["q_tokens"].shape[1] for g in groups)
    W = max(g["chars"].shape[1] for g in groups)
    names = INPUTS + (STATE_INPUTS if "c_states" in groups[0] else ())
    out: dict[str, list[np.ndarray]] = {k: [] for k in names}
    n_words = n_windows = 0
    for g in groups:
        if "c_states" in g:
            out["c_states"].append(_pad(g["c_states"], Tc))
            out["q_states"].append(_pad(g["q_states"], Tq))
        out["words"].append(g["words"])
        out["chars"].append(_pad(g["chars"], W))
        out["c_tokens"].append(_pad(np.where(g["c_mask"], g["c_tokens"] + n_words, 0), Tc))
        out["c_mask"].append(_pad(g["c_mask"], Tc))
        out["q_tokens"].append(_pad(np.where(g["q_mask"], g["q_tokens"] + n_words, 0), Tq))
        out["q_mask"].append(_pad(g["q_mask"], Tq))
        out["q_context"].append(g["q_context"] + n_windows)
        n_words += len(g["words"])
        n_windows += len(g["c_tokens"])
    return {k: np.concatenate(v) for k, v in out.items()}


def _pad(x: np.ndarray, width: int) -> np.ndarray:
    """``x`` (B, T, ...) padded with zeros (padding, False) to (B, width, ...)."""
    return np.pad(x, ((0, 0), (0, width - x.shape[1])) + ((0, 0),) * (x.ndim - 2))
