"""Finding the distinct rows of an integer tensor fast enough to pay off at inference.

Evaluation shares work between equal rows: a context asked about by several questions of a
batch, a token that occurs many times (``QANet.encode``, ``InputEmbedding``). PyTorch's
``torch.unique(dim=0)`` sorts the rows with a lexicographic comparison and is slow on CPU:
292 us for 151 tokens of 17 ids, 4.0 ms for 2,000, 22.5 ms for 10,000, where a 1-D
``torch.unique`` over as many int64 keys takes 10-30 us (BENCHMARKS.md, QANet round 5).
:func:`unique_rows` hashes each row to one int64 key, groups the keys, and then checks every
row against its group's representative: a hash collision (two different rows, one key) is
caught and answered by ``torch.unique(dim=0)``, so the result is always exact.
"""

from __future__ import annotations

import functools

import torch


def _weights(n: int, device: torch.device) -> torch.Tensor:
    """``n`` fixed odd int64 multipliers (a seeded draw: the same in every process)."""
    return _draw(max(64, 1 << (n - 1).bit_length()), device)[:n]  # rows of every length share a few draws


@functools.lru_cache(maxsize=16)
def _draw(n: int, device: torch.device) -> torch.Tensor:
    g = torch.Generator().manual_seed(0x5EED)
    w = torch.randint(-(2**62), 2**62, (n,), generator=g, dtype=torch.int64) | 1
    return w.to(device)


def unique_rows(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` (N, M) integer -> ``(rep, inverse)``: ``rep`` (U,) the index of one row of each
    distinct value, ``inverse`` (N,) the group of each row, so ``rows[rep][inverse]`` equals
    ``rows`` and ``U`` is the number of distinct rows. Groups come in no particular order."""
    N, M = rows.shape
    arange = torch.arange(N, device=rows.device)
    if N <= 1:
        return arange, torch.zeros(N, dtype=torch.long, device=rows.device)
    key = (rows.long() * _weights(M, rows.device)).sum(1)  # (N,), wraps modulo 2^64
    _, inverse = torch.unique(key, return_inverse=True)  # (N,)
    rep = inverse.new_empty(int(inverse.max()) + 1).scatter_(0, inverse, arange)  # (U,)
    if not torch.equal(rows[rep][inverse], rows):  # a collision: let the exact sort decide
        _, inverse = torch.unique(rows, dim=0, return_inverse=True)
        rep = inverse.new_empty(int(inverse.max()) + 1).scatter_(0, inverse, arange)
    return rep, inverse


def unique_texts(words: torch.Tensor, chars: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`unique_rows` over texts: ``words`` (N, T), ``chars`` (N, T, W); two texts are equal
    when their word ids and characters are (a token is a text of length 1)."""
    N = words.shape[0]
    return unique_rows(torch.cat([words, chars.reshape(N, -1)], dim=1))
