"""The lecture's model as `GPT2LMHeadModel`: the same computation, weight for weight.

What has to line up:
- GPT-2's `Conv1D` stores a weight as (in, out), the transpose of `nn.Linear`'s.
- Our bias-free q, k, v become one `c_attn` of (E, 3E) with a zero bias: q of every head, then k, then v.
- Our exact (erf) GELU is `activation_function="gelu"` (GPT-2's default `gelu_new` is the tanh approximation).
- GPT-2 has no separate head size: only `head_size == embedding_size` fits (others go to custom).
"""

from __future__ import annotations

import torch
from torch import Tensor

from model.config import ModelConfig, levers
from model.qkv_layout import QKV, fuse


def fits(c: ModelConfig) -> bool:
    kinds = (c.position, c.norm, c.mlp, c.embedding, c.head)
    plain = c.head_size == c.embedding_size and not (c.qk_norm or levers(c))
    return plain and kinds == ("learned", "layernorm", "gelu", "token", "softmax")


def qkv_rows(sd: dict[str, Tensor], block: int) -> Tensor:
    """Block `block`'s query, key and value rows, every head's: (3, head_size, E), from either layout."""
    prefix = f"blocks.{block}.attn."
    qkv = sd[prefix + QKV] if prefix + QKV in sd else fuse(sd, prefix)  # (3, H, D, E)
    return qkv.flatten(1, 2)


def hf_config(c: ModelConfig) -> dict:
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": c.vocab_size,
        "n_positions": c.context_length,
        "n_ctx": c.context_length,
        "n_embd": c.embedding_size,
        "n_layer": c.num_blocks,
        "n_head": c.num_heads,
        "n_inner": c.mlp_hidden,
        "activation_function": "gelu",
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "layer_norm_epsilon": 1e-5,
        "tie_word_embeddings": c.tie_weights,
        "scale_attn_weights": True,
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": 0,
    }


# (our name, GPT-2's name) of the top tensors, then (ours, GPT-2's, transposed: Conv1D stores (in, out)) of a block
TOP = (
    ("token_embedding.weight", "transformer.wte.weight"),
    ("position_embedding.weight", "transformer.wpe.weight"),
    ("ln_f.weight", "transformer.ln_f.weight"),
    ("ln_f.bias", "transformer.ln_f.bias"),
)
BLOCK = (
    ("ln1.weight", "ln_1.weight", False),
    ("ln1.bias", "ln_1.bias", False),
    ("attn.proj.weight", "attn.c_proj.weight", True),
    ("attn.proj.bias", "attn.c_proj.bias", False),
    ("ln2.weight", "ln_2.weight", False),
    ("ln2.bias", "ln_2.bias", False),
    ("ffwd.fc.weight", "mlp.c_fc.weight", True),
    ("ffwd.fc.bias", "mlp.c_fc.bias", False),
    ("ffwd.proj.weight", "mlp.c_proj.weight", True),
    ("ffwd.proj.bias", "mlp.c_proj.bias", False),
)


def renamed(
    tensors: dict[str, Tensor], c: ModelConfig, top: tuple, block: tuple, theirs: str, back: bool = False
) -> dict[str, Tensor]:
    """The tensors both sides hold alike, renamed by `top` (its first: the token embedding) and, for every block
    (`theirs`: its prefix there), `block`, an untied head as it is; `back`: to our names, a tied head read from the
    token embedding."""
    head = [] if c.tie_weights else [("lm_head.weight", "lm_head.weight")]
    pairs = [(ours, name, False) for ours, name in (*top, *head)] + [
        (f"blocks.{i}.{ours}", theirs.format(i) + name, flip) for i in range(c.num_blocks) for ours, name, flip in block
    ]
    pairs = [(name, ours, transposed) for ours, name, transposed in pairs] if back else pairs
    out = {new: tensors[old].t() if transposed else tensors[old] for old, new, transposed in pairs}
    return out | ({"lm_head.weight": tensors[top[0][1]]} if back and c.tie_weights else {})


def to_hf(sd: dict[str, Tensor], c: ModelConfig) -> dict[str, Tensor]:
    out = renamed(sd, c, TOP, BLOCK, "transformer.h.{}.")
    for i in range(c.num_blocks):
        qkv = qkv_rows(sd, i).flatten(0, 1)  # (3 * head_size, E)
        out[f"transformer.h.{i}.attn.c_attn.weight"] = qkv.t()
        out[f"transformer.h.{i}.attn.c_attn.bias"] = torch.zeros(qkv.shape[0], dtype=qkv.dtype)
    return out


def from_hf(hf: dict[str, Tensor], c: ModelConfig) -> dict[str, Tensor]:
    sd = renamed(hf, c, TOP, BLOCK, "transformer.h.{}.", back=True)
    for i in range(c.num_blocks):
        rows = hf[f"transformer.h.{i}.attn.c_attn.weight"].t().unflatten(0, (3, c.head_size))
        sd[f"blocks.{i}.attn.{QKV}"] = rows.unflatten(1, (c.num_heads, -1))  # (3, H, head_dim, E)
    return {k: v.contiguous() for k, v in sd.items()}
