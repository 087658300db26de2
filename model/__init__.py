"""The model: ids and tensors in, logits out. It never sees characters or files."""

from model.attention import Head, MultiHeadAttention
from model.gpt import AttentionLanguageModel

__all__ = ["AttentionLanguageModel", "Head", "MultiHeadAttention"]
