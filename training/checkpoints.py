"""The run's checkpoints: `ckpt.pt` at every evaluation and when a signal stops the run, `best.pt` following the
lowest validation loss, and what a resumed run takes back from one.

Design choices:
- `best.pt` is a byte copy of the evaluation's `ckpt.pt`, not a second serialisation.
- Nothing non-finite is saved (training/guards/divergence.py); every write is atomic, so a failed one (a full disk)
  is one line and the old file stays. Everything a resume needs is plain data (`weights_only=True` loads it).
- Resuming from another file than the run's `ckpt.pt` keeps that newer `ckpt.pt` as `ckpt.step<N>.pt`, and says so.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from cli.overrides import shell_path
from common.atomic_files import atomic_rename
from common.errors import UserError, close_bars
from data.sampler import BatchSampler
from inference.checkpoint import (
    CKPT_NAME,
    Checkpoint,
    TrainingState,
    copy_checkpoint,
    load_checkpoint,
    save_checkpoint,
    strip_compile_prefix,
    usable,
)
from inference.run_files import resolve_checkpoint
from model.hangul.held_rows import dense_state_dict
from training.early_stop import EarlyStop
from training.guards.divergence import all_finite
from training.optim.layout import match_optimizer_layout
from training.settings.config import TrainJob
from training.state import LoopState, Session


def save(s: Session, state: LoopState, name: str, also: str | None = None) -> None:
    """Write the checkpoint `name`, and give it the second name `also` (best.pt) without writing it twice."""
    state.watch.check(state.step)
    if not s.dist.is_main:
        return
    if not all_finite(s.raw_model) or s.average is not None and not all_finite(s.average.model):
        state.watch.refuse_unfinite(state.step, "the model weights")
    average = s.average
    training = TrainingState(
        step=state.step,
        optimizer=s.optimizer.state_dict(),
        scaler=s.scaler.state_dict(),
        best_val_loss=state.best_val_loss,
        val_loss=state.val_loss,
        elapsed_seconds=state.elapsed(),
        rng=capture_rng(),
        sampler=s.sampler.state_dict(),
        world_size=s.dist.world_size,
        average_updates=average.updates if average else 0,
        early_stop=state.early.record(),
    )
    recorded = {"init_from": s.init_record, "measured": s.measured}  # how the run was made, where it says
    ckpt = Checkpoint(
        model_config=s.raw_model.config,
        model=strip_compile_prefix(dense_state_dict(s.raw_model)),
        tokenizer=s.tokenizer.to_dict(),
        tokens_per_char=s.tokens_per_char,
        config={**asdict(s.job), **{k: v for k, v in recorded.items() if v}},  # the whole run config
        training=training,
        averaged=average.dense_state() if average else None,
    )
    try:
        save_checkpoint(ckpt, s.run_dir / name)  # a failed write (full disk) is one UserError; the old file stays
        if also:
            copy_checkpoint(s.run_dir / name, s.run_dir / also)
        state.watch.saved_step = state.step
    except UserError:
        close_bars()
        raise


def open_resume(job: TrainJob, run_dir: Path, is_main: bool) -> Checkpoint | None:
    """The checkpoint to continue, or None for a new run (refused if the folder holds one already)."""
    if job.train.resume:
        return usable(load_checkpoint(resolve_checkpoint(job.train.resume, key="train.resume")))
    if is_main and (run_dir / CKPT_NAME).exists() and not job.train.overwrite:
        raise UserError(
            f"{run_dir} already holds a checkpoint; pass train.resume={shell_path(run_dir)} to continue "
            "it, train.overwrite=true to start over, or another hydra.run.dir"
        )
    return None


def restore_training(
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    sampler: BatchSampler,
    world_size: int,
    resumed: Checkpoint,
    model: torch.nn.Module,
) -> dict:
    """Load the optimizer, the loss scaler, the sampler and the random-number states of `resumed`; returns the loop
    state's fields it restores (step, best validation, time trained, the early-stopping count)."""
    saved = resumed.training
    if saved is None:
        raise UserError(resumed.resume_refusal())
    part = "optimizer"
    try:
        fresh = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
        optimizer.load_state_dict(match_optimizer_layout(saved.optimizer, optimizer, model))
        for group, settings in zip(optimizer.param_groups, fresh, strict=True):  # this run's betas; saved moments
            group.update(settings)
        part = "gradient scaler"
        if saved.scaler:
            scaler.load_state_dict(saved.scaler)
        if world_size == saved.world_size:  # another world size draws other batches anyway
            part = "sampler"
            sampler.load_state_dict(saved.sampler)
            part = "random-number"
            restore_rng(saved.rng)
        part = "step"
        return {
            "step": int(saved.step),
            "best_val_loss": float(saved.best_val_loss),
            "elapsed_before": float(saved.elapsed_seconds),
            "last_log": (time.perf_counter(), int(saved.step)),
            "early": EarlyStop.restored(saved.early_stop),
        }
    except (KeyError, ValueError, TypeError, IndexError, RuntimeError) as e:
        raise UserError(
            f"checkpoint {resumed.path} has an unusable {part} state ({type(e).__name__}: "
            f"{' '.join(str(e).split())[:120]}), so it cannot be resumed; its weights can still be "
            "sampled (generate.py) and scored (evaluate.py), or start a new run"
        ) from None


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


def capture_rng() -> dict:
    """Every random-number state a resume restores (plain data, so weights_only loading accepts it)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(gauss)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    random.setstate(_as_tuple(state["python"]))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def _as_tuple(x):
    return tuple(_as_tuple(v) for v in x) if isinstance(x, (list, tuple)) else x


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
