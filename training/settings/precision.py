"""The precision a run computes in, decided once a resume has restored its checkpoint's settings.

Design choices (docs/en/training.md, "Precision and compile"):
- bf16 autocast is faster on some CPUs with bf16 instructions and slower on others, so `train.dtype=auto` there
  times steps of this run's own model in both and takes bf16 only where it is clearly faster (`BF16_MARGIN`), from
  paired rounds that a momentary or drifting load cannot tip, saying and recording both timings.
- The job records the precision resolved, so a resume keeps it without measuring again; a typed `train.dtype` is
  never second-guessed, and one this device cannot run is refused before any work.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from common.device import DTYPES, autocast, cpu_bf16_forced, cpu_has_native_bf16, precision_line, run_precision
from data.sampler import BatchSampler
from training import distributed
from training.guards.memory import fit_memory
from training.optim.factory import make_optimizer
from training.settings.auto import token_seconds
from training.settings.config import TrainJob

NAMES = {dtype: name for name, dtype in DTYPES.items()}
ROUNDS = 7  # paired rounds, one step in each precision a round: with a warm-up step in each, 16 steps
# bf16 rounds every matmul's inputs to 8 bits of mantissa: a smaller gain does not pay for the precision it costs, and
# a busy machine's timings differ between runs by about as much, so under it float32 stays.
BF16_MARGIN = 1.15
SIDES = ("bfloat16", "float32")


def measured_on_this_cpu(job: TrainJob, device: torch.device) -> bool:
    """Whether `train.dtype=auto` is decided by timing this run's steps (a CPU with bf16 instructions, unforced)."""
    return job.train.dtype == "auto" and device.type == "cpu" and cpu_bf16_forced() is None and cpu_has_native_bf16()


def run_dtype(job: TrainJob, device: torch.device) -> tuple[torch.dtype | None, str | None]:
    """The run's dtype on `device`, recorded in `job` as resolved, and the line that says it where worth it
    (common/device.py `precision_line`), which setup prints once every check has passed; (None, None) where it is
    measured once the model is built (`measured_dtype`)."""
    if measured_on_this_cpu(job, device):
        return None, None
    dtype, line = run_precision(job.train.dtype, job.train.compile == "true", device)
    job.train.dtype = NAMES[dtype]
    return dtype, line


def bf16_speedup(rounds: Sequence[Sequence[float]]) -> float:
    """How many times faster a bf16 step is than a float32 one, from paired rounds of (bf16, float32) times: the
    median of each round's float32 time over its bf16 time. Each ratio compares neighbouring steps, so a load that
    drifts cancels out; the median ignores rounds that a momentary load hit (fewer than half of them)."""
    return statistics.median(float32 / bf16 for bf16, float32 in rounds)


def precision_for(speedup: float) -> str:
    """bfloat16 where it makes a step at least `BF16_MARGIN` times faster, else float32."""
    return "bfloat16" if speedup >= BF16_MARGIN else "float32"


def measured_dtype(
    job: TrainJob, model: nn.Module, train_tokens: np.ndarray, device: torch.device, dist: distributed.DistInfo
) -> tuple[torch.dtype, str, dict]:
    """float32 or bf16 autocast, whichever `precision_for` takes for this run's steps timed here: (dtype, the
    precision line, the record: milliseconds per step in each, bf16's speedup and the tokens/s of the one chosen)."""
    t = job.train
    batches = BatchSampler(train_tokens, model.context_length, t.batch_size, device, job.seed + 7919, dist.rank)
    tokens = t.batch_size * model.context_length

    def optimizer_for(m: nn.Module) -> torch.optim.Optimizer:
        return make_optimizer(m, t.lr, t.weight_decay, (t.beta1, t.beta2), device, t)

    with fit_memory(model, t, device, torch.float32):  # a batch that cannot fit: one line before it is allocated
        sides = [lambda n=name: autocast(device, DTYPES[n]) for name in SIDES]
        rounds = token_seconds(model, optimizer_for, batches, sides, ROUNDS, t.grad_clip)
    # one choice on every rank: the least speedup and the slowest steps of any
    speedup = 1 / distributed.agreed_max(1 / bf16_speedup(rounds), dist, device)
    ms = {
        name: distributed.agreed_max(1000 * tokens * statistics.median(r[i] for r in rounds), dist, device)
        for i, name in enumerate(SIDES)
    }
    name = job.train.dtype = precision_for(speedup)
    why = (
        f"train.dtype=auto; measured on this CPU, a step takes {ms['bfloat16']:.1f} ms in bfloat16 and "
        f"{ms['float32']:.1f} ms in float32; bfloat16 is taken when {BF16_MARGIN:g}x as fast or more, and was "
        f"{speedup:.2f}x"
    )
    line = precision_line(DTYPES[name], why, device) or f"precision: float32 on {device} ({why})"
    record = {
        "step_ms": {k: round(v, 2) for k, v in ms.items()},
        "bf16_speedup": round(speedup, 3),
        "chosen": name,
        "tokens_per_sec": 1000 * tokens / ms[name],
    }
    return DTYPES[name], line, record
