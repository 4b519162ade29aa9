"""``rckit evaluate MODEL.onnx --data FILE``: the official scores of a model read through
:class:`rckit.answering.reader.Reader`, without PyTorch.

The questions are answered as :func:`rckit.evaluation.evaluate.evaluate_squad` answers them for a
PyTorch model: each context read whole (one window as long as the longest context), each
question's best span and, for a model that can abstain, its null margin, the abstention decided
at the model's threshold; the same official rules score them. So an ONNX file and the PyTorch
file it came from are compared on equal terms.
"""

from __future__ import annotations

import math
import sys

from tqdm import tqdm

from rckit.data.squad import read_squad
from rckit.evaluation.squad_metrics import abstaining, best_thresholds, only_questions, score_predictions
from rckit.answering.reader import Reader

CHUNK = 256  # questions planned and read together


def evaluate_reader(reader: Reader, data: str, limit: int | None = None, always_answer: bool = False,
                    progress: bool = True) -> tuple[dict, dict]:
    """(official EM/F1 of ``reader`` on the SQuAD file ``data``, ``{question id: answer text}``)."""
    ds = read_squad(data)
    examples = ds.examples[:limit] if limit else ds.examples
    raw = only_questions(ds.raw, {ex.qid for ex in examples}) if limit else ds.raw
    spans: dict[str, str] = {}
    margins: dict[str, float] = {}
    window, reader.window = reader.window, 10**9  # contexts whole, as evaluation of a PyTorch model reads them
    try:
        with tqdm(total=len(examples), unit="q", file=sys.stderr, disable=None if progress else True) as bar:
            for lo in range(0, len(examples), CHUNK):
                chunk = examples[lo:lo + CHUNK]
                job = reader.plan([(ex.context, ex.question) for ex in chunk])
                for items in reader._batches(job.windows):
                    reader.read([(job, items)])
                job.no_answer_threshold = math.inf  # the best span of every question; abstaining below
                for ex, answers, found, null in zip(chunk, job.answers(), job.found, job.null):
                    spans[ex.qid] = answers[0]["answer"] if answers else ""
                    if null is not None:  # the null's margin over the best span, in log-probability
                        margins[ex.qid] = null - max(found.values(), default=-math.inf)
                bar.update(len(chunk))
    finally:
        reader.window = window  # the caller's reader reads as before
    threshold = math.inf if always_answer else reader.decode.no_answer_threshold
    preds = abstaining(spans, margins, threshold)
    result = score_predictions(raw, preds, ds.report.version)
    if ds.report.version.startswith("2") and margins:
        result.update(best_thresholds(raw, spans, margins), no_answer_threshold=reader.decode.no_answer_threshold)
    if always_answer:
        result["always_answer"] = True
    return result, preds
