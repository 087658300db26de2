"""One optimisation step: micro-batches with gradient accumulation, clipping, the optimizer update.

Every way a step runs goes through `train_step` and the two halves written here once, `forward_backward` and
`apply_gradients`: eagerly (`eager_update`), with the model compiled, and recorded into the whole step's CUDA graph
(training/runner/graph.py), which calls them while it records. `compute_loss` is module-level on purpose: the
crash-safety tests replace it to make a loss NaN, so no fault-injection switch lives in the production loop.

Three levers of the data-limited records, off by default, follow the run's progress (`run_progress`):
`train.mtp_weights`, `train.muon_weight_decay_schedule` and `train.average` (training/optim/averaging.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from training.optim.factory import clip_and_update, set_lr, set_muon_weight_decay
from training.optim.schedule import lr_at, lr_at_fraction
from training.settings.config import TrainConfig
from training.state import LoopState, Session


@dataclass
class StepResult:
    """What a step leaves for logging. The loss and the gradient norm stay on the device (0-d tensors): reading them
    waits for the step to finish, which the trainer does only at its checks (training/guards/divergence.py)."""

    loss: Tensor
    lr: float
    grad_norm: Tensor


def compute_loss(model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
    _, loss = model(x, y)
    return loss


def multi_token_loss(model: nn.Module, x: Tensor, y: Tensor, weights: list[float]) -> tuple[Tensor, Tensor]:
    """(the loss to train on, the next-token loss to report): the next-token loss plus weights[k] x the loss of the
    target k + 2 positions ahead, read from the same logits (the last positions have no such target)."""
    logits, _ = model(x)  # (B, T, V)
    V = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, V).float(), y.reshape(-1))
    total = loss
    for k, w in enumerate(weights, start=1):
        if w > 0:
            total = total + w * F.cross_entropy(logits[:, :-k].reshape(-1, V).float(), y[:, k:].reshape(-1))
    return total, loss


def run_progress(s: Session, state: LoopState) -> float:
    """How far along the run is, from 0 to 1: by steps against the schedule's length, or by the clock against
    train.max_seconds, whichever is further."""
    t = s.job.train
    by_steps = state.step / s.decay_steps if s.decay_steps else 0.0
    by_clock = state.elapsed() / t.max_seconds if t.max_seconds else 0.0
    return min(1.0, max(by_steps, by_clock))


def mtp_weights_at(t: TrainConfig, progress: float) -> list[float]:
    """train.mtp_weights, faded linearly to zero over the first train.mtp_fade of the run."""
    fade = max(0.0, 1.0 - progress / t.mtp_fade)
    return [w * fade for w in t.mtp_weights] if fade > 0 else []


def muon_decay_scale(schedule: str, progress: float) -> float:
    """The multiple of Muon's weight decay at `progress`: constant, or the records' dip (held for the first 1/8,
    down to 1/8 by mid-run, then up to 1.5625x at the end: their 0.8 -> 0.1 -> 1.25)."""
    if schedule == "constant":
        return 1.0
    return float(np.interp(progress, [0.0, 0.125, 0.5, 1.0], [1.0, 1.0, 0.125, 1.5625]))


def learning_rate(s: Session, state: LoopState) -> float:
    """The schedule follows the steps, or under train.max_seconds the clock, whichever is further along; with
    no step limit at all, the clock alone."""
    t = s.job.train
    if s.decay_steps is None:
        return lr_at_fraction(
            state.step, state.elapsed() / t.max_seconds, t.lr, t.min_lr, t.warmup_steps, t.lr_schedule
        )
    progress = state.step
    if t.max_seconds:
        progress = max(state.step, s.decay_steps * state.elapsed() / t.max_seconds)
    return lr_at(progress, t.lr, t.min_lr, t.warmup_steps, s.decay_steps, t.lr_schedule)


def begin_step(s: Session, state: LoopState) -> tuple[float, float, list[float]]:
    """Set this step's learning rate and Muon's weight decay: (lr, the run's progress, the mtp weights)."""
    t = s.job.train
    lr, progress = learning_rate(s, state), run_progress(s, state)
    set_lr(s.optimizer, lr)
    set_muon_weight_decay(s.optimizer, muon_decay_scale(t.muon_weight_decay_schedule, progress))
    return lr, progress, mtp_weights_at(t, progress)


Batches = Iterable[tuple[Tensor, Tensor]]
# How a step's forward, backward and update run, given the mtp weights: (the mean loss, the gradient norm)
StepRun = Callable[[list[float]], tuple[Tensor, Tensor]]


def train_step(s: Session, state: LoopState, run: StepRun | None = None) -> StepResult:
    """Advance the model by one optimizer step, without reading anything back from the device: a non-finite loss
    is found at the trainer's next check (training/guards/divergence.py), before anything is saved. `run`: how
    the forward, backward and update run (training/runner/steps.py: the model eager or compiled, or the CUDA graph
    replayed); None: `eager_update` of `s.model`."""
    lr, progress, mtp = begin_step(s, state)
    loss, grad_norm = run(mtp) if run is not None else eager_update(s, s.model, mtp)
    end_step(s, state, progress)
    return StepResult(loss, lr, grad_norm)


def eager_update(s: Session, model: nn.Module, mtp: list[float]) -> tuple[Tensor, Tensor]:
    """The step as the lecture writes it, on `model` (`s.model`, or compiled): each micro-batch's forward and
    backward on fresh batches, then clipping and the update, and the gradients set to None."""
    batches = (s.sampler.next_batch() for _ in range(s.job.train.grad_accum_steps))
    loss = forward_backward(s, model, batches, mtp)
    grad_norm = apply_gradients(s)
    s.optimizer.zero_grad(set_to_none=True)
    return loss, grad_norm


def forward_backward(
    s: Session, model: nn.Module, batches: Batches, mtp: list[float], autocast: Callable | None = None
) -> Tensor:
    """Each micro-batch's forward and backward, its gradient added to the step's (scaled for accumulation and, in
    float16, by the loss scaler): the mean next-token loss, detached, on the device. Under DDP only the last
    micro-batch's backward all-reduces. `autocast`: the context the forward runs in (default: the session's)."""
    accum = s.job.train.grad_accum_steps
    loss_sum = torch.zeros((), device=s.device)
    for micro, (x, y) in enumerate(batches):
        last = micro == accum - 1
        with model.no_sync() if s.dist.enabled and not last else contextlib.nullcontext():
            with (autocast or s.autocast)():
                total, loss = multi_token_loss(model, x, y, mtp) if mtp else (compute_loss(model, x, y),) * 2
            s.scaler.scale(total / accum).backward()
        loss_sum += loss.detach()
    return loss_sum / accum


def apply_gradients(s: Session) -> Tensor:
    """Unscale (float16), clip and apply the session's gradients: the gradient norm, still on the device."""
    return clip_and_update(s.raw_model.parameters(), s.optimizer, s.job.train.grad_clip, s.scaler)


def end_step(s: Session, state: LoopState, progress: float) -> None:
    """Count the step, and update the weights' average when one is due."""
    state.step += 1
    if s.average is not None and s.average.due(state.step, progress):
        s.average.update(s.raw_model)
