"""``rckit bench``: training and inference speed and peak memory on a fixed slice of SQuAD dev.

Training examples/s: forward + backward + Adam step on batches of ``batch_size`` questions from
the first ``n_questions`` dev questions, bucketed by length as in training (contexts cut at
400 tokens), over ``train_steps`` steps that follow one untimed pass over every batch: the
steady state of a training run. The first pass is reported on its own
(``train_first_pass_examples_per_s``): it also pays for what a run pays once, the heap growing
to the largest batch (page faults) and oneDNN building its kernels for each new shape. On the
QANet paper preset (CPU, bf16, huge pages off) 23 steps from the start averaged 17.2-17.8
examples/s where 80 averaged 20.8-20.9; with huge pages (``memory.use_huge_pages``, on in
``rckit``) the first pass runs about as fast as the steps after it (BENCHMARKS.md, round 4).
Inference examples/s: batch 32, whole contexts, span decoding included.
Latency: one question at a time (batch 1), median and 90th percentile.
``train_steps=0`` (``rckit bench --steps 0``) leaves training out: inference and latency in a
process that has not trained, as ``rckit evaluate``, ``predict`` and ``serve`` run them. After
training in the same process, batch-32 inference on the QANet paper preset (bf16) ran at
0.81-0.87 of the speed of a process that had not trained (three pairs of processes,
alternating); timing inference first instead raised the peak resident set from 3,740-3,772
MiB to 3,854-3,896 (the training heap grows around what inference left), so the full bench
keeps training first (BENCHMARKS.md, QANet round 6). Peak memory: the
process's peak resident set (CPU) or peak allocated CUDA memory. ``heap_limit_mb``: as
``rckit train --heap-limit-mb`` for the training part, the heap's ceiling for inference after it
(``memory.py``).
"""

from __future__ import annotations

import resource
import statistics
import time

import numpy as np
import torch

from rckit.data.batching import BucketBatchSampler
from rckit.evaluation.decoding import best_spans
from rckit.evaluation.predict import autocast
from rckit.training import memory
from rckit.training.losses import span_loss


def bench(model, split, device, dtype, batch_size=32, train_steps=20, n_questions=1024, latency_questions=100,
          max_c_len=400, warmup=3, heap_limit_mb=0.0) -> dict:
    """``warmup``: untimed inference batches and questions; training warms up with a whole pass."""
    device = torch.device(device)
    idx = np.arange(min(n_questions, len(split)))
    idx = idx[split.a["y_start"][idx] >= 0]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    train_eps = first_pass_eps = None
    if train_steps > 0:
        if heap_limit_mb > 0:
            memory.limit_heap_growth(int(heap_limit_mb * 2**20))  # as `rckit train --heap-limit-mb` (memory.py)
        train_eps, first_pass_eps = _training_speed(model, split, idx, device, dtype, batch_size, train_steps,
                                                    max_c_len, sync)
        if heap_limit_mb > 0:
            memory.heap_for_inference()  # the training limit off again for what follows

    # Inference, batch 32, whole contexts.
    model.eval()
    eval_batches = [split.collate(idx[b]) for b in BucketBatchSampler(split.c_len[idx], 32, shuffle=False)]
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
            best_spans(out.start_logits.float(), out.end_logits.float(), b.c_mask, 30)
            n += len(b)
        sync()
        infer_eps = n / (time.perf_counter() - t0)

        # Latency, one question at a time.
        times = []
        for i in idx[: latency_questions + warmup]:
            b = split.collate([i]).to(device)
            t = time.perf_counter()
            with autocast(device, dtype):
                out = model(b)
            best_spans(out.start_logits.float(), out.end_logits.float(), b.c_mask, 30)
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


def _training_speed(model, split, idx, device, dtype, batch_size, steps, max_c_len, sync) -> tuple[float, float]:
    """Training examples/s over ``steps`` steps after one untimed pass, and over that first pass,
    with the loss the engine would use (a model's own, e.g. DCN's, or the span loss)."""
    reward = None
    if getattr(model, "uses_reward", False):
        from rckit.training.rewards import SpanF1Reward

        reward = SpanF1Reward(split)

    def loss_fn(out, batch):
        if hasattr(model, "loss"):
            return model.loss(out, batch, reward_fn=reward)
        return span_loss(out.start_logits, out.end_logits, batch.y_start, batch.y_end)

    model.train()
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    sampler = BucketBatchSampler(np.minimum(split.c_len[idx], max_c_len), batch_size, seed=0)
    batches = [split.collate(idx[b], max_c_len, 50) for b in sampler if len(b) == batch_size]
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
