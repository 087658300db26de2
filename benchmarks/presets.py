"""Model sizes the speed benchmark measures.

Design choices:
- `default` is the size the speed table of docs/en/speed.md reports (the project's own default benchmark
  configuration); `shakespeare` is nanoGPT's shakespeare-char size, for comparing with its numbers on a GPU;
  `tiny` exists only so a smoke test can run every benchmark in seconds.
- `batch` sits next to the model's keyword arguments because it belongs to the measurement, and the
  JSON output reports the whole dict under `config`.
"""

from __future__ import annotations

PRESETS: dict[str, dict[str, int]] = {
    "default": dict(context_length=128, embedding_size=128, head_size=128, num_heads=4, num_blocks=4, batch=32),
    "shakespeare": dict(context_length=256, embedding_size=384, head_size=384, num_heads=6, num_blocks=6, batch=64),
    "tiny": dict(context_length=32, embedding_size=32, head_size=32, num_heads=2, num_blocks=2, batch=4),
}


def model_kwargs(preset: dict[str, int]) -> dict[str, int]:
    """The preset without `batch`: the keyword arguments of `AttentionLanguageModel`."""
    return {k: v for k, v in preset.items() if k != "batch"}
