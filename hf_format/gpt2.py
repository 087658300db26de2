"""The lecture's model as `GPT2LMHeadModel`: the same computation, weight for weight.

What has to line up:
- GPT-2's `Conv1D` stores a layer's weight as (in, out), the transpose of `nn.Linear`'s (out, in).
- Our attention owns one `query`, `key` and `value` projection per `Head`, without bias; GPT-2 has one
  `c_attn` of (E, 3E) with a bias: the heads' rows are concatenated (q of every head, then k, then v, head by
  head as GPT-2 splits them) and the bias is zero.
- GELU: our MLP uses the exact (erf) GELU, which is `activation_function="gelu"` in `transformers`
  (`gelu_new`, GPT-2's own default, is the tanh approximation and would not match).
- The head is untied in the lecture's model (`tie_word_embeddings=False`); a tied run ties it.
- GPT-2 has no separate head size: only runs with `head_size == embedding_size` fit (others go to custom).
"""

from __future__ import annotations

import torch
from torch import Tensor

from model.config import ModelConfig, levers


def fits(c: ModelConfig) -> bool:
    return (c.position == "learned" and c.norm == "layernorm" and c.mlp == "gelu" and not c.qk_norm
            and c.head_size == c.embedding_size and c.embedding == "token" and c.head == "softmax" and not levers(c))


def head_rows(sd: dict[str, Tensor], block: int, part: str, num_heads: int) -> Tensor:
    """The `part` ("query", "key" or "value") rows of every head of a block, stacked: (head_size, E)."""
    return torch.cat([sd[f"blocks.{block}.attn.heads.{h}.{part}.weight"] for h in range(num_heads)], dim=0)


def hf_config(c: ModelConfig) -> dict:
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": c.vocab_size,
            "n_positions": c.context_length, "n_ctx": c.context_length, "n_embd": c.embedding_size,
            "n_layer": c.num_blocks, "n_head": c.num_heads, "n_inner": c.mlp_hidden,
            "activation_function": "gelu", "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
            "layer_norm_epsilon": 1e-5, "tie_word_embeddings": c.tie_weights, "scale_attn_weights": True,
            "bos_token_id": None, "eos_token_id": None, "pad_token_id": 0}


# (our name, GPT-2's name, transposed: Conv1D stores (in, out)) for the tensors of block i
BLOCK = (("ln1.weight", "ln_1.weight", False), ("ln1.bias", "ln_1.bias", False),
         ("attn.proj.weight", "attn.c_proj.weight", True), ("attn.proj.bias", "attn.c_proj.bias", False),
         ("ln2.weight", "ln_2.weight", False), ("ln2.bias", "ln_2.bias", False),
         ("ffwd.fc.weight", "mlp.c_fc.weight", True), ("ffwd.fc.bias", "mlp.c_fc.bias", False),
         ("ffwd.proj.weight", "mlp.c_proj.weight", True), ("ffwd.proj.bias", "mlp.c_proj.bias", False))
TOP = (("token_embedding.weight", "transformer.wte.weight"), ("position_embedding.weight", "transformer.wpe.weight"),
       ("ln_f.weight", "transformer.ln_f.weight"), ("ln_f.bias", "transformer.ln_f.bias"))


def to_hf(sd: dict[str, Tensor], c: ModelConfig) -> dict[str, Tensor]:
    out = {theirs: sd[ours] for ours, theirs in TOP}
    if not c.tie_weights:
        out["lm_head.weight"] = sd["lm_head.weight"]
    for i in range(c.num_blocks):
        for ours, theirs, transposed in BLOCK:
            w = sd[f"blocks.{i}.{ours}"]
            out[f"transformer.h.{i}.{theirs}"] = w.t() if transposed else w
        qkv = torch.cat([head_rows(sd, i, part, c.num_heads) for part in ("query", "key", "value")], dim=0)
        out[f"transformer.h.{i}.attn.c_attn.weight"] = qkv.t()
        out[f"transformer.h.{i}.attn.c_attn.bias"] = torch.zeros(qkv.shape[0], dtype=qkv.dtype)
    return {k: v.contiguous() for k, v in out.items()}


def from_hf(hf: dict[str, Tensor], c: ModelConfig) -> dict[str, Tensor]:
    """The inverse of `to_hf`: our state dict from the exported tensors."""
    sd = {ours: hf[theirs] for ours, theirs in TOP}
    sd["lm_head.weight"] = hf["transformer.wte.weight"] if c.tie_weights else hf["lm_head.weight"]
    hd = c.head_size // c.num_heads
    for i in range(c.num_blocks):
        for ours, theirs, transposed in BLOCK:
            w = hf[f"transformer.h.{i}.{theirs}"]
            sd[f"blocks.{i}.{ours}"] = w.t() if transposed else w
        q, k, v = hf[f"transformer.h.{i}.attn.c_attn.weight"].t().split(c.head_size, dim=0)
        for part, rows in (("query", q), ("key", k), ("value", v)):
            for j in range(c.num_heads):
                sd[f"blocks.{i}.attn.heads.{j}.{part}.weight"] = rows[j * hd:(j + 1) * hd]
    return {k: v.contiguous() for k, v in sd.items()}
