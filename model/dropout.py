"""Dropout whose masks cost a quarter of the random draws on the CPU.

Design choices:
- `nn.Dropout`'s semantics and name (a subclass with no state), so the lecture's model is the same model.
- torch's CPU dropout draws one number per element, a large part of a CPU step on the attention weights; here one
  64-bit draw fills four 16-bit lanes, an element dropped when its lane is below round(p * 65536), and the scale
  uses that exact rate, so the expected output equals the input.
- Other devices use torch's own kernel (CUDA's is already cheap).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LANE_BITS = 16
LANES = 64 // LANE_BITS  # 16-bit lanes filled by one 64-bit random draw


def lane_threshold(p: float) -> int:
    """Lanes (uniform over 0..65535) below this are dropped: round(p * 65536)."""
    return round(p * (1 << LANE_BITS))


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, device: torch.device) -> tuple[Tensor, float]:
    """A bool mask of `shape`, True where an element is kept, and the exact probability of keeping one."""
    n = math.prod(shape)
    words = torch.randint(-(1 << 63), (1 << 63) - 1, (-(-n // LANES),), dtype=torch.int64, device=device)
    lanes = words.view(torch.int16)[:n]  # signed: lane value v stands for v + 32768 in 0..65535
    drop_below = lane_threshold(p)
    keep = lanes >= drop_below - (1 << (LANE_BITS - 1))
    return keep.view(shape), 1.0 - drop_below / (1 << LANE_BITS)


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """`F.dropout(x, p, training)` with masks from `keep_mask` on the CPU."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, training)
    keep, keep_prob = keep_mask(x.shape, p, x.device)
    return x.mul(keep).mul_(1.0 / keep_prob)


class Dropout(nn.Dropout):
    """`nn.Dropout` with `dropout`'s cheaper CPU masks."""

    def forward(self, x: Tensor) -> Tensor:
        if self.inplace:
            return super().forward(x)
        return dropout(x, self.p, self.training)
