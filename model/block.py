"""A pre-norm transformer block: attention and a feed-forward layer, each on a residual path.

Design choices:
- The block is built from the `ModelConfig`, so every architecture switch reaches it in one argument.
- `norm=rmsnorm` is `torch.nn.RMSNorm` with its learned gain (no bias); `layernorm` is the lecture's.
- The MLP's input layer is named `fc` and its output layer `proj` whatever the activation; SwiGLU's `fc`
  holds the gate and the value halves in one matrix (one matmul instead of two), gate first.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from model.attention import MultiHeadAttention
from model.config import ModelConfig
from model.dropout import Dropout
from model.kv_cache import LayerKV


def make_norm(kind: str, size: int) -> nn.Module:
    return nn.RMSNorm(size) if kind == "rmsnorm" else nn.LayerNorm(size)


def mlp_activation(kind: str, h: Tensor) -> Tensor:
    """The MLP's nonlinearity on the `fc` output h: (..., hidden), or (..., 2 * hidden) for swiglu."""
    if kind == "relu2":
        return F.relu(h).square()
    if kind == "swiglu":
        gate, value = h.chunk(2, dim=-1)
        return F.silu(gate) * value
    return F.gelu(h)


class FeedForward(nn.Module):
    """Position-wise MLP: GELU or squared ReLU at 4x width, or SwiGLU at 8/3 x width."""

    def __init__(self, embedding_size: int, dropout: float = 0.0, kind: str = "gelu", hidden: int | None = None):
        super().__init__()
        hidden = hidden or 4 * embedding_size
        self.kind = kind
        self.fc = nn.Linear(embedding_size, 2 * hidden if kind == "swiglu" else hidden)
        self.act = nn.GELU()  # kept as a module so the lecture's model prints as it always did
        self.proj = nn.Linear(hidden, embedding_size)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        h = self.fc(x)
        h = self.act(h) if self.kind == "gelu" else mlp_activation(self.kind, h)
        return self.dropout(self.proj(h))


class Block(nn.Module):
    def __init__(self, config: ModelConfig, index: int = 0):
        super().__init__()
        c = config
        self.ln1 = make_norm(c.norm, c.embedding_size)
        self.attn = MultiHeadAttention(
            c.embedding_size,
            c.head_size,
            c.num_heads,
            c.context_length,
            c.dropout,
            c.attention,
            c.position,
            c.qk_norm,
            c.attention_gate,
            index in c.value_embedding_blocks,
        )
        self.ln2 = make_norm(c.norm, c.embedding_size)
        self.ffwd = FeedForward(c.embedding_size, c.dropout, c.mlp, c.mlp_hidden)

    def forward(self, x: Tensor, kv: LayerKV | None = None, start: int = 0, x0: Tensor | None = None) -> Tensor:
        """x: (B, T, E) -> (B, T, E); x0: the model's embedding output (read only with model.value_embedding)."""
        x = x + self.attn(self.ln1(x), kv, start, x0)
        return x + self.ffwd(self.ln2(x))
