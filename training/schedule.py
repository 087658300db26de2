"""Learning-rate schedule and optimizer construction."""

from __future__ import annotations

import math

import torch
from torch import nn

SCHEDULES = ("cosine", "constant")


def lr_at(progress_step: float, lr: float, min_lr: float, warmup_steps: int, total_steps: float,
          schedule: str = "cosine") -> float:
    """Linear warmup over `warmup_steps`, then cosine decay from `lr` to `min_lr` at `total_steps`.

    `progress_step` may be fractional (a time budget converts elapsed seconds into steps).
    """
    if schedule == "constant":
        return lr
    if warmup_steps > 0 and progress_step < warmup_steps:
        return lr * (progress_step + 1) / (warmup_steps + 1)
    if progress_step >= total_steps:
        return min_lr
    ratio = (progress_step - warmup_steps) / max(1e-9, total_steps - warmup_steps)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices only: never on biases, LayerNorm weights or embeddings."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay, no_decay = [], []
    for p in model.parameters():  # shared (tied) parameters are listed once
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 and id(p) not in embeddings else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, lr: float, weight_decay: float, betas: tuple[float, float],
                   device: torch.device) -> torch.optim.AdamW:
    # The fused kernel (CUDA, and the CPU since torch 2.4) updates every tensor in one call: on a small
    # model the per-tensor loop of the default implementation costs several times more.
    fused = device.type in ("cuda", "cpu")
    return torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, betas=betas, fused=fused)
