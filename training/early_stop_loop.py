"""`train.early_stop` in the training loop: counted at each evaluation on every rank, said at the start, a resumed run
that stopped early kept finished, and the run's closing lines (the rule itself: training/early_stop.py).

Design choices:
- The loop calls three functions, each one line in training/trainer.py: `start` before the first step, `observe` in
  every evaluation before its checkpoint is written (so `ckpt.pt` records a stop), and `stops_here` after it.
- Under torchrun the decision is one collective per evaluation (`any_rank`), taken by every rank or none: the ranks
  stop together, as they do for a signal.
"""

from __future__ import annotations

import math

from tqdm import tqdm

from cli.overrides import shell_path
from training import distributed
from training.best_weights import NOISE_MARGIN_BPC, closing_lines
from training.early_stop import EARLY, patience
from training.setup import LoopState, Session


def observe(s: Session, state: LoopState, last: bool) -> None:
    """At an evaluation, before `state.best_val_loss` takes it in and its checkpoint is written: count it, and
    decide on every rank together whether the run stops here (`state.early.stopped_at`)."""
    state.early.count(state.step, state.val_loss, state.best_val_loss, s.tokens_per_char, last,
                      lambda stop: distributed.any_rank(stop, s.dist, s.device))


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
        e.best_step = _best_file_step(s)
    if e.stopped_at is not None:
        why = e.going_on(now)
        if why is None:
            _say(s, f"train.resume: this run stopped early at step {e.stopped_at} (validation had not improved for "
                    f"{e.stale} evaluations since step {e.best_step}); it counts as finished, so nothing is trained: "
                    "raise train.max_steps, train.max_epochs or train.max_seconds, or set train.early_stop=null, to "
                    "train on")
            state.stopped, e.said = EARLY, True
            return False
        _say(s, f"early stop: the run stopped early at step {e.stopped_at}; {why}, so it trains on")
        e.stopped_at = None
    e.limits = now
    if e.patience is not None:
        how = "auto: this run's length is set by time or passes, not train.max_steps" if t.early_stop == "auto" \
            else f"train.early_stop={t.early_stop}"
        _say(s, f"early stop: after {e.patience} evaluation{'s' if e.patience > 1 else ''} in a row without a better "
                f"validation loss (every {t.eval_interval} steps), once it is {NOISE_MARGIN_BPC:g} bits per character "
                f"above the best ({how}; train.early_stop=null turns it off)")
    return True


def _best_file_step(s: Session) -> int | None:
    from inference.checkpoint import BEST_NAME
    from inference.run_files import header

    try:
        return header(s.run_dir / BEST_NAME).step
    except Exception:  # noqa: BLE001 - a missing or unreadable best.pt leaves the step unknown, nothing more
        return None


def _say(s: Session, line: str) -> None:
    if s.dist.is_main:
        tqdm.write(line)  # above the progress bar, which is already drawn


def closing(s: Session, state: LoopState) -> str:
    """The run's last lines besides its result: that it stopped early (and what resuming it does), and, when its
    last validation is worse than its best beyond the noise margin, where it stood best and which file is read."""
    if not s.dist.is_main:
        return ""
    e, lines = state.early, []
    if state.stopped == EARLY and e.stopped_at == state.step and not e.said:
        lines.append(f"early stop at step {state.step}: {e.stale} evaluations in a row without a better validation "
                     f"loss (the best: step {e.best_step}, val loss {state.best_val_loss:.4f}); ckpt.pt and best.pt "
                     f"are kept, and train.resume={shell_path(s.run_dir)} trains on only once a limit is raised")
    if math.isfinite(state.best_val_loss):
        lines += closing_lines(s.run_dir, s.tokens_per_char)
    return "\n".join(lines)
