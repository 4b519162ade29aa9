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
Latency: one question at a time (batch 1), median and 90th percentile. Peak memory: the
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

    # Training, with the loss the engine would use (a model's own, e.g. DCN's, or the span loss).
    reward = None
    if getattr(model, "uses_reward", False):
        from rckit.training.rewards import SpanF1Reward

        reward = SpanF1Reward(split)

    def loss_fn(out, batch):
        if hasattr(model, "loss"):
            return model.loss(out, batch, reward_fn=reward)
        return span_loss(out.start_logits, out.end_logits, batch.y_start, batch.y_end)

    if heap_limit_mb > 0:
        memory.limit_heap_growth(int(heap_limit_mb * 2**20))  # as `rckit train --heap-limit-mb` (memory.py)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=1e-4)
    sampler = BucketBatchSampler(np.minimum(split.c_len[idx], max_c_len), batch_size, seed=0)
    batches = [split.collate(idx[b], max_c_len, 50) for b in sampler if len(b) == batch_size]
    if not batches:
        raise ValueError(f"{len(idx)} answerable questions in the first {n_questions}: not one training batch of "
                         f"{batch_size}")

    def train(steps):  # examples/s over ``steps`` steps, cycling through the batches
        sync()
        t0 = time.perf_counter()
        for k in range(steps):
            batch = batches[k % len(batches)].to(device)
            with autocast(device, dtype):
                out = model(batch)
            loss = loss_fn(out, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        sync()
        return steps * batch_size / (time.perf_counter() - t0)

    first_pass_eps = train(len(batches))
    train_eps = train(train_steps)

    # Inference, batch 32, whole contexts.
    if heap_limit_mb > 0:
        memory.heap_for_inference()
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
        "train_examples_per_s": round(train_eps, 2),
        "train_first_pass_examples_per_s": round(first_pass_eps, 2),
        "inference_examples_per_s": round(infer_eps, 2),
        "latency_ms_median": round(1000 * statistics.median(times), 2),
        "latency_ms_p90": round(1000 * float(np.percentile(times, 90)), 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "train_questions": int(len(idx)),
        "dtype": "bf16" if dtype == torch.bfloat16 else "fp32",
        "device": str(device),
        "threads": torch.get_num_threads(),
        "trainable_parameters": sum(p.numel() for p in params),
        "heap_limit_mb": heap_limit_mb,
    }
    if device.type == "cuda":
        res["peak_cuda_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return res
