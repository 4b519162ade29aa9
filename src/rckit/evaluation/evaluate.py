"""A trained run put to work on a whole evaluation set.

:func:`evaluate_run` is ``rckit evaluate``: it loads the run's checkpoint (or an exported
``.safetensors`` file, :mod:`rckit.model_files.safetensors`, scored on a SQuAD file given with ``data``),
reads the data to evaluate on (SQuAD: the run's dev file or another SQuAD file; cloze: a split of the run's cloze
directory or of another one), predicts with :func:`rckit.evaluation.predict.predict` and scores
the predictions (official EM/F1, or accuracy in percent). It decodes with the
:class:`DecodeConfig` the run was saved with (:func:`decode_config_of`, which also reads runs
saved before it had its own section). Questions about new text go through
:class:`rckit.answering.reader.Reader` (``rckit predict``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from rckit.data.cloze_data import load_eval_split
from rckit.data.prepare import featurize
from rckit.data.squad import read_squad
from rckit.evaluation.predict import predict, predict_split
from rckit.evaluation.squad_metrics import abstaining, best_thresholds, only_questions, score_predictions
from rckit.model_files.safetensors import load_exported
from rckit.model_files.source import open_model
from rckit.model_files.runs import decode_config_of, load_model


def evaluate_run(run: str | Path, device: torch.device, data: str | None = None, split: str | None = None,
                 weights: str = "ema", limit: int | None = None, batch_size: int = 32, out: str | None = None,
                 progress: bool = True, always_answer: bool = False) -> dict:
    """Score a run on every example of ``data`` (default: what it was evaluated on in training).

    ``weights``: ``ema`` (what training evaluated) or ``raw``. ``limit``: only the first N
    examples, scored over those N. ``split``: which split of a cloze directory (default: the
    run's). ``out``: where to write the predictions as JSON (``{id: answer}``). ``always_answer``:
    a model that can abstain is scored on its best span for every question.
    """
    if open_model(run).kind == "safetensors":
        model, vocabs, ckpt = load_export_for_evaluation(run, device, data, weights)
    else:
        model, vocabs, ckpt = load_model(run, device, use_ema=weights == "ema")
    if ckpt.get("task") == "cloze":
        result, preds = evaluate_cloze(model, ckpt, data, split, limit, batch_size, device)
    else:
        result, preds = evaluate_squad(run, model, vocabs, ckpt, data, limit, batch_size, device, progress,
                                       always_answer)
    if out:
        Path(out).write_text(json.dumps(preds, ensure_ascii=False))
    return result


def load_export_for_evaluation(path: str | Path, device, data: str | None, weights: str):
    """An exported file as ``load_model`` gives a run: (model, vocabularies, a checkpoint-like
    dict with its ``decode`` settings). The file keeps no data paths, so ``data`` is required; it
    holds one set of weights (the run's EMA weights at export), so ``weights`` must be ``ema``."""
    if not data:
        raise ValueError(f"{path}: an exported model does not record its dev file; give the SQuAD file to "
                         "evaluate on with --data")
    if weights != "ema":
        raise ValueError(f"{path}: an exported model holds one set of weights (the run's EMA weights); "
                         "--weights raw needs the run directory")
    model, vocabs, meta = load_exported(path, device)
    return model, vocabs, {"task": "span", "decode": meta.get("decode"), "data": {}}


def evaluate_squad(run, model, vocabs, ckpt: dict, data: str | None, limit: int | None, batch_size: int, device,
                   progress: bool = True, always_answer: bool = False) -> tuple[dict, dict]:
    """(official EM/F1 of the SQuAD file ``data``, ``{question id: answer text}``)."""
    path = data or ckpt["data"]["dev_file"]
    if not data and not Path(path).is_file():
        raise FileNotFoundError(f"{run} was evaluated during training on {path}, which is not there now; "
                                "give the file with --data")
    ds = read_squad(path)
    split, _ = featurize(ds, vocabs)
    rows = list(range(min(limit, len(split)))) if limit else None
    raw = only_questions(ds.raw, {split.qids[i] for i in rows}) if rows is not None else ds.raw
    decode = decode_config_of(ckpt)
    margins: dict[str, float] = {}
    always = dataclasses.replace(decode, no_answer_threshold=math.inf)  # every question's best span
    with tqdm(total=len(rows) if rows else len(split), unit="q", file=sys.stderr,
              disable=None if progress else True) as bar:
        spans = predict_split(model, split, rows, batch_size, always, device, None, bar.update, margins)
    preds = abstaining(spans, margins, math.inf if always_answer else decode.no_answer_threshold)
    result = score_predictions(raw, preds, ds.report.version)
    if ds.report.version.startswith("2") and margins:
        # The official script's figures with --na-prob-file: the best threshold on this very file
        # (an upper bound, not a result: the run's own threshold was chosen on other data).
        result.update(best_thresholds(raw, spans, margins), no_answer_threshold=decode.no_answer_threshold)
    if always_answer:
        result["always_answer"] = True
    return result, preds


def evaluate_cloze(model, ckpt: dict, data: str | None, split: str | None, limit: int | None, batch_size: int,
                   device) -> tuple[dict, dict]:
    """(accuracy on a split of a cloze directory, ``{example id: "@entityN"}``)."""
    info = ckpt["data"]
    root = data or info["cloze_dir"]
    split_name = split or info["eval_split"]
    examples = load_eval_split(root, split_name, ckpt["vocab"])
    rows = np.arange(min(limit, len(examples)) if limit else len(examples))
    pred = predict(model, examples, rows, batch_size, device, None)
    gold = examples.a["answer"][rows]
    result = {"accuracy": 100.0 * float((pred == gold).mean()), "examples": int(len(rows)),
              "split": split_name, "data": str(root)}
    return result, {examples.ids[i]: f"@entity{int(p)}" for i, p in zip(rows, pred)}
