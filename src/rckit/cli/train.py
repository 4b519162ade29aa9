"""``rckit train``: train a model on SQuAD or cloze data, with checkpoints and a learning curve."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from rckit.cli.arguments import data_arguments, data_source, duration, model_argument, preset_arguments
from rckit.data.sources import prepare_data
from rckit.model_files.reader_file import is_reader_file
from rckit.model_files.source import pytorch_source
from rckit.presets import data_overrides, run_configs, saved_configs
from rckit.training import memory


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Train MODEL on SQuAD (or on cloze data with --cloze-data). Checkpoints, metrics.jsonl and a "
        "learning-curve plot go to --out; --resume continues a stopped run from its last checkpoint."
    )
    model_argument(p)
    data_arguments(p)
    p.add_argument("--out", required=True, help="run directory")
    preset_arguments(p)
    p.add_argument("--max-steps", type=int, help="stop after this many optimiser steps")
    p.add_argument(
        "--time-budget",
        help="stop after this much training time, e.g. 45m, 2h, 90s; a preset's "
        "train.decay_share places the learning rate's linear decay to 0 on its last share",
    )
    p.add_argument(
        "--cloze-data",
        help="cloze models: a directory from `rckit prepare squad-cloze`, Chen et al.'s "
        "train/dev.txt, or DeepMind Q&A training/ validation/ .question folders",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the run's last checkpoint, with the settings "
        "it was started with (its config.json) unless --preset or --set are given",
    )
    p.add_argument(
        "--init-from",
        metavar="WEIGHTS",
        help="start a new run from the model weights of another run's "
        "last.pt or best.pt, or of an exported .safetensors file (an installed model: its name, e.g. dcn); word and "
        "character rows are taken by word where the vocabularies differ, weights the source lacks keep "
        "their initialisation (DCN+'s mixed-objective weights after a cross-entropy run, the null of a "
        "model that learns to abstain); the optimiser and step count start afresh",
    )
    p.add_argument("--checkpoint-every", type=int, metavar="N", help="write last.pt every N steps")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--heap-limit-mb",
        type=float,
        default=0.0,
        metavar="N",
        help="CPU: allocations of N MiB and more get their own mapping, returned when freed: a lower "
        'peak RSS, slower steps (e.g. 2; default 0: glibc\'s own threshold; docs/benchmark-history.md, "Allocator")',
    )


def run(args: argparse.Namespace) -> int:
    memory.use_huge_pages()  # before torch is imported
    if args.heap_limit_mb > 0:
        memory.limit_heap_growth(int(args.heap_limit_mb * 2**20))
    from rckit.device import pick_device  # these import PyTorch: after the allocator is set
    from rckit.models import MODELS
    from rckit.training.distributed import barrier, init_distributed
    from rckit.training.loop import train
    from rckit.training.task_data import cloze_data
    from rckit.training.tasks import ClozeTask

    config = Path(args.out) / "config.json"
    if args.resume and args.preset is None and not args.set and config.is_file():
        mcfg, tcfg, decode = saved_configs(args.model, config)
    else:
        mcfg, tcfg, decode = run_configs(args.model, args.preset, args.set)
    if args.checkpoint_every:
        tcfg = replace(tcfg, checkpoint_every=args.checkpoint_every)
    time_budget = duration(args.time_budget, "--time-budget")
    init_from = None if args.init_from is None else pytorch_source(args.init_from)  # 'bundled', a name: installed
    if init_from is not None and Path(init_from).is_file() and is_reader_file(init_from):
        raise ValueError(
            f"--init-from {args.init_from}: {Path(init_from).name} is rckit's own reader, not a {args.model} model "
            "(start from one of its kind, e.g. --init-from qanet; the own reader trains with rckit finetune)"
        )
    device = pick_device(args.device)
    dist = init_distributed(device)
    source = data_source(args, args.cloze_data)
    if MODELS[args.model][1].task_of(mcfg) == "cloze":
        data = ClozeTask(cloze_data(source, tcfg.seed), tcfg)
    else:  # one process builds the cache; the others then load it
        data = prepare_data(source, data_overrides(args.set)) if dist.is_main else None
        barrier(dist)
        if data is None:
            data = prepare_data(source, data_overrides(args.set))
    summary = train(
        args.model,
        MODELS[args.model][1],
        mcfg,
        tcfg,
        data,
        args.out,
        max_steps=args.max_steps,
        time_budget=time_budget,
        resume=args.resume,
        device=device,
        progress=not args.no_progress,
        decode=decode,
        init_from=init_from,
    )
    if dist.is_main:
        print(json.dumps(summary))
    return 0
