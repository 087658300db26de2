"""The learning-rate schedule: linear warmup, then cosine decay to a floor (or a constant rate)."""

from __future__ import annotations

import math

SCHEDULES = ("cosine", "constant")


def lr_at(
    progress_step: float, lr: float, min_lr: float, warmup_steps: int, total_steps: float, schedule: str = "cosine"
) -> float:
    """Linear warmup over `warmup_steps`, then cosine decay from `lr` to `min_lr` at `total_steps`.

    `progress_step` may be fractional (a time budget converts elapsed seconds into steps).
    """
    decayed = (progress_step - warmup_steps) / max(1e-9, total_steps - warmup_steps)
    fraction = decayed if progress_step < total_steps else 1.0
    return lr_at_fraction(progress_step, fraction, lr, min_lr, warmup_steps, schedule)


def lr_at_fraction(
    step: int, fraction: float, lr: float, min_lr: float, warmup_steps: int, schedule: str = "cosine"
) -> float:
    """Linear warmup over the first `warmup_steps` steps, then the decay by the `fraction` of the run done.

    A run whose only limit is a time budget knows how far along it is (elapsed / budget), not how many steps it
    will make: the decay follows that fraction, so the rate reaches `min_lr` when the time runs out.
    """
    if schedule == "constant":
        return lr
    if warmup_steps > 0 and step < warmup_steps:
        return lr * (step + 1) / (warmup_steps + 1)
    ratio = min(1.0, max(0.0, fraction))
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)
