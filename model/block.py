"""A pre-LayerNorm transformer block: attention and a feed-forward layer, each on a residual path."""

from __future__ import annotations

from torch import Tensor, nn

from model.attention import MultiHeadAttention
from model.kv_cache import LayerKV


class FeedForward(nn.Module):
    """Position-wise MLP, 4x wide, GELU."""

    def __init__(self, embedding_size: int, dropout: float = 0.0):
        super().__init__()
        self.fc = nn.Linear(embedding_size, 4 * embedding_size)
        self.act = nn.GELU()
        self.proj = nn.Linear(4 * embedding_size, embedding_size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.proj(self.act(self.fc(x))))


class Block(nn.Module):
    def __init__(
        self,
        embedding_size: int,
        head_size: int,
        num_heads: int,
        context_length: int,
        dropout: float = 0.0,
        attention: str = "fused",
    ):
        super().__init__()
        self.ln1 = nn.LayerNorm(embedding_size)
        self.attn = MultiHeadAttention(embedding_size, head_size, num_heads, context_length, dropout, attention)
        self.ln2 = nn.LayerNorm(embedding_size)
        self.ffwd = FeedForward(embedding_size, dropout)

    def forward(self, x: Tensor, kv: LayerKV | None = None, start: int = 0) -> Tensor:
        x = x + self.attn(self.ln1(x), kv, start)
        return x + self.ffwd(self.ln2(x))
