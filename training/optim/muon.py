"""Muon for the hidden weight matrices and AdamW for everything else, as one `torch.optim.Optimizer`.

Design choices:
- One optimizer object: the loop, `GradScaler`, clipping, checkpoints and resume see one `param_groups`; a group
  with `use_muon=True` takes Muon's update, every other AdamW's (PyTorch's functional Adam, fused where it can).
- Muon is `torch.optim.Muon`'s algorithm, but the Newton-Schulz iteration runs in a dtype the caller chooses
  (float32 on a CPU, where bfloat16 can cost more than the model's step), and matrices of one shape are
  orthogonalised as one batch.
- A parameter of more than two dimensions is a stack of matrices, each updated as its own: the fused `qkv` takes
  the updates the lecture layout's per-head matrices would.
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch
from torch import Tensor
from torch.optim.adam import adam

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # torch.optim.Muon's (Keller Jordan's) quintic
NS_STEPS = 5


def orthogonalize(g: Tensor, dtype: torch.dtype = torch.float32, steps: int = NS_STEPS, eps: float = 1e-7) -> Tensor:
    """(..., m, n) matrices -> the nearest semi-orthogonal matrices, approximately (U S' V^T with S' near 1)."""
    x = g.to(dtype)
    tall = x.shape[-2] > x.shape[-1]
    if tall:  # iterate on the wide orientation: the Gram matrix is then the smaller one
        x = x.mT
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)  # spectral norm <= Frobenius norm <= 1
    a, b, c = NS_COEFFICIENTS
    for _ in range(steps):
        gram = x @ x.mT
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return (x.mT if tall else x).to(g.dtype)


class MuonAdamW(torch.optim.Optimizer):
    """Groups carry their own settings: Muon groups `lr, momentum, nesterov, weight_decay` and `use_muon=True`;
    AdamW groups `lr, betas, eps, weight_decay`. `ns_dtype` is the Newton-Schulz precision."""

    def __init__(self, groups: list[dict], ns_dtype: torch.dtype = torch.float32, fused: bool = False):
        defaults = dict(
            lr=1e-3, use_muon=False, momentum=0.95, nesterov=True, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0
        )
        super().__init__(groups, defaults)
        for group in self.param_groups:
            if group["use_muon"] and any(p.dim() < 2 for p in group["params"]):
                raise ValueError(
                    "Muon updates matrices (or stacks of them) only; put other parameters in an AdamW group"
                )
        self.ns_dtype, self.fused = ns_dtype, fused

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                (self._muon if group["use_muon"] else self._adamw)(group, params)
        return loss

    def _muon(self, group: dict, params: list[Tensor]) -> None:
        lr, m = group["lr"], group["momentum"]
        by_shape: dict[tuple, list[Tensor]] = defaultdict(list)  # by the shape of one matrix
        for p in params:
            by_shape[tuple(p.shape[-2:])].append(p)
        for shape, ps in by_shape.items():
            updates = []
            for p in ps:
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - m)
                updates.append((p.grad.lerp(buf, m) if group["nesterov"] else buf).reshape(-1, *shape))
            ortho = orthogonalize(torch.cat(updates), self.ns_dtype)  # (matrices, *shape)
            scaled_lr = lr * math.sqrt(max(1.0, shape[0] / shape[1]))
            for p, o in zip(ps, ortho.split([u.shape[0] for u in updates]), strict=True):
                p.mul_(1 - lr * group["weight_decay"])
                p.add_(o.view_as(p), alpha=-scaled_lr)

    def _adamw(self, group: dict, params: list[Tensor]) -> None:
        avgs, sqs, steps = [], [], []
        for p in params:
            state = self.state[p]
            if not state:
                state["step"] = torch.zeros((), dtype=torch.float32, device=p.device if self.fused else "cpu")
                state["exp_avg"] = torch.zeros_like(p)
                state["exp_avg_sq"] = torch.zeros_like(p)
            avgs.append(state["exp_avg"])
            sqs.append(state["exp_avg_sq"])
            steps.append(state["step"])
        beta1, beta2 = group["betas"]
        adam(
            params,
            [p.grad for p in params],
            avgs,
            sqs,
            [],
            steps,
            fused=self.fused,
            decoupled_weight_decay=True,
            amsgrad=False,
            beta1=beta1,
            beta2=beta2,
            lr=group["lr"],
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=False,
        )
