"""Training steps, ours beside nanoGPT's `model.py`: tokens/s, kernels and GPU time per step, MFU.

Design choices:
- nanoGPT's side is its own `model.py`, stepped as its train.py steps it (autocast, fused AdamW, clipping), one batch.
- Ours is train.py's own step (`StepRunner` on train.py's set-up), one timer a way: what a run gets, not a bare model.
- Kernels and GPU time come from torch.profiler over eager steps: a graph replays the same kernels, launched at once.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.timing import median_alternating, step_timer, sync
from model.counts import flops_per_token

SHAKESPEARE = dict(num_blocks=6, embedding_size=384, num_heads=6, context_length=256, batch=64)
DEFAULT = dict(num_blocks=4, embedding_size=128, num_heads=4, context_length=128, batch=8)
STEPS_PER_ROUND = 20
WARMUP_STEPS = 5  # compiles and captures
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12}  # dense, per card


def nanogpt_step(
    checkout: Path, size: dict, vocab: int, dtype: torch.dtype, compiled: bool, device: torch.device | str
) -> Callable[[], None]:
    """One training step of nanoGPT's GPT (bias=False, its shakespeare-char setting) on a fixed batch."""
    from benchmarks.nanogpt_peer import nanogpt_model, nanogpt_module
    from benchmarks.timing import optimizer_step

    model = nanogpt_model(nanogpt_module(checkout), vocab, size).to(device)
    x = torch.randint(0, vocab, (size["batch"], size["context_length"]), device=device)
    return optimizer_step(model, x, x, dtype, torch.compile(model) if compiled else None, clip=True)


def ours_overrides(size: dict, dtype: str, corpus: Path, folder: Path, device: torch.device | str) -> list[str]:
    """train.py's overrides for a run of `size` in `dtype` on `device` (no dropout, no compile, no step limit)."""
    return [
        f"device={device}",
        f"train.dtype={dtype}",
        "model.dropout=0",
        f"data.path={corpus}",
        f"data.cache_dir={folder / 'cache'}",
        *(f"model.{key}={size[key]}" for key in ("num_blocks", "embedding_size", "num_heads", "context_length")),
        f"model.head_size={size['embedding_size']}",
        f"train.batch_size={size['batch']}",
        "train.max_steps=1000000",
        "train.compile=false",
    ]


def ours_step(overrides: list[str], way, folder: Path) -> tuple[Callable[[], None], torch.nn.Module]:
    """One step of train.py's loop on a session of its own set-up, run `way` (training/runner/plan.py)."""
    from benchmarks.lever_speed import session
    from training.runner.steps import StepRunner
    from training.step import train_step

    with contextlib.redirect_stdout(sys.stderr):  # the set-up's and the runner's lines: stdout is the JSON
        s, state = session(overrides, folder)
        runner = StepRunner(s, way=way)

    def step() -> None:
        with contextlib.redirect_stdout(sys.stderr):
            train_step(s, state, runner.step_fn(state))

    return step, s.raw_model


def tokens_per_second(
    steps: dict[str, Callable[[], None]], tokens_per_step: int, rounds: int, device: torch.device
) -> dict[str, float]:
    """Median tokens/s of each step function, taking turns; each warms up (compiles, captures) first."""
    return median_alternating(
        {
            name: step_timer(step, tokens_per_step, STEPS_PER_ROUND, device, WARMUP_STEPS)
            for name, step in steps.items()
        },
        rounds,
    )


def kernels_per_step(step: Callable[[], None], n: int = 5) -> dict[str, float]:
    """CUDA kernels, GPU busy time and wall time per step, over `n` profiled steps."""
    from torch.profiler import ProfilerActivity, profile

    step()
    sync(torch.device("cuda"))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        started = time.perf_counter()
        for _ in range(n):
            step()
        sync(torch.device("cuda"))
        wall = time.perf_counter() - started
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy_us = sum(getattr(e, "device_time", getattr(e, "cuda_time", 0)) for e in events)
    return {
        "kernels": round(len(events) / n, 1),
        "gpu_ms": round(busy_us / n / 1e3, 3),
        "wall_ms_profiled": round(wall / n * 1e3, 3),
    }


def mfu(model: torch.nn.Module, tokens_per_sec: float) -> float | None:
    """The share of this card's dense bf16 peak (None for a card PEAK_BF16 lacks)."""
    peak = next((v for k, v in PEAK_BF16.items() if k in torch.cuda.get_device_name()), None)
    return None if peak is None else round(flops_per_token(model) * tokens_per_sec / peak, 4)


def compare_ways(size: dict, dtype: str, checkout: Path | None, corpus: Path, rounds: int) -> dict:
    """Training tokens/s of ours (eager, graph, inductor under it) beside nanoGPT's, ratios, MFU, kernels."""
    from training.runner.plan import EAGER, Way

    cuda = torch.device("cuda")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        overrides = ours_overrides(size, dtype, corpus, folder, cuda)
        steps, models = {}, {}
        for name, way in (
            ("ours_eager", EAGER),
            ("ours_graph", Way(graph=True)),
            ("ours_compiled_graph", Way(inductor=True, graph=True)),
        ):
            steps[name], models[name] = ours_step(overrides, way, folder / name)
        vocab = models["ours_eager"].config.vocab_size
        if checkout is not None:
            steps["nanogpt_eager"] = nanogpt_step(checkout, size, vocab, getattr(torch, dtype), False, cuda)
            steps["nanogpt_compiled"] = nanogpt_step(checkout, size, vocab, getattr(torch, dtype), True, cuda)
        kernels = {k: kernels_per_step(steps[k]) for k in ("ours_eager", "nanogpt_eager") if k in steps}
        speed = tokens_per_second(steps, size["batch"] * size["context_length"], rounds, cuda)
        out = {
            "size": {**size, "vocab_size": vocab, "dtype": dtype},
            "tokens_per_sec": {k: round(v) for k, v in speed.items()},
            "steps_per_sec": {k: round(v / (size["batch"] * size["context_length"]), 1) for k, v in speed.items()},
            "mfu": {k: mfu(models["ours_eager"], v) for k, v in speed.items()},
            "kernels_per_step": kernels,
        }
        if checkout is not None:
            best = max(speed["ours_graph"], speed["ours_compiled_graph"])
            out["ratios"] = {
                "eager_vs_nanogpt_eager": round(speed["ours_eager"] / speed["nanogpt_eager"], 3),
                "best_vs_nanogpt_compiled": round(best / speed["nanogpt_compiled"], 3),
            }
        return out
