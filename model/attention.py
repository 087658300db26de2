"""Causal self-attention as the lecture builds it: a `Head` of query, key and value projections, and
`MultiHeadAttention` running `num_heads` of them side by side, then projecting back to the residual stream.

What runs, where it differs from the lecture, and the test that proves the paths equal:
- `model.attention=heads` runs each `Head` module in turn, exactly as the lecture does. `fused` (the default)
  holds the same matrices as one tensor, `qkv` (3, num_heads, head_dim, E), so a step makes one QKV matmul (no
  concatenation; model/qkv_projection.py splits it, joining nothing in the backward) and one `attend` call (SDPA,
  model/attention_kernels.py). The same seed draws the same weights on both paths, and a state dict of either
  loads into either (model/qkv_layout.py); test_heads_and_fused_give_same_outputs_and_gradients (tests/model/)
  checks they agree. Cached generation always takes the fused path (it writes the KV cache, model/kv_cache.py).
- `model.head_size` is all heads together: each head has head_size / num_heads dimensions (the lecture's
  `MultiHeadAttention(num_heads, head_size)` passes one head's size; ours is that times num_heads).
- Two switches of the modern recipe act on queries and keys only, in `shape_qk`, which both paths call:
  `qk_norm` (each head's queries and keys RMS-normalised, no learned gain, so both paths keep the same
  parameters) and `position=rope` (rotary positions, model/rope.py, instead of the position embedding; keys
  enter the cache already rotated). tests/model/test_options.py checks both paths under every switch.
- Two levers of the data-limited records, off by default, act around the heads (`model.attention_gate`: each
  head's output times a gate read from the block's input; `model.value_embedding`: a projection of the embedding
  added to the values). Their gates start at zero, so at the first step a gated head gives half its output and
  the embedding's values come in whole. tests/model/test_restated_forward.py checks every switch against decoding.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.attention_kernels import attend
from model.dropout import Dropout  # nn.Dropout with cheaper masks on the CPU (tests/model/test_dropout.py)
from model.kv_cache import LayerKV
from model.qkv_layout import convert_in_place, head_by_head
from model.qkv_projection import project_qkv
from model.rope import apply_rope, rope_tables

Rope = tuple[Tensor, Tensor]  # (cos, sin) tables, each (context_length, head_dim // 2)
GATE_CHANNELS = 12  # the gates read this many channels of the block's input (enough to switch a head off)


def causal_mask(context_length: int) -> Tensor:
    return torch.tril(torch.ones(context_length, context_length, dtype=torch.bool))


def shape_qk(q: Tensor, k: Tensor, rope: Rope | None, positions: Tensor | None, qk_norm: bool) -> tuple[Tensor, Tensor]:
    """Queries and keys (..., T, D) at `positions` (T,) as attention compares them: RMS-normalised per head
    when qk_norm, then rotated when rope tables are given. The lecture's model does neither."""
    return shape_heads(q, rope, positions, qk_norm), shape_heads(k, rope, positions, qk_norm)


def shape_heads(x: Tensor, rope: Rope | None, positions: Tensor | None, qk_norm: bool) -> Tensor:
    if qk_norm:
        x = F.rms_norm(x, (x.shape[-1],))
    return x if rope is None else apply_rope(x, *rope, positions)


class Head(nn.Module):
    """One head of causal self-attention, scores scaled by 1/sqrt(head dimension)."""

    def __init__(
        self, embedding_size: int, head_dim: int, context_length: int, dropout: float = 0.0, qk_norm: bool = False
    ):
        super().__init__()
        self.qk_norm = qk_norm
        self.query = nn.Linear(embedding_size, head_dim, bias=False)
        self.key = nn.Linear(embedding_size, head_dim, bias=False)
        self.value = nn.Linear(embedding_size, head_dim, bias=False)
        self.dropout = Dropout(dropout)
        self.scale = 1.0 / math.sqrt(head_dim)
        self.register_buffer("mask", causal_mask(context_length), persistent=False)

    def forward(self, x: Tensor, rope: Rope | None = None, extra_values: Tensor | None = None) -> Tensor:
        """x: (B, T, E) -> (B, T, head_dim). rope: the rotary tables, when the model uses rotary positions;
        extra_values: (B, T, head_dim) added to the values (model.value_embedding)."""
        T = x.shape[1]
        q, k, v = self.query(x), self.key(x), self.value(x)  # (B, T, D) each
        if extra_values is not None:
            v = v + extra_values
        q, k = shape_qk(q, k, rope, None if rope is None else torch.arange(T, device=x.device), self.qk_norm)
        scores = (q @ k.transpose(-2, -1)) * self.scale  # (B, T, T)
        scores = scores.masked_fill(~self.mask[:T, :T], float("-inf"))  # no looking ahead
        weights = self.dropout(F.softmax(scores, dim=-1))
        return weights @ v  # (B, T, D)


class MultiHeadAttention(nn.Module):
    """`num_heads` heads concatenated to `head_size`, projected back to `embedding_size`."""

    keep_init = ("gate.weight", "value_gate.weight")  # the gates start at zero (sigmoid(0) = 1/2)

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
        gate: bool = False,
        value_embedding: bool = False,
    ):
        super().__init__()
        self.num_heads, self.head_size = num_heads, head_size
        self.head_dim = head_size // num_heads
        self.attention = attention
        self.dropout_p = dropout
        self.qk_norm = qk_norm
        if attention == "heads":  # the lecture's: each Head owns its query, key and value
            self.heads = nn.ModuleList(
                Head(embedding_size, self.head_dim, context_length, dropout, qk_norm) for _ in range(num_heads)
            )
        else:  # the same matrices as one tensor: qkv[0, h] is head h's query, qkv[1, h] its key, qkv[2, h] its value
            self.qkv = nn.Parameter(torch.empty(3, num_heads, self.head_dim, embedding_size))
            for w in head_by_head(self.qkv):  # as the heads' nn.Linear would draw them, in their order
                nn.init.kaiming_uniform_(w, a=math.sqrt(5))
        cos, sin = rope_tables(self.head_dim, context_length) if position == "rope" else (None, None)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.proj = nn.Linear(head_size, embedding_size)
        self.resid_dropout = Dropout(dropout)
        self.register_buffer("mask", causal_mask(context_length), persistent=False)
        gate_channels = min(GATE_CHANNELS, embedding_size)
        self.gate = _zero_linear(gate_channels, num_heads) if gate else None
        self.value_embed = nn.Linear(embedding_size, head_size, bias=False) if value_embedding else None
        self.value_gate = _zero_linear(gate_channels, num_heads) if value_embedding else None

    def forward(self, x: Tensor, kv: LayerKV | None = None, start: int = 0, x0: Tensor | None = None) -> Tensor:
        """x: (B, T, E) at positions start..start+T-1 -> (B, T, E). kv: this block's cache, holding positions
        < start (generation only); x0: the embedding, for model.value_embedding."""
        extra = self.extra_values(x, x0)  # (B, T, H, D) or None
        if self.attention == "heads" and kv is None and start == 0:
            y = torch.cat(
                [h(x, self.rope, None if extra is None else extra[:, :, i]) for i, h in enumerate(self.heads)], dim=-1
            )  # (B, T, head_size)
        else:
            y = self._fused(x, kv, start, extra)
        if self.gate is not None:  # model.attention_gate: each head's output times its gate
            y = (y.unflatten(-1, (self.num_heads, self.head_dim)) * self.gates(self.gate, x)).flatten(-2)
        return self.resid_dropout(self.proj(y))

    @staticmethod
    def gates(layer: nn.Linear, x: Tensor) -> Tensor:
        """sigmoid of a gate layer read from x's first channels: (..., E) -> (..., H, 1)."""
        return torch.sigmoid(layer(x[..., : layer.in_features])).unsqueeze(-1)

    def extra_values(self, x: Tensor, x0: Tensor | None) -> Tensor | None:
        """model.value_embedding: the embedding's projection, each head's share times 2 sigmoid(gate) (1 at the
        start) -> (B, T, H, D); None without the switch."""
        if self.value_embed is None:
            return None
        return self.value_embed(x0).unflatten(-1, (self.num_heads, self.head_dim)) * 2 * self.gates(self.value_gate, x)

    @property
    def rope(self) -> Rope | None:
        return None if self.rope_cos is None else (self.rope_cos, self.rope_sin)

    def qkv_weight(self) -> Tensor:
        """The heads' projections as one (3 * head_size, E) matrix: all queries, then keys, then values. On the
        fused path a view of `qkv` (no copy); on the heads path the heads' matrices stacked."""
        if self.attention != "heads":
            return self.qkv.flatten(0, 2)
        hs = self.heads
        return torch.cat([h.query.weight for h in hs] + [h.key.weight for h in hs] + [h.value.weight for h in hs])

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args, **kwargs) -> None:
        convert_in_place(state_dict, prefix, fused=self.attention != "heads")  # either layout loads into either
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _fused(self, x: Tensor, kv: LayerKV | None, start: int, extra: Tensor | None) -> Tensor:
        B, T, _ = x.shape
        q, k, v = project_qkv(x, self.qkv_weight(), self.num_heads)  # (B, H, T, D) each; a backward that joins nothing
        if self.rope is not None or self.qk_norm:
            positions = None if self.rope is None else torch.arange(start, start + T, device=x.device)
            q, k = shape_qk(q, k, self.rope, positions, self.qk_norm)
        if extra is not None:
            v = v + extra.transpose(1, 2)
        mask, causal = None, True
        if kv is not None:
            kv.keys[:, :, start : start + T] = k
            kv.values[:, :, start : start + T] = v
            k, v = kv.keys[:, :, : start + T], kv.values[:, :, : start + T]  # (B, H, S, D) with S = start + T
            if T == 1:
                causal = False  # one new query sees every cached position
            elif start > 0:
                mask, causal = self.mask[start : start + T, : start + T], False
        y = attend(q, k, v, mask, causal, self.dropout_p if self.training else 0.0)  # (B, H, T, D)
        return y.transpose(1, 2).reshape(B, T, self.head_size)


def _zero_linear(inputs: int, outputs: int) -> nn.Linear:
    layer = nn.Linear(inputs, outputs, bias=False)
    nn.init.zeros_(layer.weight)
    return layer
