"""The run folder at start: once every check has passed, what a run removes, renames and writes there, and the
lines it prints first.

Design choices:
- Nothing in the folder changes before every check of the start has passed: a refused start leaves it as it was,
  its error line alone on the screen.
- `train.overwrite` removes only the old TensorBoard events (the new run's checkpoints replace the old ones as they
  are written); resuming from another file than the run's `ckpt.pt` keeps that newer `ckpt.pt` as `ckpt.step<N>.pt`,
  and says so.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common.atomic_files import atomic_rename
from common.errors import UserError
from inference.checkpoint import CKPT_NAME, Checkpoint, load_checkpoint
from model import AttentionLanguageModel
from tokenizer import Tokenizer
from training.distributed import DistInfo
from training.reporting.tensorboard import RunLogger
from training.settings.config import TrainJob
from training.settings.resume import summary


def commit_run_dir(
    job: TrainJob,
    run_dir: Path,
    resumed: Checkpoint | None,
    changed: list[str],
    dist: DistInfo,
    lines: tuple[str | None, ...] = (),
) -> None:
    """Every check has passed: only now may run-folder files be removed or renamed, and start-up `lines` printed."""
    if not dist.is_main:
        return
    for line in filter(None, lines):  # precision, auto settings: a refused start prints its error line alone
        print(line, flush=True)
    if job.train.overwrite and resumed is None:  # the old curves go only now
        for old_events in run_dir.glob("events.out.tfevents.*"):
            old_events.unlink()
    if resumed is not None:
        note = keep_newer_checkpoint(run_dir, resumed)
        print(summary(resumed, changed) + (f"\n{note}" if note else ""), flush=True)


def keep_newer_checkpoint(run_dir: Path, resumed: Checkpoint) -> str | None:
    """Resuming from another file than the run's ckpt.pt: keep that ckpt.pt under its own name, so the first
    save does not overwrite it. Returns the line that says so."""
    current = run_dir / CKPT_NAME
    if not current.is_file() or resumed.path is None or current.resolve() == resumed.path.resolve():
        return None
    try:
        step = str(load_checkpoint(current).step)
    except UserError:
        step = "unreadable"
    kept = run_dir / f"ckpt.step{step}.pt"
    n = 1
    while kept.exists():
        n += 1
        kept = run_dir / f"ckpt.step{step}.{n}.pt"
    atomic_rename(current, kept)
    return (
        f"note: resuming from {resumed.path.name} (step {resumed.step}); the run's newer {CKPT_NAME} "
        f"(step {step}) is kept as {kept.name}"
    )


def open_logger(
    run_dir: Path,
    dist: DistInfo,
    purge_step: int | None,
    tokenizer: Tokenizer,
    model: AttentionLanguageModel,
    val_tokens: np.ndarray,
    job: TrainJob,
) -> RunLogger:
    """The run's TensorBoard writer (rank 0's; a resumed run's curves cut at `purge_step`), what its snapshots show,
    and `vocab.json` beside the checkpoints."""
    t = job.train
    logger = RunLogger(run_dir, enabled=dist.is_main, purge_step=purge_step)
    if dist.is_main:
        tokenizer.save(run_dir / "vocab.json")
    attention_ids = val_tokens[: min(t.attention_tokens, model.context_length)].tolist()
    logger.watch(model, tokenizer, list(t.sample_prompts), t.sample_tokens, attention_ids, job.seed)
    return logger
