"""What a run says about itself besides its steps, and where: its folder made ready once every check has passed (the
start's lines, old TensorBoard events removed, the logger), the notes before the first step, the lines that end it,
and its summary in TensorBoard (`run/stopped`, HParams).

Design choices:
- Nothing in the run folder changes before every check of the start has passed: a refused start leaves it as it was,
  its error line alone on the screen; `train.overwrite` removes only the old TensorBoard events.
- Lines are rank 0's, printed above the progress bar (`Session.say`); they name the key that explains them.
- The closing lines find the file the readers use as they do (inference/run_files.py): a run whose last validation
  is worse than its best beyond early stopping's noise margin says where it stood best and which file is read.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import numpy as np

from cli.overrides import shell_path
from common.errors import UserError
from inference.checkpoint import BEST_NAME, CKPT_NAME, Checkpoint
from inference.run_files import folder_file
from model import AttentionLanguageModel
from model.counts import num_parameters
from tokenizer import Tokenizer
from training.checkpoints import keep_newer_checkpoint
from training.distributed import DistInfo
from training.early_stop import EARLY, turned
from training.evaluation import bits_per_char, eval_note
from training.reporting.tensorboard import RunLogger
from training.settings.config import DEFAULT_EPOCHS, TrainJob
from training.settings.resume import summary
from training.state import LoopState, Session

READERS = "generate.py, evaluate.py, serve.py, export.py and train.init_from"
LIMIT_WORDS = {
    "max_steps": "train.max_steps reached",
    "max_epochs": "the passes over the data (train.max_epochs) done",
    "max_seconds": "the time budget train.max_seconds used",
    EARLY: "validation stopped improving (train.early_stop)",
}


def open_run_dir(
    job: TrainJob,
    run_dir: Path,
    resumed: Checkpoint | None,
    changed: list[str],
    dist: DistInfo,
    lines: tuple[str | None, ...],
    tokenizer: Tokenizer,
    model: AttentionLanguageModel,
    val_tokens: np.ndarray,
) -> RunLogger:
    """Every check has passed: only now may run-folder files be removed or renamed, and start-up `lines` printed;
    then the run's TensorBoard writer (rank 0's; a resumed run's curves cut after its step), `vocab.json` beside the
    checkpoints, and what the snapshots show."""
    t = job.train
    if dist.is_main:
        for line in filter(None, lines):  # precision, auto settings: a refused start prints its error line alone
            print(line, flush=True)
        if t.overwrite and resumed is None:  # the old curves go only now
            for old_events in run_dir.glob("events.out.tfevents.*"):
                old_events.unlink()
        if resumed is not None:
            note = keep_newer_checkpoint(run_dir, resumed)
            print(summary(resumed, changed) + (f"\n{note}" if note else ""), flush=True)
    logger = RunLogger(run_dir, enabled=dist.is_main, purge_step=resumed.step + 1 if resumed else None)
    if dist.is_main:  # the writer has made the folder where a Python caller named a new one
        tokenizer.save(run_dir / "vocab.json")
    attention_ids = val_tokens[: min(t.attention_tokens, model.context_length)].tolist()
    logger.watch(model, tokenizer, list(t.sample_prompts), t.sample_tokens, attention_ids, job.seed)
    return logger


def start_notes(s: Session, state: LoopState, early_lines: list[str]) -> None:
    """The lines a run says once, before its first step: the evaluation batches capped; then that it has nothing left
    to train (a resumed run at its limit), or early stopping as resolved (training/early_stop.py `start`)."""
    limit = state.stopped is not None and state.stopped != EARLY
    for line in [eval_note(s), *([nothing_left_line(s, state)] if limit else early_lines)]:
        if line:
            s.say(line)


def nothing_left_line(s: Session, state: LoopState) -> str:
    """Why a resumed run trains nothing: the limit its checkpoint has reached, and the key to raise."""
    t = s.job.train
    if state.stopped == "max_seconds":
        limit = f"train.max_seconds={t.max_seconds:g}, used up ({state.elapsed_before:.0f} s trained),"
        more = "train.max_seconds"
    elif s.step_limit == "max_epochs":
        epochs = (
            f"train.max_epochs={t.max_epochs}"
            if t.max_epochs is not None
            else f"the default of {DEFAULT_EPOCHS:g} passes (train.max_epochs=null)"
        )
        limit, more = f"{epochs}, {s.max_steps} steps over this training split,", "train.max_epochs"
    else:
        limit, more = f"train.max_steps={s.max_steps}", "train.max_steps"
    return (
        f"nothing to train: the checkpoint resumed is at step {state.step}, and {limit} ends the run there; it is "
        f"evaluated as it stands (raise {more} to train on)"
    )


def closing_lines(s: Session, state: LoopState) -> str:
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
        lines += best_file_lines(s.run_dir, s.tokens_per_char)
    return "\n".join(lines)


def best_file_lines(run_dir: Path, tokens_per_char: float) -> list[str]:
    """Where a run whose last validation is worse than its best beyond the noise margin stood best, where it ended,
    and which file the readers use; none when the end is the best or within the margin."""
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


def log_summary(s: Session, state: LoopState) -> float:
    """TensorBoard's record of the whole run: why it stopped (`run/stopped`), and HParams with the numbers runs are
    compared by, so a sweep lines up in one table. Returns the last validation's bits per character."""
    t = s.job.train
    why = f"after {state.elapsed():.0f} s ({LIMIT_WORDS.get(state.stopped, 'a signal')})"
    s.logger.text("run/stopped", f"{state.stopped} at step {state.step} {why}", state.step)
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
    config = {"model": asdict(s.raw_model.config), "data": asdict(s.job.data), "train": asdict(t)}
    settings = {**config, "seed": s.job.seed, "recipe": s.job.recipe, "auto": auto, "init": s.init_record or {}}
    s.logger.hparams(settings, metrics, state.step)
    s.logger.close()
    return val_bpc
