"""Everything a run needs before its first step: device and precision, resume, data, model, optimizer.

Design choices:
- `setup()` returns a `Session` (what the loop reads) and a `LoopState` (what it advances), both training/state.py.
- Every check that can fail runs before anything is deleted, written or printed (the run folder's commit goes last).
- A resumed run whose checkpoint has reached its limit already trains nothing: the loop's `stop_cause` ends it before
  a step, and it is evaluated as it stands, as `train.max_steps=0` documents; it exits 0.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from cli.overrides import shell_path
from common.device import enable_fast_matmul, pick_device
from common.errors import UserError
from common.malloc_tuning import keep_freed_memory
from data.corpus import Corpus, load_corpus
from data.sampler import BatchSampler
from inference.checkpoint import Checkpoint
from model import AttentionLanguageModel
from model.hangul.held_rows import compact_syllable_rows
from tokenizer import tokenizer_from_dict
from training import distributed
from training.checkpoints import open_resume, restore_training, seed_everything
from training.early_stop import refuse_idle_patience
from training.guards.divergence import LossWatch
from training.guards.memory import building_fits
from training.init_from import InitSource, grown_state, load_init_data, load_source
from training.optim.averaging import refuse_empty_average, weight_average
from training.optim.factory import make_optimizer
from training.reporting.summary import open_run_dir
from training.settings import settle
from training.settings.auto import apply_auto_dropout
from training.settings.config import DEFAULT_EPOCHS, TrainConfig, TrainJob
from training.settings.idle import refuse_long_warmup
from training.settings.precision import measured_dtype
from training.settings.resume import typed_command_line
from training.state import LoopState, Session


def setup(job: TrainJob, run_dir: Path) -> tuple[Session, LoopState]:
    """Device, resume, settings, data, model and precision, then the training parts, each refused in one line
    before anything is written; once every check has passed, the run folder and its logger (reporting/summary.py)."""
    dist = distributed.init_distributed(job.device)
    device = pick_device(job.device, dist.local_rank)
    enable_fast_matmul(device)
    if device.type == "cpu":
        keep_freed_memory()  # common/malloc_tuning.py: no page faults for the buffers every step frees
    resumed, init = open_resume(job, run_dir, dist.is_main), load_source(job)
    changed, dtype, precision = settle(job, resumed, device)  # the precision line: once every check has passed
    t = job.train
    refuse_empty_average(t, resumed, t.max_steps, t.lr_decay_steps or t.max_steps)  # again once epochs are steps
    seed_everything(job.seed)
    corpus = load_data(job, resumed, init)
    train_tokens, val_tokens = corpus.split(job.data.val_fraction, job.data.val_files)
    raw_model = build_model(job, corpus.tokenizer.vocab_size, resumed, init, device, dtype, train_tokens)
    measured = {}
    if dtype is None:  # train.dtype=auto on a CPU with bf16 instructions: timed here (training/settings/precision.py)
        dtype, precision, measured["precision"] = measured_dtype(job, raw_model, train_tokens, device, dist)
    tokens_per_step = t.batch_size * raw_model.context_length * t.grad_accum_steps * dist.world_size
    max_steps, limit = step_limit(t, len(train_tokens), tokens_per_step)
    refuse_long_warmup(job, resumed, max_steps)  # training/settings/idle.py, once epochs are steps
    speed = measured.get("precision", {}).get("tokens_per_sec")  # the automatic dropout times none again
    auto = apply_auto_dropout(job, raw_model, max_steps, train_tokens, tokens_per_step, dist, device, dtype, speed)
    optimizer = make_optimizer(raw_model, t.lr, t.weight_decay, (t.beta1, t.beta2), device, t)  # after auto's decays
    average = weight_average(job, raw_model, resumed, max_steps, t.lr_decay_steps or max_steps)
    scaler, sampler, state = training_state(job, raw_model, optimizer, resumed, device, dtype, dist, train_tokens)
    refuse_idle_patience(t, state.early, state.step, state.best_val_loss, max_steps, resumed and typed_command_line())
    model = distribute(raw_model, sampler, dist, job.seed, device)
    lines = (precision, auto.line(len(train_tokens)) if auto else None, init.line() if init else None)
    logger = open_run_dir(job, run_dir, resumed, changed, dist, lines, corpus.tokenizer, raw_model, val_tokens)
    session = Session(
        job=job,
        run_dir=run_dir,
        dist=dist,
        device=device,
        dtype=dtype,
        tokenizer=corpus.tokenizer,
        train_tokens=train_tokens,
        val_tokens=val_tokens,
        tokens_per_char=len(corpus.tokens) / max(1, corpus.num_chars),
        raw_model=raw_model,
        model=model,
        optimizer=optimizer,
        scaler=scaler,
        sampler=sampler,
        max_steps=max_steps,
        decay_steps=t.lr_decay_steps or max_steps,
        tokens_per_step=tokens_per_step,
        step_limit=limit,
        auto_dropout=auto,
        init_record=init.record() if init else (resumed.config.get("init_from") if resumed else None),
        average=average,
        measured=measured or (resumed.config.get("measured", {}) if resumed else {}),
        logger=logger,
    )
    return session, state


def training_state(
    job: TrainJob,
    raw_model: AttentionLanguageModel,
    optimizer: torch.optim.Optimizer,
    resumed: Checkpoint | None,
    device: torch.device,
    dtype: torch.dtype,
    dist: distributed.DistInfo,
    train_tokens: np.ndarray,
) -> tuple[torch.amp.GradScaler, BatchSampler, LoopState]:
    """Float16's loss scaler, the batch sampler and the loop's state, a resumed run's restored into them and into
    the optimizer."""
    t = job.train
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    sampler = BatchSampler(
        train_tokens, raw_model.context_length, t.batch_size, device, job.seed, dist.rank, t.input_noise
    )
    if resumed is None:
        return scaler, sampler, LoopState(last_log=(time.perf_counter(), 0))
    restored = restore_training(optimizer, scaler, sampler, dist.world_size, resumed, raw_model)
    return scaler, sampler, LoopState(**restored, watch=LossWatch(restored["step"]))  # checked up to the step resumed


def min_corpus_tokens(context_length: int, val_fraction: float) -> int:
    """Fewest tokens for which both splits hold one (context_length + 1)-token window."""
    need = context_length + 1
    return max(math.ceil(need / val_fraction), math.ceil(need / (1 - val_fraction))) + 1


def epochs_to_steps(epochs: float, train_tokens: int, tokens_per_step: int) -> int:
    """Steps for `epochs` passes over the training split (the default when train.max_steps is null)."""
    return max(1, math.ceil(epochs * train_tokens / tokens_per_step))


def step_limit(t: TrainConfig, train_tokens: int, tokens_per_step: int) -> tuple[int | None, str]:
    """(the step the run stops at, which key set it). Under a time budget passes over the data stop the run
    only when train.max_epochs was given: the time the user gives is the time used."""
    if t.max_steps is not None:
        return t.max_steps, "max_steps"
    if t.max_epochs is None and t.max_seconds:
        return None, "max_seconds"
    return epochs_to_steps(t.max_epochs or DEFAULT_EPOCHS, train_tokens, tokens_per_step), "max_epochs"


def load_data(job: TrainJob, resumed: Checkpoint | None, init: InitSource | None) -> Corpus:
    """The corpus (with train.init_from, under the source's vocabulary, grown to read it: `init.added`)."""
    if init is not None:
        corpus = load_init_data(job, init)
    else:
        tokenizer = tokenizer_from_dict(resumed.tokenizer) if resumed else None
        corpus = load_corpus(job.data.path, tokenizer, job.data.cache_dir, job.data.tokenizer)
    if resumed is not None and corpus.num_unknown:
        raise UserError(
            f"the corpus {corpus.path} has {corpus.num_unknown} characters outside the vocabulary of "
            f"{resumed.path}; resume with the data.path the run was trained on (or start a new run "
            f"from it with train.init_from={shell_path(resumed.path)})"
        )
    C, vf = job.model.context_length if resumed is None else resumed.model_config.context_length, job.data.val_fraction
    if len(corpus.tokens) < min_corpus_tokens(C, vf):
        per_char = len(corpus.tokens) / max(1, corpus.num_chars)  # users think in characters, not tokens
        raise UserError(
            f"the corpus {corpus.path} is too short: {corpus.num_chars} characters, but "
            f"model.context_length={C} with data.val_fraction={vf} needs at least "
            f"{math.ceil(min_corpus_tokens(C, vf) / per_char)} characters"
        )
    return corpus


def build_model(
    job: TrainJob,
    vocab_size: int,
    resumed: Checkpoint | None,
    init: InitSource | None,
    device: torch.device,
    dtype: torch.dtype | None,
    train_tokens: np.ndarray,
) -> AttentionLanguageModel:
    """The run's model on its device: a resumed run's weights, a fine-tune's grown source, else fresh; one that
    cannot fit is one line, not an allocator's error (guards/memory.py). With train.syllable_rows=seen (a resume keeps
    its checkpoint's: `all` before the key existed) the per-syllable tables hold only the rows the training split
    reaches (model/hangul/held_rows.py)."""
    config = job.model.with_vocab(vocab_size)
    if resumed is not None:  # the checkpoint decides the shapes; these two leave the parameters as they are
        config = replace(resumed.model_config, attention=job.model.attention, dropout=job.model.dropout)
    if config.dropout is None:  # auto: resolved once the run's limits (and speed) are known
        config = replace(config, dropout=0.0)
    with building_fits(job.model.with_vocab(vocab_size), job.train, device, dtype or torch.bfloat16):
        model = AttentionLanguageModel(config)
        if resumed is not None:
            model.load_state_dict(resumed.model)
        elif init is not None:
            model.load_state_dict(grown_state(init.checkpoint.weights(init.used.kind), vocab_size, config.tie_weights))
        model = model.to(device)
    if job.train.syllable_rows == "seen":
        compact_syllable_rows(model, torch.from_numpy(np.unique(train_tokens).astype(np.int64)))
    return model


def distribute(
    raw_model: AttentionLanguageModel,
    sampler: BatchSampler,
    dist: distributed.DistInfo,
    seed: int,
    device: torch.device,
) -> nn.Module:
    """What a step runs: the model, or under torchrun its DDP wrapper, each rank with its own dropout masks and a
    digest of its first batch printed, so users can see that ranks read different data."""
    if not dist.enabled:
        return raw_model  # compiled, if at all, once the loop has chosen (training/runner/steps.py)
    if dist.rank:
        torch.manual_seed(seed + dist.rank)  # rank 0 keeps the run's seeded stream
    first, _ = sampler.peek()[0]
    digest = hashlib.sha1(first.cpu().numpy().tobytes()).hexdigest()[:12]
    print(f"rank {dist.rank}/{dist.world_size}: first batch {digest}", flush=True)
    return DDP(raw_model, device_ids=[dist.local_rank] if device.type == "cuda" else None)
