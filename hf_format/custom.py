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
NOT_COMPUTED = ("dropout", "attention", "zero_init_proj", "init")  # how the network trains or runs: not shipped


def hf_config(c: ModelConfig) -> dict:
    return {
        "architectures": ["KocharForCausalLM"],
        "model_type": "kochar_gpt",
        "auto_map": {
            "AutoConfig": "configuration_kochar.KocharConfig",
            "AutoModelForCausalLM": "modeling_kochar.KocharForCausalLM",
        },
        **{k: v for k, v in c.to_dict().items() if k not in NOT_COMPUTED},
        "mlp_hidden": c.mlp_hidden,
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
