"""``rckit bench``: training and inference speed and peak memory on a fixed slice of a dev split.

One timing procedure serves both tasks; what differs between them is a small object with the
same methods (:class:`SpanQuestions`, :class:`ClozeQuestions`): which rows of the slice are
used, their lengths for bucketing, a training batch, an evaluation batch, the training loss and
the decoding.

- SQuAD span models: the first ``n_questions`` dev questions that have an answer; training
  contexts cut at ``max_c_len`` tokens (questions at ``max_q_len``); decoding is
  ``best_spans`` with the run's :class:`DecodeConfig` (a fresh model: the preset's ``decode``
  section, else the default), as ``rckit evaluate`` decodes.
- Cloze models (``task="cloze"``, ``rckit bench --cloze-data DIR``): the first ``n_questions``
  examples of the cloze data's dev split; training documents cut at ``max_c_len`` tokens and
  bucketed as ``ClozeTask`` buckets them, with the loss the engine uses (cross-entropy over the
  candidate entities, leaving out answers the cut removed); decoding is the argmax over the
  entities, non-candidates already at the bottom of the logits. The file's entity numbering is
  kept: training redraws it per batch, which changes neither the shapes nor the work.

What is measured:

- training examples/s: forward + backward + Adam step on batches of ``batch_size`` questions,
  bucketed by length as in training, over ``train_steps`` steps that follow one untimed pass
  over every batch: the steady state of a training run. The first pass is reported on its own
  (``train_first_pass_examples_per_s``): it also pays for what a run pays once, the heap
  growing to the largest batch and oneDNN building its kernels for each new shape, which huge
  pages (``memory.use_huge_pages``, on in ``rckit bench`` as in ``rckit train``) make cheaper;
- inference examples/s: batch 32, whole contexts (documents), decoding included;
- latency: one question at a time (batch 1), median and 90th percentile;
- peak memory: the process's peak resident set (CPU) or peak allocated CUDA memory.

``train_steps=0`` (``rckit bench --steps 0``) leaves training out: inference and latency in a
process that has not trained, as ``rckit evaluate``, ``predict`` and ``serve`` run them. Training
in the same process changes how fast inference runs and how high the peak resident set gets,
and the order matters, so the full bench always trains first. ``heap_limit_mb``: as
``rckit train --heap-limit-mb`` for the training part, the heap's ceiling for inference after
it (``memory.py``). BENCHMARKS.md has the figures and what each choice here is worth.
"""

from __future__ import annotations

import resource
import statistics
import time

import numpy as np
import torch

from rckit.data.batching import BucketBatchSampler
from rckit.device import autocast
from rckit.evaluation.decoding import DecodeConfig, best_spans
from rckit.training import memory
from rckit.training.losses import span_loss
from rckit.training.tasks import cloze_loss


class SpanQuestions:
    """SQuAD questions of a prepared split: span logits, the span loss (or the model's own)."""

    def __init__(self, split, max_c_len: int = 400, max_q_len: int = 50, decode: DecodeConfig | None = None):
        self.split, self.max_c_len, self.max_q_len = split, max_c_len, max_q_len
        self.max_answer_len = (decode or DecodeConfig()).max_answer_len

    def rows(self, n_questions: int) -> np.ndarray:
        idx = np.arange(min(n_questions, len(self.split)))
        return idx[self.split.a["y_start"][idx] >= 0]  # a question without an answer cannot train

    def train_lengths(self, rows) -> np.ndarray:
        return np.minimum(self.split.c_len[rows], self.max_c_len)

    def train_batch(self, rows):
        return self.split.collate(rows, self.max_c_len, self.max_q_len)

    def eval_lengths(self, rows) -> np.ndarray:
        return self.split.c_len[rows]

    def eval_batch(self, rows):
        return self.split.collate(rows)

    def loss_fn(self, model):
        """``loss(out, batch)``: a model's own (e.g. DCN's, with its reward), else the span loss."""
        reward = None
        if getattr(model, "uses_reward", False):
            from rckit.training.rewards import SpanF1Reward

            reward = SpanF1Reward(self.split)

        def loss(out, batch):
            if hasattr(model, "loss"):
                return model.loss(out, batch, reward_fn=reward)
            return span_loss(out.start_logits, out.end_logits, batch.y_start, batch.y_end)

        return loss

    def decode(self, out, batch):
        return best_spans(out.start_logits.float(), out.end_logits.float(), batch.c_mask, self.max_answer_len)


class ClozeQuestions:
    """Cloze examples of a ``ClozeSplit``: logits over entities, the cloze loss (or the model's own)."""

    def __init__(self, split, max_c_len: int = 400, max_q_len: int = 50):
        self.split, self.max_c_len, self.max_q_len = split, max_c_len, max_q_len

    def rows(self, n_questions: int) -> np.ndarray:
        return np.arange(min(n_questions, len(self.split)))  # every answer is an entity of its document

    def train_lengths(self, rows) -> np.ndarray:
        return np.minimum(self.split.lengths[rows], self.max_c_len + self.max_q_len)  # as ClozeTask

    def train_batch(self, rows):
        return self.split.collate(rows, self.max_c_len)

    def eval_lengths(self, rows) -> np.ndarray:
        return self.split.lengths[rows]

    def eval_batch(self, rows):
        return self.split.collate(rows)

    def loss_fn(self, model):
        """``loss(out, batch)``: a model's own, else cross-entropy over the entities, as ``ClozeTask.loss``."""

        def loss(out, batch):
            if hasattr(model, "loss"):
                return model.loss(out, batch, reward_fn=None)
            return cloze_loss(out.logits, batch.answer, ~batch.answer_cut)

        return loss

    def decode(self, out, batch):
        return out.logits.float().argmax(-1)  # (B,) entity numbers


def bench_model(model_name: str, mcfg, tcfg, decode: DecodeConfig, data, device, dtype, train_steps: int = 20,
                n_questions: int = 1024, heap_limit_mb: float = 0.0) -> dict:
    """Bench a fresh ``model_name`` (seeded) built on ``data``: prepared SQuAD, or the
    ``ClozeData`` of a cloze model, whose dev split gives the slice."""
    from rckit.models import MODELS

    if getattr(mcfg, "head", None) == "cloze":
        split = data.dev
        # Documents cut for training as the preset's runs cut them; evaluation reads them whole.
        task_args = {"task": "cloze", "max_c_len": tcfg.max_c_len, "max_q_len": tcfg.max_q_len}
    else:
        split = data.split("dev")
        task_args = {}  # span: contexts cut at 400 tokens for training, bench()'s defaults
    torch.manual_seed(0)
    model = MODELS[model_name][1](mcfg, data.embedding_info()).to(device)
    return bench(model, split, device, dtype, train_steps=train_steps, n_questions=n_questions,
                 heap_limit_mb=heap_limit_mb, decode=decode, **task_args)


def bench(model, split, device, dtype, batch_size=32, train_steps=20, n_questions=1024, latency_questions=100,
          max_c_len=400, warmup=3, heap_limit_mb=0.0, task="span", max_q_len=50,
          decode: DecodeConfig | None = None) -> dict:
    """``task``: ``"span"`` (``split`` a prepared SQuAD split) or ``"cloze"`` (a ``ClozeSplit``).
    ``max_c_len`` / ``max_q_len``: training limits (cloze: ``max_c_len`` cuts documents).
    ``warmup``: untimed inference batches and questions; training warms up with a whole pass.
    ``decode``: how spans are decoded (default :class:`DecodeConfig`); cloze ignores it."""
    if task == "span":
        questions = SpanQuestions(split, max_c_len, max_q_len, decode)
    elif task == "cloze":
        questions = ClozeQuestions(split, max_c_len, max_q_len)
    else:
        raise ValueError(f"bench task must be span or cloze, got {task!r}")
    device = torch.device(device)
    idx = questions.rows(n_questions)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    train_eps = first_pass_eps = None
    if train_steps > 0:
        if heap_limit_mb > 0:
            memory.limit_heap_growth(int(heap_limit_mb * 2**20))  # as `rckit train --heap-limit-mb` (memory.py)
        train_eps, first_pass_eps = _training_speed(model, questions, idx, device, dtype, batch_size, train_steps,
                                                    sync)
        if heap_limit_mb > 0:
            memory.heap_for_inference()  # the training limit off again for what follows

    # Inference, batch 32, whole contexts.
    model.eval()
    sampler = BucketBatchSampler(questions.eval_lengths(idx), 32, shuffle=False)
    eval_batches = [questions.eval_batch(idx[b]) for b in sampler]
    with torch.inference_mode():
        for b in eval_batches[:warmup]:
            with autocast(device, dtype):
                model(b.to(device))
        sync()
        t0 = time.perf_counter()
        n = 0
        for b in eval_batches:
            b = b.to(device)
            with autocast(device, dtype):
                out = model(b)
            questions.decode(out, b)
            n += len(b)
        sync()
        infer_eps = n / (time.perf_counter() - t0)

        # Latency, one question at a time.
        times = []
        for i in idx[: latency_questions + warmup]:
            b = questions.eval_batch([i]).to(device)
            t = time.perf_counter()
            with autocast(device, dtype):
                out = model(b)
            questions.decode(out, b)
            sync()
            times.append(time.perf_counter() - t)
        times = times[warmup:]
    res = {
        "train_examples_per_s": None if train_eps is None else round(train_eps, 2),
        "train_first_pass_examples_per_s": None if first_pass_eps is None else round(first_pass_eps, 2),
        "inference_examples_per_s": round(infer_eps, 2),
        "latency_ms_median": round(1000 * statistics.median(times), 2),
        "latency_ms_p90": round(1000 * float(np.percentile(times, 90)), 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "train_questions": int(len(idx)),
        "dtype": "bf16" if dtype == torch.bfloat16 else "fp32",
        "device": str(device),
        "threads": torch.get_num_threads(),
        "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "heap_limit_mb": heap_limit_mb,
    }
    if device.type == "cuda":
        res["peak_cuda_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return res


def _training_speed(model, questions, idx, device, dtype, batch_size, steps, sync) -> tuple[float, float]:
    """Training examples/s over ``steps`` steps after one untimed pass, and over that first pass,
    with the loss the engine would use."""
    loss_fn = questions.loss_fn(model)
    model.train()
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    sampler = BucketBatchSampler(questions.train_lengths(idx), batch_size, seed=0)
    batches = [questions.train_batch(idx[b]) for b in sampler if len(b) == batch_size]
    if not batches:
        raise ValueError(f"{len(idx)} answerable questions in the bench's slice: not one training batch of {batch_size}")

    def train(n_steps):  # examples/s over ``n_steps`` steps, cycling through the batches
        sync()
        t0 = time.perf_counter()
        for k in range(n_steps):
            batch = batches[k % len(batches)].to(device)
            with autocast(device, dtype):
                out = model(batch)
            loss = loss_fn(out, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        sync()
        return n_steps * batch_size / (time.perf_counter() - t0)

    first_pass = train(len(batches))
    return train(steps), first_pass
