"""How ``rckit adapt`` fine-tunes a trained reader on a few hundred of a user's questions.

The recipe of the field for a new domain (DrQA's maintainers, Haystack's ``FARMReader.train``,
transformers' ``run_qa.py``): start from the model trained on SQuAD, train a few epochs at a low
learning rate on the user's questions with SQuAD's mixed in (:mod:`rckit.data.adapt`), keep the
epoch that scores best on the user's held-out documents. :func:`adapt_train_config` derives that
run's settings from the ones the model was trained with:

- the learning rate ``lr_scale`` times the model's, falling in a straight line to 0 over the run,
  no warm-up (the weights are trained already; a warm-up would spend a small run's steps);
- no weight averaging (``ema_decay`` 0): over a hundred steps an average would stay at the start;
- one evaluation and one checkpoint per epoch, over every dev question;
- DCN+'s mixed objective from the first step (the model ended its training on it).

The batch size, dropout, loss and every model setting stay the model's own.
"""

from __future__ import annotations

import math
from dataclasses import replace

from rckit.config import from_dict
from rckit.training.config import TrainConfig

LR_SCALE = 0.1  # of the model's own learning rate
EPOCHS = 4


def adapt_train_config(
    train_config: dict, examples: int, epochs: int = EPOCHS, lr_scale: float = LR_SCALE
) -> tuple[TrainConfig, int]:
    """(the settings of the fine-tune, its number of steps) for ``examples`` training questions
    (the user's and the SQuAD ones mixed in), from the ``train_config`` a model was saved with."""
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1, got {epochs}")
    if not lr_scale > 0:
        raise ValueError(f"the learning-rate scale must be positive, got {lr_scale}")
    cfg = from_dict(TrainConfig, train_config) if train_config else TrainConfig()
    per_epoch = max(1, math.ceil(examples / cfg.batch_size))
    cfg = replace(
        cfg,
        lr=cfg.lr * lr_scale,
        warmup_steps=0,
        decay_from=0,
        decay_steps=0,
        decay_share=1.0,
        ema_decay=0.0,
        reward_from=0,
        eval_every=per_epoch,
        eval_questions=0,
        checkpoint_every=per_epoch,
        log_every=max(1, min(cfg.log_every, per_epoch)),
    )
    return cfg, per_epoch * epochs
