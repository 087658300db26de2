"""What the speed benchmarks share: timers, the model sizes they measure, the one way they build a model, and the one
training step they time (fused AdamW under autocast, optionally clipped and averaged).

Design choices:
- The sides take turns each round and each reports its median: a slow spell hits all alike, an outlier round none.
- Every timer synchronises the device before reading the clock (CUDA launches are asynchronous) and warms up first.
- `shakespeare` is nanoGPT's shakespeare-char size, to compare with its numbers; `tiny` runs a smoke test in seconds.
- `batch` belongs to the measurement, so it sits beside the model's arguments and the output reports both.
- Every side of a comparison is built by `seeded_model` from seed 0, so two sides differ only where asked to.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping

import torch

from common.device import autocast
from model import AttentionLanguageModel
from training.optim.averaging import WeightAverage
from training.optim.factory import clip_and_update
from training.settings.config import TrainConfig

WARMUP_STEPS = 3  # the first training steps allocate buffers and pick kernels


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_alternating(timers: Mapping[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Call every timer once per round, in turn; return each timer's median result."""
    results: dict[str, list[float]] = {name: [] for name in timers}
    for _ in range(rounds):
        for name, timer in timers.items():
            results[name].append(timer())
    return {name: statistics.median(values) for name, values in results.items()}


def repeated(fn: Callable[[], object], n: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(n):
            fn()

    return run


def mean_seconds(fn: Callable[[], object], reps: int) -> Callable[[], float]:
    """A timer returning the mean wall time of `reps` calls of `fn` (one call alone is too noisy)."""
    run = repeated(fn, reps)

    def timer() -> float:
        start = time.perf_counter()
        run()
        return (time.perf_counter() - start) / reps

    return timer


def seconds(fn: Callable[[], object], device: torch.device) -> float:
    """Wall time of one call of `fn`, its device work included."""
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def per_second(
    fn: Callable[[], object], amount: float, device: torch.device, warmup: Callable[[], object] | None = None
) -> Callable[[], float]:
    """A timer returning `amount` per second of one call of `fn`, once `warmup` (by default `fn`) has run."""
    (warmup or fn)()
    return lambda: amount / seconds(fn, device)


def step_timer(
    step: Callable[[], object], tokens_per_step: int, steps: int, device: torch.device, warmup: int = WARMUP_STEPS
) -> Callable[[], float]:
    """A timer returning the tokens/s of `steps` training steps, after `warmup` steps."""
    return per_second(repeated(step, steps), tokens_per_step * steps, device, repeated(step, warmup))


PRESETS: dict[str, dict[str, int]] = {
    "default": dict(context_length=128, embedding_size=128, head_size=128, num_heads=4, num_blocks=4, batch=32),
    "shakespeare": dict(context_length=256, embedding_size=384, head_size=384, num_heads=6, num_blocks=6, batch=64),
    "tiny": dict(context_length=32, embedding_size=32, head_size=32, num_heads=2, num_blocks=2, batch=4),
}
MODERN = dict(position="rope", norm="rmsnorm", mlp="relu2", qk_norm=True, zero_init_proj=True, init="torch")


def model_kwargs(preset: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in preset.items() if k != "batch"}


def seeded_model(
    vocab: int, preset: dict[str, int] | None = None, device: torch.device | str | None = None, **options
) -> AttentionLanguageModel:
    """The model over `vocab` ids at `preset`'s size (else the model's defaults) with `options`, from seed 0."""
    torch.manual_seed(0)
    return AttentionLanguageModel(vocab_size=vocab, **model_kwargs(preset or {}), **options).to(device)


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
        clip_and_update(model.parameters(), opt, 1.0 if clip else 0.0)
        opt.zero_grad(set_to_none=True)
        if averaged is not None:
            averaged.update(model)

    return step
