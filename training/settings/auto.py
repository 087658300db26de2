"""Settings resolved at start from what the run will see: `model.dropout: null` means "auto".

Design choices (docs/en/training.md, "Dropout: auto", has the rule and its measurements):
- Dropout helps a model that sees its text many times and only slows one that sees it once or less, so auto
  resolves it from the passes the run will make: none up to `train.auto_dropout_after` (a recipe's own), then
  rising continuously with the logarithm of the passes to `MAX_DROPOUT`, so that no pass count is a cliff.
- The passes come from the step limit; under a time budget from the run's own speed, timed on a throwaway copy of
  the model and optimizer (the real ones and the random streams untouched). Under torchrun all take the largest.
- The weight decays move with the dropout towards the recipe's `train.auto_*weight_decay`, wholly at
  `FULL_DECAY_DROPOUT`. What was resolved is printed once and recorded; a value the user types always wins.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import nn

from common.device import autocast
from data.sampler import BatchSampler
from model.switches import set_dropout
from training import distributed
from training.guards.memory import fit_memory
from training.optim.factory import clip_and_update, make_optimizer
from training.settings.config import TrainConfig, TrainJob
from training.settings.resume import typed_command_line

MAX_DROPOUT = 0.2
DROPOUT_PER_DOUBLING = 0.05  # added for every doubling of the passes beyond train.auto_dropout_after
FULL_DECAY_DROPOUT = 0.1  # the dropout at which a run gets the whole of the recipe's auto weight decays
TRAINING_SHARE = 0.9  # of a time budget spent on training steps rather than evaluations and checkpoints
TIMED_STEPS = 3
AUTO_DECAYS = {"weight_decay": "auto_weight_decay", "muon_weight_decay": "auto_muon_weight_decay"}


@dataclass
class AutoDropout:
    value: float
    passes: float
    source: str  # "steps" (from the step limit) or "speed" (measured under a time budget)
    free_passes: float  # train.auto_dropout_after: no dropout up to this many passes
    weight_decays: dict[str, float] = field(default_factory=dict)  # train.<key>: value, resolved with the dropout

    def line(self, train_tokens: int) -> str:
        how = "in the step limit" if self.source == "steps" else "at this machine's measured speed in the time budget"
        if not math.isfinite(self.passes):  # a time budget too large to count in passes
            passes = "endless passes"
        else:
            digits = ".3g" if self.passes >= 1e5 else ".1f" if self.passes >= 1 else ".2f"
            passes = f"about {self.passes:{digits}} passes"
        decays = "".join(f", train.{key}={value:g}" for key, value in self.weight_decays.items())
        return (
            f"auto: model.dropout={self.value:g}{decays} ({passes} over the {train_tokens:,} "
            f"training tokens {how}, none up to train.auto_dropout_after={self.free_passes:g}; "
            "type model.dropout=... to choose)"
        )


def dropout_for_passes(passes: float, free_passes: float) -> float:
    """Dropout for a run that sees its training split `passes` times and needs none up to `free_passes`,
    rounded to 0.01."""
    if passes <= free_passes:
        return 0.0
    return round(min(MAX_DROPOUT, DROPOUT_PER_DOUBLING * math.log2(passes / max(free_passes, 1e-9))), 2)


def measured_tokens_per_sec(
    model: nn.Module,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    batches: Iterator,
    autocast: Callable,
    clip: float = 0.0,
) -> float:
    """Tokens per second of `TIMED_STEPS` whole training steps (`token_seconds`)."""
    seconds = token_seconds(model, make_optimizer, batches, [autocast], TIMED_STEPS, clip)
    return TIMED_STEPS / sum(r[0] for r in seconds)


def token_seconds(
    model: nn.Module,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    batches: Iterator,
    autocasts: Sequence[Callable],
    rounds: int,
    clip: float = 0.0,
) -> list[list[float]]:
    """Seconds per token of whole training steps (forward, backward, clipping to `clip`, the update) on a copy of the
    model with its own optimizer: [round][autocast], one step under each autocast a round, after a warm-up step under
    each. The order turns round every other round, so a load that drifts weighs on every side alike. The caller's
    model, optimizer and random streams are untouched."""
    with torch.random.fork_rng(devices=[]):
        twin = copy.deepcopy(model).train()
        optimizer = make_optimizer(twin)

        def step(autocast: Callable) -> float:
            x, y = next(batches)
            started = time.perf_counter()
            with autocast():
                _, loss = twin(x, y)
            loss.backward()
            clip_and_update(twin.parameters(), optimizer, clip)
            optimizer.zero_grad(set_to_none=True)
            if x.device.type == "cuda":
                torch.cuda.synchronize(x.device)
            return max(time.perf_counter() - started, 1e-9) / x.numel()

        for autocast in autocasts:
            step(autocast)
        sides, timed = list(enumerate(autocasts)), []
        for r in range(rounds):
            seconds = {i: step(autocast) for i, autocast in (sides if r % 2 == 0 else sides[::-1])}
            timed.append([seconds[i] for i in range(len(sides))])
    return timed


def resolve_dropout(
    max_steps: int | None,
    max_seconds: float | None,
    train_tokens: int,
    tokens_per_step: int,
    speed: Callable[[], float],
    dist: distributed.DistInfo,
    device: torch.device,
    free_passes: float,
) -> AutoDropout:
    """The dropout for the passes this run will make: from its step limit, or its time budget at `speed()`
    tokens per second per process, whichever ends it first."""
    passes, source = math.inf, "steps"
    if max_steps is not None:
        passes = max_steps * tokens_per_step / train_tokens
    if max_seconds:
        timed = speed() * dist.world_size * max_seconds * TRAINING_SHARE / train_tokens
        if timed < passes or max_steps is None:  # the limit named is the one that ends the run
            passes, source = timed, "speed"
    passes = distributed.agreed_max(passes, dist, device)
    return AutoDropout(dropout_for_passes(passes, free_passes), passes, source, free_passes)


def apply_auto_dropout(
    job: TrainJob,
    model: nn.Module,
    max_steps: int | None,
    train_tokens: np.ndarray,
    tokens_per_step: int,
    dist: distributed.DistInfo,
    device: torch.device,
    dtype: torch.dtype,
    measured: float | None = None,
) -> AutoDropout | None:
    """Resolve `model.dropout: null` for this run and set it on the model and in the job (so the checkpoint records
    it); None when the user gave a value. Its `line` is printed once every check of the start has passed.
    `measured`: this run's tokens/s per process, timed already (training/settings/precision.py)."""
    if job.model.dropout is not None:
        return None
    t = job.train
    batches = BatchSampler(train_tokens, job.model.context_length, t.batch_size, device, job.seed + 7919, dist.rank)

    def speed() -> float:
        if measured is not None:
            return measured

        def optimizer_for(m: nn.Module) -> torch.optim.Optimizer:
            return make_optimizer(m, t.lr, t.weight_decay, (t.beta1, t.beta2), device, t)

        with fit_memory(model, t, device, dtype):  # a batch that cannot fit: one line before it is allocated
            return measured_tokens_per_sec(model, optimizer_for, batches, lambda: autocast(device, dtype), t.grad_clip)

    auto = resolve_dropout(
        max_steps, t.max_seconds, len(train_tokens), tokens_per_step, speed, dist, device, t.auto_dropout_after
    )
    set_dropout(model, auto.value)
    job.model = replace(job.model, dropout=auto.value)
    auto.weight_decays = auto_weight_decays(t, auto.value, typed_command_line())
    for key, value in auto.weight_decays.items():
        setattr(t, key, value)
    return auto


def auto_weight_decays(t: TrainConfig, dropout: float, typed: set[str] | None) -> dict[str, float]:
    """The weight decays the recipe gives a run that auto gives dropout ({"weight_decay": 2.0, ...}): those of
    `train.auto_weight_decay` and `train.auto_muon_weight_decay` that are set, less the ones the user typed; at
    a dropout under `FULL_DECAY_DROPOUT`, that share of the way from the recipe's own decay to them."""
    if dropout <= 0:
        return {}
    share = min(1.0, dropout / FULL_DECAY_DROPOUT)
    return {
        key: round(getattr(t, key) + share * (getattr(t, auto) - getattr(t, key)), 4)
        for key, auto in AUTO_DECAYS.items()
        if getattr(t, auto) is not None and f"train.{key}" not in (typed or ())
    }
