"""Causal self-attention, as in the lecture (`Head`) and as one fused kernel call.

Both paths own exactly the same parameters - the per-head `query`, `key` and `value` projections - so a
state dict loads into either. The fused path concatenates those weights into one QKV projection and calls
`scaled_dot_product_attention`, which picks flash / memory-efficient kernels where the device has them.

Both accept an optional slice of a `KVCache`: keys and values of earlier positions are read from it and
the new ones written into it, so generation feeds one token per step instead of the whole window.

Design choices:
- The modern options act on queries and keys only, in one function both paths call (`shape_qk`): optional
  RMS normalisation of each head's queries and keys (no learned gain, so `heads` and `fused` still own the
  same parameters), then rotary embeddings at the tokens' absolute positions. Keys enter the cache already
  rotated, so a cached key never needs its position again.
- The rotary tables are non-persistent buffers: state dicts are the same with or without them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from model.config import ATTENTION_KINDS
from model.dropout import Dropout
from model.dropout import dropout as masked_dropout
from model.kv_cache import LayerKV
from model.rope import apply_rope, rope_tables

__all__ = ["ATTENTION_KINDS", "Head", "MultiHeadAttention", "attend", "causal_mask", "shape_heads", "shape_qk"]

Rope = tuple[Tensor, Tensor]  # (cos, sin) tables, each (context_length, head_dim // 2)


def causal_mask(context_length: int) -> Tensor:
    return torch.tril(torch.ones(context_length, context_length, dtype=torch.bool))


def attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False, dropout_p: float = 0.0
) -> Tensor:
    """scaled_dot_product_attention over (B, H, T, D) queries and (B, H, S, D) keys/values -> (B, H, T, D)."""
    if dropout_p > 0.0 and q.device.type == "cpu":
        return attend_with_dropout(q, k, v, mask, causal, dropout_p)
    # PyTorch's CPU flash kernel is slower than the plain math path in bf16 (its backward above all), so
    # reduced precision on the CPU takes the math backend, whose batched matmuls want dense inputs; elsewhere
    # SDPA picks the kernel.
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


def token_positions(start: int, length: int, device: torch.device, rope: Rope | None) -> Tensor | None:
    """Absolute positions start..start+length-1, built only when rotary embeddings will read them."""
    return None if rope is None else torch.arange(start, start + length, device=device)


def shape_heads(x: Tensor, rope: Rope | None, positions: Tensor | None, qk_norm: bool) -> Tensor:
    """Queries or keys (..., T, D) at `positions` (T,) as attention compares them: RMS-normalised per head
    when qk_norm, then rotated when rope tables are given."""
    if qk_norm:
        x = F.rms_norm(x, (x.shape[-1],))
    return x if rope is None else apply_rope(x, *rope, positions)


def shape_qk(q: Tensor, k: Tensor, rope: Rope | None, positions: Tensor | None,
             qk_norm: bool) -> tuple[Tensor, Tensor]:
    """`shape_heads` of the queries and of the keys."""
    return shape_heads(q, rope, positions, qk_norm), shape_heads(k, rope, positions, qk_norm)


class Head(nn.Module):
    """One head of causal self-attention, scores scaled by 1/sqrt(head dimension)."""

    def __init__(self, embedding_size: int, head_dim: int, context_length: int, dropout: float = 0.0,
                 qk_norm: bool = False):
        super().__init__()
        self.qk_norm = qk_norm
        self.query = nn.Linear(embedding_size, head_dim, bias=False)
        self.key = nn.Linear(embedding_size, head_dim, bias=False)
        self.value = nn.Linear(embedding_size, head_dim, bias=False)
        self.dropout = Dropout(dropout)
        self.scale = 1.0 / math.sqrt(head_dim)
        self.register_buffer("mask", causal_mask(context_length), persistent=False)

    def forward(self, x: Tensor, kv: tuple[Tensor, Tensor] | None = None, start: int = 0,
                rope: Rope | None = None) -> Tensor:
        """x: (B, T, E) at positions start..start+T-1 -> (B, T, head_dim).

        kv: this head's cache buffers, each (B, context_length, head_dim), holding positions < start.
        rope: the rotary tables, when the model uses rotary positions.
        """
        T = x.shape[1]
        q, k, v = self.query(x), self.key(x), self.value(x)  # (B, T, D) each
        q, k = shape_qk(q, k, rope, token_positions(start, T, x.device, rope), self.qk_norm)
        if kv is not None:
            kv[0][:, start : start + T] = k
            kv[1][:, start : start + T] = v
            k, v = kv[0][:, : start + T], kv[1][:, : start + T]  # (B, S, D) with S = start + T
        scores = (q @ k.transpose(-2, -1)) * self.scale  # (B, T, S)
        scores = scores.masked_fill(~self.mask[start : start + T, : start + T], float("-inf"))
        weights = self.dropout(F.softmax(scores, dim=-1))
        return weights @ v  # (B, T, D)


class MultiHeadAttention(nn.Module):
    """`num_heads` heads concatenated to `head_size`, projected back to `embedding_size`."""

    def __init__(
        self,
        embedding_size: int,
        head_size: int,
        num_heads: int,
        context_length: int,
        dropout: float = 0.0,
        attention: str = "fused",
        position: str = "learned",
        qk_norm: bool = False,
    ):
        super().__init__()
        self.num_heads, self.head_size = num_heads, head_size
        self.head_dim = head_size // num_heads
        self.attention = attention
        self.dropout_p = dropout
        self.qk_norm = qk_norm
        self.heads = nn.ModuleList(
            Head(embedding_size, self.head_dim, context_length, dropout, qk_norm) for _ in range(num_heads)
        )
        cos, sin = rope_tables(self.head_dim, context_length) if position == "rope" else (None, None)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.proj = nn.Linear(head_size, embedding_size)
        self.resid_dropout = Dropout(dropout)
        self.register_buffer("mask", causal_mask(context_length), persistent=False)

    def forward(self, x: Tensor, kv: LayerKV | None = None, start: int = 0) -> Tensor:
        """x: (B, T, E) -> (B, T, E). kv: this block's cache, holding positions < start."""
        if self.attention == "heads":
            per_head = [None if kv is None else (kv.keys[:, i], kv.values[:, i]) for i in range(self.num_heads)]
            y = torch.cat([h(x, c, start, self.rope) for h, c in zip(self.heads, per_head, strict=True)], dim=-1)
        else:
            y = self._fused(x, kv, start)
        return self.resid_dropout(self.proj(y))

    @property
    def rope(self) -> Rope | None:
        return None if self.rope_cos is None else (self.rope_cos, self.rope_sin)

    def qkv_weight(self) -> Tensor:
        """The heads' projections stacked as one (3 * head_size, E) matrix: all queries, keys, values."""
        hs = self.heads
        return torch.cat([h.query.weight for h in hs] + [h.key.weight for h in hs] + [h.value.weight for h in hs])

    def _fused(self, x: Tensor, kv: LayerKV | None, start: int) -> Tensor:
        B, T, _ = x.shape
        H, D = self.num_heads, self.head_dim
        w = kv.qkv_weight if kv is not None and kv.qkv_weight is not None else self.qkv_weight()
        qkv = F.linear(x, w).view(B, T, 3 * H, D).transpose(1, 2)  # (B, 3H, T, D): queries, keys, values
        qk, v = qkv[:, : 2 * H], qkv[:, 2 * H :]
        if self.rope is not None or self.qk_norm:  # queries and keys together: half the elementwise calls
            qk = shape_heads(qk, self.rope, token_positions(start, T, x.device, self.rope), self.qk_norm)
        q, k = qk[:, :H], qk[:, H:]  # (B, H, T, D) each
        mask, causal = None, True
        if kv is not None:
            kv.keys[:, :, start : start + T] = k
            kv.values[:, :, start : start + T] = v
            k, v = kv.keys[:, :, : start + T], kv.values[:, :, : start + T]  # (B, H, S, D)
            if T == 1:
                causal = False  # one new query sees every cached position
            elif start > 0:
                mask, causal = self.mask[start : start + T, : start + T], False
        y = attend(q, k, v, mask, causal, self.dropout_p if self.training else 0.0)  # (B, H, T, D)
        return y.transpose(1, 2).reshape(B, T, self.head_size)
