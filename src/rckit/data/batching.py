"""Length-bucketed batches of prepared SQuAD data.

A :class:`Batch` is what every span model receives. Masks are ``True`` on real tokens.
Token spans are inclusive; ``y_start``/``y_end`` are -1 when the example has no usable
answer (SQuAD v2.0 no-answer, or evaluation data where only the answer texts matter).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

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

    def __post_init__(self):
        if self.answerable is None:  # asked of a model: nobody knows, so nothing is marked unanswerable
            self.answerable = torch.ones_like(self.y_start, dtype=torch.bool)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Batch":
        return Batch(**{f.name: getattr(self, f.name).to(device, non_blocking=non_blocking) for f in fields(self)})

    def __len__(self) -> int:
        return self.c_words.shape[0]


class SquadSplit:
    """One prepared split held as flat numpy arrays (see ``rckit.data.prepare``)."""

    ARRAYS = (
        "form_words", "form_chars", "ctx_ptr", "ctx_forms", "ctx_offsets",
        "q_ptr", "q_forms", "q_ctx", "y_start", "y_end", "answerable",
    )  # fmt: skip

    def __init__(self, arrays: dict[str, np.ndarray], qids: list[str], contexts: list[str]):
        missing = [k for k in self.ARRAYS if k not in arrays]
        if missing:
            raise ValueError(f"split is missing arrays: {missing}")
        self.a = arrays
        self.qids = qids
        self.contexts = contexts
        ctx_len = np.diff(arrays["ctx_ptr"])
        self.c_len = ctx_len[arrays["q_ctx"]]  # (n_q,) context length of each question
        self.q_len = np.diff(arrays["q_ptr"])

    @classmethod
    def from_arrays(cls, arrays, qids, contexts) -> "SquadSplit":
        return cls(arrays, qids, contexts)

    @classmethod
    def load(cls, root: str | Path, name: str) -> "SquadSplit":
        root = Path(root)
        if not (root / f"{name}.text.json").exists():
            raise FileNotFoundError(f"{root}: no prepared split named {name!r}")
        arrays = {k: np.load(root / f"{name}.{k}.npy") for k in cls.ARRAYS}
        text = json.loads((root / f"{name}.text.json").read_text())
        return cls(arrays, text["qids"], text["contexts"])

    def __len__(self) -> int:
        return len(self.q_len)

    def context_of(self, i: int) -> tuple[str, np.ndarray]:
        """Context text and its (T, 2) token character offsets for question ``i``."""
        c = int(self.a["q_ctx"][i])
        lo, hi = self.a["ctx_ptr"][c], self.a["ctx_ptr"][c + 1]
        return self.contexts[c], self.a["ctx_offsets"][lo:hi]

    def collate(self, indices, max_c_len: int | None = None, max_q_len: int | None = None) -> Batch:
        """Pad the examples ``indices`` to the longest in the batch (after truncation).

        Answers that end beyond a truncated context get ``y = -1``; training code chooses
        which examples to feed, so nothing is dropped here.
        """
        a = self.a
        idx = np.asarray(indices, dtype=np.int64)
        c_len = self.c_len[idx]
        q_len = self.q_len[idx]
        if max_c_len is not None:
            c_len = np.minimum(c_len, max_c_len)
        if max_q_len is not None:
            q_len = np.minimum(q_len, max_q_len)
        c_lo = a["ctx_ptr"][a["q_ctx"][idx]]
        y_start = a["y_start"][idx].astype(np.int64)
        y_end = a["y_end"][idx].astype(np.int64)
        cut = y_end >= c_len
        y_start[cut] = -1
        y_end[cut] = -1
        return assemble(a, c_lo, c_len, a["q_ptr"][idx], q_len, y_start, y_end, idx, a["answerable"][idx])


def assemble(a: dict[str, np.ndarray], c_lo, c_len, q_lo, q_len, y_start, y_end, index, answerable=None) -> Batch:
    """A padded :class:`Batch` of example ``b`` = context tokens ``ctx_forms[c_lo[b]:c_lo[b] +
    c_len[b]]`` and question tokens ``q_forms[q_lo[b]:q_lo[b] + q_len[b]]`` of the arrays ``a``
    (:func:`rckit.data.padding.padded_inputs`, as tensors). ``answerable`` defaults to True
    (questions asked of a model, where nobody knows)."""
    t = torch.from_numpy
    inputs = {k: t(v) for k, v in padded_inputs(a, c_lo, c_len, q_lo, q_len).items()}
    return Batch(**inputs, y_start=t(np.asarray(y_start, np.int64)), y_end=t(np.asarray(y_end, np.int64)),
                 index=t(np.asarray(index, np.int64)),
                 answerable=None if answerable is None else t(np.asarray(answerable, bool)))


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
