"""What every rckit model provides: its output types, its loss and its hooks, written once.

The training loop, the tasks, ``rckit bench``, export and the CLI rely on this and on nothing
else of a model; they never ask a model what it has (no ``getattr``/``hasattr``).

A model is a :class:`ReadingModel`, built as ``Model(config, EmbeddingInfo)``:

- ``forward(batch)`` takes a span batch (:class:`rckit.data.batching.Batch`) or a cloze batch
  (:class:`rckit.data.cloze.examples.ClozeBatch`); both name the context (document) ``c_words``/``c_mask``
  and the question (query) ``q_words``/``q_mask``. It returns logits only, as a
  :class:`SpanOutput` (start/end over context tokens) or a :class:`ClozeOutput` (scores over
  the entity markers); a model may return a subclass that adds what its own loss needs (DCN's
  decoder iterations), and every consumer reads only the fields named here.
- ``answer_pass(words, chars, c_tokens, c_mask, q_tokens, q_mask, q_context, c_states, q_states)``: a span model's
  forward pass as the answering path calls it (rckit.Reader, and the ONNX graph of ``rckit export
  --format onnx``); the default builds the batch and calls ``forward``.
- ``loss(out, batch, reward_fn=None)``: a scalar float32 tensor. The default is the task's
  cross-entropy (:func:`~rckit.models.losses.span_loss`,
  :func:`~rckit.models.losses.cloze_loss`); DCN and DCN+ override it.
  ``reward_fn(rows, starts, ends) -> F1`` is given to models with ``uses_reward``.
- ``loss_terms``: after ``loss()``, named detached scalars (its parts and weights) that the
  loop logs as ``loss_<name>``; empty by default.
- ``task_of(config)``: ``"span"`` or ``"cloze"``, known before the model is built (the CLI
  picks the data by it); ``self.task`` on a built model.
- ``contextual_of(config)``: the contextual encoder and layers whose states the model reads, or
  None, known before the model is built (the task brings the states); a model class whose config
  has ``contextual`` sets ``READS_CONTEXTUAL``.

Hooks, with the defaults a model overrides as class or instance attributes:

- ``cpu_bf16`` (False): trains faster under bf16 autocast on CPU (BENCHMARKS.md), so
  ``train.amp=auto`` picks bf16 there;
- ``uses_reward`` (False): its loss needs ``reward_fn`` (DCN+'s self-critical F1 term);
- ``reward_on`` (True): the loop sets it to ``step >= train.reward_from`` before each step;
- ``no_answer`` (False): its span output carries the null scores (``SpanOutput.start_null``),
  so it may train on unanswerable questions and abstain;
- ``find_unused_parameters`` (False): some parameters may get no gradient in a step (DCN+'s
  experts, QANet's per-batch layer drop), which DistributedDataParallel must be told.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from rckit.contextual.spec import ContextualSpec
from rckit.models.losses import cloze_loss, span_loss

TASKS = ("span", "cloze")


@dataclass
class SpanOutput:
    """Start and end scores over the context tokens; padded positions at ``finfo(dtype).min``.

    A model that can say "no answer" (``no_answer`` in its config, SQuAD v2.0) also scores a
    null position for the start and the end; the start softmax runs over ``[null, tokens]``
    (and the end's likewise), so ``p(no answer) = p_start(null) * p_end(null)`` competes with
    every span for the same mass. ``None`` for a model trained on SQuAD v1.1 alone.
    """

    start_logits: torch.Tensor  # (B, Tc)
    end_logits: torch.Tensor  # (B, Tc)
    start_null: torch.Tensor | None = None  # (B,)
    end_null: torch.Tensor | None = None  # (B,)


@dataclass
class ClozeOutput:
    """Scores over the entity markers ``@entity0 .. @entity{N-1}``; non-candidates at ``finfo.min``."""

    logits: torch.Tensor  # (B, N)
    copy_logits: torch.Tensor | None = None  # (B, N) the copy task's scores (attention readers, training)


def check_contextual(config, emb) -> None:
    """Refuse a model whose config reads contextual states (``contextual`` not ``"none"``) built
    on data without them, or the other way round: the two must agree on the encoder's layers."""
    wanted = config.contextual
    have = emb.contextual
    if wanted == "none" and have is None:
        return
    if wanted == "none":
        raise ValueError(f"the data carries contextual states of {have.name!r} but the model's contextual is 'none'")
    if have is None:
        raise ValueError(f"the model reads contextual states ({wanted!r}) and the data carries none")
    if list(have.layers) != list(config.contextual_layers):
        raise ValueError(
            f"the model mixes contextual layers {list(config.contextual_layers)} and the data carries "
            f"layers {list(have.layers)}"
        )


class ReadingModel(nn.Module):
    """The base of every model: the contract above, and its defaults."""

    TASK: ClassVar[str] = "span"
    READS_CONTEXTUAL: ClassVar[bool] = False  # its config has `contextual` and `contextual_layers`
    cpu_bf16: ClassVar[bool] = False
    uses_reward: bool = False
    find_unused_parameters: bool = False
    no_answer: bool = False

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.task = self.task_of(config)
        self.reward_on = True
        self.loss_terms: dict[str, torch.Tensor] = {}

    @classmethod
    def task_of(cls, config) -> str:
        """``"span"`` or ``"cloze"``: what a model of this class with ``config`` answers."""
        return cls.TASK

    @classmethod
    def contextual_of(cls, config) -> ContextualSpec | None:
        """The encoder and layers whose states a model of this class with ``config`` reads beside its
        word vectors (its ``contextual`` and ``contextual_layers`` settings), or None: known before
        the model is built, so the task can bring the states (:mod:`rckit.contextual`)."""
        if not cls.READS_CONTEXTUAL or config.contextual == "none":
            return None
        return ContextualSpec(config.contextual, tuple(config.contextual_layers))

    def answer_pass(
        self,
        words: torch.Tensor,
        chars: torch.Tensor,
        c_tokens: torch.Tensor,
        c_mask: torch.Tensor,
        q_tokens: torch.Tensor,
        q_mask: torch.Tensor,
        q_context: torch.Tensor,
        c_states: torch.Tensor | None = None,
        q_states: torch.Tensor | None = None,
    ) -> SpanOutput:
        """A span model's forward pass on the answering inputs (:func:`rckit.data.padding.answer_inputs`:
        distinct tokens, distinct windows, questions pointing at their window), as
        ``forward`` on the batch of (question, its window) rows. The default builds that batch; a
        model may share the work of a token or a window among the questions (QANet)."""
        from rckit.data.batching import Batch  # data imports no model code; keep it that way

        c_tokens, c_mask = c_tokens[q_context], c_mask[q_context]  # (B, Tc)
        none = torch.full(q_context.shape, -1, dtype=torch.long, device=q_context.device)
        return self(
            Batch(
                words[c_tokens],
                chars[c_tokens],
                c_mask,
                words[q_tokens],
                chars[q_tokens],
                q_mask,
                none,
                none,
                none,
                c_states=None if c_states is None else c_states[q_context],
                q_states=q_states,
            )
        )

    def loss(self, out: SpanOutput | ClozeOutput, batch, reward_fn=None) -> torch.Tensor:
        """The task's cross-entropy; ``reward_fn`` is for models with ``uses_reward``."""
        self.loss_terms = {}
        if self.task == "span":
            return span_loss(
                out.start_logits,
                out.end_logits,
                batch.y_start,
                batch.y_end,
                out.start_null,
                out.end_null,
                batch.answerable,
            )
        return cloze_loss(out.logits, batch.answer, ~batch.answer_cut)
