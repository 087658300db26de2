"""Non-finite losses, found without making the CPU wait for the device at every step.

Design choices:
- A step's loss stays on the device; `LossWatch` sums the losses since its last check, so one read (every
  `train.log_interval`, evaluation and checkpoint) finds a NaN or an infinity anywhere since the one before, and
  the run stops in one line naming those steps, its last good checkpoint kept.
- A loss can stay finite while the weights are not, or so large that validation overflows (bf16 autocast keeps
  float32's range): a checkpoint is written only once its weights and validation are finite (`refuse_unfinite`).
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
        self.saved_step = checked_step  # the last step whose weights and validation were found finite (and saved)
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
            bad = "nan" if math.isnan(values[0]) else "infinite"
            raise TrainingDiverged(f"the loss became {bad} {_steps(first, step)}; {self.kept()}")
        return values[len(pending) :]

    def refuse_unfinite(self, step: int, what: str, value: float | None = None) -> None:
        """Stop the run without saving: `what` (the validation loss, the weights) is not finite at `step`, and was at
        the last checkpoint written; `value`: the loss, to say whether it is NaN or infinite."""
        bad = "non-finite" if value is None else "nan" if math.isnan(value) else "infinite"
        raise TrainingDiverged(f"{what} became {bad} {_steps(self.saved_step + 1, step)}; {self.kept()}")

    def check_evaluation(self, step: int, val_loss: float, train_loss: float) -> None:
        """Stop the run without saving if the evaluation at `step` scored either split as NaN or infinite."""
        for what, value in (("the validation loss", val_loss), ("the training split's evaluation loss", train_loss)):
            if not math.isfinite(value):
                self.refuse_unfinite(step, what, value)

    def kept(self) -> str:
        kept = (
            f", the last good checkpoint is kept (step {self.saved_step})"
            if self.saved_step
            else " (no checkpoint had been written yet)"
        )
        return f"stopped without saving{kept}; try a lower train.lr or train.grad_clip=1.0"


def _steps(first: int, last: int) -> str:
    return f"at step {last}" if first >= last else f"between steps {first} and {last}"


def all_finite(model: torch.nn.Module) -> bool:
    """Whether every parameter of `model` is finite, in one read from the device."""
    return bool(torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all())
