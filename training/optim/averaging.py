"""Weight averaging (`train.average`): an average of the weights kept beside them while training, which every
reader of the checkpoint then uses by default (docs/en/training.md, "Weight averaging").

Design choices:
- `torch.optim.swa_utils.AveragedModel` keeps it (`ema` by `train.ema_half_life`, `swa` uniform from
  `train.swa_start`), updated every `train.average_every` steps with one fused lerp.
- The average is of the raw model, never of compile's or DDP's wrapper, so every rank keeps the same one.
- Checkpoints hold both sets and the count, so a resume averages as an unbroken run; a held table
  (model/hangul/held_rows.py) is saved dense.
- An average asked for is kept: settings that would never update it are refused at start, and a run that stops
  before its first update takes one at its end, and says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn, get_swa_multi_avg_fn

from common.errors import UserError
from inference.checkpoint import Checkpoint
from model.hangul.held_rows import dense_state_dict, held_state_dict

if TYPE_CHECKING:
    from training.settings.config import TrainConfig, TrainJob


class WeightAverage:
    """The average of a model's weights, kept as `train.average` says."""

    def __init__(self, model: nn.Module, t: TrainConfig):
        self.kind, self.every, self.start = t.average, t.average_every, t.swa_start
        self.final = False  # whether the one update it holds was the end of a run that stopped before any was due
        if t.average == "ema":
            fn = get_ema_multi_avg_fn(0.5 ** (t.average_every / t.ema_half_life))
        else:
            fn = get_swa_multi_avg_fn()
        # AveragedModel deep-copies the model; the copy is the average (held rows and all), always in eval mode
        self.averaged = AveragedModel(model, multi_avg_fn=fn, use_buffers=False)
        self.averaged.eval()

    @property
    def model(self) -> nn.Module:
        """The averaged weights as a model of the raw model's class."""
        return self.averaged.module

    @property
    def updates(self) -> int:
        return int(self.averaged.n_averaged)

    def due(self, step: int, progress: float) -> bool:
        """Whether `step` (just taken, at `progress` in [0, 1] of the run) updates the average."""
        return step % self.every == 0 and (self.kind == "ema" or progress >= self.start)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        self.averaged.update_parameters(model)

    def finish(self, model: nn.Module) -> None:
        """At a run's end: an average that holds no update takes the final weights, so readers never find it empty."""
        if not self.updates:
            self.update(model)
            self.final = True

    def summary(self) -> str:
        """The run's closing line about its average."""
        n = self.updates
        when = f"every {self.every} step{'s' if self.every > 1 else ''}" + (
            f" from {self.start:g} of the run" if self.kind == "swa" else ""
        )
        final = "; it is the final weights: the run stopped before any update was due" if self.final else ""
        if not n:  # train.early_stop ended the run before the first update: there is nothing to read
            return (
                f"average: train.average={self.kind}, no update ({when}): the run stopped early, before the "
                "first; generate.py, evaluate.py, serve.py and export.py read the raw weights"
            )
        return (
            f"average: train.average={self.kind}, {n} update{'' if n == 1 else 's'} ({when}){final}; "
            "generate.py, evaluate.py, serve.py and export.py read it unless weights=raw"
        )

    def dense_state(self) -> dict[str, torch.Tensor] | None:
        """The average's weights for a checkpoint (tables written dense), or None before its first update."""
        return dense_state_dict(self.model) if self.updates else None

    def restore(self, dense: dict[str, torch.Tensor] | None, updates: int) -> None:
        """Continue the average a checkpoint saved (none saved: it starts again at the next update)."""
        if dense is None or not updates:
            return
        self.model.load_state_dict(held_state_dict(self.model, dense))
        self.averaged.n_averaged.fill_(updates)


def weight_average(
    job: TrainJob, raw_model: nn.Module, resumed: Checkpoint | None, max_steps: int | None, decay_steps: int | None
) -> WeightAverage | None:
    """train.average: the average kept beside the weights, continued where a resumed run left it; one that would
    never update within the run's known steps is one UserError."""
    if job.train.average == "none":
        return None
    average = WeightAverage(raw_model, job.train)
    if resumed is not None and resumed.training is not None:
        average.restore(resumed.averaged, resumed.training.average_updates)
    refuse_empty_average(job.train, resumed, max_steps, decay_steps)
    return average


def refuse_empty_average(
    t: TrainConfig, resumed: Checkpoint | None, max_steps: int | None, decay_steps: int | None
) -> None:
    """One UserError when a run that asks for an average, holds none yet (a resumed one may) and stops at
    `max_steps` (known) would take no update of it.
    Updates come at multiples of average_every; swa's only once the schedule's progress (the step before, over
    decay_steps, as training/step.py measures it) reaches swa_start; under train.max_seconds the clock may bring
    that progress forward, so there only the first check applies."""
    updates = resumed.training.average_updates if resumed is not None and resumed.training is not None else 0
    held = updates > 0 and resumed.averaged is not None
    if t.average == "none" or held or max_steps is None:
        return  # max_steps None: the clock decides, and an average still empty at the end takes the final weights
    first = resumed.step if resumed is not None else 0
    last = max_steps // t.average_every * t.average_every  # the last step that may update it
    if last <= first:
        raise UserError(
            f"train.average_every={t.average_every} never updates the average: the run "
            f"{'goes on from step ' + str(first) + ' and ' if first else ''}stops at step {max_steps}, "
            f"before the first update; lower train.average_every to at most {max_steps - first}, or "
            "set train.average=none"
        )
    progress = min(1.0, (last - 1) / decay_steps) if decay_steps else 0.0
    if t.average == "swa" and progress < t.swa_start and not t.max_seconds:
        raise UserError(
            f"train.swa_start={t.swa_start:g} never updates the average: the last step that may (step "
            f"{last}, train.average_every={t.average_every}) comes at {progress:.3g} of the run's "
            f"{decay_steps}-step schedule, before swa_start; lower train.swa_start (or "
            "train.average_every), or set train.average=none"
        )
