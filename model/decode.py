"""The one-token step of cached generation, on weights gathered once per generation.

Once the prompt is in the KV cache, each new token needs a few matrix-vector products per block (about
3 MFLOP for the default model). Run through the module tree, the same step makes ~50 `nn.Module` calls
(each with its hook checks, plus eval-mode dropouts), and on the CPU that overhead can cost more than the
arithmetic (bench.py reports both: `generate_decode_step_us`). `DecodeStep` computes what `Block.forward`
with fused attention computes for one position, on weights laid out for a row vector times a matrix
(`x @ W_t`, the fastest product for a single row on the CPU); the parameters stay the modules' own, so
there is still one model. Tests check its logits against the uncached forward at every step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from model.attention import attend
from model.block import Block
from model.kv_cache import KVCache


@dataclass
class _BlockWeights:
    ln1: tuple[Tensor, Tensor]
    qkv_t: Tensor  # (E, 3 * head_size): queries, keys, values of every head
    proj_t: Tensor  # (head_size, E)
    proj_b: Tensor
    ln2: tuple[Tensor, Tensor]
    fc_t: Tensor  # (E, 4E)
    fc_b: Tensor
    fc2_t: Tensor  # (4E, E)
    fc2_b: Tensor
    eps: float
    gelu: str

    @classmethod
    def of(cls, block: Block, qkv_weight: Tensor, matrix_dtype: torch.dtype) -> _BlockWeights:
        def t(w: Tensor) -> Tensor:
            return w.detach().t().to(matrix_dtype).contiguous()

        a, f = block.attn, block.ffwd
        return cls(ln1=(block.ln1.weight, block.ln1.bias), qkv_t=t(qkv_weight), proj_t=t(a.proj.weight),
                   proj_b=a.proj.bias, ln2=(block.ln2.weight, block.ln2.bias), fc_t=t(f.fc.weight), fc_b=f.fc.bias,
                   fc2_t=t(f.proj.weight), fc2_b=f.proj.bias, eps=block.ln1.eps, gelu=f.act.approximate)


class DecodeStep:
    """Logits for one new token per sequence, reading and extending the `KVCache` of a fused model.

    The matrices take the cache's dtype: the autocast dtype when generating under autocast (so they are cast
    once here instead of at every step), else the parameters' dtype. The QKV matrices are the ones the cache
    already concatenated for the prefill.
    """

    def __init__(self, model, cache: KVCache):
        dtype = cache.dtype
        self.token_embedding = model.token_embedding.weight
        self.position_embedding = model.position_embedding.weight
        self.blocks = [_BlockWeights.of(b, w, dtype) for b, w in zip(model.blocks, cache.qkv_weights, strict=True)]
        self.ln_f = (model.ln_f.weight, model.ln_f.bias, model.ln_f.eps)
        self.lm_head_t = model.lm_head.weight.detach().t().to(dtype).contiguous()  # (E, V)
        attn = model.blocks[0].attn
        self.num_heads, self.head_dim = attn.num_heads, attn.head_dim

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
        x = self.token_embedding[ids[:, 0]] + self.position_embedding[position]  # (B, E)
        E, end = x.shape[1], position + 1
        # On the CPU below fp32, attend() picks the kernel as the module path does; fp32 calls SDPA directly.
        sdpa = attend if x.device.type == "cpu" and cache.dtype != torch.float32 else F.scaled_dot_product_attention
        for w, kv in zip(self.blocks, cache.buffers, strict=True):
            h = torch.layer_norm(x, (E,), *w.ln1, w.eps)  # F.layer_norm adds a Python wrapper per call
            qkv = (h @ w.qkv_t).view(B, 3, H, 1, D)
            kv[:, :, :, position:end] = qkv[:, 1:]  # keys and values of this position, (B, 2, H, 1, D)
            y = sdpa(qkv[:, 0], kv[:, 0, :, :end], kv[:, 1, :, :end])  # (B, H, 1, D): sees every cached position
            x = x + torch.addmm(w.proj_b, y.reshape(B, H * D), w.proj_t)
            h = F.gelu(torch.addmm(w.fc_b, torch.layer_norm(x, (E,), *w.ln2, w.eps), w.fc_t), approximate=w.gelu)
            x = x + torch.addmm(w.fc2_b, h, w.fc2_t)  # (B, E)
        return (torch.layer_norm(x, (E,), *self.ln_f) @ self.lm_head_t).unsqueeze(1)  # (B, 1, V)
