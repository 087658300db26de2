"""The hangul section of bench.py: `char` against `hangul` with jamo input and the staged head, same model size.

Design choices:
- The sides differ only in the Hangul-aware parts (same size, batch, float32), so the ratio is their price.
- The hangul side holds only the syllable rows the corpus reaches, as training does; `hangul_all_rows` holds all 11,172.
"""

from __future__ import annotations

import torch

from benchmarks.generation_speed import PROMPT_TOKENS, generation_timer
from benchmarks.timing import median_alternating, seeded_model
from benchmarks.training_speed import training_timer
from model.hangul.held_rows import compact_syllable_rows
from tokenizer import build_tokenizer

TARGET_RATIO = 0.9
HANGUL = dict(embedding="jamo", head="jamo")
SIDES = {"char": {}, "hangul": HANGUL, "hangul_all_rows": HANGUL}


def bench_hangul(
    preset: dict[str, int], text: str, device: torch.device, rounds: int, steps: int, new_tokens: int
) -> dict:
    tokenizers = {kind: build_tokenizer(kind, [text]) for kind in ("char", "hangul")}
    ids = {kind: torch.from_numpy(t.encode(text).astype("int64")) for kind, t in tokenizers.items()}
    kind = {side: "char" if side == "char" else "hangul" for side in SIDES}
    vocabs = {side: tokenizers[kind[side]].vocab_size for side in SIDES}
    models = {
        side: seeded_model(vocabs[side], preset, device, dropout=0.0, **options) for side, options in SIDES.items()
    }
    compact_syllable_rows(models["hangul"], ids["hangul"].unique())
    train = median_alternating(
        {
            side: training_timer(m, preset["batch"], device, torch.float32, steps, ids[kind[side]])
            for side, m in models.items()
        },
        rounds,
    )
    prompts = {side: torch.randint(0, vocabs[side], (1, PROMPT_TOKENS), device=device) for side in ("char", "hangul")}
    generate = median_alternating(
        {side: generation_timer(models[side].eval(), prompt, new_tokens, True) for side, prompt in prompts.items()},
        rounds,
    )  # hangul_all_rows generates as hangul
    return {
        "config": dict(preset),
        "dtype": "float32",
        **{f"vocab_size_{s}": vocabs[s] for s in ("char", "hangul")},
        **{f"train_tokens_per_sec_{side}": round(v, 1) for side, v in train.items()},
        "train_hangul_over_char": round(train["hangul"] / train["char"], 3),
        "train_hangul_all_rows_over_char": round(train["hangul_all_rows"] / train["char"], 3),
        "target_hangul_over_char": TARGET_RATIO,
        **{f"generate_tokens_per_sec_{side}": round(v, 1) for side, v in generate.items()},
        "generate_hangul_over_char": round(generate["hangul"] / generate["char"], 3),
        "generate_new_tokens": new_tokens,
    }
