"""Generation throughput with and without the KV cache, where a cached token's time goes, and (on CUDA) batch-1
sampling through generate.py's path with the static step replayed as a CUDA graph, against eager.

Design choices:
- `generate_*`: two uncached baselines; `uncached` reads the cached path's windows (the same logits: only the cache
  differs), `crop_every_step` re-reads the last context_length tokens at every step.
- The `generation` report sets the cache against crop-and-recompute (nanoGPT's `generate`) per position kind: `learned`
  (its cache refilled when the window jumps) and `rope` (its cache slides), every row's tokens counted.
- A cached token's cost is split by timing the pieces directly: step, sampling, and the rest (`per_token_us`).
- `gpu_sampling` (`python bench.py --device cuda --quick`): "generate.py's path" is `stream` at its default
  temperature, seeded, every new id read back as generate.py reads it. The sides (`SIDES`) take turns, each run once
  first so the graphs are captured and compiled and the numbers are the replays'; `same_text` checks the graphs sample
  the eager static step's ids for the same seed.
- `transformers_peer`: `transformers`' cached `generate` on the very same weights (the lecture model, randomly
  initialised, exported by `export.py`'s code). Both sample the full distribution at temperature 1 (its default
  `top_k` of 50 off) with their KV caches, at most `context_length - 1` new tokens (GPT-2's positions stop there), at
  the default thread count and at one.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from torch import nn

from benchmarks.timing import MODERN, median_alternating, model_kwargs, per_second, seconds, seeded_model
from model import AttentionLanguageModel
from model.counts import num_parameters
from model.decode import DecodeStep, OneThread
from model.sampling import Sampler
from model.streaming import default_window_shift, new_cache, stream

PROMPT_TOKENS = 8
BREAKDOWN_ROUNDS = 5
BATCHES = (1, 8)
KINDS = {"learned": {}, "rope": {**MODERN, "zero_init_proj": False}}  # rope: modern's, its projections drawn
TEMPERATURE = 0.8  # generate.py's default (configs/generate.yaml)
SIDES = {"graph": "graph", "compiled": "compiled", "static_eager": "static", "eager": "eager"}  # key -> decoder


def generation_timer(
    model: AttentionLanguageModel,
    prompt: torch.Tensor,
    new_tokens: int,
    use_cache: bool,
    window_shift: int | None = None,
) -> Callable[[], float]:
    """A timer returning the tokens/s (all rows) of generating `new_tokens` after `prompt` (warmed up once)."""

    def generate() -> None:
        g = torch.Generator(device=prompt.device).manual_seed(0)
        for _ in stream(
            model, prompt, new_tokens, temperature=1.0, use_cache=use_cache, generator=g, window_shift=window_shift
        ):
            pass

    return per_second(generate, prompt.shape[0] * new_tokens, prompt.device)


def bench_generation(preset: dict[str, int], vocab: int, device: torch.device, rounds: int, new_tokens: int) -> dict:
    """Tokens/s of cached and uncached generation, their ratios, and the cached path's breakdown."""
    model = seeded_model(vocab, preset, device).eval()
    prompt = torch.randint(0, vocab, (1, PROMPT_TOKENS), device=device)
    tps = median_alternating(
        {
            "cached": generation_timer(model, prompt, new_tokens, True),
            "uncached": generation_timer(model, prompt, new_tokens, False),
            "crop_every_step": generation_timer(model, prompt, new_tokens, False, 1),
        },
        rounds,
    )
    return {
        "generate_new_tokens": new_tokens,
        "generate_tokens_per_sec_cached": round(tps["cached"], 1),
        "generate_tokens_per_sec_uncached": round(tps["uncached"], 1),
        "generate_cached_over_uncached": round(tps["cached"] / tps["uncached"], 2),
        "generate_tokens_per_sec_uncached_crop_every_step": round(tps["crop_every_step"], 1),
        "generate_cached_over_uncached_crop_every_step": round(tps["cached"] / tps["crop_every_step"], 2),
        **decode_breakdown(model, vocab, device),
    }


def bench_cache_against_crop(
    preset: dict[str, int], vocab: int, device: torch.device, rounds: int, new_tokens: int
) -> dict:
    """The `generation` report: {kind: {batch_N: {cached, crop, ratio}, per_token_us: {...}}}."""
    report: dict = {"new_tokens": new_tokens, "prompt_tokens": 1}
    for kind, options in KINDS.items():
        model = seeded_model(vocab, preset, device, **options).eval()
        timers = {}
        for b in BATCHES:
            prompt = torch.randint(0, vocab, (b, 1), device=device)
            timers[f"cached_{b}"] = generation_timer(model, prompt, new_tokens, True)
            timers[f"crop_{b}"] = generation_timer(model, prompt, new_tokens, False, 1)
        tps = median_alternating(timers, rounds)
        report[kind] = {
            f"batch_{b}": {
                "cached_tokens_per_sec": round(tps[f"cached_{b}"], 1),
                "crop_tokens_per_sec": round(tps[f"crop_{b}"], 1),
                "cached_over_crop": round(tps[f"cached_{b}"] / tps[f"crop_{b}"], 2),
            }
            for b in BATCHES
        }
        report[kind]["per_token_us"] = per_token_costs(model, vocab, device, 1e6 / tps["cached_1"])
    return report


def per_token_costs(model: AttentionLanguageModel, vocab: int, device: torch.device, total_us: float) -> dict:
    """Median µs per cached token (batch 1): the full-cache step, sampling, and the rest of `total_us`."""
    median = decode_times(model, vocab, device, max(1, model.context_length // 4), sampling=True)
    step_us, sampling_us = median["step"] * 1e6, median["sampling"] * 1e6
    return {
        "step": round(step_us, 1),
        "sampling": round(sampling_us, 1),
        "loop": round(total_us - step_us - sampling_us, 1),
    }


def decode_breakdown(model: AttentionLanguageModel, vocab: int, device: torch.device) -> dict:
    """Microseconds of a cached decode step, a cache refill per token, and an uncached full-window forward."""
    shift = default_window_shift(model)
    median = decode_times(model, vocab, device, shift)
    return {
        "generate_decode_step_us": round(median["step"] * 1e6, 1),
        "generate_refill_us_per_token": round(median["refill"] / shift * 1e6, 1),
        "generate_uncached_full_window_us": round(median["full"] * 1e6, 1),
    }


@torch.inference_mode()
def decode_times(
    model: AttentionLanguageModel, vocab: int, device: torch.device, tail: int, sampling: bool = False
) -> dict[str, float]:
    """Median seconds of `refill` (all but the last `tail` positions), `step` over those (and `sampling`), `full`."""
    C = model.context_length
    ids = torch.randint(0, vocab, (1, C), device=device)
    cache = new_cache(model, 1, device)
    step = DecodeStep(model, cache)
    logits = torch.randn(1, vocab, device=device)
    g = torch.Generator(device=device).manual_seed(0)
    sampler = Sampler(vocab, device)
    sampler.set(1.0, None, None, None)
    times: dict[str, list[float]] = {"refill": [], "step": [], "sampling": [], "full": []}
    for _ in range(BREAKDOWN_ROUNDS):
        cache.reset(0)
        times["refill"].append(
            seconds(lambda: model(ids[:, : C - tail], kv_cache=cache, start=0, last_only=True), device)
        )
        cache.advance(C - tail)
        with OneThread(device.type == "cpu"):  # as the loop runs them
            for p in range(C - tail, C):
                times["step"].append(seconds(lambda p=p: step(ids[:, p : p + 1], cache), device))
                if sampling:
                    times["sampling"].append(seconds(lambda: sampler(logits, g), device))
        times["full"].append(seconds(lambda: model(ids, last_only=True), device))
    return {name: statistics.median(values) for name, values in times.items() if values}


def sampled_ids(model: nn.Module, prompt: torch.Tensor, new_tokens: int, decoder: str, seed: int = 0) -> list[int]:
    """The ids one generation samples after `prompt` (1, T), each read back as it comes."""
    g = torch.Generator(device=prompt.device).manual_seed(seed)
    return [int(nxt[0, 0]) for nxt, _ in stream(model, prompt, new_tokens, TEMPERATURE, generator=g, decoder=decoder)]


def sampling_speeds(model: nn.Module, device: torch.device, new_tokens: int = 500, rounds: int = 3) -> dict:
    """Batch-1 tokens/s of each side after an 8-token prompt, `graph_over_eager` and `same_text`."""
    model = model.eval()
    ids = torch.randint(0, model.config.vocab_size, (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(0))
    prompt = ids.to(device)
    sides = {k: partial(sampled_ids, model, prompt, new_tokens, d) for k, d in SIDES.items()}
    tps = median_alternating({k: per_second(run, new_tokens, prompt.device) for k, run in sides.items()}, rounds)
    static = sampled_ids(model, prompt, new_tokens, "static")
    same = all(sampled_ids(model, prompt, new_tokens, d) == static for d in ("graph", "compiled"))
    return {
        **{k: round(v, 1) for k, v in tps.items()},
        "graph_over_eager": round(tps["graph"] / tps["eager"], 2),
        "same_text": same,
        "new_tokens": new_tokens,
    }


def bench_gpu_sampling(preset: dict[str, int], vocab: int, device: torch.device, rounds: int, new_tokens: int) -> dict:
    """bench.py's `gpu_sampling` section: `sampling_speeds` of the lecture model at `preset`'s size."""
    model = seeded_model(vocab, preset, device)
    return {"config": model_kwargs(preset), **sampling_speeds(model, device, new_tokens, rounds)}


def _peer_timers(ours: AttentionLanguageModel, theirs, batch: int, new_tokens: int, vocab: int) -> dict:
    prompt = torch.randint(0, vocab, (batch, 1))

    def theirs_run() -> None:
        torch.manual_seed(0)
        theirs.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            use_cache=True,
            pad_token_id=0,
        )

    return {
        "ours": generation_timer(ours, prompt, new_tokens, use_cache=True),  # the same sampling, seeded
        "transformers": per_second(theirs_run, batch * new_tokens, prompt.device),
    }


@torch.inference_mode()
def bench_transformers_peer(preset: dict[str, int], vocab: int, rounds: int, new_tokens: int) -> dict:
    """{threads_N: {batch_B: {ours, transformers, ours_over_transformers}}}, or why it was skipped."""
    try:
        import transformers
    except ImportError:
        return {"skipped": "transformers is not installed (pip install -r requirements-dev.txt)"}
    from hf_export.writer import write_folder
    from inference.checkpoint import Checkpoint
    from tokenizer import KoreanCharTokenizer

    tokenizer = KoreanCharTokenizer([chr(0xAC00 + i) for i in range(vocab - 1)])
    ours = seeded_model(vocab, preset).eval()
    ckpt = Checkpoint(ours.config, ours.state_dict(), tokenizer.to_dict(), 1.0)
    with tempfile.TemporaryDirectory() as tmp:
        write_folder(ckpt, tokenizer, num_parameters(ours), Path(tmp) / "m", "benchmark", overwrite=False)
        theirs = transformers.AutoModelForCausalLM.from_pretrained(str(Path(tmp) / "m")).eval()
    new = min(new_tokens, ours.context_length - 1)
    report: dict = {"class": type(theirs).__name__, "transformers": transformers.__version__, "new_tokens": new}
    default_threads = torch.get_num_threads()
    for threads in dict.fromkeys((default_threads, 1)):
        torch.set_num_threads(threads)
        try:
            row = {}
            for b in BATCHES:
                tps = median_alternating(_peer_timers(ours, theirs, b, new, vocab), rounds)
                row[f"batch_{b}"] = {
                    "ours_tokens_per_sec": round(tps["ours"], 1),
                    "transformers_tokens_per_sec": round(tps["transformers"], 1),
                    "ours_over_transformers": round(tps["ours"] / tps["transformers"], 2),
                }
            report[f"threads_{threads}"] = row
        finally:
            torch.set_num_threads(default_threads)
    return report
