"""Generation throughput with and without the KV cache, and where a cached token's time goes.

Design choices:
- Batch 1, a short random prompt and a fixed sampling seed: the interactive case, the same tokens on
  every side and every round.
- Two uncached baselines: `uncached` reads the same windows as the cached path (so the logits match and
  only the cache differs); `crop_every_step` is the classic loop that re-reads the last context_length
  tokens at every step, which is more work and what most tutorials' numbers refer to.
- The breakdown times the pieces of the cached path directly: the one-token decode step, and the
  prefill that refills the cache each time the window jumps (reported per token it covers).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch

from benchmarks.presets import model_kwargs
from benchmarks.timing import median_alternating, seconds
from model import AttentionLanguageModel
from model.decode import DecodeStep

PROMPT_TOKENS = 8
BREAKDOWN_ROUNDS = 5


def _generation_timer(model: AttentionLanguageModel, prompt: torch.Tensor, new_tokens: int, use_cache: bool,
                      window_shift: int | None = None) -> Callable[[], float]:
    """A timer returning the tokens/s of generating `new_tokens` after `prompt` (warmed up once)."""

    def generate() -> None:
        g = torch.Generator(device=prompt.device).manual_seed(0)
        for _ in model.stream(prompt, new_tokens, temperature=1.0, use_cache=use_cache, generator=g,
                              window_shift=window_shift):
            pass

    generate()
    return lambda: new_tokens / seconds(generate, prompt.device)


def bench_generation(preset: dict[str, int], vocab: int, device: torch.device, rounds: int, new_tokens: int) -> dict:
    """Tokens/s of cached and uncached generation, their ratios, and the cached path's breakdown."""
    torch.manual_seed(0)
    model = AttentionLanguageModel(vocab_size=vocab, **model_kwargs(preset)).to(device).eval()
    prompt = torch.randint(0, vocab, (1, PROMPT_TOKENS), device=device)
    tps = median_alternating({"cached": _generation_timer(model, prompt, new_tokens, True),
                              "uncached": _generation_timer(model, prompt, new_tokens, False),
                              "crop_every_step": _generation_timer(model, prompt, new_tokens, False, 1)}, rounds)
    return {"generate_new_tokens": new_tokens,
            "generate_tokens_per_sec_cached": round(tps["cached"], 1),
            "generate_tokens_per_sec_uncached": round(tps["uncached"], 1),
            "generate_cached_over_uncached": round(tps["cached"] / tps["uncached"], 2),
            "generate_tokens_per_sec_uncached_crop_every_step": round(tps["crop_every_step"], 1),
            "generate_cached_over_uncached_crop_every_step": round(tps["cached"] / tps["crop_every_step"], 2),
            **decode_breakdown(model, vocab, device)}


@torch.inference_mode()
def decode_breakdown(model: AttentionLanguageModel, vocab: int, device: torch.device) -> dict:
    """Median times of one cached decode step, of refilling the cache (per token), and of one uncached
    forward over a full window, in microseconds."""
    C, shift = model.context_length, model.window_shift
    ids = torch.randint(0, vocab, (1, C), device=device)
    cache = model.new_cache(1, device)
    step = DecodeStep(model, cache)
    steps, refills, full = [], [], []
    for _ in range(BREAKDOWN_ROUNDS):
        refills.append(seconds(lambda: model(ids[:, : C - shift], kv_cache=cache, start=0, last_only=True), device))
        for p in range(C - shift, C):
            steps.append(seconds(lambda p=p: step(ids[:, p : p + 1], cache, p), device))
        full.append(seconds(lambda: model(ids, last_only=True), device))
    return {"generate_decode_step_us": round(statistics.median(steps) * 1e6, 1),
            "generate_refill_us_per_token": round(statistics.median(refills) / shift * 1e6, 1),
            "generate_uncached_full_window_us": round(statistics.median(full) * 1e6, 1)}
