"""The precision a run computes in, decided once a resume has restored its checkpoint's settings.

Design choices (docs/en/training.md, "Precision and compile"):
- bf16 autocast is faster on some CPUs with bf16 instructions and slower on others, so `train.dtype=auto` there
  times a few steps of this run's own model in both and takes the faster, saying and recording both timings.
- The job records the precision resolved, so a resume keeps it without measuring again; a typed `train.dtype` is
  never second-guessed, and one this device cannot run is refused before any work.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from common.device import DTYPES, autocast, cpu_bf16_forced, cpu_has_native_bf16, precision_line, run_precision
from data.sampler import BatchSampler
from training import distributed
from training.guards.memory import fit_memory
from training.optim.factory import make_optimizer
from training.settings.auto import measured_tokens_per_sec
from training.settings.config import TrainJob

NAMES = {dtype: name for name, dtype in DTYPES.items()}
ROUNDS = 2  # the two precisions take turns, each timed this many times; the faster time of each counts


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


def measured_dtype(
    job: TrainJob, model: nn.Module, train_tokens: np.ndarray, device: torch.device, dist: distributed.DistInfo
) -> tuple[torch.dtype, str, dict]:
    """float32 or bf16 autocast, whichever makes this run's steps faster here: (dtype, the precision line, the
    record: milliseconds per step in each and the tokens/s of the one chosen)."""
    t = job.train
    batches = BatchSampler(train_tokens, model.context_length, t.batch_size, device, job.seed + 7919, dist.rank)
    tokens = t.batch_size * model.context_length
    ms = {"float32": math.inf, "bfloat16": math.inf}

    def optimizer_for(m: nn.Module) -> torch.optim.Optimizer:
        return make_optimizer(m, t.lr, t.weight_decay, (t.beta1, t.beta2), device, t)

    with fit_memory(model, t, device, torch.float32):  # a batch that cannot fit: one line before it is allocated
        for name in list(ms) * ROUNDS:
            speed = measured_tokens_per_sec(model, optimizer_for, batches, lambda n=name: autocast(device, DTYPES[n]))
            ms[name] = min(ms[name], 1000 * tokens / speed)
    ms = {name: distributed.agreed_max(value, dist, device) for name, value in ms.items()}  # one choice on every rank
    name = "bfloat16" if ms["bfloat16"] < ms["float32"] else "float32"
    job.train.dtype = name
    why = (
        f"train.dtype=auto; measured on this CPU, a step takes {ms['bfloat16']:.1f} ms in bfloat16 and "
        f"{ms['float32']:.1f} ms in float32"
    )
    line = precision_line(DTYPES[name], why, device) or f"precision: float32 on {device} ({why})"
    record = {
        "step_ms": {k: round(v, 2) for k, v in ms.items()},
        "chosen": name,
        "tokens_per_sec": 1000 * tokens / ms[name],
    }
    return DTYPES[name], line, record
