"""Training throughput of the `heads` and `fused` attention paths, and the share of the matmul peak it reaches.

Design choices:
- Every (attention, dtype) pair gets its own freshly seeded model and optimizer, built before any timing,
  so the pairs can take turns round by round (see `benchmarks.timing`).
- The batches are random ids: the speed of a step does not depend on the text, and no data pipeline
  is measured by accident.
- float32 is always measured: it is the baseline of every ratio and of the achieved FLOP/s.
- The "peak" is what a large square matmul reaches on this device in the same run, not a datasheet
  figure, so the achieved fraction compares like with like.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from benchmarks.presets import seeded_model
from benchmarks.timing import median_alternating, seconds
from common.device import autocast
from model import AttentionLanguageModel
from model.counts import flops_per_token, num_parameters
from training.optim.averaging import WeightAverage
from training.settings.config import TrainConfig

WARMUP_STEPS = 3  # the first steps allocate buffers and pick kernels


def matmul_peak_flops(device: torch.device, dtype: torch.dtype, rounds: int, small: bool = False) -> float:
    """Median FLOP/s of repeated n x n matmuls (2 n^3 FLOPs each)."""
    n = 4096 if device.type == "cuda" else 1024
    reps = 50 if device.type == "cuda" else 10
    if small:
        n, reps = 256, 2
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)

    def many() -> None:
        for _ in range(reps):
            a @ b

    many()
    return median_alternating({"mm": lambda: 2 * n**3 * reps / seconds(many, device)}, rounds)["mm"]


def training_timer(model: AttentionLanguageModel, batch: int, device: torch.device, dtype: torch.dtype,
                   steps: int, tokens: torch.Tensor | None = None, average: str = "none") -> Callable[[], float]:
    """A timer returning the tokens/s of `steps` optimizer steps on one batch (after a warm-up): random ids, or
    windows of `tokens` (a text's ids) at random offsets. `average="ema"` updates a weight average after every
    step, as train.average=ema does."""
    vocab, context = model.config.vocab_size, model.config.context_length
    if tokens is None:
        x = torch.randint(0, vocab, (batch, context), device=device)
        y = torch.randint(0, vocab, (batch, context), device=device)
    else:
        window = tokens[torch.randint(0, len(tokens) - context - 1, (batch, 1)) + torch.arange(context + 1)]
        x, y = window[:, :-1].to(device), window[:, 1:].to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type in ("cuda", "cpu"))
    averaged = WeightAverage(model, TrainConfig(average=average)) if average != "none" else None

    def step() -> None:
        with autocast(device, dtype):
            _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if averaged is not None:
            averaged.update(model)

    def run(n: int) -> None:
        for _ in range(n):
            step()

    run(WARMUP_STEPS)
    return lambda: batch * context * steps / seconds(lambda: run(steps), device)


def clipped_step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, run: Callable | None = None,
                 amp: torch.dtype | None = None) -> Callable[[], None]:
    """One optimizer step as nanoGPT's train.py takes one: forward with targets (through `run`, `model` compiled,
    where given; under `amp` autocast where given), backward, gradients clipped at 1.0, a fused AdamW step,
    gradients unset."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    forward = run or model

    def step() -> None:
        with torch.autocast(x.device.type, dtype=amp) if amp else contextlib.nullcontext():
            _, loss = forward(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def bench_training(preset: dict[str, int], vocab: int, device: torch.device, dtypes: list[str], rounds: int,
                   steps: int, peak_flops: float) -> dict:
    """Tokens/s per (attention, dtype), their ratios, the model's size and its achieved fp32 FLOP/s."""
    timers = {}
    for attention in ("heads", "fused"):
        for dt in dtypes:
            model = seeded_model(vocab, preset, device, dropout=0.0, attention=attention)
            timers[f"{attention}_{dt}"] = training_timer(model, preset["batch"], device, getattr(torch, dt), steps)
    model = seeded_model(vocab, preset, device, dropout=0.0)
    timers["fused_float32_ema"] = training_timer(model, preset["batch"], device, torch.float32, steps, average="ema")
    tps = median_alternating(timers, rounds)
    out: dict[str, object] = {"config": dict(preset)}
    out.update({f"train_tokens_per_sec_{k}": round(v, 1) for k, v in tps.items()})
    for dt in dtypes:
        out[f"fused_over_heads_{dt}"] = round(tps[f"fused_{dt}"] / tps[f"heads_{dt}"], 3)
        out[f"fused_{dt}_over_heads_float32"] = round(tps[f"fused_{dt}"] / tps["heads_float32"], 3)
    out["ema_over_plain_float32"] = round(tps["fused_float32_ema"] / tps["fused_float32"], 3)  # train.average's cost
    out["model_params"] = num_parameters(model)
    out["model_flops_per_token"] = flops_per_token(model)
    achieved = tps["fused_float32"] * flops_per_token(model)
    out["achieved_flops_fused_float32"] = round(achieved)
    out["achieved_fraction_of_matmul_peak_float32"] = round(achieved / peak_flops, 3)
    return out
