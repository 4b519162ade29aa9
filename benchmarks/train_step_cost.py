"""What a training step's bookkeeping costs: the loop's ``train_step`` against the bare step.

``rckit bench`` times the loop's own :func:`rckit.training.loop.train_step` (forward, the task's
loss, backward, gradient clipping, the preset's optimiser, the schedule, the EMA update). The bare
step leaves out the clipping, the schedule and the EMA. Both run on the same collated batches in
one process, each batch with one step right after the other (the order alternating), so that
the machine's drift between phases (a quarter on the development VM) falls on both alike; the
script prints the median ms per step of each and the median of the per-batch ratios.

    python benchmarks/train_step_cost.py qanet --preset cpu-small --data-dir ../shared/data/squad-v1.1
    python benchmarks/train_step_cost.py attentive_reader --preset cloze-cpu --cloze-data runs/squad-cloze
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import numpy as np
import torch

from rckit.data.batching import BucketBatchSampler
from rckit.data.sources import DataSource
from rckit.models import MODELS
from rckit.presets import run_configs
from rckit.training.bench import SPAN_LENGTHS
from rckit.training.loop import optimisation, train_step
from rckit.training.task_data import task_data
from rckit.training.tasks import make_task


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--preset", required=True)
    ap.add_argument("--data-dir")
    ap.add_argument("--cloze-data")
    ap.add_argument("--questions", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=4, help="passes over the batches, each batch timed with both steps")
    args = ap.parse_args()
    mcfg, tcfg, _ = run_configs(args.model, args.preset, [])
    model_cls = MODELS[args.model][1]
    kind = model_cls.task_of(mcfg)
    if kind == "span":
        tcfg = replace(tcfg, **SPAN_LENGTHS)
    data = task_data(kind, DataSource(data_dir=args.data_dir, cloze=args.cloze_data), tcfg.seed)
    task = make_task(kind, data, tcfg, train_split="dev")
    torch.manual_seed(0)
    model = model_cls(mcfg, task.model_inputs()).train()
    parts = optimisation(model, tcfg)
    idx = task.first_rows(args.questions)
    batches = [
        task.collate(idx[b]) for b in BucketBatchSampler(task.lengths_for_training(idx), 32, seed=0) if len(b) == 32
    ]
    device = torch.device("cpu")

    def full(batch):
        train_step(model, parts, task, batch, tcfg, device, None)

    def bare(batch):  # forward, the task's loss, backward, optimiser step: the bench's step before the loop's
        out = model(batch)
        loss, _ = task.loss(model, out, batch)
        parts.opt.zero_grad(set_to_none=True)
        loss.backward()
        parts.opt.step()

    for b in batches:  # one untimed pass: the heap and oneDNN's kernels for every shape
        full(b)
    times = {"train_step": [], "bare": []}
    for r in range(args.rounds):  # each batch with each step, the order alternating round by round
        for b in batches:
            kinds = (("train_step", full), ("bare", bare))
            for name, step in kinds if r % 2 == 0 else kinds[::-1]:
                t0 = time.perf_counter()
                step(b)
                times[name].append(1000 * (time.perf_counter() - t0))
    ratios = np.divide(times["train_step"], times["bare"])  # the same batch, one step after the other
    print(
        f"{args.model} {args.preset}: {len(batches)} batches of 32, {args.rounds} rounds, "
        f"{torch.get_num_threads()} threads"
    )
    for name, v in times.items():
        print(f"  {name:10s} median {statistics.median(v):7.1f} ms/step")
    print(
        f"  train_step / bare, per batch: median {np.median(ratios):.3f}, "
        f"quartiles {np.percentile(ratios, 25):.3f} / {np.percentile(ratios, 75):.3f}"
    )


if __name__ == "__main__":
    main()
