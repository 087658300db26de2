"""Model sizes the speed benchmarks measure, and the one way they build a model.

Design choices:
- `shakespeare` is nanoGPT's shakespeare-char size, to compare with its numbers; `tiny` runs a smoke test in seconds.
- `batch` belongs to the measurement, so it sits beside the model's arguments and the output reports both.
- Every side of a comparison is built by `seeded_model` from seed 0, so two sides differ only where asked to.
"""

from __future__ import annotations

import torch

from model import AttentionLanguageModel

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
