"""Changing a built model's dropout, a setting its parameters do not depend on.

A resumed run may change dropout and the attention path (training/settings/resume.py); the path decides the
attention weights' layout, so a changed path is a model built anew, into which the checkpoint's weights load
(model/qkv_layout.py). Everything else about the architecture is fixed when the model is built.
"""

from __future__ import annotations

from dataclasses import replace

from torch import nn


def set_dropout(model: nn.Module, p: float) -> None:
    """Set every dropout probability (residual, MLP, attention weights); the parameters are unchanged."""
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = p
        if hasattr(m, "dropout_p"):
            m.dropout_p = p
    model.config = replace(model.config, dropout=p)
