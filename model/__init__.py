"""The model: ids and tensors in, logits out. It never sees characters or files.

Reading order: model/attention.py (`Head`, `MultiHeadAttention`), model/block.py (`Block`), model/gpt.py
(`AttentionLanguageModel`); beside them the two ends' builder (model/input_output.py), the Hangul-aware ends
(model/hangul/) and generation (model/streaming.py, model/kv_cache.py, model/decode.py).
"""

from model.attention import Head, MultiHeadAttention
from model.block import Block
from model.config import ModelConfig
from model.gpt import AttentionLanguageModel

__all__ = ["AttentionLanguageModel", "Block", "Head", "ModelConfig", "MultiHeadAttention"]
