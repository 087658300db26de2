"""Batch-1 sampling through generate.py's path: the static step replayed as a CUDA graph, against eager.

    python bench.py --device cuda --quick          # the `gpu_sampling` section (CUDA only)

Design choices:
- "generate.py's path": `stream` at its default temperature, seeded, every new id read back as generate.py reads it.
- The sides (`SIDES`) take turns, each run once first so the graphs are captured and compiled and the numbers are
  the replays'; `same_text` checks the graphs sample the eager static step's ids for the same seed.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from benchmarks.generation_speed import PROMPT_TOKENS
from benchmarks.timing import median_alternating, model_kwargs, per_second, seeded_model
from model.streaming import stream

TEMPERATURE = 0.8  # generate.py's default (configs/generate.yaml)
SIDES = {"graph": "graph", "compiled": "compiled", "static_eager": "static", "eager": "eager"}  # key -> decoder


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
