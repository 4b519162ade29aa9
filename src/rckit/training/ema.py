"""Exponential moving average of a model's trainable parameters, swapped in for evaluation.

``shadow <- d * shadow + (1 - d) * param`` after every optimiser step, with
``d = min(decay, (1 + n) / (10 + n))`` at update ``n`` (the warm-up TensorFlow's
``ExponentialMovingAverage(num_updates=...)`` uses): with the paper's 0.9999 the average would
otherwise still be ~37 % random initialisation after 10k steps, which matters for short runs.
Only parameters are averaged; fixed buffers (the GloVe table) never change.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from collections.abc import Iterator


class EMA:
    def __init__(self, model: nn.Module, decay: float):
        self.decay = decay
        self.updates = 0
        self.shadow = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        self.updates += 1
        d = min(self.decay, (1 + self.updates) / (10 + self.updates))
        params = [p for n, p in model.named_parameters() if n in self.shadow]
        shadows = [self.shadow[n] for n, p in model.named_parameters() if n in self.shadow]
        torch._foreach_lerp_(shadows, params, 1.0 - d)

    @contextmanager
    def swapped_in(self, model: nn.Module) -> Iterator[nn.Module]:
        """Evaluate with the averaged weights; the training weights come back afterwards."""
        backup = {}
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n in self.shadow:
                    backup[n] = p.detach().clone()
                    p.copy_(self.shadow[n])
        try:
            yield model
        finally:
            with torch.no_grad():
                for n, p in model.named_parameters():
                    if n in backup:
                        p.copy_(backup[n])

    def state_dict(self) -> dict:
        return {"decay": self.decay, "updates": self.updates, "shadow": dict(self.shadow)}

    def load_state_dict(self, state: dict) -> None:
        if set(state["shadow"]) != set(self.shadow):
            raise ValueError("EMA state does not match the model's parameters")
        self.decay = state["decay"]
        self.updates = state["updates"]
        for n, t in state["shadow"].items():
            self.shadow[n].copy_(t)
