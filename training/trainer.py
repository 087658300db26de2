"""The training loop: set-up, then steps, evaluations and checkpoints until `stop_cause` names why the run ends.

Read `train`, `stop_cause`, `run_steps` and `validate`, then training/step.py (one optimizer step) and
training/checkpoints.py (`save`); every other part is one call away: `setup` (training/session.py), `StepRunner`
(training/runner/), `early_stop`, `guards`, `reporting`.

Design choices:
- litgpt's shape: a `Session` and a `LoopState` (training/state.py) from `setup`; the loop reads in one screen.
- Every way a run ends is in `stop_cause`, and `state.stopped` is assigned here only; divergence alone ends a run
  as an error (`TrainingDiverged`, raised by the loss checks of training/guards/divergence.py).
- The same on one CPU, one GPU or torchrun: rank 0 logs and writes checkpoints; every rank agrees on when to stop.
  Nothing waits for the device between steps but the checks at log steps, evaluations and checkpoints.
- TensorBoard's samples and attention maps, dearer than an evaluation, come every `train.snapshot_interval` steps.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from cli.overrides import shell_path
from common.errors import Interrupted
from inference.checkpoint import BEST_NAME, CKPT_NAME
from training import distributed, early_stop
from training.checkpoints import save
from training.early_stop import EARLY
from training.evaluation import bits_per_char, estimate, evaluate, reader_model
from training.guards.memory import fit_memory
from training.guards.signals import SIGNALS, StopSignals, stop_at_once, stop_signals
from training.reporting.progress import RunBar
from training.reporting.sample import sample_chars
from training.reporting.summary import closing_lines, log_summary, start_notes
from training.runner.steps import StepRunner
from training.session import setup
from training.settings.config import TrainJob
from training.state import LoopState, Session
from training.step import StepResult, train_step


@dataclass
class TrainResult:
    run_dir: Path
    step: int
    train_loss: float
    val_loss: float
    val_bpc: float
    best_val_loss: float
    tokens_per_sec: float
    seconds: float
    stopped: str  # what ended the run: max_steps, max_epochs, max_seconds, early_stop, SIGINT, SIGTERM
    sample: str = ""
    average: str = ""  # train.average: the closing line saying how many updates the average had
    closing: str = ""  # an early stop; where validation stood best, when the end is worse (reporting/summary.py)


def train(job: TrainJob, run_dir: str | Path) -> TrainResult:
    """Set up, train until `stop_cause` ends the run, then finish (the closing sample, the summary)."""
    with stop_signals() as signals:  # one set of handlers from the setup to the closing sample (guards/signals.py)
        with stop_at_once():  # a signal before the first step ends the start (`Interrupted`): no step, no run kept
            s, state = setup(job, Path(run_dir))
            early = early_stop.start(state.early, job.train, s.max_steps, state.step, state.best_val_loss, s.run_dir)
            state.stopped = stop_cause(s, state, signals)  # a resumed run may have nothing left to train
            start_notes(s, state, early)
        started = time.perf_counter()
        if state.stopped is None:
            # Counts steps, or seconds when train.max_seconds will stop the run first (reporting/progress.py).
            bar = RunBar(s.max_steps, state.step, job.train.max_seconds, state.elapsed, not s.dist.is_main)
            try:
                with fit_memory(s.raw_model, job.train, s.device, s.dtype, bool(s.optimizer.state)):  # not an OOM
                    state.stopped = run_steps(s, state, signals, bar)
            finally:
                bar.close()  # before the next line: the result's, or a divergence's error
        return finish(s, state, time.perf_counter() - started)


def stop_cause(s: Session, state: LoopState, signals: StopSignals) -> str | None:
    """Why the run ends at this step, or None while it goes on. Every way a run ends but one, in the order they win:
    - SIGINT or SIGTERM (a signal during a wait that may be cut short ends the run at once: `Interrupted`);
    - the step limit: train.max_steps, or train.max_epochs as steps (`s.step_limit` says which);
    - the clock: train.max_seconds, resumed time included;
    - early stopping: an evaluation found validation turned (train.early_stop; early_stop.py counts).
    The other is divergence: a non-finite loss, validation or weights raises `TrainingDiverged` from the checks
    (guards/divergence.py), and the run ends as an error with its last good checkpoint kept.
    Asked before the first step (a resumed run may be done) and after each step and each evaluation."""
    t = s.job.train
    at_limit = s.max_steps is not None and state.step >= s.max_steps
    out_of_time = bool(t.max_seconds) and state.step > 0 and state.elapsed() >= t.max_seconds
    # under torchrun agreeing is a collective that waits for the device: the ranks agree at log steps
    if not s.dist.enabled or at_limit or state.step % t.log_interval == 0:
        if distributed.any_rank(out_of_time or signals.received is not None, s.dist, s.device):
            return distributed.agreed_signal(signals.received, s.dist, s.device) or "max_seconds"
    if at_limit:
        return s.step_limit
    return EARLY if state.early.stopped_at is not None else None


def run_steps(s: Session, state: LoopState, signals: StopSignals, bar: tqdm) -> str:
    """Steps, logging, evaluations and checkpoints until `stop_cause` says why the run ends, which it returns."""
    runner = StepRunner(s)  # eager, compiled or a CUDA graph, as train.compile chose (training/runner/)
    s.raw_model.train()
    while True:
        try:
            result = train_step(s, state, runner.step_fn(state))
        except Interrupted as e:  # a signal during a compile's warm-up, which changes nothing a checkpoint holds
            return stopped_by_signal(s, state, bar, e.signal_name)
        state.watch.add(result.loss)
        bar.update(1)
        log_step(s, state, result, bar)
        ending = stop_cause(s, state, signals)
        if ending not in SIGNALS and (ending or state.step % s.job.train.eval_interval == 0):
            try:
                validate(s, state, last=ending is not None)
            except Interrupted as e:  # a signal during the evaluation or the snapshot (training/guards/signals.py)
                return stopped_by_signal(s, state, bar, e.signal_name)
            ending = stop_cause(s, state, signals)  # with what the evaluation decided: early stopping
        if ending in SIGNALS:
            return stopped_by_signal(s, state, bar, ending)
        if ending:
            return ending


def stopped_by_signal(s: Session, state: LoopState, bar: tqdm | None, signal_name: str) -> str:
    """Save the step reached (unless this step's checkpoint is written already) and say how to go on; every rank
    got the signal, rank 0 says it."""
    if state.watch.saved_step != state.step or not (s.run_dir / CKPT_NAME).exists():
        save(s, state, CKPT_NAME)
    if bar is not None:
        bar.close()
    resume = f"train.resume={shell_path(s.run_dir)}"
    s.say(f"stopped by {signal_name} at step {state.step}; checkpoint saved, resume with {resume}")
    return signal_name


def log_step(s: Session, state: LoopState, result: StepResult, bar: tqdm) -> None:
    """Every train.log_interval steps (and the last): the one read from the device, which also checks every loss
    since the last one; then TensorBoard and the progress bar."""
    if state.step % s.job.train.log_interval and state.step != s.max_steps:
        return
    loss, grad_norm = state.watch.check(state.step, result.loss, result.grad_norm)
    now = time.perf_counter()
    last_time, last_step = state.last_log
    state.tokens_per_sec = (state.step - last_step) * s.tokens_per_step / max(1e-9, now - last_time)
    state.last_log = (now, state.step)
    scalars = {"train/loss": loss, "train/lr": result.lr, "train/grad_norm": grad_norm}
    s.logger.scalars(state.step, {**scalars, "train/tokens_per_sec": state.tokens_per_sec})
    bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{state.tokens_per_sec:,.0f}", refresh=False)


def validate(s: Session, state: LoopState, last: bool = False) -> None:
    """Evaluate, log, count for early stopping, and save `ckpt.pt` (and `best.pt` when the validation loss
    improved); then the snapshot. A signal cuts the evaluation and the snapshot short (training/guards/signals.py:
    `Interrupted`), never the save. The last evaluation finishes the weights' average first, and never stops a run
    early."""
    if last and s.average is not None:
        s.average.finish(s.raw_model)  # never an empty average: the final weights if no update was due
    state.watch.check(state.step)
    with stop_at_once():
        train_est, val_loss = evaluate(s)
        bpc = bits_per_char(val_loss, s.tokens_per_char)
        scalars = {"val/loss": val_loss, "val/bpc": bpc, "train/eval_loss": train_est}
        if s.average is not None:  # the average is what val/loss scores; the raw weights beside it
            scalars["val/loss_raw"] = estimate(s, s.eval_model, "val")
    state.watch.check_evaluation(state.step, val_loss, train_est)  # finite losses, weights too large to score
    s.logger.scalars(state.step, {**scalars, "val/best_loss": min(state.best_val_loss, val_loss)})
    s.logger.flush()
    s.say(f"step {state.step}: train loss {train_est:.4f}, val loss {val_loss:.4f}, val bpc {bpc:.4f}")
    agree = lambda stop: distributed.any_rank(stop, s.dist, s.device)  # noqa: E731 - every rank decides together
    state.early.count(state.step, val_loss, state.best_val_loss, s.tokens_per_char, last, agree)  # before the best
    improved, state.val_loss = val_loss < state.best_val_loss, val_loss
    state.best_val_loss = min(state.best_val_loss, val_loss)
    save(s, state, CKPT_NAME, also=BEST_NAME if improved else None)  # after the count: ckpt.pt records a stop
    if snapshot_due(s.job.train.snapshot_interval, state.last_snapshot, state.step, last):
        with stop_at_once():
            s.logger.snapshot(state.step)
        s.logger.flush()
        state.last_snapshot = state.step


def snapshot_due(interval: int, last_snapshot: int | None, step: int, last: bool) -> bool:
    """TensorBoard samples and attention maps at the first evaluation, the first one `interval` steps after
    the previous snapshot, and the last; never with interval 0."""
    if interval == 0:
        return False
    return last or last_snapshot is None or step - last_snapshot >= interval


def finish(s: Session, state: LoopState, seconds: float) -> TrainResult:
    """A run that trained no step is evaluated as it stands; then the closing sample, the summary and the result."""
    sample, completed = "", state.stopped not in SIGNALS  # a run a signal stopped has said so already
    try:
        with stop_at_once() if completed else contextlib.nullcontext():
            if completed and math.isnan(state.val_loss):  # zero steps run (resumed at the end)
                closing_evaluation(s, state)
            if completed and s.dist.is_main and s.job.train.sample_chars > 0:
                model = reader_model(s, s.raw_model)
                sample = sample_chars(model, s.tokenizer, s.val_tokens, s.job.train.sample_chars, s.device, s.job.seed)
                s.logger.text("samples/final", sample, state.step)
    except Interrupted as e:  # a signal cuts the final evaluation and the sample short; the checkpoint is written
        state.stopped = stopped_by_signal(s, state, None, e.signal_name)
    val_bpc = log_summary(s, state)
    distributed.cleanup(s.dist)
    return TrainResult(
        run_dir=s.run_dir,
        step=state.step,
        train_loss=math.nan if state.watch.last is None else float(state.watch.last),
        val_loss=state.val_loss,
        val_bpc=val_bpc,
        best_val_loss=state.best_val_loss,
        tokens_per_sec=state.tokens_per_sec,
        seconds=seconds,
        stopped=state.stopped,
        sample=sample,
        average=s.average.summary() if s.average else "",
        closing=closing_lines(s, state),
    )


def closing_evaluation(s: Session, state: LoopState) -> None:
    """A run that trained no step (resumed at its end) is evaluated as it stands; where the run has no ckpt.pt
    (resumed from best.pt, the newer ckpt.pt kept aside) it is written, never leaving the run without the
    checkpoint generate.py reads, and only if its validation is finite."""
    train_est, state.val_loss = evaluate(s)
    if not (s.run_dir / CKPT_NAME).exists():
        state.watch.check_evaluation(state.step, state.val_loss, train_est)
        save(s, state, CKPT_NAME)
