"""Loss estimates on fixed batches, with the weights the run's readers use, and bits per character.

Design choices:
- Every evaluation scores the same `train.eval_steps` batches of each split (a fixed seed per split), so validation
  moves between two evaluations only because the weights moved.
- Evaluation runs the raw model eagerly (`Session.eval_model`), never the compiled graph (which would compile again
  for evaluation's mode) nor DDP's wrapper; where `train.average` keeps an average, validation scores it.
- A split of N tokens holds N - context_length distinct windows: more batches than draw that many only repeat them,
  so the batches are capped there, and the run says so once, naming the key (`eval_note`).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from data.sampler import BatchSampler
from training.state import Session


def bits_per_char(loss_nats_per_token: float, tokens_per_char: float = 1.0) -> float:
    """Mean loss in nats per token -> bits per original character."""
    return loss_nats_per_token * tokens_per_char / math.log(2)


@torch.no_grad()
def estimate_loss(
    model: nn.Module,
    tokens: np.ndarray,
    context_length: int,
    batch_size: int,
    steps: int,
    device: torch.device,
    autocast_ctx,
    seed: int = 0,
) -> float:
    """Mean loss over `steps` batches drawn with a fixed seed: the same batches at every evaluation."""
    was_training = model.training
    model.eval()
    sampler = BatchSampler(tokens, context_length, batch_size, device, seed=seed, rank=0)
    total = 0.0
    try:
        for _ in range(steps):
            x, y = sampler.next_batch()
            with autocast_ctx():
                _, loss = model(x, y)
            total += loss.item()
    finally:  # a signal may cut an evaluation short (training/guards/signals.py): the model trains on as it did
        model.train(was_training)
    return total / steps


def reader_model(s: Session, raw: nn.Module) -> nn.Module:
    """The weights the run's readers use: the average once it holds one (train.average), else `raw`."""
    return s.average.model if s.average is not None and s.average.updates else raw


def estimate(s: Session, model: nn.Module, split: str) -> float:
    """Mean loss of `model` on the same fixed batches of the `train` or `val` split at every evaluation."""
    t = s.job.train
    tokens, seed = (s.train_tokens, s.job.seed + 1) if split == "train" else (s.val_tokens, s.job.seed + 2)
    batches = min(t.eval_steps, eval_cap(s))  # train.eval_steps, at most what the smaller split holds
    return estimate_loss(model, tokens, s.raw_model.context_length, t.batch_size, batches, s.device, s.autocast, seed)


def evaluate(s: Session) -> tuple[float, float]:
    """Mean loss on fixed batches of the training and validation splits, with the readers' weights."""
    model = reader_model(s, s.eval_model)
    return estimate(s, model, "train"), estimate(s, model, "val")


def _distinct_windows(s: Session) -> int:
    return min(len(s.train_tokens), len(s.val_tokens)) - s.raw_model.context_length


def eval_cap(s: Session) -> int:
    """The batches that draw as many windows as the smaller split holds distinct ones."""
    return max(1, math.ceil(_distinct_windows(s) / s.job.train.batch_size))


def eval_note(s: Session) -> str | None:
    """The line a run prints once at its start when `train.eval_steps` is capped."""
    t, cap = s.job.train, eval_cap(s)
    if t.eval_steps <= cap:
        return None
    split = "validation" if len(s.val_tokens) <= len(s.train_tokens) else "training"
    return (
        f"note: train.eval_steps={t.eval_steps} asks for more batches than the splits hold: the {split} split "
        f"has {_distinct_windows(s):,} distinct windows of {s.raw_model.context_length} tokens, which {cap} "
        f"batches of train.batch_size={t.batch_size} draw; each evaluation scores {cap} batches per split"
    )
