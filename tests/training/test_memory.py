import os
import subprocess
import sys

import pytest

from rckit.training.memory import huge_page_mode

# Allocate 40 tensors of 4 MiB with a small tensor kept alive after each (so the heap cannot
# shrink from its top), free the big ones, three times over; print the resident MiB left and
# the MiB glibc held in mmapped blocks while the last 40 were alive (mallinfo2's hblkhd).
CHILD = r"""
import ctypes, sys, torch
from rckit.training.memory import heap_for_inference, limit_heap_growth
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
mallinfo2.restype = Info
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
    mapped = mallinfo2().hblkhd / 2**20
    del big
print(rss() - base, mapped)
"""


def after_free(mode: str) -> tuple[float, float]:
    """(MiB still resident after the frees, MiB in mmapped blocks while the last round was allocated)."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")},
        check=True,
    )
    resident, mapped = out.stdout.strip().splitlines()[-1].split()
    return float(resident), float(mapped)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc (Linux)")
def test_limit_heap_growth_gives_freed_tensors_back():
    # glibc's default raises its mmap threshold after the first frees: later 4 MiB tensors come
    # from the heap (their memory is not given back while small blocks sit above them; how much
    # stays resident depends on where glibc put the small ones, so the test checks the mapping).
    resident, mapped = after_free("default")
    assert mapped < 40
    # under the limit every 4 MiB tensor is its own mapping, unmapped when freed
    resident, mapped = after_free("limit")
    assert mapped >= 160 and resident < 40
    # inference puts the threshold at glibc's ceiling: 4 MiB blocks come from the heap again
    resident, mapped = after_free("inference")
    assert mapped < 40


# Fill eight 32 MiB tensors and print the MiB of the process backed by huge pages.
THP_CHILD = r"""
import sys
from rckit.training.memory import use_huge_pages
print(use_huge_pages())
import torch
big = [torch.ones(2**23) for _ in range(8)]
print(sum(int(l.split()[1]) for l in open("/proc/self/smaps") if l.startswith("AnonHugePages:")) / 1024)
"""


@pytest.mark.skipif(huge_page_mode() not in ("madvise", "always"), reason="kernel without transparent huge pages")
def test_use_huge_pages_backs_large_tensors_with_huge_pages():
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}

    def run(extra):
        out = subprocess.run(
            [sys.executable, "-c", THP_CHILD], capture_output=True, text=True, env={**env, **extra}, check=True
        ).stdout.split()
        return out[0] == "True", float(out[1])

    on, huge = run({})
    assert on and huge >= 64  # most of the 256 MiB; the kernel may fall back to small pages for some
    off, huge = run({"THP_MEM_ALLOC_ENABLE": "0"})  # the user's setting wins
    assert not off
    if huge_page_mode() == "madvise":  # only madvised memory gets huge pages
        assert huge < 8


@pytest.mark.parametrize(
    "argv, trains",
    [
        (["score", "no-such.json", "no-such.json"], False),
        (["evaluate", "no-such-run"], False),
        (["predict", "no-such-run", "--context", "a b", "--question", "c ?"], False),
        (["train", "nosuchmodel", "--out", "x"], True),
        (["bench", "nosuchmodel"], True),
        (["sweep", "nosuchmodel", "--out", "x"], True),
    ],
)
def test_only_the_commands_that_train_turn_huge_pages_on_before_torch_is_imported(argv, trains, tmp_path):
    # Each command fails at once on its missing input (exit 2), after its allocator set-up.
    code = (
        f"import os, sys; from rckit.cli import main; code = main({argv!r}); "
        "print(code, os.environ.get('THP_MEM_ALLOC_ENABLE'), 'torch' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, check=True
    ).stdout.split()
    available = sys.platform.startswith("linux") and huge_page_mode() in ("always", "madvise")
    assert out[0] == "2" and out[1] == ("1" if trains and available else "None")
    if argv[0] == "score":
        assert out[2] == "False"  # scoring never needs torch


def test_huge_pages_cannot_be_turned_on_once_torch_is_imported():
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    code = "import torch; from rckit.training.memory import use_huge_pages; print(use_huge_pages())"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout.strip()
        == "False"
    )  # too late once torch is in
