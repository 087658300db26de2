"""Training throughput of the `heads` and `fused` attention paths, and the share of the matmul peak it reaches.

Design choices:
- Every (attention, dtype) pair has its own seeded model and optimizer, built before any timing, so pairs take turns.
- Random ids: a step's speed does not depend on the text, and no data pipeline is timed by accident.
- float32 is always measured, the baseline of every ratio; the peak is a large matmul's in this run, not a datasheet's.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from benchmarks.timing import median_alternating, per_second, repeated, seeded_model, step_timer
from common.device import autocast
from model import AttentionLanguageModel
from model.counts import flops_per_token, num_parameters
from training.optim.averaging import WeightAverage
from training.settings.config import TrainConfig


def matmul_peak_flops(device: torch.device, dtype: torch.dtype, rounds: int, small: bool = False) -> float:
    """Median FLOP/s of repeated n x n matmuls (2 n^3 FLOPs each)."""
    n, reps = (256, 2) if small else (4096, 50) if device.type == "cuda" else (1024, 10)
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    return median_alternating({"mm": per_second(repeated(lambda: a @ b, reps), 2 * n**3 * reps, device)}, rounds)["mm"]


def training_timer(
    model: AttentionLanguageModel,
    batch: int,
    device: torch.device,
    dtype: torch.dtype,
    steps: int,
    tokens: torch.Tensor | None = None,
    average: str = "none",
) -> Callable[[], float]:
    """Tokens/s of `steps` optimizer steps on one batch of random ids or windows of `tokens`, after a warm-up."""
    vocab, context = model.config.vocab_size, model.config.context_length
    if tokens is None:
        x, y = (torch.randint(0, vocab, (batch, context), device=device) for _ in range(2))
    else:
        window = tokens[torch.randint(0, len(tokens) - context - 1, (batch, 1)) + torch.arange(context + 1)]
        x, y = window[:, :-1].to(device), window[:, 1:].to(device)
    return step_timer(optimizer_step(model, x, y, dtype, average=average), batch * context, steps, device)


def optimizer_step(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    dtype: torch.dtype = torch.float32,
    forward: Callable | None = None,
    clip: bool = False,
    average: str = "none",
) -> Callable[[], None]:
    """One fused-AdamW step on (x, y) through `forward` (say `model` compiled) under `dtype`'s autocast; `clip` at 1.0
    as nanoGPT's train.py clips, `average="ema"` a weight average updated as train.average=ema does."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=x.device.type in ("cuda", "cpu"))
    averaged = WeightAverage(model, TrainConfig(average=average)) if average != "none" else None
    forward = forward or model

    def step() -> None:
        with autocast(x.device, dtype):
            _, loss = forward(x, y)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if averaged is not None:
            averaged.update(model)

    return step


def bench_training(
    preset: dict[str, int],
    vocab: int,
    device: torch.device,
    dtypes: list[str],
    rounds: int,
    steps: int,
    peak_flops: float,
) -> dict:
    """Tokens/s per (attention, dtype), their ratios, the model's size and its achieved fp32 FLOP/s."""
    timers = {}
    for attention in ("heads", "fused"):
        for dt in dtypes:
            model = seeded_model(vocab, preset, device, dropout=0.0, attention=attention)
            timers[f"{attention}_{dt}"] = training_timer(model, preset["batch"], device, getattr(torch, dt), steps)
    model = seeded_model(vocab, preset, device, dropout=0.0)
    timers["fused_float32_ema"] = training_timer(model, preset["batch"], device, torch.float32, steps, average="ema")
    tps = median_alternating(timers, rounds)
    out: dict = {"config": dict(preset), **{f"train_tokens_per_sec_{k}": round(v, 1) for k, v in tps.items()}}
    for dt in dtypes:
        out[f"fused_over_heads_{dt}"] = round(tps[f"fused_{dt}"] / tps[f"heads_{dt}"], 3)
        out[f"fused_{dt}_over_heads_float32"] = round(tps[f"fused_{dt}"] / tps["heads_float32"], 3)
    out["ema_over_plain_float32"] = round(tps["fused_float32_ema"] / tps["fused_float32"], 3)  # train.average's cost
    achieved = tps["fused_float32"] * flops_per_token(model)
    return {
        **out,
        "model_params": num_parameters(model),
        "model_flops_per_token": flops_per_token(model),
        "achieved_flops_fused_float32": round(achieved),
        "achieved_fraction_of_matmul_peak_float32": round(achieved / peak_flops, 3),
    }
