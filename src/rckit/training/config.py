"""How a model is trained: :class:`TrainConfig`, the ``train`` section of a preset.

Kept apart from the loop (:mod:`rckit.training.loop`) so that reading or writing a preset
(:mod:`rckit.presets`) imports no PyTorch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrainConfig:
    batch_size: int = 32  # global: split across processes under torchrun
    optimizer: str = "adam"  # "adam" (beta1, beta2, eps) or "rmsprop" (rmsprop_alpha, momentum, eps)
    lr: float = 1e-3
    warmup_steps: int = 1000  # lr = lr * log(step + 1) / log(warmup_steps), then constant
    decay_from: int = 0  # with decay_steps > 0: the lr falls linearly from this step ...
    decay_steps: int = 0  # ... to 0 over this many steps (0: no decay placed by steps)
    decay_share: float = (
        0.0  # else: the lr falls linearly to 0 over this last share of the run's time budget (or max_steps)
    )
    beta1: float = 0.8
    beta2: float = 0.999
    eps: float = 1e-7
    rmsprop_alpha: float = 0.95  # RMSProp's decay of the squared-gradient average
    momentum: float = 0.9  # RMSProp only
    weight_decay: float = 3e-7  # L2 on every trainable parameter (added to the gradient)
    grad_clip: float = 5.0
    reward_from: int = 0  # models with a reward term (DCN+'s mixed objective): cross-entropy alone before this step
    copy_steps: int = 0  # cloze attention readers: add the copy task's loss for the first copy_steps steps
    copy_weight: float = 1.0  # its weight
    ema_decay: float = 0.9999  # 0: no averaging, evaluation and checkpoints use the raw weights
    max_c_len: int = 400  # training only; evaluation reads every context whole (cloze: document length)
    renumber_entities: bool = True  # cloze: draw the entity numbering afresh for every training batch
    max_q_len: int = 50
    long_contexts: str = "truncate"  # "truncate" (keep if the answer fits) or "drop"
    eval_every: int = 1000
    eval_questions: int = 2000  # fixed random dev subset for periodic evaluation; 0 = all
    log_every: int = 50
    checkpoint_every: int = 500
    amp: str = "auto"  # "bf16", "fp32" or "auto" (bf16 on CUDA with bf16 support; on CPU where the model trains faster)
    seed: int = 0
    pool_batches: int = 50


def parse_duration(text: str | None) -> float | None:
    """A training time budget in seconds: ``'45m'`` -> 2700.0; s, m and h suffixes or plain seconds."""
    if text is None:
        return None
    units = {"s": 1, "m": 60, "h": 3600}
    t = text.strip().lower()
    try:
        return float(t[:-1]) * units[t[-1]] if t[-1:] in units else float(t)
    except ValueError:
        raise ValueError(f"cannot read {text!r} (use e.g. 90s, 45m, 2h)") from None
