"""Per-block key/value buffers for incremental generation."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class LayerKV:
    """One block's slice of the cache."""

    keys: Tensor  # (B, num_heads, context_length, head_dim)
    values: Tensor  # (B, num_heads, context_length, head_dim)
    qkv_weight: Tensor | None = None  # the fused QKV matrix, built once per generation instead of every step


class KVCache:
    """Keys and values of every block for positions 0..length-1 of the current window.

    Buffers are allocated once at full context length: (B, num_heads, context_length, head_dim) each.
    """

    def __init__(self, num_blocks: int, batch_size: int, num_heads: int, context_length: int, head_dim: int,
                 device: torch.device, dtype: torch.dtype):
        shape = (batch_size, num_heads, context_length, head_dim)
        self.keys = [torch.empty(shape, device=device, dtype=dtype) for _ in range(num_blocks)]
        self.values = [torch.empty(shape, device=device, dtype=dtype) for _ in range(num_blocks)]
        self.qkv_weights: list[Tensor | None] = [None] * num_blocks
        self.length = 0  # positions filled
        self.window_start = 0  # absolute index, in the whole sequence, of cache position 0

    def layer(self, i: int) -> LayerKV:
        return LayerKV(self.keys[i], self.values[i], self.qkv_weights[i])
