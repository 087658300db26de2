"""Rotary position embeddings (RoPE): queries and keys rotated by angles that grow with their position.

Design choices:
- The cos/sin tables are computed once per model (`rope_tables`) and indexed by each token's absolute position
  (`apply_rope`), so a KV cache that keeps keys rotated where they were written uses the training forward's function.
- Half-split pairing (GPT-NeoX, LLaMA's Hugging Face port): dimension i with i + D/2, so the rotation is
  x * (cos, cos) + swap(x) * (sin, -sin), one flip and no interleaving copies, forward and backward.
- A query at m and a key at n score q . R(n - m) k: attention depends on their distance only.
- The rotated tensor keeps its input's dtype, so SDPA sees one dtype.
"""

from __future__ import annotations

import torch
from torch import Tensor

ROPE_BASE = 10000.0


def rope_tables(head_dim: int, context_length: int, base: float = ROPE_BASE) -> tuple[Tensor, Tensor]:
    """(cos, sin), each (context_length, head_dim // 2), in float32, for positions 0..context_length-1."""
    if head_dim % 2:
        raise ValueError(f"rotary embeddings need an even head dimension, got {head_dim}")
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (D/2,)
    angles = torch.arange(context_length, dtype=torch.float64)[:, None] * inv_freq[None]  # (C, D/2)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, positions: Tensor) -> Tensor:
    """x: (..., T, D) at absolute `positions` (T,) -> x rotated, same shape and dtype."""
    c, s = cos[positions].to(x.dtype), sin[positions].to(x.dtype)  # (T, D/2)
    swapped = x.unflatten(-1, (2, -1)).flip(-2).flatten(-2)  # (x2, x1): the halves trade places
    return x * torch.cat((c, c), dim=-1) + swapped * torch.cat((s, -s), dim=-1)  # (x1 c + x2 s, x2 c - x1 s)
