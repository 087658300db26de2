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

    Each block has one buffer (B, 2, num_heads, context_length, head_dim), allocated once at full context
    length; `keys[i]` and `values[i]` are its two halves, so a one-token step writes both in one copy.
    """

    def __init__(self, num_blocks: int, batch_size: int, num_heads: int, context_length: int, head_dim: int,
                 device: torch.device, dtype: torch.dtype):
        shape = (batch_size, 2, num_heads, context_length, head_dim)
        self.buffers = [torch.empty(shape, device=device, dtype=dtype) for _ in range(num_blocks)]
        self.keys = [b[:, 0] for b in self.buffers]  # (B, num_heads, context_length, head_dim) each
        self.values = [b[:, 1] for b in self.buffers]
        self.qkv_weights: list[Tensor | None] = [None] * num_blocks
        self.length = 0  # positions filled
        self.window_start = 0  # absolute index, in the whole sequence, of cache position 0

    @property
    def dtype(self) -> torch.dtype:
        return self.buffers[0].dtype

    def layer(self, i: int) -> LayerKV:
        return LayerKV(self.keys[i], self.values[i], self.qkv_weights[i])
