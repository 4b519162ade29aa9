import os
import subprocess
import sys

import pytest

# Allocate 40 tensors of 4 MiB with a small tensor kept alive after each (so the heap cannot
# shrink from its top), free the big ones, three times over; print the resident MiB left.
CHILD = r"""
import sys, torch
from rckit.training.memory import heap_for_inference, limit_heap_growth
if sys.argv[1] == "limit":
    assert limit_heap_growth()
if sys.argv[1] == "inference":
    assert limit_heap_growth() and heap_for_inference()
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
keep = []
base = rss()
for _ in range(3):
    big = []
    for _ in range(40):
        big.append(torch.ones(2**20))  # 4 MiB
        keep.append(torch.ones(64))
    del big
print(rss() - base)
"""


def resident_after_free(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}, check=True)
    return float(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc (Linux)")
def test_limit_heap_growth_gives_freed_tensors_back():
    # glibc's default raises its mmap threshold after the first frees: later 4 MiB tensors come
    # from the heap, which cannot shrink past the small tensors kept above them.
    assert resident_after_free("default") > 100
    assert resident_after_free("limit") < 40
    # inference puts the threshold at glibc's ceiling: 4 MiB blocks come from the heap again
    assert resident_after_free("inference") > 100
