"""``rckit bench``: training and inference speed and peak memory on a fixed slice of a dev split.

What is timed is what the engine runs: the model's task (:mod:`rckit.training.tasks`, built on
the dev split: ``train_split="dev"``) gives the batches, the loss and the decoding, and a
training step is the loop's own :func:`~rckit.training.loop.train_step` (autocast, the task's
loss, backward, gradient clipping, the preset's optimiser and schedule, the EMA update).

- SQuAD span models: the first ``n_questions`` dev questions that have an answer; training
  contexts cut at 400 tokens and questions at 50 whatever the preset (:data:`SPAN_LENGTHS`), so
  that every span row times the same inputs; decoding is ``best_spans`` with the run's
  :class:`DecodeConfig` (a fresh model: the preset's ``decode`` section, else the default), as
  ``rckit evaluate`` decodes.
- Cloze models (``rckit bench --cloze-data DIR``): the first ``n_questions`` examples of the
  cloze data's dev split; training documents cut at the preset's ``max_c_len`` and bucketed as
  ``ClozeTask`` buckets them, entity numbers redrawn per batch as in training, the copy task
  off; decoding is the argmax over the entities.

What is measured:

- training examples/s: training steps on batches of ``batch_size`` questions, bucketed by
  length as in training, over ``train_steps`` steps that follow one untimed pass over every
  batch: the steady state of a training run. The first pass is reported on its own
  (``train_first_pass_examples_per_s``): it also pays for what a run pays once, the heap
  growing to the largest batch and oneDNN building its kernels for each new shape, which huge
  pages (``memory.use_huge_pages``, on in ``rckit bench`` as in ``rckit train``) make cheaper.
  Batches are collated before the clock starts;
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
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rckit.answering.decoding import DecodeConfig
from rckit.data.batching import BucketBatchSampler
from rckit.device import autocast
from rckit.models import MODELS
from rckit.models.contract import ReadingModel
from rckit.training import memory
from rckit.training.config import TrainConfig
from rckit.training.loop import optimisation, train_step
from rckit.training.tasks import ClozeTask, SpanTask, make_task

if TYPE_CHECKING:
    from rckit.data.cloze.dataset import ClozeData
    from rckit.data.prepare import Prepared

SPAN_LENGTHS = {"max_c_len": 400, "max_q_len": 50}  # the training cut of every span row


def bench_model(
    model_name: str,
    mcfg: Any,
    tcfg: TrainConfig,
    decode: DecodeConfig,
    data: Prepared | ClozeData,
    device: torch.device | str,
    dtype: torch.dtype | None,
    train_steps: int = 20,
    n_questions: int = 1024,
    heap_limit_mb: float = 0.0,
) -> dict:
    """Bench a fresh ``model_name`` (seeded) built on ``data``: prepared SQuAD, or the
    ``ClozeData`` of a cloze model, whose dev split gives the slice."""
    model_cls = MODELS[model_name][1]
    kind = model_cls.task_of(mcfg)
    if kind == "span":
        tcfg = replace(tcfg, **SPAN_LENGTHS)
    task = make_task(kind, data, tcfg, train_split="dev")
    torch.manual_seed(0)
    task.attach_encoder(model_cls.contextual_of(mcfg))
    model = model_cls(mcfg, task.model_inputs()).to(device)
    return bench(
        model,
        task,
        device,
        dtype,
        train_steps=train_steps,
        n_questions=n_questions,
        heap_limit_mb=heap_limit_mb,
        decode=decode,
    )


def bench(
    model: ReadingModel,
    task: SpanTask | ClozeTask,
    device: torch.device | str,
    dtype: torch.dtype | None,
    batch_size: int = 32,
    train_steps: int = 20,
    n_questions: int = 1024,
    latency_questions: int = 100,
    warmup: int = 3,
    heap_limit_mb: float = 0.0,
    decode: DecodeConfig | None = None,
) -> dict:
    """Time ``model`` on ``task`` (built with ``train_split="dev"``; its ``cfg`` is the training
    configuration: optimiser, schedule, EMA, clipping, the training cut of contexts).
    ``warmup``: untimed inference batches and questions; training warms up with a whole pass.
    ``decode``: how spans are decoded (default :class:`DecodeConfig`); cloze ignores it."""
    decode = decode or DecodeConfig()
    device = torch.device(device)
    idx = task.first_rows(n_questions)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    train_eps = first_pass_eps = None
    if train_steps > 0:
        if heap_limit_mb > 0:
            memory.limit_heap_growth(int(heap_limit_mb * 2**20))  # as `rckit train --heap-limit-mb` (memory.py)
        train_eps, first_pass_eps = _training_speed(model, task, idx, device, dtype, batch_size, train_steps, sync)
        if heap_limit_mb > 0:
            memory.heap_for_inference()  # the training limit off again for what follows

    model.eval()
    infer_eps = _inference_speed(model, task, idx, device, dtype, decode, warmup, sync)
    times = _latencies(model, task, idx, device, dtype, decode, latency_questions, warmup, sync)
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


def _inference_speed(model, task, idx, device, dtype, decode, warmup, sync) -> float:
    """Inference examples/s over the slice in batches of 32 whole contexts, decoding included,
    after ``warmup`` untimed batches (batches made before the clock starts)."""
    sampler = BucketBatchSampler(task.eval_lengths(idx), 32, shuffle=False)
    eval_batches = [task.eval_batch(idx[b]) for b in sampler]
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
            task.decode(out, b, decode)
            n += len(b)
        sync()
        return n / (time.perf_counter() - t0)


def _latencies(model, task, idx, device, dtype, decode, latency_questions, warmup, sync) -> list[float]:
    """Seconds to answer each of the first ``latency_questions`` questions one at a time (batch 1,
    decoding included), after ``warmup`` untimed ones."""
    times = []
    with torch.inference_mode():
        for i in idx[: latency_questions + warmup]:
            b = task.eval_batch([i]).to(device)
            t = time.perf_counter()
            with autocast(device, dtype):
                out = model(b)
            task.decode(out, b, decode)
            sync()
            times.append(time.perf_counter() - t)
    return times[warmup:]


def _training_speed(model, task, idx, device, dtype, batch_size, steps, sync) -> tuple[float, float]:
    """Training examples/s over ``steps`` steps after one untimed pass, and over that first pass:
    the loop's :func:`train_step` with the task's loss and the preset's optimiser."""
    model.train()
    parts = optimisation(model, task.cfg)
    device = torch.device(device)
    sampler = BucketBatchSampler(task.lengths_for_training(idx), batch_size, seed=0)
    batches = [task.collate(idx[b]) for b in sampler if len(b) == batch_size]
    if not batches:
        raise ValueError(
            f"{len(idx)} answerable questions in the bench's slice: not one training batch of {batch_size}"
        )

    def train(n_steps):  # examples/s over ``n_steps`` steps, cycling through the batches
        sync()
        t0 = time.perf_counter()
        for k in range(n_steps):
            batch = batches[k % len(batches)].to(device)
            train_step(model, parts, task, batch, task.cfg, device, dtype)
        sync()
        return n_steps * batch_size / (time.perf_counter() - t0)

    first_pass = train(len(batches))
    return train(steps), first_pass
