"""``rckit bench``: training and inference speed and memory of a model."""

from __future__ import annotations

import argparse
import json

from rckit.cli.arguments import data_arguments, data_source, model_argument, preset_arguments
from rckit.presets import data_overrides, run_configs
from rckit.training import memory


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Training examples/s, inference examples/s (batch 32), single-question latency and peak "
        "memory on a fixed slice of SQuAD dev (cloze models: of the --cloze-data dev split)."
    )
    model_argument(p)
    preset_arguments(p)
    p.add_argument("--amp", default="fp32", choices=["fp32", "bf16"], help="autocast dtype")
    p.add_argument("--device", default="auto")
    p.add_argument(
        "--steps",
        type=int,
        default=20,
        help="timed training steps (0: no training, inference and latency as in a process that only "
        "evaluates or serves)",
    )
    p.add_argument("--questions", type=int, default=1024, help="size of the dev slice")
    p.add_argument(
        "--heap-limit-mb",
        type=float,
        default=0.0,
        metavar="N",
        help="as `rckit train --heap-limit-mb`, for the training part",
    )
    p.add_argument(
        "--cloze-data",
        metavar="DIR",
        help="cloze models: a cloze data directory (as `rckit train "
        "--cloze-data`); the slice is the first --questions examples of its dev split",
    )
    p.add_argument("--json", action="store_true")
    data_arguments(p)


def run(args: argparse.Namespace) -> int:
    memory.use_huge_pages()  # before torch is imported
    import torch  # and the library below: after the allocator is set

    from rckit.device import pick_device
    from rckit.models import MODELS
    from rckit.training.bench import bench_model
    from rckit.training.task_data import task_data

    mcfg, tcfg, decode = run_configs(args.model, args.preset, args.set)
    kind = MODELS[args.model][1].task_of(mcfg)
    if args.cloze_data and kind != "cloze":
        raise ValueError(f"--cloze-data is for cloze models; {args.model} with this preset reads SQuAD")
    data = task_data(kind, data_source(args, args.cloze_data), tcfg.seed, data_overrides(args.set))
    res = bench_model(
        args.model,
        mcfg,
        tcfg,
        decode,
        data,
        pick_device(args.device),
        torch.bfloat16 if args.amp == "bf16" else None,
        train_steps=args.steps,
        n_questions=args.questions,
        heap_limit_mb=args.heap_limit_mb,
    )
    res = {"model": args.model, "preset": args.preset, **res}
    print(json.dumps(res) if args.json else "\n".join(f"{k:26s} {v}" for k, v in res.items()))
    return 0
