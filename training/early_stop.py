"""Early stopping (`train.early_stop`) and where a run stood best: the noise margin of validation, the count of
evaluations without a better one, and the lines that end a run whose end is worse than its best.

Design choices (docs/en/training.md, "Best weights and early stopping"):
- Patience counts evaluations, and stops only once validation is worse than the best by more than
  `NOISE_MARGIN_BPC` (bits per character: the same for every tokenizer); the last evaluation never stops a run.
  A patience that cannot act is refused where typed, silent under `auto`.
- `auto` is `AUTO_PATIENCE` where the clock or the passes set the run's length, off under `train.max_steps`: a
  step count typed is a run asked for whole.
- `observe` runs in every evaluation before its checkpoint is written, so `ckpt.pt` records a stop; under torchrun
  every rank decides together. The count is saved, so a resumed run stops where the unbroken one would, and one
  that stopped early counts as finished until a limit is raised or the patience no longer holds.
- The closing lines find the file the readers use as they do (inference/run_files.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cli.overrides import shell_path
from common.errors import ConfigError, UserError
from inference.checkpoint import BEST_NAME, CKPT_NAME
from inference.run_files import folder_file, header
from training import distributed
from training.evaluation import bits_per_char

if TYPE_CHECKING:
    from training.session import LoopState, Session

AUTO_PATIENCE = 4
EARLY = "early_stop"  # the `stopped` of a run that stopped early (its result line, run/stopped in TensorBoard)
LIMITS = ("max_steps", "max_seconds")  # what a resumed run must raise to train on (max_epochs is in max_steps)
NOISE_MARGIN_BPC = 0.05
READERS = "generate.py, evaluate.py, serve.py, export.py and train.init_from"


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


def refuse_idle_patience(job, state: LoopState, max_steps: int | None, resumed: bool, typed: set[str] | None) -> None:
    """A `train.early_stop=N` of the user's own that cannot act in this run is refused, naming the key, as the idle
    rules do (training/settings/idle.py); `auto` (the default) is then silent, and a resumed run that stopped early
    is `start`'s to answer."""
    t = job.train
    if t.early_stop in (None, "auto") or state.early.stopped_at is not None:
        return
    if resumed and typed is not None and "train.early_stop" not in typed and "train" not in typed:
        return
    n, left = int(t.early_stop), evaluations_left(state.step, max_steps, t.eval_interval)
    if can_act(state.early, state.best_val_loss, n, left):
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
        """What the checkpoint keeps (plain data: checkpoints load with weights_only=True)."""
        return {
            "best_step": self.best_step,
            "stale": self.stale,
            "stopped_at": self.stopped_at,
            "limits": dict(self.limits),
        }

    @classmethod
    def restored(cls, record: object) -> EarlyStop:
        """The count a checkpoint saved (one written before early stopping existed: nothing counted yet)."""
        r = record if isinstance(record, dict) else {}
        whole = lambda v: v if isinstance(v, int) and not isinstance(v, bool) else None  # noqa: E731
        limits = r.get("limits") if isinstance(r.get("limits"), dict) else {}
        return cls(
            None,
            whole(r.get("best_step")),
            whole(r.get("stale")) or 0,
            whole(r.get("stopped_at")),
            {k: v for k, v in limits.items() if k in LIMITS and (v is None or isinstance(v, int | float))},
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


def observe(s: Session, state: LoopState, last: bool) -> None:
    """At an evaluation, before `state.best_val_loss` takes it in and its checkpoint is written: count it, and
    decide on every rank together whether the run stops here (`state.early.stopped_at`)."""
    state.early.count(
        state.step,
        state.val_loss,
        state.best_val_loss,
        s.tokens_per_char,
        last,
        lambda stop: distributed.any_rank(stop, s.dist, s.device),
    )


def stops_here(state: LoopState) -> bool:
    """Whether the evaluation just counted stopped the run (the loop then ends)."""
    if state.early.stopped_at != state.step:
        return False
    state.stopped = EARLY
    return True


def start(s: Session, state: LoopState) -> bool:
    """Resolve the patience and say it; False for a resumed run that stopped early and is given nothing more to do
    (it counts as finished: nothing is trained, and the run ends as any finished run does)."""
    t, e = s.job.train, state.early
    e.patience = patience(t.early_stop, t.max_steps)
    now = {"max_steps": s.max_steps, "max_seconds": t.max_seconds}
    if e.best_step is None and state.step:  # a checkpoint written before the count was saved: best.pt's step
        e.best_step = _best_file_step(s.run_dir)
    if e.stopped_at is not None:
        why = e.going_on(now)
        if why is None:
            s.say(
                f"train.resume: this run stopped early at step {e.stopped_at} (validation had not improved for "
                f"{e.stale} evaluations since step {e.best_step}); it counts as finished, so nothing is trained: "
                "raise train.max_steps, train.max_epochs or train.max_seconds, or set train.early_stop=null, to "
                "train on"
            )
            state.stopped, e.said = EARLY, True
            return False
        s.say(f"early stop: the run stopped early at step {e.stopped_at}; {why}, so it trains on")
        e.stopped_at = None
    e.limits = now
    left = evaluations_left(state.step, s.max_steps, t.eval_interval)
    if e.patience is not None and can_act(e, state.best_val_loss, e.patience, left):  # else auto, silent
        how = (
            "auto: this run's length is set by time or passes, not train.max_steps"
            if t.early_stop == "auto"
            else f"train.early_stop={t.early_stop}"
        )
        s.say(
            f"early stop: after {e.patience} evaluation{'s' if e.patience > 1 else ''} in a row without a better "
            f"validation loss (every {t.eval_interval} steps), once it is {NOISE_MARGIN_BPC:g} bits per character "
            f"above the best ({how}; train.early_stop=null turns it off)"
        )
    return True


def _best_file_step(run_dir: Path) -> int | None:
    try:
        return header(run_dir / BEST_NAME).step
    except Exception:  # noqa: BLE001 - a missing or unreadable best.pt leaves the step unknown, nothing more
        return None


def closing(s: Session, state: LoopState) -> str:
    """The run's last lines besides its result: that it stopped early (and what resuming it does), and, when its
    last validation is worse than its best beyond the noise margin, where it stood best and which file is read."""
    if not s.dist.is_main:
        return ""
    e, lines = state.early, []
    if state.stopped == EARLY and e.stopped_at == state.step and not e.said:
        lines.append(
            f"early stop at step {state.step}: {e.stale} evaluations in a row without a better validation "
            f"loss (the best: step {e.best_step}, val loss {state.best_val_loss:.4f}); ckpt.pt and best.pt "
            f"are kept, and train.resume={shell_path(s.run_dir)} trains on only once a limit is raised"
        )
    if math.isfinite(state.best_val_loss):
        lines += closing_lines(s.run_dir, s.tokens_per_char)
    return "\n".join(lines)


def closing_lines(run_dir: Path, tokens_per_char: float) -> list[str]:
    """The lines that end a run whose last validation is worse than its best beyond the noise margin: where it stood
    best, where it ended, and which file the readers use; none when the end is the best or within the margin."""
    try:
        chosen = folder_file(run_dir)
    except UserError:  # a file that cannot be read: every reader says so in its own line
        return []
    if chosen.chosen != "best" or chosen.other is None:
        return []
    best, last = chosen.header, chosen.other
    if not turned(last.val_loss, best.val_loss, tokens_per_char):
        return []
    bpc = lambda loss: bits_per_char(loss, tokens_per_char)  # noqa: E731 - a local shorthand
    worse = bpc(last.val_loss) - bpc(best.val_loss)
    return [
        f"validation turned: the best was step {best.step}, val loss {best.val_loss:.4f} "
        f"({bpc(best.val_loss):.4f} bpc); the last, step {last.step}, {last.val_loss:.4f} "
        f"({bpc(last.val_loss):.4f} bpc, {worse:.3f} bpc worse)",
        f"{READERS} read {BEST_NAME} (the best) from this run; ckpt={shell_path(run_dir / CKPT_NAME)} reads the "
        "last weights",
    ]
