"""``rckit sweep``: a time-boxed hyper-parameter sweep, one run per grid point, resumable."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rckit.cli.arguments import data_arguments, data_source, duration, model_argument, preset_arguments
from rckit.presets import data_overrides, run_configs
from rckit.training import memory


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Train one time-boxed run per grid point (or a seeded random subset) into OUT/trial-NNN; "
        "results.md and results.png summarise them. Run it again with the same --out to resume. The "
        "default grid for deep_lstm_reader is the paper's table; --grid KEY=V1,V2 replaces it key by key."
    )
    model_argument(p)
    p.add_argument("--out", required=True, help="sweep directory")
    preset_arguments(p, preset_help="preset the trials start from", set_help="override a config field in every trial")
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="swept values for model.X or train.X; given keys replace the default grid",
    )
    p.add_argument("--only-grid", action="store_true", help="sweep only the --grid keys, not the default grid")
    p.add_argument("--trials", type=int, help="a random subset of this many grid points (default: the whole grid)")
    p.add_argument("--budget", default="5m", help="wall-clock budget per trial (default 5m)")
    p.add_argument("--max-steps", type=int, help="step limit per trial")
    p.add_argument("--seed", type=int, default=0, help="seed of the trial subset")
    p.add_argument("--cloze-data", help="cloze data directory (cloze models)")
    p.add_argument("--device", default="auto")
    p.add_argument("--no-progress", action="store_true")
    data_arguments(p)


def run(args: argparse.Namespace) -> int:
    memory.use_huge_pages()  # before torch is imported
    from rckit.device import pick_device  # these import PyTorch: after the allocator is set
    from rckit.models import MODELS
    from rckit.training.sweep import run_sweep, sweep_grid
    from rckit.training.task_data import task_data
    from rckit.training.tasks import make_task

    mcfg, tcfg, decode = run_configs(args.model, args.preset, args.set)
    grid = sweep_grid(args.model, args.grid, args.only_grid)
    budget = duration(args.budget, "--budget")
    device = pick_device(args.device)
    kind = MODELS[args.model][1].task_of(mcfg)
    data = task_data(kind, data_source(args, args.cloze_data), tcfg.seed, data_overrides(args.set))
    rows = run_sweep(
        args.model,
        MODELS[args.model][1],
        mcfg,
        tcfg,
        lambda t: make_task(kind, data, t),
        args.out,
        grid,
        args.trials,
        budget,
        args.max_steps,
        args.seed,
        device,
        not args.no_progress,
        decode=decode,
    )
    print(f"{len(rows)} trials finished; table in {Path(args.out) / 'results.md'}")
    if rows:
        print(json.dumps(rows[0]))
    return 0
