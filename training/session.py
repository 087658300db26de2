"""Everything a run needs before its first step: device and precision, resume, data, model, optimizer.

Design choices:
- `setup()` returns a `Session` (what the loop reads) and a `LoopState` (what it advances): the loop stays one screen.
- Every check that can fail runs before anything is deleted, written or printed (old TensorBoard events go last).
- A resumed run whose checkpoint has reached its limit already trains nothing: it says so and is evaluated as it
  stands, as `train.max_steps=0` documents; it exits 0.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

from cli.overrides import shell_path
from common.device import autocast, enable_fast_matmul, pick_device
from common.errors import UserError
from common.malloc_tuning import keep_freed_memory
from data.corpus import Corpus, load_corpus
from data.sampler import BatchSampler
from inference.checkpoint import Checkpoint
from model import AttentionLanguageModel
from model.hangul.held_rows import compact_syllable_rows
from tokenizer import Tokenizer, tokenizer_from_dict
from training import distributed
from training.checkpoints import keep_newer_checkpoint, open_resume, restore_training, seed_everything
from training.early_stop import EarlyStop, refuse_idle_patience
from training.evaluation import eval_note
from training.guards.divergence import LossWatch
from training.guards.memory import building_fits
from training.init_from import InitSource, grown_state, load_init_data, load_source
from training.optim.averaging import WeightAverage, refuse_empty_average, weight_average
from training.optim.factory import make_optimizer
from training.reporting.tensorboard import RunLogger
from training.settings import settle
from training.settings.auto import AutoDropout, apply_auto_dropout
from training.settings.config import DEFAULT_EPOCHS, TrainConfig, TrainJob
from training.settings.idle import refuse_long_warmup
from training.settings.precision import measured_dtype
from training.settings.resume import summary, typed_command_line


@dataclass
class Session:
    job: TrainJob
    run_dir: Path
    dist: distributed.DistInfo
    device: torch.device
    dtype: torch.dtype
    tokenizer: Tokenizer
    train_tokens: np.ndarray
    val_tokens: np.ndarray
    tokens_per_char: float
    raw_model: AttentionLanguageModel
    model: nn.Module  # raw_model, or its DDP wrapper: what a step runs (the runner compiles its own handle to it)
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    sampler: BatchSampler
    logger: RunLogger
    max_steps: int | None  # None: only the time budget stops the run
    decay_steps: int | None  # None: the schedule follows the clock (train.max_seconds)
    tokens_per_step: int
    step_limit: str = "max_steps"  # what max_steps stands for: max_steps, or max_epochs converted to steps
    auto_dropout: AutoDropout | None = None  # model.dropout resolved at start (null = auto), else None
    init_record: dict | None = None  # train.init_from: the source checkpoint, its step, the tokens added
    average: WeightAverage | None = None  # train.average: the weights' average, kept beside them
    measured: dict = field(default_factory=dict)  # what auto measured at start (precision), recorded in checkpoints

    def autocast(self):
        return autocast(self.device, self.dtype)

    @property
    def eval_model(self) -> nn.Module:
        return self.raw_model  # eager: never the compiled training graph, never DDP's wrapper

    def say(self, line: str) -> None:
        """A line of the run's, once (rank 0), above the progress bar."""
        if self.dist.is_main:
            tqdm.write(line)


@dataclass
class LoopState:
    step: int = 0
    best_val_loss: float = math.inf
    val_loss: float = math.nan  # nan until the first evaluation
    watch: LossWatch = field(default_factory=LossWatch)  # the losses since the last check (guards/divergence.py)
    elapsed_before: float = 0.0  # seconds trained before this process (resume)
    tokens_per_sec: float = 0.0
    stopped: str = "max_steps"  # max_steps | max_epochs | max_seconds | early_stop | SIGINT | SIGTERM
    started: float = field(default_factory=time.perf_counter)
    last_log: tuple[float, int] = (0.0, 0)  # (time, step) of the last throughput measurement
    last_snapshot: int | None = None  # step of this process's last TensorBoard snapshot
    early: EarlyStop = field(default_factory=EarlyStop)  # train.early_stop's count (training/early_stop.py)

    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.started


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


def load_data(job: TrainJob, resumed: Checkpoint | None, source: Checkpoint | None) -> tuple[Corpus, InitSource | None]:
    """The corpus (and, with train.init_from, how the source's vocabulary grew to read it)."""
    init = None
    if source is not None:
        corpus, init = load_init_data(job, source)
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
    return corpus, init


def build_model(
    job: TrainJob, vocab_size: int, resumed: Checkpoint | None, init: InitSource | None = None
) -> AttentionLanguageModel:
    config = job.model.with_vocab(vocab_size)
    if resumed is not None:  # the checkpoint decides the shapes; these two leave the parameters as they are
        config = replace(resumed.model_config, attention=job.model.attention, dropout=job.model.dropout)
    if config.dropout is None:  # auto: resolved once the run's limits (and speed) are known
        config = replace(config, dropout=0.0)
    model = AttentionLanguageModel(config)
    if resumed is not None:
        model.load_state_dict(resumed.model)
    elif init is not None:
        model.load_state_dict(grown_state(init.state(), vocab_size, config.tie_weights))
    return model


def hold_syllable_rows(job: TrainJob, model: AttentionLanguageModel, train_tokens: np.ndarray) -> None:
    """train.syllable_rows=seen: the per-syllable tables hold only the rows the training split reaches (held_rows.py);
    a resume keeps its checkpoint's setting (resume_settings.py: `all` for one written before the key existed)."""
    if job.train.syllable_rows == "seen":
        compact_syllable_rows(model, torch.from_numpy(np.unique(train_tokens).astype(np.int64)))


def commit_run_dir(
    job: TrainJob,
    run_dir: Path,
    resumed: Checkpoint | None,
    changed: list[str],
    dist: distributed.DistInfo,
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


def print_first_batch(sampler: BatchSampler, dist: distributed.DistInfo) -> None:
    """Under DDP, each rank prints a digest of its first batch, so users can see that ranks read different data."""
    saved = sampler.state_dict()
    first = sampler.next_batch()[0]
    sampler.load_state_dict(saved)
    digest = hashlib.sha1(first.cpu().numpy().tobytes()).hexdigest()[:12]
    print(f"rank {dist.rank}/{dist.world_size}: first batch {digest}", flush=True)


def setup(job: TrainJob, run_dir: Path) -> tuple[Session, LoopState]:
    t = job.train
    dist = distributed.init_distributed(job.device)
    device = pick_device(job.device, dist.local_rank)
    enable_fast_matmul(device)
    if device.type == "cpu":
        keep_freed_memory()  # common/malloc_tuning.py: no page faults for the buffers every step frees
    resumed = open_resume(job, run_dir, dist.is_main)
    source = load_source(job)
    changed, dtype, precision = settle(job, resumed, device)  # the precision line: once every check has passed
    refuse_empty_average(t, resumed, t.max_steps, t.lr_decay_steps or t.max_steps)  # again once epochs are steps
    seed_everything(job.seed)
    corpus, init = load_data(job, resumed, source)
    train_tokens, val_tokens = corpus.split(job.data.val_fraction, job.data.val_files)
    with building_fits(job.model.with_vocab(corpus.tokenizer.vocab_size), t, device, dtype or torch.bfloat16):
        raw_model = build_model(job, corpus.tokenizer.vocab_size, resumed, init).to(device)  # a line, not OOM
    hold_syllable_rows(job, raw_model, train_tokens)
    measured = {}
    if dtype is None:  # train.dtype=auto on a CPU with bf16 instructions: timed here (training/settings/precision.py)
        dtype, precision, measured["precision"] = measured_dtype(job, raw_model, train_tokens, device, dist)
    tokens_per_step = t.batch_size * raw_model.context_length * t.grad_accum_steps * dist.world_size
    max_steps, limit = step_limit(t, len(train_tokens), tokens_per_step)
    refuse_long_warmup(job, resumed, max_steps)  # training/settings/idle.py, once epochs are steps
    auto = apply_auto_dropout(
        job,
        raw_model,
        max_steps,
        train_tokens,
        tokens_per_step,
        dist,
        device,
        dtype,
        measured.get("precision", {}).get("tokens_per_sec"),
    )
    # after auto: it may set the weight decays the optimizer is made with
    optimizer = make_optimizer(raw_model, t.lr, t.weight_decay, (t.beta1, t.beta2), device, t)
    average = weight_average(job, raw_model, resumed, max_steps, t.lr_decay_steps or max_steps)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    sampler = BatchSampler(
        train_tokens, raw_model.context_length, t.batch_size, device, job.seed, dist.rank, t.input_noise
    )
    state = (
        LoopState(**restore_training(optimizer, scaler, sampler, dist.world_size, resumed, raw_model))
        if resumed
        else LoopState(last_log=(time.perf_counter(), 0))
    )
    refuse_idle_patience(job, state, max_steps, resumed is not None, typed_command_line())
    if dist.rank:
        torch.manual_seed(job.seed + dist.rank)  # different dropout masks per rank
    if dist.enabled:
        print_first_batch(sampler, dist)
    model = raw_model  # compiled, if at all, once the loop has chosen (training/runner/steps.py)
    if dist.enabled:
        model = DDP(model, device_ids=[dist.local_rank] if device.type == "cuda" else None)
    commit_run_dir(job, run_dir, resumed, changed, dist, (precision, auto.line(len(train_tokens)) if auto else None))
    if init is not None and dist.is_main:
        print(init.line(), flush=True)
    logger = RunLogger(run_dir, enabled=dist.is_main, purge_step=state.step + 1 if resumed else None)
    if dist.is_main:
        corpus.tokenizer.save(run_dir / "vocab.json")
    logger.watch(
        raw_model,
        corpus.tokenizer,
        list(t.sample_prompts),
        t.sample_tokens,
        val_tokens[: min(t.attention_tokens, raw_model.context_length)].tolist(),
        job.seed,
    )
    session = Session(
        job,
        run_dir,
        dist,
        device,
        dtype,
        corpus.tokenizer,
        train_tokens,
        val_tokens,
        len(corpus.tokens) / max(1, corpus.num_chars),
        raw_model,
        model,
        optimizer,
        scaler,
        sampler,
        logger,
        max_steps,
        t.lr_decay_steps or max_steps,
        tokens_per_step,
        limit,
        auto,
        init.record() if init else (resumed.config.get("init_from") if resumed else None),
        average,
        measured or (resumed.config.get("measured", {}) if resumed else {}),
    )
    return session, state


def start_notes(s: Session, state: LoopState) -> None:
    """The lines a run prints once, before its first step (rank 0): the evaluation batches capped, nothing to train."""
    if not s.dist.is_main:
        return
    for line in (eval_note(s), nothing_left_line(s, state)):
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
            epochs = (
                f"train.max_epochs={t.max_epochs}"
                if t.max_epochs is not None
                else f"the default of {DEFAULT_EPOCHS:g} passes (train.max_epochs=null)"
            )
            limit, more = f"{epochs}, {s.max_steps} steps over this training split,", "train.max_epochs"
        else:
            limit, more = f"train.max_steps={s.max_steps}", "train.max_steps"
    else:
        limit, more = (
            f"train.max_seconds={t.max_seconds:g}, used up ({state.elapsed_before:.0f} s trained),",
            "train.max_seconds",
        )
    return (
        f"nothing to train: the checkpoint resumed is at step {state.step}, and {limit} ends the run there; it is "
        f"evaluated as it stands (raise {more} to train on)"
    )
