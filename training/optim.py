"""The optimizer factory: which parameters decay, and the optimizer that updates them.

Design choices:
- Weight decay on matrices only: never on biases, norm weights or embeddings (decaying an embedding
  pulls rare characters' vectors towards zero).
- The fused AdamW kernel (CUDA, and the CPU since torch 2.4) updates every tensor in one call; on a small
  model the per-tensor loop of the default implementation costs several times more.
"""

from __future__ import annotations

import torch
from torch import nn


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay, no_decay = [], []
    for p in model.parameters():  # shared (tied) parameters are listed once
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 and id(p) not in embeddings else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, lr: float, weight_decay: float, betas: tuple[float, float],
                   device: torch.device) -> torch.optim.Optimizer:
    fused = device.type in ("cuda", "cpu")
    return torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, betas=betas, fused=fused)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
