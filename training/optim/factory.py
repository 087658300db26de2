"""The optimizer factory: which parameters decay, which take Muon, and the optimizer that updates them.

Design choices:
- Weight decay on matrices only: never on biases, norms, skip weights or head gates, and on embeddings only when
  `train.embedding_weight_decay` asks (decay pulls rare characters' vectors towards zero).
- `train.optimizer=muon` gives the hidden matrices (every 2-D weight inside the blocks) to Muon and the embeddings,
  the LM head, norms and biases to AdamW; every parameter is in exactly one group.
- Each group's rate is a multiple of `train.lr` (`lr_scale`), so the one schedule `set_lr` sets moves all together.
- AdamW is fused (CUDA, and the CPU since torch 2.4): one call for every tensor.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from common.device import has_native_bf16
from training.optim.muon import MuonAdamW

if TYPE_CHECKING:
    from training.settings.config import TrainConfig


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW's two groups: matrices that decay, and the rest (biases, norms, embeddings) that do not."""
    groups = split_parameters(model, use_muon=False)
    return [
        {"params": groups["decay"], "weight_decay": weight_decay},
        {"params": groups["no_decay"], "weight_decay": 0.0},
    ]


def split_parameters(model: nn.Module, use_muon: bool) -> dict[str, list[nn.Parameter]]:
    """{"muon": hidden matrices (empty unless use_muon), "decay": other matrices, "embeddings": ...,
    "no_decay": norms and biases}; each trainable parameter in exactly one list."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    out: dict[str, list[nn.Parameter]] = {"muon": [], "decay": [], "embeddings": [], "no_decay": []}
    for name, p in model.named_parameters():  # shared (tied) parameters are listed once
        if not p.requires_grad:
            continue
        if id(p) in embeddings:
            out["embeddings"].append(p)
        elif p.dim() < 2 or name.endswith("gate.weight"):  # a head gate (H x 12) is a few scalars, not a map
            out["no_decay"].append(p)
        elif use_muon and name.startswith(("blocks.", "module.blocks.", "_orig_mod.blocks.")):
            out["muon"].append(p)
        else:
            out["decay"].append(p)
    if not use_muon:  # the lecture's grouping: embeddings never decay
        out["no_decay"] = out.pop("embeddings") + out["no_decay"]
        out["embeddings"] = []
    return out


def make_optimizer(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    device: torch.device,
    train: TrainConfig | None = None,
) -> torch.optim.Optimizer:
    """AdamW over `param_groups`, or with `train.optimizer == "muon"` a `MuonAdamW` over `split_parameters`."""
    fused = device.type in ("cuda", "cpu")
    if train is None or train.optimizer == "adamw":
        groups = param_groups(model, weight_decay)
        if train is not None and (train.embedding_lr is not None or train.embedding_weight_decay > 0):
            split = split_parameters(model, use_muon=True)  # the embeddings in a group of their own
            groups = [
                {"params": split["muon"] + split["decay"], "weight_decay": weight_decay},
                embedding_group(split["embeddings"], lr, train),
                {"params": split["no_decay"], "weight_decay": 0.0},
            ]
            groups = [g for g in groups if g["params"]]
        return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=fused)
    split = split_parameters(model, use_muon=True)
    groups = [
        {
            "params": split["muon"],
            "use_muon": True,
            "lr_scale": train.muon_lr / lr,
            "lr": train.muon_lr,
            "momentum": train.muon_momentum,
            "nesterov": True,
            "weight_decay": train.muon_weight_decay,
            "base_weight_decay": train.muon_weight_decay,
        },  # what train.muon_weight_decay_schedule scales
        {"params": split["decay"], "lr": lr, "weight_decay": weight_decay},
        embedding_group(split["embeddings"], lr, train),
        {"params": split["no_decay"], "lr": lr, "weight_decay": 0.0},
    ]
    for g in groups[1:]:
        g.update(use_muon=False, betas=betas)
    # bfloat16 Newton-Schulz is fast where bf16 is native (GPUs from sm_80, CPUs with bf16 instructions); elsewhere
    # it is emulated and can cost more than the model's own step, so there it runs in float32
    ns_dtype = torch.bfloat16 if has_native_bf16(device) else torch.float32
    return MuonAdamW([g for g in groups if g["params"]], ns_dtype=ns_dtype, fused=fused)


def embedding_group(params: list[nn.Parameter], lr: float, train: TrainConfig) -> dict:
    """AdamW's group for the embeddings under either optimizer: `train.embedding_lr` (default `lr`) as a
    multiple of the schedule's rate, and `train.embedding_weight_decay`."""
    emb_lr = train.embedding_lr if train.embedding_lr is not None else lr
    return {"params": params, "lr_scale": emb_lr / lr, "lr": emb_lr, "weight_decay": train.embedding_weight_decay}


def set_muon_weight_decay(optimizer: torch.optim.Optimizer, scale: float) -> None:
    """Muon's weight decay at `scale` times train.muon_weight_decay (the schedule's multiple)."""
    for group in optimizer.param_groups:
        if group.get("use_muon"):
            group["weight_decay"] = group["base_weight_decay"] * scale


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the schedule's learning rate; groups with an `lr_scale` take that multiple of it. A rate held in a device
    tensor (an optimizer step replayed in a CUDA graph reads it there: training/runner/graph.py) is filled in place."""
    for group in optimizer.param_groups:
        value = lr * group.get("lr_scale", 1.0)
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(value)
        else:
            group["lr"] = value


def clip_and_update(
    params: Iterable[Tensor], optimizer: torch.optim.Optimizer, clip: float, scaler: torch.amp.GradScaler | None = None
) -> Tensor:
    """Unscale (float16's loss scaler), clip to the norm `clip` (0: no clipping) and step the optimizer: the norm
    before clipping, still on the device. The one place a gradient is clipped and an optimizer steps: every way of
    a training step, the speed it is measured at, and the benchmarks' steps (nanoGPT's loop as its train.py runs)."""
    if scaler is not None:
        scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(params, clip or float("inf"))
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    return grad_norm
