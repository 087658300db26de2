"""What the loop runs on (`Session`, built once by `setup`) and what it advances (`LoopState`).

Design choices:
- litgpt's shape: a session the loop reads and a small state it moves, plain dataclasses in a module of their own,
  so every part of training takes them without importing the set-up (training/session.py).
- `LoopState.stopped` is assigned in one place, training/trainer.py, from its `stop_cause`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from common.device import autocast
from data.sampler import BatchSampler
from model import AttentionLanguageModel
from tokenizer import Tokenizer
from training.distributed import DistInfo
from training.early_stop import EarlyStop
from training.guards.divergence import LossWatch
from training.optim.averaging import WeightAverage
from training.reporting.tensorboard import RunLogger
from training.settings.auto import AutoDropout
from training.settings.config import TrainJob


@dataclass
class Session:
    job: TrainJob
    run_dir: Path
    dist: DistInfo
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
    stopped: str | None = None  # why the run ended (trainer.py `stop_cause`); None while it goes on
    started: float = field(default_factory=time.perf_counter)
    last_log: tuple[float, int] = (0.0, 0)  # (time, step) of the last throughput measurement
    last_snapshot: int | None = None  # step of this process's last TensorBoard snapshot
    early: EarlyStop = field(default_factory=EarlyStop)  # train.early_stop's count (training/early_stop.py)

    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.started
