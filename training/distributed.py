"""torchrun / DistributedDataParallel support: NCCL on CUDA, gloo on the CPU."""

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


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def init_distributed(device_name: str) -> DistInfo:
    """Join the process group when started by torchrun; otherwise a single-process DistInfo."""
    if not launched_by_torchrun():
        return DistInfo()
    info = DistInfo(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0)))
    use_cuda = torch.cuda.is_available() and str(device_name).split(":")[0] in ("auto", "cuda")
    if use_cuda:
        torch.cuda.set_device(info.local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return info


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def all_reduce_mean(value: float, info: DistInfo, device: torch.device) -> float:
    if not info.enabled:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.item() / info.world_size


def any_rank(flag: bool, info: DistInfo, device: torch.device) -> bool:
    """True on every rank when it is true on one (used to stop all ranks together)."""
    if not info.enabled:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def cleanup(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()
