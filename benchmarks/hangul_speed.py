"""The hangul section of bench.py: `char` against `hangul` with jamo input and the staged head, same model size.

Design choices:
- The two sides differ only in what issue 23 changes: the char side is the lecture model over the corpus's
  character vocabulary; the hangul side reads the hangul tokenizer's ids of the same corpus (every syllable
  plus the corpus's other characters) with `embedding="jamo"` and `head="jamo"`. Everything else (size,
  batch, dtype float32) is the same, so the ratio is the price of the Hangul-aware parts.
- Training and generation each alternate the two sides round by round and report medians
  (`benchmarks.timing`), like the other sections; generation is cached sampling at batch 1 from an 8-token
  prompt, as the `generate_*` keys measure it.
- The batches are random ids, as in the training section: nearly all of them are syllables on the hangul
  side (the fixed block dominates its vocabulary), a little more syllable-heavy than prose, so the staged
  head's cost is if anything overstated.
- `target_hangul_over_char` (0.9) is issue 23's goal for the training ratio, printed beside it so a reader
  of the JSON need not look it up.
"""

from __future__ import annotations

import torch

from benchmarks.generation_speed import PROMPT_TOKENS, generation_timer
from benchmarks.presets import model_kwargs
from benchmarks.timing import median_alternating
from benchmarks.training_speed import training_timer
from model import AttentionLanguageModel
from tokenizer import build_tokenizer

TARGET_RATIO = 0.9
SIDES = {"char": {}, "hangul": dict(embedding="jamo", head="jamo")}


def _model(preset: dict[str, int], vocab: int, device: torch.device, **options) -> AttentionLanguageModel:
    torch.manual_seed(0)
    return AttentionLanguageModel(vocab_size=vocab, dropout=0.0, **model_kwargs(preset), **options).to(device)


def bench_hangul(preset: dict[str, int], text: str, device: torch.device, rounds: int, steps: int,
                 new_tokens: int) -> dict:
    """Training and generation tokens/s of char and of hangul (jamo embedding + staged head), and the ratios."""
    vocabs = {"char": build_tokenizer("char", [text]).vocab_size,
              "hangul": build_tokenizer("hangul", [text]).vocab_size}
    models = {side: _model(preset, vocabs[side], device, **options) for side, options in SIDES.items()}
    train = median_alternating({side: training_timer(m, preset["batch"], device, torch.float32, steps)
                                for side, m in models.items()}, rounds)
    timers = {}
    for side, m in models.items():
        m.eval()
        prompt = torch.randint(0, vocabs[side], (1, PROMPT_TOKENS), device=device)
        timers[side] = generation_timer(m, prompt, new_tokens, True)
    generate = median_alternating(timers, rounds)
    out: dict[str, object] = {"config": dict(preset), "dtype": "float32"}
    out.update({f"vocab_size_{side}": v for side, v in vocabs.items()})
    out.update({f"train_tokens_per_sec_{side}": round(v, 1) for side, v in train.items()})
    out["train_hangul_over_char"] = round(train["hangul"] / train["char"], 3)
    out["target_hangul_over_char"] = TARGET_RATIO
    out.update({f"generate_tokens_per_sec_{side}": round(v, 1) for side, v in generate.items()})
    out["generate_hangul_over_char"] = round(generate["hangul"] / generate["char"], 3)
    out["generate_new_tokens"] = new_tokens
    return out
