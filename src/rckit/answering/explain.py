"""Computing an :class:`~rckit.answering.explanation.Explanation` of a PyTorch span reader's answer.

1. The answer is ``Reader.answer(context, question)[0]``, as asked. A context longer than the
   reader's window is planned as the Reader plans it (:meth:`Reader.plan`), each window read on its
   own (:meth:`Reader.read`), and the window explained is the one whose spans gave the answer:
   where its span scored best (Job's merge keeps a span's best score), or for an abstention the
   window whose null was lowest (the null a long context reports).
2. One forward pass over that window, as the Reader makes it (``answer_pass``), gives the start and
   end logits the span decoder reads, DCN's decoder trace (its ``DCNOutput``), and the attention.
   Attention is taken by forward hooks on the model's :class:`~rckit.layers.attention.ContextQueryAttention`
   and :class:`~rckit.layers.coattention.Coattention` layers that recompute the weights from the
   layer's inputs: both are a few matrix products, the layers and the models stay as they are, and
   nothing runs unless an explanation asks (a recorder inside the layers would put a switch in the
   path every forward takes). The first such layer called is shown (DCN+ has two).
3. Saliency, with gradients: a forward hook on the model's word table
   (:class:`~rckit.layers.embedding.PartiallyFrozenEmbedding`, called once on the context and once
   on the question) puts ``alpha * x`` in place of its output ``x``, a leaf whose gradient is the
   gradient at that point of the path. The score is the chosen span's ``start_logit[s] +
   end_logit[e]`` (DCN: its final iteration's; an abstention: the null's two logits). Integrated
   gradients (Sundararajan et al. 2017, as AllenNLP Interpret) run from the all-zero word vectors
   to ``x`` with the trapezoid rule on ``steps + 1`` points, copies of the example in batched
   forwards; the point ``alpha = 1`` gives gradient x input, and the two ends give ``score`` and
   ``baseline_score``. Each word's value is the dot product over the embedding dimension; a model
   that reads contextual states has them scaled along the same path, and their part added to the
   word's (the whole input vector, so the sum still meets the score's change). The
   character features (QANet, DCN with chars) are left as they are on the whole path. DCN's
   decoder follows, in every copy, the path it took on the real input (:func:`followed_path`).
   The default steps (``DEFAULT_STEPS``) are chosen by ``benchmarks/explain_steps.py``: against 256
   steps, 12 keep QANet's and DCN+'s attributions within about 2 % and explain in under a second
   here; the integrand of DCN and of the Deep LSTM Reader is rough near the all-zero baseline and
   needs 32 to 256 steps, which the completeness note asks for where the sum misses.
   The CPU fast path ``dedupe`` is off for these passes: it shares one text's work among the
   copies, and the copies differ in ``alpha``.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np
import torch

from rckit import kernels
from rckit.answering.answer import Answer
from rckit.answering.explanation import DEFAULT_STEPS, Attention, DecoderStep, Explanation, Saliency
from rckit.answering.torch_backend import TorchModel
from rckit.data.batching import Batch
from rckit.data.padding import INPUTS, STATE_INPUTS, answer_inputs
from rckit.data.tokenize import tokenize
from rckit.layers.attention import ContextQueryAttention
from rckit.layers.coattention import Coattention, append_sentinel
from rckit.layers.embedding import PartiallyFrozenEmbedding
from rckit.layers.masking import masked_softmax, zero_padding
from rckit.models.contract import ReadingModel, SpanOutput
from rckit.models.dcn import DCNOutput, DynamicDecoder


def explain(
    reader,
    context: str,
    question: str,
    steps: int = DEFAULT_STEPS,
    max_answer_len: int | None = None,
    stride: int | None = None,
) -> Explanation:
    """See the module docstring; ``reader`` a :class:`rckit.answering.reader.Reader` (not imported
    here: the Reader imports this module when asked to explain); ``steps``: integrated gradients'
    trapezoids (>= 1)."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if not isinstance(reader.model, TorchModel):
        raise ValueError("explaining needs a reader on a PyTorch model (rckit.answering.torch_backend.TorchModel)")
    module, device = reader.model.model, reader.model.device
    answer, explained, notes = answer_explained(reader, context, question, max_answer_len, stride)
    job = reader.plan([(context, question)], 1, max_answer_len, stride)
    item, offsets, span, window_notes = window_explained(reader, job, explained)
    notes += window_notes
    _, q_offsets = tokenize(question)
    inputs = {k: torch.from_numpy(v).to(device) for k, v in answer_inputs(job.arrays, [item]).items()}
    _, _, lo, hi = item
    with torch.no_grad(), recorded_attention(module, hi - lo) as seen:
        out = module.answer_pass(*(inputs[k] for k in INPUTS), **{k: inputs[k] for k in STATE_INPUTS if k in inputs})
    start_probs, end_probs, null_prob = probabilities(out)
    attention, attention_notes = attention_shown(seen, reader.info.get("model", "this model"))
    decoder, decoder_notes = decoder_shown(out, span, job.max_answer_len)
    notes += attention_notes + decoder_notes
    if span is None:
        notes.append("the model abstains: the score explained is the null's, start_null + end_null")
    saliency, saliency_notes = saliency_explained(module, inputs, out, span, steps, reader.batch_size)
    notes += saliency_notes
    return {
        "model": reader.info.get("model", ""),
        "context": context,
        "question": question,
        "window": {"start": offsets[0][0], "end": offsets[-1][1]},
        "context_tokens": [context[s:e] for s, e in offsets],
        "context_offsets": [[s, e] for s, e in offsets],
        "question_tokens": [question[s:e] for s, e in q_offsets],
        "question_offsets": [[s, e] for s, e in q_offsets],
        "answer": answer,
        "answer_tokens": None if span is None else list(span),
        "start_probs": start_probs,
        "end_probs": end_probs,
        "null_prob": null_prob,
        "attention": attention,
        "decoder": decoder,
        "saliency": saliency,
        "notes": notes,
    }


def answer_explained(
    reader, context: str, question: str, max_answer_len: int | None, stride: int | None
) -> tuple[Answer, Answer, list[str]]:
    """The reader's answer and the answer explained: the same, but where the verifier abstains and
    the model would not, the reader's best span (a note says so)."""
    answers = reader.answer(context, question, 1, max_answer_len, stride)
    answer = explained = answers[0]
    notes: list[str] = []
    if answer["start"] is None and reader.verifier is not None and len(answers) > 1:
        # The verifier's abstention, not the model's: what is explained is the reader's best span.
        explained = answers[1]
        notes.append(
            f"the verifier says the text holds no answer (p {answer['no_answer_probability']:.2f}); "
            f"shown: why the reader would answer {explained['answer']!r}, its best guess"
        )
    return answer, explained, notes


def window_explained(
    reader, job, explained: Answer
) -> tuple[tuple[int, int, int, int], list[tuple[int, int]], tuple[int, int] | None, list[str]]:
    """The window that gave the ``explained`` answer (:func:`answer_window`): its item, its tokens'
    character offsets, the answer's inclusive token span in it (None: an abstention), and a note
    where the context was read in more than one window."""
    item, n_windows = answer_window(reader, job, explained)
    _, c, lo, hi = item
    a = job.arrays
    offsets = a["ctx_offsets"][a["ctx_ptr"][c] + lo : a["ctx_ptr"][c] + hi].tolist()  # the window's tokens
    notes = []
    if n_windows > 1:
        notes.append(
            f"the context is {int(a['ctx_ptr'][c + 1] - a['ctx_ptr'][c])} tokens, read in {n_windows} "
            f"windows of at most {reader.window}; shown: tokens {lo} to {hi - 1}, the window that gave "
            f"the answer"
        )
    span = None
    if explained["start"] is not None:
        starts, ends = [s for s, _ in offsets], [e for _, e in offsets]
        span = (starts.index(explained["start"]), ends.index(explained["end"]))  # inclusive token span in the window
    return item, offsets, span, notes


def attention_shown(seen: list[Attention], model: str) -> tuple[Attention | None, list[str]]:
    """The attention shown, the first layer's of those ``seen``, and notes on what it leaves out
    (``model``: named where it has no attention layer)."""
    if not seen:
        return None, [f"{model} has no attention layer (context-query or coattention) to show"]
    attention = seen[0]
    notes = []
    if len(seen) > 1:
        notes.append(f"the model has {len(seen)} {attention['kind']} layers; shown: the first")
    if attention["kind"] == "coattention":
        notes.append(
            "coattention without its sentinels: a context token's row sums to 1 less its weight on "
            "the question's sentinel, a question token's column to 1 less the context's"
        )
    return attention, notes


def decoder_shown(
    out: SpanOutput, span: tuple[int, int] | None, max_answer_len: int
) -> tuple[list[DecoderStep] | None, list[str]]:
    """DCN's decoder iterations (:func:`decoder_trace`; None for another model), and a note where
    its last pointers are not the answer's span."""
    decoder = decoder_trace(out) if isinstance(out, DCNOutput) else None
    notes = []
    if decoder and span is not None and (decoder[-1]["start"], decoder[-1]["end"]) != span:
        # The Reader decodes the last iteration's logits as every span model's (best_spans), within
        # the answer's length limit; the decoder's own pointers may lie outside it.
        notes.append(
            f"the decoder's last pointers (start word {decoder[-1]['start'] + 1}, end word "
            f"{decoder[-1]['end'] + 1}) are not a span of at most {max_answer_len} words; the answer "
            f"is the best such span of the last iteration's start and end probabilities"
        )
    return decoder, notes


def saliency_explained(
    module: ReadingModel,
    inputs: dict[str, torch.Tensor],
    out: SpanOutput,
    span: tuple[int, int] | None,
    steps: int,
    chunk: int,
) -> tuple[Saliency, list[str]]:
    """The words' saliency (:func:`word_saliency`; DCN's decoder held to the path ``out`` took), and
    a note where the integrated gradients' sum misses the score's change (more steps may close it)."""
    path = (out.starts[:, 0], out.ends[:, 0]) if isinstance(out, DCNOutput) else None
    saliency = word_saliency(module, inputs, span, steps, chunk, path)
    ig = saliency["integrated_gradients"]
    gap = ig["score"] - ig["baseline_score"]
    notes = []
    if abs(ig["sum"] - gap) > 0.05 * abs(gap) + 1e-3:
        notes.append(
            f"integrated gradients sum to {ig['sum']:.4g} where score - baseline_score is {gap:.4g}: "
            f"more steps than {steps} may close the gap"
        )
    return saliency, notes


def answer_window(reader, job, answer) -> tuple[tuple[int, int, int, int], int]:
    """The item ``(pair, context, lo, hi)`` of the window that gave ``answer``, and how many windows
    the context has. Each window is read as a job of its own, so its best span and null are its alone."""
    groups = job.windows
    if len(groups) == 1:
        return groups[0][0], 1
    best, best_score = groups[0][0], -np.inf
    for group in groups:
        alone = type(job)(job.pairs, 1, job.max_answer_len, job.arrays, [group], job.first, job.no_answer_threshold)
        reader.read([(alone, group)])
        if answer["start"] is None:  # the abstention: the window whose null is lowest, as the Reader keeps it
            score = -alone.null[0]
        else:
            score = alone.found[0].get((answer["start"], answer["end"]), -np.inf)
        if score > best_score:
            best, best_score = group[0], score
    return best, len(groups)


def probabilities(out: SpanOutput) -> tuple[list[float], list[float], float | None]:
    """The start and end softmaxes of row 0 at its tokens, over ``[null, tokens]`` for a model that
    can abstain (then also ``p_start(null) * p_end(null)``)."""
    start, end = out.start_logits[0].float(), out.end_logits[0].float()  # (Tc,) one window, no padding
    if out.start_null is None:
        return torch.softmax(start, 0).tolist(), torch.softmax(end, 0).tolist(), None
    p_start = torch.softmax(torch.cat([out.start_null[:1].float(), start]), 0)  # (1 + Tc,)
    p_end = torch.softmax(torch.cat([out.end_null[:1].float(), end]), 0)
    return p_start[1:].tolist(), p_end[1:].tolist(), float(p_start[0] * p_end[0])


def decoder_trace(out: DCNOutput) -> list[DecoderStep]:
    """Every iteration DCN's decoder ran on row 0, the last the one where its span repeated (or the
    last allowed). A model that can abstain decodes over ``[null, tokens]``: the null is token -1."""
    shift = 0 if out.start_null is None else 1
    trace: list[DecoderStep] = []
    for i in range(out.active.shape[0]):
        if not bool(out.active[i, 0]):
            break
        p_start = torch.softmax(out.start_iters[i, 0].float(), 0)[shift:]  # (Tc,)
        p_end = torch.softmax(out.end_iters[i, 0].float(), 0)[shift:]
        trace.append(
            {
                "iteration": i,
                "start_probs": p_start.tolist(),
                "end_probs": p_end.tolist(),
                "start": int(out.starts[i, 0]) - shift,
                "end": int(out.ends[i, 0]) - shift,
            }
        )
    return trace


@contextmanager
def recorded_attention(module: ReadingModel, tokens: int):
    """A list that fills, during the block, with the :class:`Attention` of every context-query or
    coattention layer of ``module`` as it is called, at row 0 of its batch, a window of ``tokens``."""
    seen: list[Attention] = []
    # A server may answer with the same model in another thread meanwhile: its calls are not ours.
    explaining = threading.get_ident()

    def context_query(layer: ContextQueryAttention, args, _output):
        if threading.get_ident() != explaining:
            return
        c, q, c_mask, q_mask = args
        s = layer.similarity(c, q)  # (B, Tc, Tq)
        s_bar = masked_softmax(s, q_mask.unsqueeze(1), dim=2)  # rows over the question
        s_bbar = masked_softmax(s, c_mask.unsqueeze(2), dim=1)  # columns over the context (and its null)
        seen.append(attention("context-query", s_bar[0], s_bbar[0], c_mask[0], q_mask[0], tokens))

    def coattention(layer: Coattention, args, _output):
        if threading.get_ident() != explaining:
            return
        D, Q, d_mask, q_mask = args
        m, n = D.shape[1], Q.shape[1]
        D0, d_mask0 = append_sentinel(D, d_mask, layer.d_sentinel)  # (B, m+1, h)
        Q0, q_mask0 = append_sentinel(Q, q_mask, layer.q_sentinel)  # (B, n+1, h)
        if layer.q_proj is not None:
            Q0 = zero_padding(torch.tanh(layer.q_proj(Q0)), q_mask0)
        L = torch.bmm(D0, Q0.transpose(1, 2))  # (B, m+1, n+1)
        A_Q = masked_softmax(L, d_mask0.unsqueeze(2), dim=1)  # columns over D
        A_D = masked_softmax(L, q_mask0.unsqueeze(1), dim=2)  # rows over Q
        seen.append(attention("coattention", A_D[0, :m, :n], A_Q[0, :m, :n], d_mask[0], q_mask[0], tokens))

    hooks = [
        layer.register_forward_hook(context_query)
        for layer in module.modules()
        if isinstance(layer, ContextQueryAttention)
    ]
    hooks += [layer.register_forward_hook(coattention) for layer in module.modules() if isinstance(layer, Coattention)]
    try:
        yield seen
    finally:
        for hook in hooks:
            hook.remove()


def attention(
    kind: str, to_query: torch.Tensor, to_context: torch.Tensor, c_mask: torch.Tensor, q_mask: torch.Tensor, tokens: int
) -> Attention:
    """Weights (rows, Tq) at the window's ``tokens`` and the real question tokens. QANet's rows
    start with the null where it has one (:func:`rckit.layers.masking.with_null`): left out."""
    skip, Tq = int(c_mask.sum()) - tokens, int(q_mask.sum())  # skip: the null's row, or none
    return {
        "kind": kind,
        "context_to_query": to_query[skip : skip + tokens, :Tq].float().tolist(),
        "query_to_context": to_context[skip : skip + tokens, :Tq].float().tolist(),
    }


def word_saliency(
    module: ReadingModel,
    inputs: dict[str, torch.Tensor],
    span: tuple[int, int] | None,
    steps: int,
    chunk: int,
    path: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> Saliency:
    """Gradient x input and integrated gradients of the span's score for each word of the window
    and the question (module docstring); ``span`` None: the null's score. ``chunk``: most copies
    of the example per forward. ``path``: DCN's starts and ends (I,) on the real input, which
    every copy's decoder follows (:func:`followed_path`)."""
    alphas = torch.linspace(0.0, 1.0, steps + 1, device=inputs["words"].device)  # (K,)
    weights = torch.full((steps + 1,), 1.0 / steps, device=alphas.device)
    weights[[0, -1]] /= 2  # the trapezoid rule
    ig: dict[str, torch.Tensor] = {}
    last: dict[str, torch.Tensor] = {}
    scores = []
    fast = ",".join(name for name in kernels.active() if name != "dedupe") or "none"
    with torch.enable_grad(), kernels.use(fast):
        for lo in range(0, steps + 1, max(1, chunk)):
            part = alphas[lo : lo + chunk]
            batch, states = copies(inputs, len(part), part)
            with scaled_words(module, batch, part) as words, followed_path(module, path):
                out = module(batch)
            if span is None:
                score = out.start_null + out.end_null  # (k,)
            else:
                score = out.start_logits[:, span[0]] + out.end_logits[:, span[1]]  # (k,)
            if set(words) != {"context", "question"}:
                raise RuntimeError(f"the model's word table read {sorted(words)}, not the context and the question")
            leaves = [words["context"][1], words["question"][1]] + [at for _, at in states.values()]
            grads = torch.autograd.grad(score.sum(), leaves)
            for side, grad in zip(("context", "question"), grads):
                x = words[side][0][0]  # (T, Dw) the word vectors
                g = (grad.float() * x.float()).sum(-1)  # (k, T) gradient . vector, per copy
                if side in states:  # a contextual model: its states are part of the word's input vector
                    x_s = states[side][0]  # (T, K, D)
                    g = g + (grads[2 + list(states).index(side)].float() * x_s.float()).sum((-2, -1))
                ig[side] = ig.get(side, 0) + (weights[lo : lo + chunk, None] * g).sum(0)
                last[side] = g[-1]
            scores.append(score.detach().float())
    score = torch.cat(scores)  # (K,)
    total = float(ig["context"].sum() + ig["question"].sum())
    return {
        "gradient_x_input": {"context": last["context"].tolist(), "question": last["question"].tolist()},
        "integrated_gradients": {
            "context": ig["context"].tolist(),
            "question": ig["question"].tolist(),
            "steps": steps,
            "score": float(score[-1]),
            "baseline_score": float(score[0]),
            "sum": total,
        },
    }


def copies(inputs: dict[str, torch.Tensor], k: int, alphas: torch.Tensor | None = None) -> tuple[Batch, dict]:
    """``k`` copies of the one (question, window) example of answering ``inputs``, as a batch, and
    for a model that reads contextual states ``{side: (x, alphas * x)}``: each copy's states scaled
    by its ``alpha`` as leaves to take gradients at (integrated gradients over the whole input
    vector: word vectors and states run from zero together)."""
    words, chars = inputs["words"], inputs["chars"]
    c, q = inputs["c_tokens"][inputs["q_context"]], inputs["q_tokens"]  # (1, Tc), (1, Tq)
    none = torch.full((k,), -1, dtype=torch.long, device=words.device)
    states: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    if "c_states" in inputs:
        alphas = torch.ones(k, device=words.device) if alphas is None else alphas
        for side, x in (("context", inputs["c_states"][inputs["q_context"]][0]), ("question", inputs["q_states"][0])):
            at = (x.unsqueeze(0) * alphas.view(-1, 1, 1, 1).to(x.dtype)).requires_grad_(True)  # (k, T, K, D)
            states[side] = (x, at)
    batch = Batch(
        words[c].repeat(k, 1),
        chars[c].repeat(k, 1, 1),
        inputs["c_mask"][inputs["q_context"]].repeat(k, 1),
        words[q].repeat(k, 1),
        chars[q].repeat(k, 1, 1),
        inputs["q_mask"].repeat(k, 1),
        none,
        none,
        none,
        c_states=states["context"][1] if states else None,
        q_states=states["question"][1] if states else None,
    )
    return batch, states


@contextmanager
def scaled_words(module: ReadingModel, batch: Batch, alphas: torch.Tensor):
    """During the block, the model's word table gives ``alphas[b] * x`` for row ``b`` of the
    context and the question of ``batch``: a dict fills with ``side -> (x, alpha * x)``, the
    second a leaf to take gradients at."""
    tables = [m for m in module.modules() if isinstance(m, PartiallyFrozenEmbedding)]
    if len(tables) != 1:
        raise RuntimeError(f"expected one word table (PartiallyFrozenEmbedding) in the model, found {len(tables)}")
    words: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def scale(_table, args, output):
        ids = args[0]
        side = "context" if ids is batch.c_words else "question" if ids is batch.q_words else None
        if side is None or side in words:
            return None
        x = output.detach()  # (k, T, Dw)
        at = (x * alphas.view(-1, 1, 1).to(x.dtype)).requires_grad_(True)  # (k, T, Dw)
        words[side] = (x, at)
        return at

    hook = tables[0].register_forward_hook(scale)
    try:
        yield words
    finally:
        hook.remove()


@contextmanager
def followed_path(module: ReadingModel, path: tuple[torch.Tensor, torch.Tensor] | None):
    """During the block, DCN's decoder points at ``path`` (starts, ends: (I,), the real input's
    trace) in every row rather than at its own argmax (``DynamicDecoder.forward(follow=)``): along
    integrated gradients' path from the all-zero word vectors the argmax switches spans, and the
    final iteration's score jumps where it does (the sum of the attributions then missed the
    score's change by 1 to 4 times it, whatever the steps). Held to one path the score is smooth,
    and what is explained is the answer's score on the path the decoder took. No-op for ``None``."""
    if path is None:
        yield
        return
    decoders = [m for m in module.modules() if isinstance(m, DynamicDecoder)]
    if len(decoders) != 1:
        raise RuntimeError(f"expected one DynamicDecoder in a DCN model, found {len(decoders)}")

    def follow(_decoder, args, kwargs):
        k = args[0].shape[0]  # U (k, m, 2l): the batch's rows
        return args, {**kwargs, "follow": (path[0].unsqueeze(1).expand(-1, k), path[1].unsqueeze(1).expand(-1, k))}

    hook = decoders[0].register_forward_pre_hook(follow, with_kwargs=True)
    try:
        yield
    finally:
        hook.remove()
