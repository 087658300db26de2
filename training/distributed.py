"""torchrun / DistributedDataParallel support: NCCL on CUDA, gloo on the CPU.

Design choices:
- One process's contract where the workers control it: a signal stops every rank after its step, rank 0 saves and
  prints the resume command once, each worker exits 143 (SIGTERM) or 130 (Ctrl-C).
- A rank whose peer died fails in its next collective: `peer_loss_is_one_line` makes that one `error:` line.
- torchrun's agent's own reports (its SignalException, ChildFailedError) are not ours to change.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist

from cli.overrides import shell_path
from common.errors import close_bars


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


def agreed_max(value: float, info: DistInfo, device: torch.device) -> float:
    """The largest of every rank's `value`, on every rank (so all ranks resolve the same setting)."""
    if not info.enabled:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def any_rank(flag: bool, info: DistInfo, device: torch.device) -> bool:
    """True on every rank when it is true on one (used to stop all ranks together)."""
    return agreed_max(float(flag), info, device) > 0


def agreed_signal(received: str | None, info: DistInfo, device: torch.device) -> str | None:
    """The stop signal any rank has received (SIGTERM over SIGINT), the same on every rank: a signal reaches
    the ranks at slightly different moments, and they must all take the same branch of the loop."""
    if not info.enabled:
        return received
    code = agreed_max({"SIGINT": 2.0, "SIGTERM": 15.0}.get(received or "", 0.0), info, device)
    return {2: "SIGINT", 15: "SIGTERM"}.get(int(code))


def cleanup(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()


def _peer_gone(e: BaseException) -> bool:
    text = str(e).lower()
    return isinstance(e, (dist.DistError, ConnectionError)) or any(
        s in text for s in ("connection closed by peer", "connection reset", "broken pipe", "gloo")
    )


@contextlib.contextmanager
def peer_loss_is_one_line(run_dir: str) -> Iterator[None]:
    """Under torchrun, a collective that fails because another rank is gone ends this rank with one line."""
    try:
        yield
    except (RuntimeError, ConnectionError) as e:
        if not (launched_by_torchrun() and dist.is_initialized() and _peer_gone(e)):
            raise
        rank = int(os.environ["RANK"])
        first = re.sub(r"^\[[^\]]*\]\s*", "", " ".join(str(e).split()))[:120]  # without gloo's source location
        close_bars()
        hint = f"; the last checkpoint in {run_dir} is intact: resume with train.resume={shell_path(run_dir)}"
        where = hint if rank == 0 else ""
        print(
            f"error: rank {rank} lost contact with another rank, which stopped or crashed ({first}){where}",
            file=sys.stderr,
            flush=True,
        )
        os._exit(1)  # the process group cannot be shut down cleanly without the peer
