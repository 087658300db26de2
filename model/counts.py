"""Counting a model: its parameters (in total and by part) and its training FLOPs per token.

Design choices:
- Tied weights count once (`parameters()` lists a shared tensor once), as the lecture and nanoGPT count them.
- A table held in part while training (model/hangul/held_rows.py) counts in full (`params_left_out`), so a run
  reports the same number whether or not its per-syllable rows are held.
- FLOPs count the matrix products only, forward + backward = 3x forward, as in PaLM and nanoGPT's MFU.
"""

from __future__ import annotations

from torch import nn


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters()) + sum(getattr(m, "params_left_out", 0) for m in model.modules())


def block_matrices(c) -> int:
    """The entries of one block's matrices (QKV, the output projection, the MLP) of a `ModelConfig`."""
    E, HS = c.embedding_size, c.head_size
    return 3 * E * HS + HS * E + (3 if c.mlp == "swiglu" else 2) * E * c.mlp_hidden


def matrix_parameters(c) -> int:
    """The parameters a `ModelConfig` builds, counted from its numbers alone (no model is built): the blocks' matrices,
    the token embedding and a softmax head's read-out (once where tied), the learned positions. Norms, biases and
    gates are left out, so it is a lower bound within a few percent."""
    E, V = c.embedding_size, c.vocab_size or 0
    head = E * V if c.head == "softmax" and not c.tie_weights else 0
    positions = c.context_length * E if c.position == "learned" else 0
    return c.num_blocks * block_matrices(c) + E * V + head + positions


def flops_per_token(model: nn.Module, context_length: int | None = None) -> int:
    """Training FLOPs per token of a model at `context_length` (its own by default)."""
    c = model.config
    T = context_length or c.context_length
    per_block = 2 * block_matrices(c) + 2 * 2 * T * c.head_size  # projections + QK^T and AV
    return 3 * (c.num_blocks * per_block + 2 * c.embedding_size * c.vocab_size)


def parameter_counts(model: nn.Module) -> list[tuple[str, int]]:
    """(module name, parameter count) for the embeddings, each block's attention, feed-forward and norms, and the
    head. Shared (tied) parameters are counted once, under the first module that owns them, so with nothing held
    in part the counts sum to `num_parameters(model)`."""
    rows: dict[str, int] = {}
    for name, p in model.named_parameters():  # named_parameters skips tied duplicates
        parts = name.split(".")
        # blocks.0.attn.qkv -> blocks.0.attn ; token_embedding.weight -> token_embedding
        key = ".".join(parts[:3]) if parts[0] == "blocks" else parts[0]
        if parts[0] == "blocks" and parts[2].startswith("ln"):
            key = ".".join(parts[:2]) + ".norms"
        rows[key] = rows.get(key, 0) + p.numel()
    return list(rows.items())
