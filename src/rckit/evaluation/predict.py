"""From a trained span model to answer strings: whole splits, or one question at a time."""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from rckit.data.batching import BucketBatchSampler, SquadSplit
from rckit.evaluation.decoding import best_spans, span_to_text


def autocast(device: torch.device, dtype: torch.dtype | None):
    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


@torch.inference_mode()
def predict_split(
    model: torch.nn.Module,
    split: SquadSplit,
    indices=None,
    batch_size: int = 32,
    max_answer_len: int = 30,
    device: torch.device | str = "cpu",
    amp_dtype: torch.dtype | None = None,
    progress=None,
) -> dict[str, str]:
    """``{question id: answer text}`` for every question in ``indices`` (default: all).

    Nothing is truncated or dropped: contexts of any length are read whole. Batches are
    formed longest-first so padding stays small.
    """
    device = torch.device(device)
    was_training = model.training
    model.eval()
    idx = np.arange(len(split)) if indices is None else np.asarray(indices)
    sampler = BucketBatchSampler(split.c_len[idx], batch_size, shuffle=False)
    preds: dict[str, str] = {}
    try:
        for rows in sampler:
            batch = split.collate(idx[rows]).to(device)
            with autocast(device, amp_dtype):
                out = model(batch)
            spans = best_spans(out.start_logits.float(), out.end_logits.float(), batch.c_mask, max_answer_len)
            for b, i in enumerate(batch.index.tolist()):
                context, offsets = split.context_of(i)
                s, e = int(spans.start[b]), int(spans.end[b])
                preds[split.qids[i]] = span_to_text(context, offsets, s, e) if s >= 0 else ""
            if progress is not None:
                progress(len(rows))
    finally:
        model.train(was_training)
    return preds


@torch.inference_mode()
def answer(model, vocabs, context: str, question: str, max_answer_len: int = 30, device="cpu") -> dict:
    """Answer one question; returns the text, its character span and the span's log-probability."""
    from rckit.data.prepare import featurize
    from rckit.data.squad import ReadReport, SquadDataset, SquadExample

    # Without a letter or digit there is nothing to ask or to read; refuse rather than answer anyway.
    for name, text in (("context", context), ("question", question)):
        if not any(ch.isalnum() for ch in text):
            what = "is empty" if not text.strip() else f"has no word, only punctuation ({text.strip()[:20]!r})"
            raise ValueError(f"the {name} {what}: nothing to answer")
    ex = SquadExample("q", "", 0, context, question, [], is_impossible=True)
    split, _ = featurize(SquadDataset([ex], [context], ReadReport("<input>", "1.1"), {}), vocabs)
    model.eval()
    batch = split.collate([0]).to(device)
    out = model(batch)
    spans = best_spans(out.start_logits.float(), out.end_logits.float(), batch.c_mask, max_answer_len)
    _, offsets = split.context_of(0)
    s, e = int(spans.start[0]), int(spans.end[0])
    start, end = int(offsets[s][0]), int(offsets[e][1])
    return {"answer": context[start:end], "start": start, "end": end, "log_prob": float(spans.score[0])}
