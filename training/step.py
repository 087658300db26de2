"""One optimisation step: micro-batches with gradient accumulation, clipping, the optimizer update.

`compute_loss` is a module-level function on purpose: the crash-safety tests replace it to make a step's
loss NaN, so no fault-injection switch lives in the production loop.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from common.errors import UserError
from training.optim import set_lr
from training.schedule import lr_at, lr_at_fraction
from training.setup import LoopState, Session


class TrainingDiverged(UserError):
    exit_code = 3


@dataclass
class StepResult:
    loss: float
    lr: float
    grad_norm: float


def compute_loss(model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
    _, loss = model(x, y)
    return loss


def learning_rate(s: Session, state: LoopState) -> float:
    """The schedule follows the steps, or under train.max_seconds the clock, whichever is further along; with
    no step limit at all, the clock alone."""
    t = s.job.train
    if s.decay_steps is None:
        return lr_at_fraction(state.step, state.elapsed() / t.max_seconds, t.lr, t.min_lr, t.warmup_steps,
                              t.lr_schedule)
    progress = state.step
    if t.max_seconds:
        progress = max(state.step, s.decay_steps * state.elapsed() / t.max_seconds)
    return lr_at(progress, t.lr, t.min_lr, t.warmup_steps, s.decay_steps, t.lr_schedule)


def train_step(s: Session, state: LoopState) -> StepResult:
    """Advance the model by one optimizer step; a non-finite loss stops the run before anything is saved."""
    lr = learning_rate(s, state)
    set_lr(s.optimizer, lr)
    accum = s.job.train.grad_accum_steps
    loss_sum = torch.zeros((), device=s.device)
    for micro in range(accum):
        x, y = s.sampler.next_batch()
        last = micro == accum - 1
        sync = s.model.no_sync() if s.dist.enabled and not last else contextlib.nullcontext()
        with sync:
            with s.autocast():
                loss = compute_loss(s.model, x, y)
            s.scaler.scale(loss / accum).backward()
        loss_sum += loss.detach()
    loss_value = (loss_sum / accum).item()
    if not math.isfinite(loss_value):
        raise TrainingDiverged(f"the loss became {loss_value} at step {state.step + 1}; stopped without saving, the "
                               "last good checkpoint is kept (try a lower train.lr or train.grad_clip=1.0)")
    s.scaler.unscale_(s.optimizer)
    clip = s.job.train.grad_clip or float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(s.raw_model.parameters(), clip).item()
    s.scaler.step(s.optimizer)
    s.scaler.update()
    s.optimizer.zero_grad(set_to_none=True)
    state.step += 1
    state.train_loss = loss_value
    return StepResult(loss_value, lr, grad_norm)
