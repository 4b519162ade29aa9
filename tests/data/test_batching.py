from collections import Counter

import numpy as np
import pytest
import torch

from rckit.data.batching import BucketBatchSampler
from rckit.data.prepare import PrepareConfig, prepare_squad


@pytest.mark.parametrize("n, bs", [(1, 4), (97, 8), (1000, 32), (64, 64)])
def test_every_example_exactly_once_per_epoch(n, bs):
    lengths = np.random.default_rng(n).integers(1, 400, n)
    s = BucketBatchSampler(lengths, bs, seed=3)
    for epoch in range(3):
        s.set_epoch(epoch)
        batches = list(s)
        flat = [i for b in batches for i in b]
        assert sorted(flat) == list(range(n))
        assert len(batches) == len(s) and all(1 <= len(b) <= bs for b in batches)


def test_buckets_reduce_padding_and_epochs_differ():
    lengths = np.random.default_rng(0).integers(20, 700, 5000)
    s = BucketBatchSampler(lengths, 32, seed=1, pool_batches=50)

    def padding(batches):
        return sum(len(b) * lengths[b].max() - lengths[b].sum() for b in map(np.array, batches)) / lengths.sum()

    bucketed = list(s)
    rng = np.random.default_rng(0)
    perm = rng.permutation(5000)
    unbucketed = [perm[i : i + 32] for i in range(0, 5000, 32)]
    assert padding(bucketed) < 0.1 * padding(unbucketed)
    s.set_epoch(1)
    assert list(s) != bucketed  # a new order each epoch
    s.set_epoch(0)
    assert list(s) == bucketed  # and the same order for the same (seed, epoch): resumable


def test_no_shuffle_is_longest_first_and_complete():
    lengths = np.array([5, 9, 1, 7, 3])
    s = BucketBatchSampler(lengths, 2, shuffle=False)
    assert list(s) == [[1, 3], [0, 4], [2]]


@pytest.mark.parametrize("n, bs, R", [(100, 8, 2), (101, 8, 3), (7, 4, 2), (64, 8, 4)])
def test_replicas_split_the_epoch_without_overlap(n, bs, R):
    lengths = np.random.default_rng(n).integers(1, 50, n)
    per_rank = [list(BucketBatchSampler(lengths, bs, seed=0, num_replicas=R, rank=r)) for r in range(R)]
    counts = Counter(i for batches in per_rank for b in batches for i in b)
    assert max(counts.values()) == 1  # nobody sees an example twice
    assert len({len(b) for b in per_rank}) == 1  # every rank takes the same number of steps
    assert n - len(counts) < R  # at most R-1 leftovers wait for the next epoch


def test_collate_masks_padding_and_truncation(tiny_squad, tiny_glove, tmp_path):
    train, dev = tiny_squad
    p = prepare_squad(train, {"dev": dev}, tmp_path, PrepareConfig(embeddings=str(tiny_glove)))
    split = p.split("train")
    b = split.collate([0, 2])
    assert b.c_words.shape == b.c_mask.shape and b.c_chars.shape[:2] == b.c_mask.shape
    assert b.c_mask.dtype == torch.bool
    assert b.c_mask.sum(1).tolist() == [int(split.c_len[0]), int(split.c_len[2])]
    assert (b.c_words[~b.c_mask] == 0).all() and (b.c_chars[~b.c_mask] == 0).all()
    assert (b.c_chars[b.c_mask][:, 0] > 0).all()  # every real token has a first character
    # Truncating the context below the answer marks the target as unusable instead of dropping it.
    i = split.qids.index("t2")  # answer near the end of its context
    cut = split.collate([i], max_c_len=5)
    assert cut.c_words.shape[1] == 5 and cut.y_start.item() == -1
    full = split.collate([i])
    assert full.y_start.item() >= 5
