"""The learning-rate schedule: linear warmup, then cosine decay to a floor (or a constant rate)."""

from __future__ import annotations

import math

SCHEDULES = ("cosine", "constant")


def lr_at(progress_step: float, lr: float, min_lr: float, warmup_steps: int, total_steps: float,
          schedule: str = "cosine") -> float:
    """Linear warmup over `warmup_steps`, then cosine decay from `lr` to `min_lr` at `total_steps`.

    `progress_step` may be fractional (a time budget converts elapsed seconds into steps).
    """
    if schedule == "constant":
        return lr
    if warmup_steps > 0 and progress_step < warmup_steps:
        return lr * (progress_step + 1) / (warmup_steps + 1)
    if progress_step >= total_steps:
        return min_lr
    ratio = (progress_step - warmup_steps) / max(1e-9, total_steps - warmup_steps)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)
