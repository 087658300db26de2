"""Early stopping (`train.early_stop`): the noise margin of validation, the count of evaluations without a better
one, and when a patience can act.

Design choices (docs/en/training.md, "Best weights and early stopping"):
- Patience counts evaluations, and stops only once validation is worse than the best by more than
  `NOISE_MARGIN_BPC` (bits per character: the same for every tokenizer); the last evaluation never stops a run.
  A patience that cannot act is refused where typed, silent under `auto`.
- `auto` is `AUTO_PATIENCE` where the clock or the passes set the run's length, off under `train.max_steps`: a
  step count typed is a run asked for whole.
- `observe` runs in every evaluation before its checkpoint is written, so `ckpt.pt` records a stop; under torchrun
  every rank decides together. The count is saved, so a resumed run stops where the unbroken one would, and one
  that stopped early counts as finished until a limit is raised or the patience no longer holds.
- The loop asks `stop_cause` (training/trainer.py), which reads `EarlyStop.stopped_at`; the closing lines that say
  where a run stood best are reporting's (training/reporting/summary.py).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from common.errors import ConfigError
from inference.checkpoint import BEST_NAME
from inference.run_files import header
from training.settings.config import TrainConfig

AUTO_PATIENCE = 4
EARLY = "early_stop"  # the `stopped` of a run that stopped early (its result line, run/stopped in TensorBoard)
LIMITS = ("max_steps", "max_seconds")  # what a resumed run must raise to train on (max_epochs is in max_steps)
NOISE_MARGIN_BPC = 0.05


def margin_nats(tokens_per_char: float) -> float:
    """The noise margin in the loss's own unit, nats per token."""
    return NOISE_MARGIN_BPC * math.log(2) / max(tokens_per_char, 1e-9)


def turned(val_loss: float, best_val_loss: float, tokens_per_char: float) -> bool:
    """Whether `val_loss` is worse than the best by more than the noise margin."""
    return math.isfinite(val_loss) and val_loss > best_val_loss + margin_nats(tokens_per_char)


def evaluations_left(step: int, max_steps: int | None, interval: int) -> int | None:
    """The evaluations a run at `step` makes up to its step limit, the last one included (None: no step limit)."""
    if max_steps is None:
        return None
    last = 1 if max_steps % interval and max_steps > step else 0
    return max(0, max_steps // interval - step // interval) + last


def can_act(e: EarlyStop, best_val_loss: float, patience_: int, left: int | None) -> bool:
    """Whether `patience_` evaluations in a row without a better one can be reached before the last of the `left`
    evaluations (the last never stops a run early). A run without a best yet finds it at its first evaluation."""
    if left is None:
        return True
    stale = e.stale if math.isfinite(best_val_loss) else -1
    return left - 1 + stale >= patience_


def refuse_idle_patience(
    t: TrainConfig, e: EarlyStop, step: int, best_val_loss: float, max_steps: int | None, typed: set[str] | None
) -> None:
    """A `train.early_stop=N` of the user's own that cannot act in this run is refused, naming the key, as the idle
    rules do (training/settings/idle.py); `auto` (the default) is then silent, and a resumed run that stopped early
    is `start`'s to answer. `typed`: a resumed run's keys typed on the command line (None: a new run, or no command
    line), where only a patience typed again is refused."""
    if t.early_stop in (None, "auto") or e.stopped_at is not None:
        return
    if typed is not None and "train.early_stop" not in typed and "train" not in typed:
        return
    n, left = int(t.early_stop), evaluations_left(step, max_steps, t.eval_interval)
    if can_act(e, best_val_loss, n, left):
        return
    raise ConfigError(
        f"train.early_stop={n} cannot act in this run: it stops a run after {n} evaluations in a row "
        f"without a better validation loss (the first finds the best, the last never stops a run), "
        f"and this run makes {left} evaluation"
        f"{'s' if left != 1 else ''} (every train.eval_interval={t.eval_interval} steps up to step "
        f"{max_steps}); drop train.early_stop, or evaluate more often (a lower train.eval_interval)"
    )


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
        """What the checkpoint keeps (plain data: checkpoints load with weights_only=True): the fields but the
        patience (the config holds it) and `said`."""
        return {k: v for k, v in asdict(self).items() if k not in ("patience", "said")}

    @classmethod
    def restored(cls, record: object) -> EarlyStop:
        """The count a checkpoint saved (one written before early stopping existed: nothing counted yet)."""
        r = record if isinstance(record, dict) else {}
        whole = lambda v: v if isinstance(v, int) and not isinstance(v, bool) else None  # noqa: E731
        limits = r.get("limits") if isinstance(r.get("limits"), dict) else {}
        return cls(
            best_step=whole(r.get("best_step")),
            stale=whole(r.get("stale")) or 0,
            stopped_at=whole(r.get("stopped_at")),
            limits={k: v for k, v in limits.items() if k in LIMITS and (v is None or isinstance(v, int | float))},
        )

    def count(
        self,
        step: int,
        val_loss: float,
        best_before: float,
        tokens_per_char: float,
        last: bool,
        agree=lambda stop: stop,
    ) -> bool:
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

    def acts(self, step: int, best_val_loss: float, max_steps: int | None, interval: int) -> bool:
        """Whether the patience resolved can stop this run before its last evaluation."""
        left = evaluations_left(step, max_steps, interval)
        return self.patience is not None and can_act(self, best_val_loss, self.patience, left)

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
            return (
                f"train.early_stop={self.patience} allows {self.patience - self.stale} more evaluation(s) without "
                "a better validation loss"
            )
        return None


def start(
    e: EarlyStop, t: TrainConfig, max_steps: int | None, step: int, best_val_loss: float, run_dir: Path
) -> list[str]:
    """Resolve the patience, and the lines that say it. A resumed run that stopped early and is given nothing more to
    do keeps `stopped_at`: it counts as finished, and the loop's `stop_cause` ends it before a step."""
    e.patience = patience(t.early_stop, t.max_steps)
    now, lines = {"max_steps": max_steps, "max_seconds": t.max_seconds}, []
    if e.best_step is None and step:  # a checkpoint written before the count was saved: best.pt's step
        e.best_step = _best_file_step(run_dir)
    if e.stopped_at is not None:
        why = e.going_on(now)
        if why is None:
            e.said = True
            return [
                f"train.resume: this run stopped early at step {e.stopped_at} (validation had not improved for "
                f"{e.stale} evaluations since step {e.best_step}); it counts as finished, so nothing is trained: "
                "raise train.max_steps, train.max_epochs or train.max_seconds, or set train.early_stop=null, to "
                "train on"
            ]
        lines.append(f"early stop: the run stopped early at step {e.stopped_at}; {why}, so it trains on")
        e.stopped_at = None
    e.limits = now
    if e.acts(step, best_val_loss, max_steps, t.eval_interval):  # else auto, silent
        how = (
            "auto: this run's length is set by time or passes, not train.max_steps"
            if t.early_stop == "auto"
            else f"train.early_stop={t.early_stop}"
        )
        lines.append(
            f"early stop: after {e.patience} evaluation{'s' if e.patience > 1 else ''} in a row without a better "
            f"validation loss (every {t.eval_interval} steps), once it is {NOISE_MARGIN_BPC:g} bits per character "
            f"above the best ({how}; train.early_stop=null turns it off)"
        )
    return lines


def _best_file_step(run_dir: Path) -> int | None:
    try:
        return header(run_dir / BEST_NAME).step
    except Exception:  # noqa: BLE001 - a missing or unreadable best.pt leaves the step unknown, nothing more
        return None
