"""Before a layout is chosen: the run's network rewritten, exactly, in switches a stock class knows.

Design choices:
- `model.embedding=jamo` is folded into the token embedding where that earns a stock class (docs/en/export.md).
- Every `ModelConfig` field is in `HANDLED` (a test checks): an unknown one off its default is refused, never exported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace

import torch
from torch import Tensor

from common.errors import UserError
from hf_format import custom
from inference.checkpoint import strip_compile_prefix
from model.config import ModelConfig

HANDLED = {  # every ModelConfig field, and how an export deals with it
    # the shapes: every layout takes them as they are
    **dict.fromkeys(
        ("vocab_size", "context_length", "embedding_size", "head_size", "num_heads", "num_blocks"), "shape"
    ),
    # how the network trains or runs, not what it computes
    **dict.fromkeys(("dropout", "init", "zero_init_proj"), "training only"),
    "attention": "the same weights either way",
    # the architecture: the layout follows them (hf_export/writer.py choose_layout)
    **dict.fromkeys(("position", "norm", "mlp", "qk_norm", "tie_weights", "head"), "layout"),
    "embedding": "layout (folded into the token embedding where that earns a stock class)",
    "jamo_initials": "the staged head's stage 1 (custom layout only; written to config.json)",
    **dict.fromkeys(("attention_gate", "value_embedding", "unet_skips", "logit_softcap"), "layout (custom)"),
}


def unknown_settings(c: ModelConfig) -> list[str]:
    """`model.X=value` for each field export does not know set off its default, and each kind not computed."""
    default = ModelConfig()
    unknown = [
        f.name for f in fields(ModelConfig) if f.name not in HANDLED and getattr(c, f.name) != getattr(default, f.name)
    ]
    uncomputed = [name for name, kinds in custom.COMPUTES.items() if getattr(c, name) not in kinds]
    return [f"model.{name}={getattr(c, name)}" for name in unknown + uncomputed]


def fold_jamo_embedding(state: dict[str, Tensor], c: ModelConfig) -> tuple[dict[str, Tensor], ModelConfig]:
    """The jamo embedding summed into the token embedding (same order of additions as the forward)."""
    from model.hangul.jamo_embedding import syllable_parts

    state = dict(state)
    parts = state.pop("token_embedding.parts.weight")
    raw = state["token_embedding.weight"]
    jamo = parts[syllable_parts(c.vocab_size)].sum(dim=-2)  # (V, E), as JamoEmbedding computes it per id
    state["token_embedding.weight"] = raw + jamo
    if c.head == "softmax":
        state["lm_head.weight"] = state.get("lm_head.weight", raw).clone()  # the head reads the unfolded rows
    return state, replace(c, embedding="token", tie_weights=False)


def plain_model(
    state: dict[str, Tensor], c: ModelConfig, stock: Callable[[ModelConfig], bool]
) -> tuple[dict[str, Tensor], ModelConfig]:
    """(state dict, config) computing exactly what the run computes; the jamo embedding folded where `stock` says a
    stock class then expresses it."""
    unknown = unknown_settings(c)
    if unknown:
        raise UserError(
            f"{', '.join(unknown)} cannot be exported yet: hf_export/plain.py or the exported modeling "
            "code does not know it (the run itself samples and evaluates as usual)"
        )
    state = {
        k: v.detach().to(torch.float32) if v.is_floating_point() else v for k, v in strip_compile_prefix(state).items()
    }
    if c.embedding == "jamo" and stock(replace(c, embedding="token", tie_weights=False)):
        state, c = fold_jamo_embedding(state, c)
    return state, c
