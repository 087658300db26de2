"""Per-block key/value buffers for incremental generation."""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """Keys and values of every block for positions 0..length-1 of the current window.

    Buffers are allocated once at full context length: (B, num_heads, context_length, head_dim) each.
    """

    def __init__(self, num_blocks: int, batch_size: int, num_heads: int, context_length: int, head_dim: int,
                 device: torch.device, dtype: torch.dtype):
        shape = (batch_size, num_heads, context_length, head_dim)
        self.keys = [torch.empty(shape, device=device, dtype=dtype) for _ in range(num_blocks)]
        self.values = [torch.empty(shape, device=device, dtype=dtype) for _ in range(num_blocks)]
        self.length = 0  # positions filled
        self.window_start = 0  # absolute index, in the whole sequence, of cache position 0

    def layer(self, i: int) -> tuple[Tensor, Tensor]:
        return self.keys[i], self.values[i]
