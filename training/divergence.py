"""Non-finite losses, found without making the CPU wait for the device at every step.

Design choices:
- A step's loss and gradient norm stay tensors on the device (training/step.py): reading one (`.item()`) makes the
  CPU wait until the device has finished that step, so it cannot queue the next one meanwhile.
- `LossWatch` sums the losses of the steps since its last check where they were computed; a NaN or an infinity in
  any of them makes the sum non-finite, so one read at a check covers every step since the one before. The trainer
  checks at every `train.log_interval` (the same read brings the logged loss and gradient norm), before every
  evaluation and before every checkpoint is written, so nothing non-finite is ever saved.
- A run that diverged stops with one line naming the steps between the two checks, the last good checkpoint kept.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from common.errors import UserError


class TrainingDiverged(UserError):
    exit_code = 3


class LossWatch:
    """The losses of the steps taken since the last check (`checked_step`), summed on the device."""

    def __init__(self, checked_step: int = 0):
        self.checked_step = checked_step
        self.total: Tensor | None = None
        self.last: Tensor | None = None  # the last step's loss (read when the run ends)

    def add(self, loss: Tensor) -> None:
        self.total = loss.float() if self.total is None else self.total + loss
        self.last = loss

    def check(self, step: int, *read_along: Tensor) -> list[float]:
        """Stop the run if a loss since the last check was not finite; `read_along` values come back as floats
        from the same single read (the logged loss and gradient norm)."""
        pending = [] if self.total is None else [self.total]
        if not pending and not read_along:
            return []
        values = torch.stack([v.detach().float() for v in (*pending, *read_along)]).tolist()  # the one read
        first, self.checked_step, self.total = self.checked_step + 1, step, None
        if pending and not math.isfinite(values[0]):
            where = f"at step {step}" if first >= step else f"between steps {first} and {step}"
            bad = "nan" if math.isnan(values[0]) else "infinite"
            raise TrainingDiverged(f"the loss became {bad} {where}; stopped without saving, the last good checkpoint "
                                   "is kept (try a lower train.lr or train.grad_clip=1.0)")
        return values[len(pending):]
