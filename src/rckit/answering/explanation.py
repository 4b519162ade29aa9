"""Why a reader chose its span, declared once: :class:`Explanation`, what
:meth:`rckit.answering.reader.Reader.explain` returns and ``rckit explain --json`` prints.

An explanation is a JSON-shaped dict, typed here as ``TypedDict``s (as :mod:`rckit.answering.answer`
types answers), so that the command line, the drawings (:mod:`rckit.explain.common`) and
the Python API name the same fields:

- the window of the context that was explained (the one that gave the answer, for a context read
  in several), its tokens and the question's, each with half-open character offsets into the
  texts as given;
- the answer, exactly ``Reader.answer(context, question)[0]``, and its token span in the window;
- the start and end probabilities the span decoder read (softmaxes over the window's tokens, and
  the null's for a model that can abstain);
- the model's own attention (QANet's context-query attention, DCN's coattention), the DCN decoder's
  iterations, and the saliency of each word (gradient x input, integrated gradients);
- notes on what is shown, or why something is not.

This module imports no PyTorch; :func:`needs_torch` is the one line that refuses an ONNX reader
before the computation (:mod:`rckit.answering.explain`, PyTorch) is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

from rckit.answering.answer import Answer
from rckit.model_files.source import pytorch_beside

DEFAULT_STEPS = 12  # integrated gradients' steps along the path from the baseline (explain.py says why)


class Window(TypedDict):
    """The explained window: half-open character offsets into the context."""

    start: int
    end: int


class Attention(TypedDict):
    """The model's attention between the window's context tokens (rows) and the question's (columns)."""

    kind: str  # "context-query" (QANet) or "coattention" (DCN, DCN+)
    context_to_query: list[list[float]]  # (Tc, Tq): each context token's weights over the question
    query_to_context: list[list[float]]  # (Tc, Tq): each question token's weights over the context (columns)


class DecoderStep(TypedDict):
    """One iteration of DCN's dynamic decoder."""

    iteration: int  # from 0
    start_probs: list[float]  # (Tc,) the iteration's start softmax at the context tokens
    end_probs: list[float]  # (Tc,)
    start: int  # the token it points at; -1 for the null (a model that can abstain)
    end: int


class Attributions(TypedDict):
    """One number per word: the context's (Tc,) and the question's (Tq,)."""

    context: list[float]
    question: list[float]


class IntegratedGradients(Attributions):
    steps: int  # trapezoids along the path from the all-zero word vectors
    score: float  # the chosen span's score, start_logit[s] + end_logit[e]
    baseline_score: float  # the same score with every word vector zero
    sum: float  # the sum of every word's attribution: close to score - baseline_score (completeness)


class Saliency(TypedDict):
    gradient_x_input: Attributions
    integrated_gradients: IntegratedGradients


class Explanation(TypedDict):
    """Why a reader chose its span (the module docstring); token lists and offsets are the
    window's, every per-token list as long as ``context_tokens`` or ``question_tokens``."""

    model: str  # the model's name, as Reader.info["model"] gives it
    context: str
    question: str
    window: Window
    context_tokens: list[str]
    context_offsets: list[list[int]]  # [start, end) into `context`
    question_tokens: list[str]
    question_offsets: list[list[int]]  # [start, end) into `question`
    answer: Answer  # Reader.answer(context, question)[0]
    answer_tokens: list[int] | None  # [first, last], inclusive token indices into context_tokens; None: no answer
    start_probs: list[float]  # (Tc,) p_start over [null, tokens] (or the tokens alone), at the tokens
    end_probs: list[float]  # (Tc,)
    null_prob: float | None  # p_start(null) * p_end(null); None for a model that cannot abstain
    attention: Attention | None  # None for a model without an attention layer (a note says so)
    decoder: list[DecoderStep] | None  # DCN and DCN+: every iteration the decoder ran; None for others
    saliency: Saliency
    notes: list[str]


def needs_torch(source: str | None) -> str:
    """Why an ONNX reader cannot explain, and what can: the ``.safetensors`` file beside it, if any."""
    path = Path(source or "model.onnx")
    beside = pytorch_beside(source)
    what = f"rckit explain {beside}" if beside else "the run or the .safetensors file it was exported from"
    return (
        f"{path.name} is an ONNX file, and explaining needs the PyTorch model ({what}), with pip install 'rckit[torch]'"
    )
