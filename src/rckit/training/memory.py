"""CPU allocator settings for the commands that train (``rckit train``, ``bench``, ``sweep``).

Heap growth. glibc's malloc serves blocks above its mmap threshold with their own ``mmap`` and
gives them back on ``free``; smaller blocks come from the heap, which only shrinks from its top.
The threshold rises to the size of every mmapped block that is freed, so after the first steps
a training run's activations all land in the heap, and as bucketed batches change length the
freed holes no longer fit the next batch's tensors: the heap, and the peak resident set, keep
growing past what the run actually holds. :func:`limit_heap_growth` fixes the threshold (which
also stops its rise): tensors of that size and more get their own mapping and go back to the
system the moment they are freed. The price is a page fault per 4 KiB page of each large
tensor's first touch, so slower steps: a choice, ``rckit train --heap-limit-mb N`` (off by
default), for runs that must fit in memory. ``rckit bench --heap-limit-mb N`` sets it for its
training part and then puts the threshold at glibc's ceiling for inference
(:func:`heap_for_inference`). A no-op where the C library is not glibc; the standard
``MALLOC_MMAP_THRESHOLD_`` environment variable, if set, wins.

Huge pages. :func:`use_huge_pages` (called by ``rckit train``, ``bench`` and ``sweep`` where
the kernel has transparent huge pages in ``always`` or ``madvise`` mode) sets PyTorch's
``THP_MEM_ALLOC_ENABLE``: its CPU allocator then asks for transparent huge pages
(``madvise(MADV_HUGEPAGE)``) on every tensor of 2 MiB or more, so one page fault maps 2 MiB
instead of 4 KiB. That is what a CPU run spends its first steps on while the heap grows to the
largest batches; it also lowers the peak resident set. Commands that only evaluate, predict or
score leave the allocator alone. The allocator reads the variable once, at its first
allocation, so it must be set before torch is imported; a value the user set
(``THP_MEM_ALLOC_ENABLE=0`` turns it off) wins.

What each setting costs and saves, measured: docs/benchmark-history.md, "Allocator".
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

THP_ENV = "THP_MEM_ALLOC_ENABLE"  # c10/core/impl/alloc_cpu.cpp
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)
TRAINING_THRESHOLD = 2 * 2**20
INFERENCE_THRESHOLD = 32 * 2**20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit


def set_mmap_threshold(nbytes: int) -> bool:
    """``mallopt(M_MMAP_THRESHOLD, nbytes)``; True if glibc took the setting."""
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (e.g. musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, int(nbytes)) == 1


def limit_heap_growth(threshold: int = TRAINING_THRESHOLD) -> bool:
    """Serve allocations of ``threshold`` bytes and more by mmap (for training)."""
    return set_mmap_threshold(threshold)


def heap_for_inference() -> bool:
    """Serve everything under 32 MiB from the heap (no page faults once it has grown)."""
    return set_mmap_threshold(INFERENCE_THRESHOLD)


def use_huge_pages() -> bool:
    """Turn on transparent huge pages for PyTorch's large CPU tensors; True if they are on.

    Only before torch is imported (see the module docstring); a ``THP_MEM_ALLOC_ENABLE``
    already in the environment is left as it is.
    """
    if not sys.platform.startswith("linux"):
        return False
    if THP_ENV not in os.environ:
        if "torch" in sys.modules:  # too late: the allocator has read the environment already
            return False
        if huge_page_mode() in ("never", None):  # nothing to ask for (and torch would warn that madvise failed)
            return False
        os.environ[THP_ENV] = "1"
    return os.environ[THP_ENV] == "1"


def huge_page_mode() -> str | None:
    """The kernel's transparent-huge-page mode (``always``, ``madvise``, ``never``), or None."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            text = f.read()
    except OSError:
        return None
    return text.split("[", 1)[1].split("]", 1)[0] if "[" in text else None
