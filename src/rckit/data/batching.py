"""Length-bucketed batches of prepared SQuAD data.

A :class:`Batch` is what every span model receives. Masks are ``True`` on real tokens.
Token spans are inclusive; ``y_start``/``y_end`` are -1 when the example has no usable
answer (SQuAD v2.0 no-answer, or evaluation data where only the answer texts matter).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch

from rckit.data.padding import padded_inputs


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
    answerable: torch.Tensor | None = None  # (B,) bool, False for a SQuAD v2.0 question without an answer
    c_states: torch.Tensor | None = None  # (B, Tc, K, D) float, contextual states (a model with `contextual`)
    q_states: torch.Tensor | None = None  # (B, Tq, K, D) float

    def __post_init__(self):
        if self.answerable is None:  # asked of a model: nobody knows, so nothing is marked unanswerable
            self.answerable = torch.ones_like(self.y_start, dtype=torch.bool)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        return Batch(
            **{
                f.name: None
                if getattr(self, f.name) is None
                else getattr(self, f.name).to(device, non_blocking=non_blocking)
                for f in fields(self)
            }
        )

    def __len__(self) -> int:
        return self.c_words.shape[0]


def assemble(a: dict[str, np.ndarray], c_lo, c_len, q_lo, q_len, y_start, y_end, index, answerable=None) -> Batch:
    """A padded :class:`Batch` of example ``b`` = context tokens ``ctx_forms[c_lo[b]:c_lo[b] +
    c_len[b]]`` and question tokens ``q_forms[q_lo[b]:q_lo[b] + q_len[b]]`` of the arrays ``a``
    (:func:`rckit.data.padding.padded_inputs`, as tensors). ``answerable`` defaults to True
    (questions asked of a model, where nobody knows)."""
    t = torch.from_numpy
    inputs = {k: t(v) for k, v in padded_inputs(a, c_lo, c_len, q_lo, q_len).items()}
    return Batch(
        **inputs,
        y_start=t(np.asarray(y_start, np.int64)),
        y_end=t(np.asarray(y_end, np.int64)),
        index=t(np.asarray(index, np.int64)),
        answerable=None if answerable is None else t(np.asarray(answerable, bool)),
    )


class BucketBatchSampler:
    """Batches of similar-length examples, each example exactly once per epoch.

    Each epoch shuffles the examples, cuts them into pools of ``pool_batches`` batches, sorts
    every pool by length and slices it into batches, then shuffles the batch order. Similar
    lengths mean little padding; the pools keep batches random from epoch to epoch. Without
    ``shuffle`` the order is simply longest-first, for evaluation.

    With ``num_replicas > 1`` (data-parallel training) batch ``j`` of the epoch goes to rank
    ``j % num_replicas``; when the batch count does not divide evenly, the last batches are
    split so that every rank gets the same number of batches and still no example repeats.
    """

    def __init__(
        self,
        lengths,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        pool_batches: int = 50,
        num_replicas: int = 1,
        rank: int = 0,
    ):
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} outside [0, {num_replicas})")
        self.lengths = np.asarray(lengths)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.pool_batches = pool_batches
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _all_batches(self) -> list[np.ndarray]:
        n = len(self.lengths)
        if not self.shuffle:
            order = np.argsort(-self.lengths, kind="stable")
            return [order[i : i + self.batch_size] for i in range(0, n, self.batch_size)]
        rng = np.random.default_rng((self.seed, self.epoch))
        perm = rng.permutation(n)
        pool = self.batch_size * self.pool_batches
        batches = []
        for p in range(0, n, pool):
            chunk = perm[p : p + pool]
            chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]
            batches.extend(chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size))
        rng.shuffle(batches)
        return batches

    def _replica_batches(self) -> list[np.ndarray]:
        batches = self._all_batches()
        R = self.num_replicas
        if R == 1:
            return batches
        full = len(batches) - len(batches) % R
        mine = batches[self.rank : full : R]
        tail = batches[full:]
        if tail:  # share the leftover examples out so every rank takes one more step
            rest = np.concatenate(tail)
            parts = np.array_split(rest, R)
            if len(rest) >= R:
                mine.append(parts[self.rank])
            else:  # fewer leftovers than ranks: drop them this epoch (rng moves them next epoch)
                pass
        return mine

    def __iter__(self):
        for b in self._replica_batches():
            yield b.tolist()

    def __len__(self) -> int:
        return len(self._replica_batches())
