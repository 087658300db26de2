"""Loss estimates on fixed batches, and bits per character."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from data.sampler import BatchSampler


def bits_per_char(loss_nats_per_token: float, tokens_per_char: float = 1.0) -> float:
    """Mean loss in nats per token -> bits per original character."""
    return loss_nats_per_token * tokens_per_char / math.log(2)


@torch.no_grad()
def estimate_loss(model: nn.Module, tokens: np.ndarray, context_length: int, batch_size: int, steps: int,
                  device: torch.device, autocast_ctx, seed: int = 0) -> float:
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
    finally:  # a signal may cut an evaluation short (training/signals.py): the model trains on as it did
        model.train(was_training)
    return total / steps
