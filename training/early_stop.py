"""Early stopping (`train.early_stop`): a run that stops once validation has turned, and counts as finished.

Design choices:
- Patience is counted in evaluations: `null` is off; N stops the run at the N-th evaluation in a row without a new
  best validation loss (the evaluations that write best.pt), provided that one is worse than the best by more than
  the noise margin (training/best_weights.py). Validation that only jitters around its best has not turned, and
  the run goes on to its limit. The last evaluation of a run never stops it early: its limit does.
- `auto` (the default) is `AUTO_PATIENCE` for a run whose length the clock (`train.max_seconds`) or its passes over
  the data (`train.max_epochs`, or their default) set, the runs that give a small text more passes than it can fill,
  and off for a `train.max_steps` run: a step count typed is a run asked for whole. The measured effect is in
  docs/en/training.md.
- The stop is decided at its evaluation, before that evaluation's checkpoint is written, so `ckpt.pt` records it;
  `best.pt` holds the best weights, which every reader then uses (inference/run_files.py). Under torchrun every
  rank takes the decision together (training/distributed.py's `any_rank`).
- A run that stopped early counts as finished: `train.resume` of it trains nothing and exits 0, saying so, unless a
  limit is raised (`train.max_steps`, `train.max_epochs`, `train.max_seconds`: the count then starts again) or the
  patience no longer holds (`train.early_stop=null`, or a larger patience).
- The count (best step, evaluations since, where it stopped and within which limits) is saved in the checkpoint's
  training state, so a resumed run stops where the unbroken one would.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from training.best_weights import turned

AUTO_PATIENCE = 4
EARLY = "early_stop"  # the `stopped` of a run that stopped early (its result line, run/stopped in TensorBoard)
LIMITS = ("max_steps", "max_seconds")  # what a resumed run must raise to train on (max_epochs is in max_steps)


def patience(value: str | None, max_steps: int | None) -> int | None:
    """Evaluations without a new best after which the run stops (None: never), from `train.early_stop`."""
    if value is None:
        return None
    if value == "auto":
        return None if max_steps is not None else AUTO_PATIENCE
    return int(value)


@dataclass
class EarlyStop:
    patience: int | None = None  # resolved at each start from train.early_stop (not saved: the config holds it)
    best_step: int | None = None  # the step of the best validation so far
    stale: int = 0  # evaluations since then without a new best
    stopped_at: int | None = None  # the step at which the run stopped early
    limits: dict = field(default_factory=dict)  # the run's limits (LIMITS) as it stopped: what a resume must raise
    said: bool = False  # the start said the run stopped early and trains nothing (not saved)

    def record(self) -> dict:
        """What the checkpoint keeps (plain data: checkpoints load with weights_only=True)."""
        return {"best_step": self.best_step, "stale": self.stale, "stopped_at": self.stopped_at,
                "limits": dict(self.limits)}

    @classmethod
    def restored(cls, record: object) -> EarlyStop:
        """The count a checkpoint saved (one written before early stopping existed: nothing counted yet)."""
        r = record if isinstance(record, dict) else {}
        whole = lambda v: v if isinstance(v, int) and not isinstance(v, bool) else None  # noqa: E731
        limits = r.get("limits") if isinstance(r.get("limits"), dict) else {}
        return cls(None, whole(r.get("best_step")), whole(r.get("stale")) or 0, whole(r.get("stopped_at")),
                   {k: v for k, v in limits.items() if k in LIMITS and (v is None or isinstance(v, int | float))})

    def count(self, step: int, val_loss: float, best_before: float, tokens_per_char: float, last: bool,
              agree=lambda stop: stop) -> bool:
        """Count the evaluation at `step` (`best_before`: the best validation before it); True when the run stops
        here. `agree` makes every rank's decision the same (any_rank); it is called on every rank or on none."""
        improved = val_loss < best_before
        if improved:
            self.best_step, self.stale = step, 0
        else:
            self.stale += 1
        if self.patience is None or last:
            return False
        if agree(self.stale >= self.patience and turned(val_loss, best_before, tokens_per_char)):
            self.stopped_at = step
        return self.stopped_at == step

    def going_on(self, now: dict) -> str | None:
        """Why a resumed run that stopped early trains on with the limits `now` (a limit raised: the count starts
        again; the patience no longer holding), or None: it counts as finished."""
        for key in LIMITS:
            before, after = self.limits.get(key), now.get(key)
            if before is not None and (after is None or after > before):
                self.stale = 0
                return f"train.{key} was raised ({before:g} to {'none' if after is None else format(after, 'g')})"
        if self.patience is None:
            return "train.early_stop is null now"
        if self.stale < self.patience:
            return f"train.early_stop={self.patience} allows {self.patience - self.stale} more evaluation(s) without " \
                   "a better validation loss"
        return None
