"""The one-token step of cached generation, on weights gathered once per generation.

Once the prompt is in the KV cache, each new token needs a few matrix-vector products per block (about
3 MFLOP for the default model). Run through the module tree, the same step makes ~50 `nn.Module` calls
(each with its hook checks, plus eval-mode dropouts), and on the CPU that overhead can cost more than the
arithmetic (bench.py reports both: `generate_decode_step_us`). `DecodeStep` computes what `Block.forward`
with fused attention computes for one position, on weights laid out for a row vector times a matrix
(`x @ W_t`, the fastest product for a single row on the CPU); the parameters stay the modules' own, so
there is still one model. Tests check its logits against the uncached forward at every step.

Every architecture switch is computed here too (LayerNorm or RMSNorm, learned or rotary positions, query/key
norm, GELU, squared ReLU or SwiGLU), through the same helpers the modules use (`shape_qk`, `mlp_activation`),
so the fast path cannot drift from the module path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.attention import attend, shape_qk
from model.block import Block, mlp_activation
from model.kv_cache import KVCache


def _norm_params(norm: nn.Module) -> tuple:
    """(kind, shape, weight, bias, eps) of a LayerNorm or RMSNorm, for `_normalize`."""
    if isinstance(norm, nn.RMSNorm):
        return ("rms", norm.normalized_shape, norm.weight, None, norm.eps)
    return ("layer", norm.normalized_shape, norm.weight, norm.bias, norm.eps)


def _normalize(x: Tensor, p: tuple) -> Tensor:
    kind, shape, weight, bias, eps = p
    if kind == "rms":
        return torch.rms_norm(x, shape, weight, eps)
    return torch.layer_norm(x, shape, weight, bias, eps)  # F.layer_norm adds a Python wrapper per call


@dataclass
class _BlockWeights:
    ln1: tuple
    qkv_t: Tensor  # (E, 3 * head_size): queries, keys, values of every head
    proj_t: Tensor  # (head_size, E)
    proj_b: Tensor
    ln2: tuple
    fc_t: Tensor  # (E, hidden), or (E, 2 * hidden) for swiglu
    fc_b: Tensor
    fc2_t: Tensor  # (hidden, E)
    fc2_b: Tensor
    mlp: str
    gelu: str

    @classmethod
    def of(cls, block: Block, qkv_weight: Tensor, matrix_dtype: torch.dtype) -> _BlockWeights:
        def t(w: Tensor) -> Tensor:
            return w.detach().t().to(matrix_dtype).contiguous()

        a, f = block.attn, block.ffwd
        return cls(ln1=_norm_params(block.ln1), qkv_t=t(qkv_weight), proj_t=t(a.proj.weight), proj_b=a.proj.bias,
                   ln2=_norm_params(block.ln2), fc_t=t(f.fc.weight), fc_b=f.fc.bias, fc2_t=t(f.proj.weight),
                   fc2_b=f.proj.bias, mlp=f.kind, gelu=f.act.approximate)


class DecodeStep:
    """Logits for one new token per sequence, reading and extending the `KVCache` of a fused model.

    The matrices take the cache's dtype: the autocast dtype when generating under autocast (so they are cast
    once here instead of at every step), else the parameters' dtype. The QKV matrices are the ones the cache
    already concatenated for the prefill.
    """

    def __init__(self, model, cache: KVCache):
        dtype = cache.dtype
        self.token_embedding = model.token_embedding.weight
        pe = model.position_embedding
        self.position_embedding = None if pe is None else pe.weight
        self.blocks = [_BlockWeights.of(b, w, dtype) for b, w in zip(model.blocks, cache.qkv_weights, strict=True)]
        self.ln_f = _norm_params(model.ln_f)
        self.lm_head_t = model.lm_head.weight.detach().t().to(dtype).contiguous()  # (E, V)
        attn = model.blocks[0].attn
        self.num_heads, self.head_dim = attn.num_heads, attn.head_dim
        self.rope, self.qk_norm = attn.rope, attn.qk_norm

    def __call__(self, ids: Tensor, cache: KVCache, position: int) -> Tensor:
        """ids: (B, 1), the tokens at cache position `position` (= cache.length) -> logits (B, 1, V), as
        `AttentionLanguageModel.forward(..., last_only=True)` returns them."""
        if ids.device.type != "cpu":
            return self._step(ids, cache, position)
        # A single row gives intra-op threads nothing worth splitting: on the CPU every small op would pay
        # a thread fork/join that costs more than its arithmetic. The thread count is restored before
        # returning.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._step(ids, cache, position)
        finally:
            torch.set_num_threads(threads)

    def _step(self, ids: Tensor, cache: KVCache, position: int) -> Tensor:
        B, H, D = ids.shape[0], self.num_heads, self.head_dim
        x = self.token_embedding[ids[:, 0]]  # (B, E)
        if self.position_embedding is not None:
            x = x + self.position_embedding[position]
        end = position + 1
        positions = torch.tensor([position], device=x.device) if self.rope is not None else None
        # On the CPU below fp32, attend() picks the kernel as the module path does; fp32 calls SDPA directly.
        sdpa = attend if x.device.type == "cpu" and cache.dtype != torch.float32 else F.scaled_dot_product_attention
        for w, kv in zip(self.blocks, cache.buffers, strict=True):
            qkv = (_normalize(x, w.ln1) @ w.qkv_t).view(B, 3, H, 1, D)
            q = qkv[:, 0]
            if self.rope is None and not self.qk_norm:
                kv[:, :, :, position:end] = qkv[:, 1:]  # keys and values of this position, (B, 2, H, 1, D)
            else:
                q, k = shape_qk(q, qkv[:, 1], self.rope, positions, self.qk_norm)
                kv[:, 0, :, position:end] = k
                kv[:, 1, :, position:end] = qkv[:, 2]
            y = sdpa(q, kv[:, 0, :, :end], kv[:, 1, :, :end])  # (B, H, 1, D): sees every cached position
            x = x + torch.addmm(w.proj_b, y.reshape(B, H * D), w.proj_t)
            h = torch.addmm(w.fc_b, _normalize(x, w.ln2), w.fc_t)
            h = F.gelu(h, approximate=w.gelu) if w.mlp == "gelu" else mlp_activation(w.mlp, h)
            x = x + torch.addmm(w.fc2_b, h, w.fc2_t)  # (B, E)
        return (_normalize(x, self.ln_f) @ self.lm_head_t).unsqueeze(1)  # (B, 1, V)
