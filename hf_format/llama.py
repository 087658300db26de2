"""Rotary + RMSNorm + SwiGLU without query/key norm as `LlamaForCausalLM`, exactly.

What has to line up:
- Both rotaries pair dimension i with i + D/2, but ours turns the other way: negating the second half of every
  head's query and key rows makes it LLaMA's and leaves every query-key dot product unchanged.
- Our biases (attention output, MLP in and out): `attention_bias=True` (q/k/v biases zero) and `mlp_bias=True`.
- Our SwiGLU `fc` holds the gate rows then the value rows: `gate_proj`, `up_proj`.
- `nn.RMSNorm(eps=None)` uses float32's machine epsilon: `rms_norm_eps` is set to it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from hf_format.gpt2 import qkv_rows, renamed
from model.config import ModelConfig, levers
from model.qkv_layout import QKV
from model.rope import ROPE_BASE


def fits(c: ModelConfig) -> bool:
    kinds = (c.position, c.norm, c.mlp, c.embedding, c.head)
    return not (c.qk_norm or levers(c)) and kinds == ("rope", "rmsnorm", "swiglu", "token", "softmax")


def _flip_second_half(rows: Tensor, num_heads: int) -> Tensor:
    """Negate the second half of every head's rows (the rotation's direction)."""
    per_head = rows.reshape(num_heads, 2, -1, rows.shape[-1]).clone()  # (H, 2, D/2, E)
    per_head[:, 1].neg_()  # in place: the export's shape check runs this on `meta` (inference/weight_checks.py)
    return per_head.reshape(rows.shape)


def hf_config(c: ModelConfig) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": c.vocab_size,
        "hidden_size": c.embedding_size,
        "intermediate_size": c.mlp_hidden,
        "num_hidden_layers": c.num_blocks,
        "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_heads,
        "head_dim": c.head_size // c.num_heads,
        "max_position_embeddings": c.context_length,
        "hidden_act": "silu",
        "rms_norm_eps": torch.finfo(torch.float32).eps,
        "rope_theta": ROPE_BASE,
        "rope_parameters": {"rope_type": "default", "rope_theta": ROPE_BASE},
        "attention_bias": True,
        "mlp_bias": True,
        "attention_dropout": 0.0,
        "tie_word_embeddings": c.tie_weights,
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": 0,
    }


# (our name, LLaMA's name) of the top tensors both hold alike, then (ours, LLaMA's, transposed) of a block's
TOP = (("token_embedding.weight", "model.embed_tokens.weight"), ("ln_f.weight", "model.norm.weight"))
BLOCK = (
    ("ln1.weight", "input_layernorm.weight", False),
    ("ln2.weight", "post_attention_layernorm.weight", False),
    ("attn.proj.weight", "self_attn.o_proj.weight", False),
    ("attn.proj.bias", "self_attn.o_proj.bias", False),
    ("ffwd.proj.weight", "mlp.down_proj.weight", False),
    ("ffwd.proj.bias", "mlp.down_proj.bias", False),
)


def to_hf(sd: dict[str, Tensor], c: ModelConfig) -> dict[str, Tensor]:
    out = renamed(sd, c, TOP, BLOCK, "model.layers.{}.")
    for i in range(c.num_blocks):
        b, m = f"blocks.{i}", f"model.layers.{i}"
        q, k, v = qkv_rows(sd, i)
        flipped = {"q": _flip_second_half(q, c.num_heads), "k": _flip_second_half(k, c.num_heads), "v": v}
        for name, rows in flipped.items():
            out[f"{m}.self_attn.{name}_proj.weight"] = rows
            out[f"{m}.self_attn.{name}_proj.bias"] = torch.zeros(c.head_size, dtype=q.dtype)  # a tensor each
        for part in ("weight", "bias"):
            out[f"{m}.mlp.gate_proj.{part}"], out[f"{m}.mlp.up_proj.{part}"] = sd[f"{b}.ffwd.fc.{part}"].chunk(2)
    return out


def from_hf(hf: dict[str, Tensor], c: ModelConfig) -> dict[str, Tensor]:
    sd = renamed(hf, c, TOP, BLOCK, "model.layers.{}.", back=True)
    for i in range(c.num_blocks):
        b, m = f"blocks.{i}", f"model.layers.{i}"
        q, k, v = (hf[f"{m}.self_attn.{name}_proj.weight"] for name in "qkv")  # (head_size, E) each
        rows = torch.stack([_flip_second_half(q, c.num_heads), _flip_second_half(k, c.num_heads), v])
        sd[f"{b}.attn.{QKV}"] = rows.unflatten(1, (c.num_heads, -1))
        for part in ("weight", "bias"):
            sd[f"{b}.ffwd.fc.{part}"] = torch.cat([hf[f"{m}.mlp.gate_proj.{part}"], hf[f"{m}.mlp.up_proj.{part}"]])
    return {k: v.contiguous() for k, v in sd.items()}
