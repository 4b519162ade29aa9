"""The PyTorch side of :func:`rckit.evaluation.evaluate.evaluate`: a loaded model's answers to a
whole SQuAD file (best spans and null margins, for :func:`rckit.evaluation.evaluate.score_squad`)
or its accuracy on a split of a cloze directory.

Kept apart from :mod:`rckit.evaluation.evaluate` so that evaluating an ONNX file imports no
PyTorch.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from rckit.answering.decoding import DecodeConfig
from rckit.data.cloze_data import load_eval_split
from rckit.data.prepare import Vocabularies, featurize
from rckit.data.squad import SquadDataset
from rckit.evaluation.predict import predict, predict_split


def squad_spans(model: torch.nn.Module, vocabs: Vocabularies, ds: SquadDataset, limit: int | None,
                decode: DecodeConfig, batch_size: int, device: torch.device, progress=None) -> tuple[dict, dict]:
    """(``{question id: best span text}``, ``{question id: null margin}``) of ``model`` on the
    first ``limit`` questions of ``ds`` (all without one), each context read whole; margins only
    for a model that can abstain. ``progress(n)``, if given, is called after each batch."""
    split, _ = featurize(ds, vocabs)
    rows = list(range(min(limit, len(split)))) if limit else None
    margins: dict[str, float] = {}
    always = dataclasses.replace(decode, no_answer_threshold=math.inf)  # every question's best span
    spans = predict_split(model, split, rows, batch_size, always, device, None, progress, margins)
    return spans, margins


def cloze_scores(model: torch.nn.Module, meta: dict, data: str | None, split: str | None, limit: int | None,
                 batch_size: int, device: torch.device) -> tuple[dict, dict]:
    """(accuracy on a split of a cloze directory, ``{example id: "@entityN"}``); ``data`` and
    ``split`` default to the directory and split the run evaluated on in training."""
    info = meta["data"]
    root = data or info["cloze_dir"]
    split_name = split or info["eval_split"]
    examples = load_eval_split(root, split_name, meta["vocab"])
    rows = np.arange(min(limit, len(examples)) if limit else len(examples))
    pred = predict(model, examples, rows, batch_size, device, None)
    gold = examples.a["answer"][rows]
    result = {"accuracy": 100.0 * float((pred == gold).mean()), "examples": int(len(rows)),
              "split": split_name, "data": str(root)}
    return result, {examples.ids[i]: f"@entity{int(p)}" for i, p in zip(rows, pred)}
