"""``rckit evaluate``: a model's official scores on a whole evaluation set, whatever file holds it.

:func:`evaluate` takes a run directory, a checkpoint, an exported ``.safetensors`` file or an
ONNX file, told apart once by :func:`rckit.model_files.source.open_model`. Every kind answers a
SQuAD file through the one route new text takes, :class:`rckit.answering.reader.Reader`: each
context read whole, each question's best span and its no-answer score (a verifier's probability
of no answer, else for a model that can abstain its null margin), decoded with the
:class:`DecodeConfig` the model was saved with, the contextual encoder's states computed as the
Reader computes them. :func:`score_squad`, the one scoring tail, then abstains at the model's
threshold and scores with the official rules (:mod:`rckit.evaluation.squad_metrics`), so an
ONNX file and the PyTorch file it came from are compared on equal terms.

- a run or a checkpoint is loaded into PyTorch with its EMA or raw weights
  (:func:`rckit.model_files.load.load_model`) and scored on a SQuAD file (default: the dev file
  it trained with) or, for a cloze model, on a split of a cloze directory (accuracy in percent);
- an exported file holds one set of weights (the run's EMA weights) and no data paths, so it is
  scored on a SQuAD file given with ``data``: a ``.safetensors`` file in PyTorch, an ONNX file
  on onnxruntime. This module imports no PyTorch; the PyTorch side is imported for the other
  kinds only, so an ONNX file is evaluated where PyTorch is not installed.

Training's own dev figures come from another reading of the same model
(:mod:`rckit.evaluation.split_answers`: the prepared split, the encoder's states from training's
fp16 cache), so a contextual run's ``rckit evaluate`` may differ from its last dev figure by a
few answers.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from rckit.answering.pointer_reader import PointerReader
from rckit.answering.reader import Reader
from rckit.data.squad import SquadExample, read_squad
from rckit.evaluation.squad_metrics import abstaining, best_thresholds, only_questions, score_predictions
from rckit.model_files.reader_file import is_reader_file
from rckit.model_files.source import ModelFile, open_model


def evaluate(
    source: str | Path | ModelFile,
    data: str | Path | None = None,
    *,
    split: str | None = None,
    weights: str = "ema",
    limit: int | None = None,
    batch_size: int = 32,
    out: str | Path | None = None,
    always_answer: bool = False,
    device="auto",
    progress: bool = True,
    no_answer_threshold: float | None = None,
    spans_of: Callable[[Reader, list[SquadExample], Callable[[int], object]], tuple[dict, dict]] | None = None,
) -> dict:
    """The scores of ``source`` (a run, a checkpoint, an exported ``.safetensors`` or ONNX file)
    on every question of ``data``: official EM/F1 (SQuAD), or accuracy in percent (cloze).

    ``data``: a SQuAD file (default: the run's dev file; an exported file needs it), or for a
    cloze run a cloze directory (default: the run's). ``split``: which split of a cloze
    directory (default: the run's). ``weights``: ``ema`` (what training evaluated) or ``raw``
    (a run's or checkpoint's own weights; an exported file holds only the EMA ones). ``limit``:
    only the first N questions, scored over those N. ``out``: where to write the predictions
    as JSON (``{id: answer}``). ``always_answer``: a model that can abstain is scored on its
    best span for every question. ``device``: a name (``auto``, ``cpu``, ``cuda``) or a
    ``torch.device``. ``progress``: a progress bar on stderr (where it is a terminal).
    An exported file with a verifier (:mod:`rckit.answering.verifier`) is read as the Reader
    answers, its verifier's probability of no answer compared with its threshold
    (``no_answer_threshold``: another). ``spans_of``: who reads the questions, for a SQuAD file
    read through the Reader whatever the source (``rckit evaluate --ray``:
    :mod:`rckit.cluster.answers`); given the loaded Reader, the questions and a progress callback,
    it returns what :func:`reader_spans` returns.
    """
    found = open_model(source)
    _check_exported(found, data, weights)
    if found.kind == "safetensors" and is_reader_file(found.path):  # rckit's own reader
        reader = PointerReader.load(
            found.path, str(device), batch_size=batch_size, no_answer_threshold=no_answer_threshold
        )
        threshold = 1.0 if reader.threshold is None else reader.threshold
        return _scored(reader, data, limit, out, progress, threshold, always_answer, spans_of)
    if found.kind == "onnx":  # onnxruntime, without PyTorch
        reader = Reader.load(found, device, batch_size=batch_size, no_answer_threshold=no_answer_threshold)
    else:
        # These import PyTorch: only for a model that needs it.
        from rckit.answering.torch_backend import TorchModel
        from rckit.device import pick_device
        from rckit.evaluation.split_answers import cloze_scores
        from rckit.model_files.load import load_model

        device = pick_device(device)
        model, vocabs, meta = load_model(found, device, ema=weights == "ema")
        if meta["task"] == "cloze":
            if no_answer_threshold is not None:
                raise ValueError(f"{found.path}: --no-answer-threshold is for a span model with a verifier")
            result, preds = cloze_scores(model, meta, data, split, limit, batch_size, device)
            write_predictions(out, preds)
            return result
        if not data:
            data = meta["data"]["dev_file"]
            if not Path(data).is_file():
                raise FileNotFoundError(
                    f"{found.path} was evaluated during training on {data}, which is not there now; "
                    "give the file with --data"
                )
        reader = Reader.from_parts(
            TorchModel(model, device),
            vocabs,
            meta,
            meta["file"],
            batch_size=batch_size,
            no_answer_threshold=no_answer_threshold,
        )
    threshold = reader.decode.no_answer_threshold if reader.verifier is None else reader.verifier_threshold
    return _scored(reader, data, limit, out, progress, threshold, always_answer, spans_of)


def _scored(reader, data, limit, out, progress, threshold, always_answer, spans_of) -> dict:
    """The questions of the SQuAD file ``data`` read by ``reader`` (or ``spans_of``) and scored
    (:func:`score_squad`), the predictions written to ``out``."""
    ds = read_squad(data)
    questions = ds.examples[:limit] if limit else ds.examples
    with progress_bar(len(questions), progress) as bar:
        spans, margins = (spans_of or reader_spans)(reader, questions, bar.update)
    raw = only_questions(ds.raw, set(spans)) if limit else ds.raw
    result, preds = score_squad(raw, spans, margins, threshold, ds.report.version, always_answer)
    write_predictions(out, preds)
    return result


def _check_exported(found: ModelFile, data: str | Path | None, weights: str) -> None:
    """An exported file records no dev file and holds the EMA weights only: refuse asking otherwise."""
    if not found.exported:
        return
    if not data:
        raise ValueError(
            f"{found.path}: an exported model does not record its dev file; give the SQuAD file to "
            "evaluate on with --data"
        )
    if weights != "ema":
        raise ValueError(
            f"{found.path}: an exported model holds one set of weights (the run's EMA weights); "
            "--weights raw needs the run directory"
        )


def score_squad(
    raw: dict,
    spans: dict[str, str],
    margins: dict[str, float],
    threshold: float,
    version: str,
    always_answer: bool = False,
) -> tuple[dict, dict[str, str]]:
    """(official scores, ``{question id: answer text}``) of each question's best span in
    ``spans`` and, for a model that can abstain, its null margin in ``margins``: the answer is
    ``""`` where the margin is above ``threshold`` (never, with ``always_answer``), and the
    questions of ``raw`` (the SQuAD JSON) are scored by the rules of ``version``."""
    preds = abstaining(spans, margins, math.inf if always_answer else threshold)
    result = score_predictions(raw, preds, version)
    if version.startswith("2") and margins:
        # The official script's figures with --na-prob-file: the best threshold on this very file
        # (an upper bound, not a result: the model's own threshold was chosen on other data).
        result.update(best_thresholds(raw, spans, margins), no_answer_threshold=threshold)
    if always_answer:
        result["always_answer"] = True
    return result, preds


def reader_spans(reader: Reader, questions: list[SquadExample], progress=None) -> tuple[dict, dict]:
    """(``{question id: best span text}``, ``{question id: null margin}``) of ``reader`` on
    ``questions``, each context read whole (:meth:`Reader.best_spans`); margins only for a model
    that can abstain. ``progress(n)``, if given, is called with the number of questions read after
    each chunk."""
    best = reader.best_spans([(ex.context, ex.question) for ex in questions], whole=True, progress=progress)
    spans: dict[str, str] = {}
    margins: dict[str, float] = {}
    for ex, (text, margin) in zip(questions, best):
        spans[ex.qid] = text
        if margin is not None:
            margins[ex.qid] = margin
    return spans, margins


def progress_bar(total: int, progress: bool) -> tqdm:
    """A bar of ``total`` questions on stderr, shown where stderr is a terminal (never without ``progress``)."""
    return tqdm(total=total, unit="q", file=sys.stderr, disable=None if progress else True)


def write_predictions(out: str | Path | None, preds: dict) -> None:
    """``preds`` as JSON at ``out``, if given."""
    if out:
        Path(out).write_text(json.dumps(preds, ensure_ascii=False))
