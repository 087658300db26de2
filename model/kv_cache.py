"""Per-block key/value buffers for incremental generation, and the token ids the window still needs.

Design choices:
- One buffer per block, (B, 2, num_heads, context_length, head_dim), allocated once per generation: a one-token step
  writes its key and value in one copy, and nothing is reallocated per token.
- `position` counts the positions written since the last (re)fill; position p lives in slot p % context_length.
  Learned positions refill the window before it outgrows the context; rotary keys, rotated where they were written,
  make the cache a ring that never refills. A one-token query sees every slot, so their order does not matter.
- `TokenWindow` keeps only the last context_length ids of each sequence, so memory does not grow with the output.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass
class LayerKV:
    """One block's slice of the cache."""

    keys: Tensor  # (B, num_heads, context_length, head_dim)
    values: Tensor  # (B, num_heads, context_length, head_dim)


class KVCache:
    """Keys and values of every block for the positions of the current window (see the module docstring)."""

    def __init__(self, model: nn.Module, batch_size: int, device: torch.device, dtype: torch.dtype):
        attn = model.blocks[0].attn
        shape = (batch_size, 2, attn.num_heads, model.context_length, attn.head_dim)
        self.buffers = [torch.empty(shape, device=device, dtype=dtype) for _ in model.blocks]
        self.context_length = model.context_length
        self.position = 0  # positions written since the last (re)fill; the next one goes to slot position % C
        self.window_start = 0  # absolute index, in the whole sequence, of position 0

    @property
    def dtype(self) -> torch.dtype:
        return self.buffers[0].dtype

    def reset(self, window_start: int) -> None:
        """Empty the cache for a window starting at `window_start` (the buffers are reused)."""
        self.window_start, self.position = window_start, 0

    def advance(self, n: int) -> None:
        """Record that `n` more positions were written."""
        self.position += n

    def layer(self, i: int) -> LayerKV:
        return LayerKV(self.buffers[i][:, 0], self.buffers[i][:, 1])  # views: (B, num_heads, context_length, head_dim)


class TokenWindow:
    """The last `size` token ids of each of B sequences, appended to in place."""

    def __init__(self, idx: Tensor, size: int):
        """idx: (B, T) the prompt; only its last `size` ids are kept."""
        kept = idx[:, -size:]
        self.size = size
        self.buffer = torch.empty(idx.shape[0], 2 * size, dtype=idx.dtype, device=idx.device)
        self.end = kept.shape[1]
        self.buffer[:, : self.end] = kept

    def append(self, ids: Tensor) -> None:
        """ids: (B, 1), the next token of each sequence."""
        if self.end == self.buffer.shape[1]:  # full: keep the newest size - 1 ids, at the front
            self.buffer[:, : self.size - 1] = self.buffer[:, self.end - self.size + 1 : self.end]
            self.end = self.size - 1
        self.buffer[:, self.end : self.end + 1] = ids
        self.end += 1

    def last(self, n: int) -> Tensor:
        """The newest n ids (n <= size): (B, n), a view valid until the next `append`."""
        return self.buffer[:, self.end - n : self.end]
