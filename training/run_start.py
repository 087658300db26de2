"""What a run says once at its start, after the setup: the evaluation batches capped to what the splits hold, and a
resumed run that has nothing left to train.

Design choices:
- An evaluation draws `train.eval_steps` batches of `train.batch_size` windows at random positions of each split
  (the same ones every time). A split of N tokens holds N - context_length distinct windows: batches beyond the
  number that draws that many windows only repeat them, so they make the estimate no better and the evaluation
  longer, without end in sight for a small split and a large `train.eval_steps` (and every evaluation is a wait).
  The batches are capped there, for the smaller split, and the run says so once, naming the key. A default
  setting on any corpus a run can train on stays far below the cap.
- A resumed run whose checkpoint has reached its limit already (`train.max_steps` at or below its step, the steps
  `train.max_epochs` comes to, or the time `train.max_seconds` gives, used up) trains nothing: it says so, and
  is evaluated as it stands, as `train.max_steps=0` documents; it exits 0.
"""

from __future__ import annotations

import math

from training.config import DEFAULT_EPOCHS
from training.setup import LoopState, Session


def eval_cap(s: Session) -> int:
    """The batches that draw as many windows as the smaller split holds distinct ones."""
    windows = min(len(s.train_tokens), len(s.val_tokens)) - s.raw_model.context_length
    return max(1, math.ceil(windows / s.job.train.batch_size))


def eval_batches(s: Session) -> int:
    """The batches each evaluation scores per split: `train.eval_steps`, at most `eval_cap`."""
    return min(s.job.train.eval_steps, eval_cap(s))


def start_notes(s: Session, state: LoopState) -> None:
    """The lines a run prints once, before its first step (rank 0)."""
    if not s.dist.is_main:
        return
    t, cap = s.job.train, eval_cap(s)
    if t.eval_steps > cap:
        split = "validation" if len(s.val_tokens) <= len(s.train_tokens) else "training"
        windows = min(len(s.train_tokens), len(s.val_tokens)) - s.raw_model.context_length
        print(f"note: train.eval_steps={t.eval_steps} asks for more batches than the splits hold: the {split} split "
              f"has {windows:,} distinct windows of {s.raw_model.context_length} tokens, which {cap} batches of "
              f"train.batch_size={t.batch_size} draw; each evaluation scores {cap} batches per split", flush=True)
    line = nothing_left_line(s, state)
    if line:
        print(line, flush=True)


def nothing_left(s: Session, state: LoopState) -> bool:
    """Whether the run's limit is reached before its first step (a resumed run); the time budget's limit then
    stops it (`state.stopped`)."""
    t = s.job.train
    if s.max_steps is not None and state.step >= s.max_steps:
        return True
    if t.max_seconds and state.step and state.elapsed_before >= t.max_seconds:
        state.stopped = "max_seconds"
        return True
    return False


def nothing_left_line(s: Session, state: LoopState) -> str | None:
    t = s.job.train
    if not nothing_left(s, state):
        return None
    if s.max_steps is not None and state.step >= s.max_steps:
        if s.step_limit == "max_epochs":
            epochs = f"train.max_epochs={t.max_epochs}" if t.max_epochs is not None else \
                f"the default of {DEFAULT_EPOCHS:g} passes (train.max_epochs=null)"
            limit, more = f"{epochs}, {s.max_steps} steps over this training split,", "train.max_epochs"
        else:
            limit, more = f"train.max_steps={s.max_steps}", "train.max_steps"
    else:
        limit, more = f"train.max_seconds={t.max_seconds:g}, used up ({state.elapsed_before:.0f} s trained),", \
            "train.max_seconds"
    return (f"nothing to train: the checkpoint resumed is at step {state.step}, and {limit} ends the run there; it is "
            f"evaluated as it stands (raise {more} to train on)")
