"""A resumable, time-budgeted run of a planned number of steps: the shape shared by the student's
distillation (:mod:`rckit.training.distill`) and rckit's own reader's fine-tuning
(:mod:`rckit.training.encoder_reader`). The reading models' own engine is :mod:`rckit.training.loop`.

The job brings its optimiser and schedule; both jobs take AdamW and the linear schedule
(:func:`adamw_run`).

**The run.** ``DIR/last.pt`` holds the model, the optimiser, the step, the best figures so far, the
torch RNG and what the job adds (its config, a teacher's digest); it is written (atomically) at
every evaluation and every ``SAVE_EVERY`` steps, so a killed run loses at most that many.
``DIR/log.jsonl`` gets a line per evaluation; its ``seconds`` count the run's training time across
resumes (the time between calls is not counted). Each epoch's order is drawn by the job from
``seed + epoch``, so a resumed run takes the batches the first call would have taken.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from rckit.training.optim import adamw, linear_schedule

SAVE_EVERY = 100  # steps between saves of last.pt besides each evaluation


def save_atomic(obj: dict, path: Path) -> None:
    """``torch.save`` to a temporary file beside ``path``, then renamed over it: a kill mid-write
    leaves the previous file whole."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def previous_run(out: Path, resume: bool) -> dict | None:
    """``out/last.pt`` when resuming (``None`` where there is none yet); a refusal where ``out``
    already holds a run and ``resume`` is off."""
    last = out / "last.pt"
    if not last.is_file():
        return None
    if not resume:
        raise ValueError(f"{out} already holds a run (last.pt): --resume to continue it, or another folder")
    return torch.load(last, weights_only=True)


@dataclass
class PlannedRun:
    """One job's run: the model and what trains it, the plan, and what last.pt keeps besides."""

    out: Path
    model: torch.nn.Module
    params: list[torch.nn.Parameter]  # what trains (clipped to norm 1)
    opt: torch.optim.Optimizer
    lr_at: Callable[[int], float]
    planned: int  # steps in all
    per_epoch: int  # batches an epoch
    eval_every: int
    kept: dict  # saved in last.pt beside the model, optimiser, step, best and RNG
    seconds: float = 0.0  # the run's training time before this call (its earlier calls')

    def restore(self, state: dict | None) -> tuple[int, dict | None]:
        """Load a previous run's last.pt; its step and best figures (0 and None for a new run)."""
        if state is None:
            return 0, None
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        self.seconds = float(state.get("seconds", 0.0))
        return state["step"], state.get("best")

    def save(self, step: int, best: dict | None, seconds: float) -> None:
        state = {"model": self.model.state_dict(), "optimizer": self.opt.state_dict(), "step": step, "best": best}
        kept = {**self.kept, "rng": torch.get_rng_state(), "planned": self.planned, "seconds": seconds}
        save_atomic({**state, **kept}, self.out / "last.pt")

    def log_line(self, line: dict, log: Callable[[str], object]) -> None:
        with open(self.out / "log.jsonl", "a") as fh:
            fh.write(json.dumps(line) + "\n")
        log(json.dumps(line))


def adamw_run(
    out: Path, model: torch.nn.Module, params: list[torch.nn.Parameter], per_epoch: int, config: Any, kept: dict
) -> PlannedRun:
    """A run of ``config.epochs`` epochs of ``per_epoch`` batches with AdamW
    (:func:`~rckit.training.optim.adamw`) and the linear schedule
    (:func:`~rckit.training.optim.linear_schedule`); ``config`` gives ``lr``, ``weight_decay``,
    ``warmup``, ``epochs`` and ``eval_every``."""
    planned = int(config.epochs * per_epoch)
    opt = adamw(params, config.lr, config.weight_decay)
    schedule = linear_schedule(config.lr, config.warmup, planned)
    return PlannedRun(out, model, params, opt, schedule, planned, per_epoch, config.eval_every, kept)


def run_steps(
    run: PlannedRun,
    step: int,
    best: dict | None,
    order: Callable[[int], list[list[int]]],
    loss_of: Callable[[list[int]], torch.Tensor],
    figures: Callable[[], dict],
    keep: Callable[[dict, dict | None], dict | None],
    bar: tqdm,
    minutes: float | None = None,
    max_steps: int | None = None,
    log: Callable[[str], object] = print,
) -> dict:
    """Train from ``step`` until the plan ends, ``minutes`` of this call pass or ``max_steps`` are
    done in all. ``order(epoch)``: that epoch's batches (lists of example indices); ``loss_of(batch)``:
    the batch's loss; ``figures()``: the held-out figures, written with the step, the mean training
    loss since the last line and the seconds; ``keep(line, best)``: the new best (and whatever the
    job saves with it) or ``None`` to keep ``best``. Returns the steps done, planned, the best
    figures and whether the plan is done."""
    started = time.time()

    def elapsed() -> float:
        return run.seconds + time.time() - started

    loss_sum, loss_n = 0.0, 0
    while step < run.planned:
        epoch, within = divmod(step, run.per_epoch)
        for idx in order(epoch)[within:]:
            for g in run.opt.param_groups:
                g["lr"] = run.lr_at(step)
            loss = loss_of(idx)
            run.opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(run.params, 1.0)
            run.opt.step()
            step += 1
            loss_sum, loss_n = loss_sum + loss.item(), loss_n + 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss_sum / loss_n:.5f}")
            out_of_time = minutes is not None and time.time() - started > minutes * 60
            stop = out_of_time or (max_steps is not None and step >= max_steps) or step >= run.planned
            evaluate = step % run.eval_every == 0 or stop
            if evaluate:
                held = figures()
                line = {"step": step, "loss": loss_sum / loss_n, **held, "seconds": round(elapsed(), 1)}
                loss_sum, loss_n = 0.0, 0
                run.log_line(line, log)
                best = keep(line, best) or best
            if evaluate or step % SAVE_EVERY == 0:
                run.save(step, best, elapsed())
            if stop:
                bar.close()
                return {"step": step, "planned": run.planned, "best": best, "done": step >= run.planned}
    bar.close()
    return {"step": step, "planned": run.planned, "best": best, "done": True}
