"""Changing a built model's settings that leave its parameters as they are: the attention path and dropout.

Both are settings a checkpoint's weights do not depend on (training/resume_settings.py lets a resumed run change
them); everything else about the architecture is fixed when the model is built.
"""

from __future__ import annotations

from dataclasses import replace

from torch import nn

from model.config import ATTENTION_KINDS


def set_attention(model: nn.Module, attention: str) -> None:
    """Switch every block between the `heads` and `fused` paths (the same parameters)."""
    if attention not in ATTENTION_KINDS:
        raise ValueError(f"attention must be one of {', '.join(ATTENTION_KINDS)}, got {attention!r}")
    for b in model.blocks:
        b.attn.attention = attention
    model.config = replace(model.config, attention=attention)


def set_dropout(model: nn.Module, p: float) -> None:
    """Set every dropout probability (residual, MLP, attention weights); the parameters are unchanged."""
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = p
        if hasattr(m, "dropout_p"):
            m.dropout_p = p
    model.config = replace(model.config, dropout=p)
