"""Hyper-parameter sweeps: a grid, or a seeded random subset of it, each run time-boxed.

``rckit sweep MODEL`` trains one run per trial in ``<sweep>/trial-NNN`` with the ordinary
engine, so every trial has its own checkpoints, metrics and learning curve. The sweep is
resumable: ``plan.json`` fixes the trials when the sweep starts; a trial with a
``summary.json`` is done, one with only a ``last.pt`` (the sweep was killed inside it) is
resumed from that checkpoint with what is left of its budget, and the rest run in order.
Results go to ``results.md`` (a table sorted by the dev score) and ``results.png``.

The default grid is the one the Deep LSTM Reader's hyper-parameter table lists (Hermann et
al. 2015, seed 000): hidden size {64, 128, 256}, learning rate {1e-3, 5e-4, 1e-4, 5e-5},
batch {16, 32}, dropout {0, 0.1, 0.2}, depth {1, 2, 3} and input form {cqa, qca}: 432 runs,
so on one machine a sweep is a random subset (``trials``). A plain seeded sample of the grid
is all this needs; a search library (Optuna and the like) would add a dependency to do the
same, and its adaptive samplers only pay off over many more trials than a CPU can afford.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rckit.config import apply_overrides
from rckit.explain.curves import plot_sweep
from rckit.training.loop import train

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from rckit.answering.decoding import DecodeConfig
    from rckit.models.contract import ReadingModel
    from rckit.training.config import TrainConfig
    from rckit.training.tasks import ClozeTask, SpanTask

DEEP_LSTM_READER_GRID = {
    "model.hidden": [64, 128, 256],
    "train.lr": [1e-3, 5e-4, 1e-4, 5e-5],
    "train.batch_size": [16, 32],
    "model.dropout": [0.0, 0.1, 0.2],
    "model.depth": [1, 2, 3],
    "model.form": ["cqa", "qca"],
}

GRIDS = {"deep_lstm_reader": DEEP_LSTM_READER_GRID}


def parse_grid(items: list[str]) -> dict[str, list]:
    """``["model.hidden=64,128", "train.lr=1e-3"]`` -> ``{"model.hidden": [64, 128], ...}``."""
    grid = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--grid {item!r}: expected KEY=V1,V2,...")
        key, values = item.split("=", 1)
        grid[key.strip()] = [_parse_value(v.strip()) for v in values.split(",") if v.strip()]
        if not grid[key.strip()]:
            raise ValueError(f"--grid {item!r}: no values")
    return grid


def sweep_grid(model: str, given: list[str], only_given: bool = False) -> dict[str, list]:
    """``model``'s default grid with the ``--grid KEY=V1,V2`` items replacing it key by key
    (``only_given``: the given items alone)."""
    grid = {} if only_given else dict(GRIDS.get(model, {}))
    grid.update(parse_grid(given))
    if not grid:
        raise ValueError(f"no default grid for {model}: give --grid KEY=V1,V2 ...")
    return grid


def _parse_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def plan_trials(grid: dict[str, list], trials: int | None, seed: int) -> list[dict]:
    """Every grid point, or ``trials`` of them drawn without replacement (seeded)."""
    keys = sorted(grid)
    points = [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]
    if trials and trials < len(points):
        points = random.Random(seed).sample(points, trials)
    return points


def _apply(mcfg, tcfg, point: dict):
    bad = [k for k in point if not k.startswith(("model.", "train."))]
    if bad:
        raise ValueError(f"grid keys must start with model. or train.: {bad}")
    m = {k[len("model.") :]: v for k, v in point.items() if k.startswith("model.")}
    t = {k[len("train.") :]: v for k, v in point.items() if k.startswith("train.")}
    return apply_overrides(mcfg, m), apply_overrides(tcfg, t)


def run_sweep(
    model_name: str,
    model_cls: type[ReadingModel],
    mcfg: Any,
    tcfg: TrainConfig,
    make_task: Callable[[TrainConfig], SpanTask | ClozeTask],
    out: str | Path,
    grid: dict[str, list],
    trials: int | None,
    budget: float | None,
    max_steps: int | None,
    seed: int = 0,
    device: torch.device | str = "cpu",
    progress: bool = True,
    decode: DecodeConfig | None = None,
) -> list[dict]:
    """Run (or resume) a sweep and return its results, best first.

    ``make_task(tcfg)`` builds the task for a trial's training config (the data is loaded
    once by the caller and shared). ``decode``: every trial's :class:`DecodeConfig`.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plan_path = out / "plan.json"
    if plan_path.exists():
        plan = json.loads(plan_path.read_text())
        if plan["grid"] != grid or plan["model"] != model_name:
            raise ValueError(f"{out} holds a sweep with a different model or grid; choose another --out")
        points = plan["trials"]
    else:
        points = plan_trials(grid, trials, seed)
        plan_path.write_text(
            json.dumps(
                {
                    "model": model_name,
                    "grid": grid,
                    "trials": points,
                    "seed": seed,
                    "budget_s": budget,
                    "max_steps": max_steps,
                },
                indent=1,
            )
        )
    for i, point in enumerate(points):
        run_dir = out / f"trial-{i:03d}"
        if (run_dir / "summary.json").exists():
            continue
        m, t = _apply(mcfg, tcfg, point)
        print(f"trial {i + 1}/{len(points)}: {point}", flush=True)
        train(
            model_name,
            model_cls,
            m,
            t,
            make_task(t),
            run_dir,
            max_steps=max_steps,
            time_budget=budget,
            resume=(run_dir / "last.pt").exists(),
            device=device,
            progress=progress,
            decode=decode,
        )
        write_results(out)
    return write_results(out)


def collect(out: Path) -> list[dict]:
    plan = json.loads((out / "plan.json").read_text())
    rows = []
    for i, point in enumerate(plan["trials"]):
        summary_path = out / f"trial-{i:03d}" / "summary.json"
        if not summary_path.exists():
            continue
        s = json.loads(summary_path.read_text())
        score_key = next(k for k in s if k.startswith("best_"))
        rows.append(
            {
                "trial": i,
                **point,
                "score": s[score_key],
                "metric": score_key[len("best_") :],
                "steps": s["steps"],
                "seconds": s["seconds"],
            }
        )
    return sorted(rows, key=lambda r: -r["score"])


def write_results(out: str | Path) -> list[dict]:
    """``results.md`` (table, best first), ``results.json`` and ``results.png`` from finished trials."""
    out = Path(out)
    rows = collect(out)
    if not rows:
        return rows
    keys = [k for k in rows[0] if k not in ("trial", "score", "metric", "steps", "seconds")]
    metric = rows[0]["metric"]
    lines = [f"| rank | trial | {' | '.join(keys)} | {metric} | steps | seconds |", "|" + "---|" * (len(keys) + 5)]
    for rank, r in enumerate(rows, 1):
        lines.append(
            f"| {rank} | {r['trial']} | "
            + " | ".join(str(r[k]) for k in keys)
            + f" | {r['score']:.2f} | {r['steps']} | {r['seconds']:.0f} |"
        )
    (out / "results.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    plot_sweep(rows, keys, metric, out / "results.png")
    return rows
