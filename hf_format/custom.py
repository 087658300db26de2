"""Every architecture no stock class expresses: the project's own modeling code ships in the folder. The weights keep
the project's names in the per-head layout, the Hangul layers those of checkpoint versions 1 and 2 (`jamo_embedding.*`,
`jamo_head.*`), so folders written before and after read the same."""

from __future__ import annotations

from torch import Tensor

from model.config import ModelConfig
from model.input_output import RENAMED, upgrade_state_names
from model.qkv_layout import to_heads

FILES = ("configuration_kochar.py", "modeling_kochar.py")
# The kinds the shipped code computes (its KINDS: tests/model/test_restated_forward.py keeps the two equal).
COMPUTES = {
    "position": ("learned", "rope"),
    "norm": ("layernorm", "rmsnorm"),
    "mlp": ("gelu", "relu2", "swiglu"),
    "embedding": ("token", "jamo"),
    "head": ("softmax", "jamo"),
    "jamo_initials": ("pairs", "linear"),
}


def hf_config(c: ModelConfig) -> dict:
    return {
        "architectures": ["KocharForCausalLM"],
        "model_type": "kochar_gpt",
        "auto_map": {
            "AutoConfig": "configuration_kochar.KocharConfig",
            "AutoModelForCausalLM": "modeling_kochar.KocharForCausalLM",
        },
        "vocab_size": c.vocab_size,
        "context_length": c.context_length,
        "embedding_size": c.embedding_size,
        "head_size": c.head_size,
        "num_heads": c.num_heads,
        "num_blocks": c.num_blocks,
        "position": c.position,
        "norm": c.norm,
        "mlp": c.mlp,
        "qk_norm": c.qk_norm,
        "mlp_hidden": c.mlp_hidden,
        "tie_weights": c.tie_weights,
        "embedding": c.embedding,
        "head": c.head,
        "jamo_initials": c.jamo_initials,
        "attention_gate": c.attention_gate,
        "value_embedding": c.value_embedding,
        "unet_skips": c.unet_skips,
        "logit_softcap": c.logit_softcap,
        "tie_word_embeddings": False,
        "pad_token_id": 0,
    }


def to_hf(sd: dict[str, Tensor], c: ModelConfig) -> dict[str, Tensor]:
    # A tied head is written as its own tensor (safetensors stores no shared tensors); the values are equal.
    return {
        _shipped_name(k, c): v.clone() if k == "lm_head.weight" and c.tie_weights else v
        for k, v in to_heads(sd).items()
    }


def _shipped_name(key: str, c: ModelConfig) -> str:
    """The shipped code's name of one of our parameters (the Hangul-aware layers keep their own prefixes)."""
    for old, new in RENAMED:
        kind = c.embedding if new == "token_embedding." else c.head
        if kind == "jamo" and key.startswith(new) and key != "token_embedding.weight":
            return old + key[len(new) :]
    return key


def from_hf(hf: dict[str, Tensor], c: ModelConfig) -> dict[str, Tensor]:
    return upgrade_state_names(dict(hf))
