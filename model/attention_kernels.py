"""Which kernel computes causal attention: `attend`, the one call the fused path and the decode step make.

Design choices:
- Everywhere but the CPU, `scaled_dot_product_attention` picks the kernel (flash, memory-efficient, math) itself.
- On the CPU in reduced precision, PyTorch's flash kernel is slower than the plain math path (its backward above
  all), so bf16/fp16 take the math backend, whose batched matmuls want dense inputs.
- In training on the CPU with dropout, the weights are computed here and dropped with `model.dropout`'s masks (a
  quarter of the random draws of SDPA's own dropout): the same expectation, fewer random numbers.
- The lecture's `Head` computes the same step by step (model/attention.py); tests/model/test_model.py and
  tests/model/test_dropout.py check that they agree.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from model.dropout import dropout as masked_dropout


def attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False, dropout_p: float = 0.0
) -> Tensor:
    """scaled_dot_product_attention over (B, H, T, D) queries and (B, H, S, D) keys/values -> (B, H, T, D)."""
    if dropout_p > 0.0 and q.device.type == "cpu":
        return attend_with_dropout(q, k, v, mask, causal, dropout_p)
    if q.device.type == "cpu" and q.dtype != torch.float32:
        with sdpa_kernel(SDPBackend.MATH):
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, dropout_p=dropout_p)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, dropout_p=dropout_p)


def attend_with_dropout(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, p: float) -> Tensor:
    """`attend` in training on the CPU: SDPA's own math path, with `model.dropout`'s cheaper masks on the
    attention weights instead of one random draw per weight."""
    T, S = q.shape[-2], k.shape[-2]
    if causal:
        mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(diagonal=S - T)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))  # (B, H, T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return masked_dropout(F.softmax(scores, dim=-1), p, training=True) @ v
