"""How rckit's runs learn: the optimisers and the learning-rate schedules.

The reading models' engine (:mod:`rckit.training.loop`) takes Adam or RMSProp with L2
(:func:`make_optimizer`) and the papers' schedule: an inverse-exponential warm-up, a constant rate,
then a straight line down to 0 (:func:`lr_factor`). The runs of planned steps
(:mod:`rckit.training.steps`: the student's distillation, rckit's own reader's fine-tuning) take
AdamW with decay on the matrices only (:func:`adamw`) and BERT's linear warm-up and decay
(:func:`linear_schedule`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from rckit.training.config import TrainConfig


def warmup_factor(step: int, warmup: int) -> float:
    """Inverse-exponential warm-up (log curve) from 0 to 1 over ``warmup`` steps."""
    if warmup <= 1 or step >= warmup - 1:
        return 1.0
    return math.log(step + 1) / math.log(warmup)


def lr_factor(
    step: int, cfg: TrainConfig, elapsed: float = 0.0, time_budget: float | None = None, max_steps: int | None = None
) -> float:
    """The learning rate's multiplier for optimiser step ``step`` (``elapsed`` seconds of training
    so far): the warm-up, then constant, then a straight line down to 0 at the end of the run.

    The decay is placed by steps when ``decay_steps`` > 0 (from 1 at ``decay_from`` to 0 at
    ``decay_from + decay_steps``), else, when ``decay_share`` > 0, on the run's horizon: over
    the last ``decay_share`` of ``time_budget`` in training seconds when the run has one, else
    of ``max_steps``; with neither the rate stays constant. A run ends on the decay, its last
    steps averaging out the noise of a large constant rate instead of stopping in the middle of
    it (docs/investigations/qanet-cpu-small.md, the bundled model; Li et al. 2020 found a linear
    decay to zero over the budget the best simple schedule for budgeted training).
    """
    if cfg.decay_steps > 0:
        if step >= cfg.decay_from:
            return max(0.0, 1.0 - (step - cfg.decay_from) / cfg.decay_steps)
        return warmup_factor(step, cfg.warmup_steps)
    warm = warmup_factor(step, cfg.warmup_steps)
    if cfg.decay_share > 0:
        horizon, now = (time_budget, elapsed) if time_budget else (max_steps, step)
        if horizon and now > (1.0 - cfg.decay_share) * horizon:
            return warm * max(0.0, (horizon - now) / (cfg.decay_share * horizon))
    return warm


def set_learning_rate(opt: torch.optim.Optimizer, lr: float) -> None:
    for group in opt.param_groups:
        group["lr"] = lr


def make_optimizer(params: Iterable[torch.nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    if cfg.optimizer == "adam":
        return torch.optim.Adam(
            params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, weight_decay=cfg.weight_decay
        )
    if cfg.optimizer == "rmsprop":
        return torch.optim.RMSprop(
            params,
            lr=cfg.lr,
            alpha=cfg.rmsprop_alpha,
            eps=cfg.eps,
            momentum=cfg.momentum,
            weight_decay=cfg.weight_decay,
        )
    raise ValueError(f"optimizer must be adam or rmsprop, got {cfg.optimizer!r}")


def adamw(params: Iterable[torch.nn.Parameter], lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices only."""
    params = list(params)
    return torch.optim.AdamW(
        [
            {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
        ],
        lr=lr,
    )


def linear_schedule(lr: float, warmup: float, planned: int) -> Callable[[int], float]:
    """The learning rate at each step: up linearly over ``warmup`` (a share) of ``planned`` steps,
    then down linearly to 0 at ``planned``."""
    warm = max(1, int(warmup * planned))
    return lambda step: lr * min((step + 1) / warm, max(0.0, (planned - step) / max(1, planned - warm)))
