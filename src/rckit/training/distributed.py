"""Data-parallel set-up for ``torchrun``: gloo on CPU, nccl on CUDA; rank 0 writes files."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: torch.device) -> DistInfo:
    """Join the process group when launched by torchrun (``WORLD_SIZE`` > 1)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def largest(values: list[float], info: DistInfo, device: torch.device) -> list[float]:
    """Each value's maximum over the ranks, on every rank, in one collective (a stop flag seen
    by any rank, the slowest rank's clock)."""
    if not info.enabled:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64 if device.type == "cpu" else torch.float32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()
