"""A trained model's answers to a prepared split: what training's dev evaluation reads, and
``rckit evaluate`` for a cloze run.

:func:`predict` is the one entry for a split of either task: a SQuAD split (:class:`SquadSplit`,
its encoder states read from training's cache) gives ``{question id: answer text}`` through
:func:`predict_split` (span decoding with the run's :class:`DecodeConfig`), a cloze split
(:class:`ClozeSplit`) the predicted entity number of every example through :func:`predict_cloze`;
:func:`cloze_scores` scores a cloze run for ``rckit evaluate``. A SQuAD file is evaluated, and
new text answered, by :class:`rckit.answering.reader.Reader`, whatever file holds the model
(:func:`rckit.evaluation.evaluate.evaluate`).
"""

from __future__ import annotations

import numpy as np
import torch

from rckit.answering.decoding import DecodeConfig, abstains, best_spans, span_to_text, spans_and_null
from rckit.data.batching import BucketBatchSampler
from rckit.data.cloze.dataset import load_eval_split
from rckit.data.cloze.examples import ClozeSplit
from rckit.data.split import SquadSplit
from rckit.device import autocast


def predict(
    model: torch.nn.Module,
    split: SquadSplit | ClozeSplit,
    rows=None,
    batch_size: int = 32,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
    decode: DecodeConfig | None = None,
    progress=None,
) -> dict[str, str] | np.ndarray:
    """The model's answers to ``rows`` of ``split`` (default: all), whichever task it is.

    SQuAD: ``{question id: answer text}``, spans of at most ``decode.max_answer_len`` tokens.
    Cloze: the predicted entity numbers, an int64 array in the order of ``rows``.
    ``progress(n)``, if given, is called after each batch with its number of examples.
    """
    if isinstance(split, ClozeSplit):
        rows = np.arange(len(split)) if rows is None else rows
        return predict_cloze(model, split, rows, batch_size, device, dtype, progress=progress)
    return predict_split(model, split, rows, batch_size, decode or DecodeConfig(), device, dtype, progress)


@torch.inference_mode()
def predict_split(
    model: torch.nn.Module,
    split: SquadSplit,
    indices=None,
    batch_size: int = 32,
    decode: DecodeConfig | None = None,
    device: torch.device | str = "cpu",
    amp_dtype: torch.dtype | None = None,
    progress=None,
    null_margins: dict[str, float] | None = None,
) -> dict[str, str]:
    """``{question id: answer text}`` for every question in ``indices`` (default: all).

    Nothing is truncated or dropped: contexts of any length are read whole. Batches are
    formed longest-first so padding stays small. A model that can abstain answers ``""`` where
    its null beats the best span by more than ``decode.no_answer_threshold``; with
    ``null_margins`` given, such a model puts each question's margin (null score - best span
    score) there, for choosing the threshold (a model that cannot abstain puts none).
    """
    decode = decode or DecodeConfig()
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
            start, end, mask = (t.float().cpu().numpy() for t in (out.start_logits, out.end_logits, batch.c_mask))
            mask = mask.astype(bool)
            if out.start_null is None:
                spans, margin = best_spans(start, end, mask, decode.max_answer_len), None
            else:
                spans, null = spans_and_null(
                    start,
                    end,
                    mask,
                    out.start_null.float().cpu().numpy(),
                    out.end_null.float().cpu().numpy(),
                    decode.max_answer_len,
                )
                margin = (null - spans.score).tolist()
            for b, i in enumerate(batch.index.tolist()):
                context, offsets = split.context_of(i)
                s, e = int(spans.start[b]), int(spans.end[b])
                qid = split.qids[i]
                preds[qid] = span_to_text(context, offsets, s, e) if s >= 0 else ""
                if margin is not None:
                    if abstains(margin[b], decode.no_answer_threshold):
                        preds[qid] = ""
                    if null_margins is not None:
                        null_margins[qid] = margin[b]
            if progress is not None:
                progress(len(rows))
    finally:
        model.train(was_training)
    return preds


@torch.inference_mode()
def predict_cloze(
    model,
    split: ClozeSplit,
    rows,
    batch_size: int = 64,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
    max_doc_len: int | None = None,
    progress=None,
) -> np.ndarray:
    """The predicted entity number for each of ``rows``, in that order: the argmax of the logits
    (non-candidates already sit at the bottom). Documents are read whole unless ``max_doc_len``."""
    device = torch.device(device)
    was_training = model.training
    model.eval()
    rows = np.asarray(rows)
    out_pred = np.empty(len(rows), dtype=np.int64)
    lengths = np.asarray(split.lengths)[rows]
    try:
        for b in BucketBatchSampler(lengths, batch_size, shuffle=False):
            batch = split.collate(rows[b], max_doc_len).to(device)
            with autocast(device, dtype):
                out = model(batch)
            out_pred[b] = out.logits.float().argmax(-1).cpu().numpy()
            if progress is not None:
                progress(len(b))
    finally:
        model.train(was_training)
    return out_pred


def cloze_scores(
    model: torch.nn.Module,
    meta: dict,
    data: str | None,
    split: str | None,
    limit: int | None,
    batch_size: int,
    device: torch.device,
) -> tuple[dict, dict]:
    """(accuracy on a split of a cloze directory, ``{example id: "@entityN"}``); ``data`` and
    ``split`` default to the directory and split the run evaluated on in training."""
    info = meta["data"]
    root = data or info["cloze_dir"]
    split_name = split or info["eval_split"]
    examples = load_eval_split(root, split_name, meta["vocab"])
    rows = np.arange(min(limit, len(examples)) if limit else len(examples))
    pred = predict(model, examples, rows, batch_size, device, None)
    gold = examples.a["answer"][rows]
    result = {
        "accuracy": 100.0 * float((pred == gold).mean()),
        "examples": int(len(rows)),
        "split": split_name,
        "data": str(root),
    }
    return result, {examples.ids[i]: f"@entity{int(p)}" for i, p in zip(rows, pred)}
