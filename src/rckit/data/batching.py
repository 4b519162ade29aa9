"""Length-bucketed batches of prepared SQuAD data.

A :class:`Batch` is what every span model receives. Masks are ``True`` on real tokens.
Token spans are inclusive; ``y_start``/``y_end`` are -1 when the example has no usable
answer (SQuAD v2.0 no-answer, or evaluation data where only the answer texts matter).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


@dataclass
class Batch:
    c_words: torch.Tensor  # (B, Tc) long, 0 = <pad>, 1 = <unk>
    c_chars: torch.Tensor  # (B, Tc, W) long, 0 = <pad>, 1 = <unk>
    c_mask: torch.Tensor  # (B, Tc) bool
    q_words: torch.Tensor  # (B, Tq) long
    q_chars: torch.Tensor  # (B, Tq, W) long
    q_mask: torch.Tensor  # (B, Tq) bool
    y_start: torch.Tensor  # (B,) long, inclusive token index or -1
    y_end: torch.Tensor  # (B,) long, inclusive token index or -1
    index: torch.Tensor  # (B,) long, row of each example in its split

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Batch":
        return Batch(**{f.name: getattr(self, f.name).to(device, non_blocking=non_blocking) for f in fields(self)})

    def __len__(self) -> int:
        return self.c_words.shape[0]
