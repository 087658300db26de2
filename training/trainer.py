"""The training loop: setup, then steps, evaluations and checkpoints until a limit or a signal stops it.

Read `train`, `loop` and `validate`, then training/step.py (one optimizer step) and training/checkpoints.py
(`save`); every other part is one call away: `setup` (training/session.py), `StepRunner` (training/runner/),
`early_stop`, `guards`, `reporting`.

Design choices:
- litgpt's shape: a `Session` and a `LoopState` from `setup`; the loop reads in one screen.
- The same on one CPU, one GPU or torchrun: rank 0 logs and writes checkpoints; every rank agrees on when to stop.
  Nothing waits for the device between steps but the checks at log steps, evaluations and checkpoints.
- TensorBoard's samples and attention maps, dearer than an evaluation, come every `train.snapshot_interval` steps.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm import tqdm

from cli.overrides import shell_path
from common.errors import Interrupted
from inference.checkpoint import BEST_NAME, CKPT_NAME
from model.counts import num_parameters
from training import distributed, early_stop
from training.checkpoints import save
from training.early_stop import EARLY
from training.evaluation import bits_per_char, estimate, evaluate, reader_model
from training.guards.divergence import LossWatch, TrainingDiverged
from training.guards.memory import fit_memory
from training.guards.signals import stop_at_once, stop_signals
from training.reporting.progress import progress_bar
from training.reporting.sample import sample_chars
from training.runner.steps import StepRunner
from training.session import LoopState, Session, nothing_left, setup, start_notes
from training.settings.config import TrainJob
from training.step import StepResult

COMPLETED = ("max_steps", "max_epochs", "max_seconds", EARLY)
LIMIT_WORDS = {
    "max_steps": "train.max_steps reached",
    "max_epochs": "the passes over the data (train.max_epochs) done",
    "max_seconds": "the time budget train.max_seconds used",
    EARLY: "validation stopped improving (train.early_stop)",
}


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
    closing: str = ""  # an early stop; where validation stood best, when the end is worse (early_stop.py)


def train(job: TrainJob, run_dir: str | Path) -> TrainResult:
    with stop_signals():  # one set of handlers from the setup to the closing sample (training/guards/signals.py)
        return run_training(job, Path(run_dir))


def run_training(job: TrainJob, run_dir: Path) -> TrainResult:
    with stop_at_once():  # the setup's waits (the first token-cache build) end at a signal, nothing half-written
        s, state = setup(job, run_dir)
    started = time.perf_counter()
    start_notes(s, state)  # the evaluation batches capped, nothing left to train
    # Counts steps, or seconds when train.max_seconds will stop the run first (training/reporting/progress.py).
    bar = progress_bar(s.max_steps, state.step, job.train.max_seconds, state.elapsed, disable=not s.dist.is_main)
    s.raw_model.train()
    state.stopped = s.step_limit  # unless the clock or a signal ends the run first
    state.watch = LossWatch(state.step)
    try:
        if not nothing_left(s, state) and early_stop.start(s, state):  # False: an early stop resumed as it was
            with fit_memory(s.raw_model, s.job.train, s.device, s.dtype, bool(s.optimizer.state)):  # a line, not OOM
                loop(s, state, bar, StepRunner(s))
    except TrainingDiverged:
        bar.close()  # so the error starts its own line
        raise
    bar.close()
    return finish(s, state, time.perf_counter() - started)


def loop(s: Session, state: LoopState, bar: tqdm, runner: StepRunner) -> None:
    """Steps, logging, evaluations and checkpoints until a limit or a signal; nothing here waits for the device
    but the checks at log steps, evaluations and checkpoints (training/guards/divergence.py)."""
    job = s.job
    with stop_signals() as signals:  # train()'s
        while s.max_steps is None or state.step < s.max_steps:
            try:
                result = runner.step(state)
            except Interrupted as e:  # a signal during a compile's warm-up, which changes nothing a checkpoint holds
                stop(s, state, bar, e.signal_name)
                break
            state.watch.add(result.loss)
            bar.update(1)
            log_step(s, state, result, bar)
            out_of_time = bool(job.train.max_seconds) and state.elapsed() >= job.train.max_seconds
            # under DDP agreeing to stop is a collective that waits for the device: ranks agree at log steps
            agree = not s.dist.enabled or state.step % job.train.log_interval == 0 or state.step == s.max_steps
            halt = agree and distributed.any_rank(out_of_time or signals.received is not None, s.dist, s.device)
            stop_signal = distributed.agreed_signal(signals.received, s.dist, s.device) if halt else None
            if stop_signal:  # every rank takes this branch together, whichever got the signal first
                stop(s, state, bar, stop_signal)
                break
            last = state.step == s.max_steps or halt
            if last and s.average is not None:
                s.average.finish(s.raw_model)  # never an empty average: the final weights if no update was due
            if state.step % job.train.eval_interval == 0 or last:
                try:
                    validate(s, state, last)
                except Interrupted as e:  # a signal during the evaluation or the snapshot (training/guards/signals.py)
                    stop(s, state, bar, e.signal_name)
                    break
            if halt:
                state.stopped = "max_seconds" if out_of_time else state.stopped
                break
            if early_stop.stops_here(state):  # train.early_stop: validation has turned
                break


def stop(s: Session, state: LoopState, bar: tqdm | None, signal_name: str) -> None:
    """A signal stops the run: save the step reached (unless this step's checkpoint is written already), say how to
    go on."""
    state.stopped = signal_name
    if state.watch.saved_step != state.step or not (s.run_dir / CKPT_NAME).exists():
        save(s, state, CKPT_NAME)
    if bar is not None:
        bar.close()
    s.say(
        f"stopped by {state.stopped} at step {state.step}; checkpoint saved, resume with "  # every rank got it
        f"train.resume={shell_path(s.run_dir)}"
    )


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
    s.logger.scalars(
        state.step,
        {
            "train/loss": loss,
            "train/lr": result.lr,
            "train/grad_norm": grad_norm,
            "train/tokens_per_sec": state.tokens_per_sec,
        },
    )
    bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{state.tokens_per_sec:,.0f}", refresh=False)


def validate(s: Session, state: LoopState, last: bool = False) -> None:
    """Evaluate, log, and save `ckpt.pt` (and `best.pt` when the validation loss improved); then the snapshot. A
    signal cuts the evaluation and the snapshot short (training/guards/signals.py: `Interrupted`), never the save."""
    state.watch.check(state.step)
    with stop_at_once():
        train_est, val_loss = evaluate(s)
        scalars = {
            "val/loss": val_loss,
            "val/bpc": bits_per_char(val_loss, s.tokens_per_char),
            "train/eval_loss": train_est,
            "val/best_loss": min(state.best_val_loss, val_loss),
        }
        if s.average is not None:  # the average is what val/loss scores; the raw weights beside it
            scalars["val/loss_raw"] = estimate(s, s.eval_model, "val")
    state.watch.check_evaluation(state.step, val_loss, train_est)  # finite losses, weights too large to score
    state.val_loss, bpc = val_loss, scalars["val/bpc"]
    s.logger.scalars(state.step, scalars)
    s.logger.flush()
    s.say(f"step {state.step}: train loss {train_est:.4f}, val loss {state.val_loss:.4f}, val bpc {bpc:.4f}")
    early_stop.observe(s, state, last)  # before the best takes this evaluation in, and before ckpt.pt records it
    improved = state.val_loss < state.best_val_loss
    state.best_val_loss = min(state.best_val_loss, state.val_loss)
    save(s, state, CKPT_NAME, also=BEST_NAME if improved else None)
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


def closing_evaluation(s: Session, state: LoopState) -> None:
    """A run that trained no step (resumed at its end) is evaluated as it stands; where the run has no ckpt.pt
    (resumed from best.pt, the newer ckpt.pt kept aside) it is written, never leaving the run without the
    checkpoint generate.py reads, and only if its validation is finite."""
    train_est, state.val_loss = evaluate(s)
    if not (s.run_dir / CKPT_NAME).exists():
        state.watch.check_evaluation(state.step, state.val_loss, train_est)
        save(s, state, CKPT_NAME)


def finish(s: Session, state: LoopState, seconds: float) -> TrainResult:
    """The final evaluation if none ran, the closing sample, HParams, and the result line's numbers."""
    t = s.job.train
    sample = ""
    try:  # a run a signal stopped has said so already (stop); it has no closing evaluation or sample
        with stop_at_once() if state.stopped in COMPLETED else contextlib.nullcontext():
            if math.isnan(state.val_loss) and state.stopped in COMPLETED:  # zero steps run (resumed at the end)
                closing_evaluation(s, state)
            if s.dist.is_main and state.stopped in COMPLETED and t.sample_chars > 0:
                model = reader_model(s, s.raw_model)
                sample = sample_chars(model, s.tokenizer, s.val_tokens, t.sample_chars, s.device, s.job.seed)
                s.logger.text("samples/final", sample, state.step)
    except Interrupted as e:  # a signal cuts the final evaluation and the sample short; the checkpoint is written
        stop(s, state, None, e.signal_name)
    s.logger.text(
        "run/stopped",
        f"{state.stopped} at step {state.step} after {state.elapsed():.0f} s "
        f"({LIMIT_WORDS.get(state.stopped, 'a signal')})",
        state.step,
    )
    val_bpc = bits_per_char(state.val_loss, s.tokens_per_char)
    metrics = {
        "hparam/val_loss": state.val_loss,
        "hparam/val_bpc": val_bpc,
        "hparam/best_val_loss": state.best_val_loss,
        "hparam/tokens_per_sec": state.tokens_per_sec,
        "hparam/params": num_parameters(s.raw_model),
    }
    auto = {"dropout_passes": s.auto_dropout.passes} if s.auto_dropout else {}
    auto.update({f"{dtype}_step_ms": ms for dtype, ms in s.measured.get("precision", {}).get("step_ms", {}).items()})
    s.logger.hparams(
        {
            "model": asdict(s.raw_model.config),
            "data": asdict(s.job.data),
            "train": asdict(t),
            "seed": s.job.seed,
            "recipe": s.job.recipe,
            "auto": auto,
            "init": s.init_record or {},
        },
        metrics,
        state.step,
    )
    s.logger.close()
    distributed.cleanup(s.dist)
    train_loss = math.nan if state.watch.last is None else float(state.watch.last)
    return TrainResult(
        s.run_dir,
        state.step,
        train_loss,
        state.val_loss,
        val_bpc,
        state.best_val_loss,
        state.tokens_per_sec,
        seconds,
        state.stopped,
        sample,
        s.average.summary() if s.average else "",
        early_stop.closing(s, state),
    )
