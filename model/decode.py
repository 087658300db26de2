"""The one-token step of cached generation, on weights gathered once per generation.

Once the prompt is in the KV cache, each new token needs a few matrix-vector products per block (about
3 MFLOP for the default model). Run through the module tree, the same step makes ~50 `nn.Module` calls
(each with its hook checks, plus eval-mode dropouts), and on the CPU that overhead can cost more than the
arithmetic (bench.py reports both). `DecodeStep` computes what `Block.forward` with fused attention computes
for one position, on weights laid out for a row vector times a matrix (`x @ W_t`, the fastest product for a
single row on the CPU); the parameters stay the modules' own, so there is still one model. Tests check its
logits against the uncached forward at every step.

Design choices:
- Every architecture switch is computed here too (LayerNorm or RMSNorm, learned or rotary positions,
  query/key norm, GELU, squared ReLU or SwiGLU). The cost of a step is mostly the number of small ops, so
  each switch is computed in as few as it allows:
  - an RMSNorm's gain is folded into the matrix that follows it (`(x * g) @ W == x @ (g[:, None] * W)`),
    leaving three elementwise ops instead of torch.rms_norm's composite of six; LayerNorm keeps its own
    one-op kernel, with its weights;
  - queries and keys are normalised and rotated together, and the rotation is one product with a (D, D)
    matrix per position (`_Rotations`), built by `apply_rope` itself from the identity, so it is the
    modules' rotation by construction.
- Positions come from the cache (`KVCache.position`); position p is written to slot p % context_length and
  the query attends to every filled slot, which makes the same step serve learned positions (refilled
  before p reaches the context) and the rotary ring (which never refills).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.attention import attend
from model.block import Block, mlp_activation
from model.kv_cache import KVCache
from model.rope import apply_rope, rope_tables

ROTATION_CHUNK = 64  # rotation matrices are built for this many positions at a time


@dataclass
class _Norm:
    """A LayerNorm applied with its own weight and bias, or an RMSNorm whose gain the next matrix carries."""

    rms: bool
    shape: tuple
    weight: Tensor | None
    bias: Tensor | None
    eps: float | None

    @classmethod
    def of(cls, norm: nn.Module) -> _Norm:
        if isinstance(norm, nn.RMSNorm):
            return cls(True, norm.normalized_shape, None, None, norm.eps)
        return cls(False, norm.normalized_shape, norm.weight, norm.bias, norm.eps)

    def fold(self, norm: nn.Module, w_t: Tensor) -> Tensor:
        """w_t (E, out), the matrix applied to this norm's output -> the matrix to apply to `self(x)`."""
        return norm.weight.detach()[:, None] * w_t if self.rms else w_t

    def __call__(self, x: Tensor) -> Tensor:
        if self.rms:
            return rms(x, self.eps)
        return torch.layer_norm(x, self.shape, self.weight, self.bias, self.eps)  # F.layer_norm adds a wrapper


def rms(x: Tensor, eps: float | None = None) -> Tensor:
    """x / sqrt(mean(x^2) + eps) over the last dimension, without a gain: torch.rms_norm's value (eps None =
    the dtype's machine epsilon, as there) in fewer ops."""
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    return x * torch.rsqrt(torch.linalg.vecdot(x, x).unsqueeze(-1) * (1.0 / x.shape[-1]) + eps)


class _Rotations:
    """`rotation(p)`: a (D, D) matrix R with x @ R == apply_rope(x, ..., p), for any absolute position p.

    Built ROTATION_CHUNK positions at a time, so memory stays constant however far the ring slides.
    """

    def __init__(self, head_dim: int, dtype: torch.dtype, device: torch.device):
        self.head_dim, self.dtype, self.device = head_dim, dtype, device
        self.first, self.table = 0, None

    def __call__(self, p: int) -> Tensor:
        if self.table is None or not 0 <= p - self.first < ROTATION_CHUNK:
            D, n = self.head_dim, ROTATION_CHUNK
            self.first = p - p % n
            cos, sin = rope_tables(D, n, start=self.first)
            rows = torch.eye(D, dtype=torch.float32)[:, None].expand(D, n, D)  # basis vector j at each position
            rotated = apply_rope(rows, cos, sin, torch.arange(n))  # (D, n, D): row j rotated at each position
            self.table = rotated.transpose(0, 1).to(self.device, self.dtype).contiguous()  # (n, D, D)
        return self.table[p - self.first]


@dataclass
class _BlockWeights:
    ln1: _Norm
    qkv_t: Tensor  # (E, 3 * head_size): queries, keys, values of every head
    proj_t: Tensor  # (head_size, E)
    proj_b: Tensor
    ln2: _Norm
    fc_t: Tensor  # (E, hidden), or (E, 2 * hidden) for swiglu
    fc_b: Tensor
    fc2_t: Tensor  # (hidden, E)
    fc2_b: Tensor
    mlp: str
    gelu: str

    @classmethod
    def of(cls, block: Block, qkv_weight: Tensor, matrix_dtype: torch.dtype) -> _BlockWeights:
        def t(w: Tensor, norm: nn.Module | None = None) -> Tensor:
            w_t = w.detach().t()
            if norm is not None:
                w_t = _Norm.of(norm).fold(norm, w_t)
            return w_t.to(matrix_dtype).contiguous()

        a, f = block.attn, block.ffwd
        return cls(ln1=_Norm.of(block.ln1), qkv_t=t(qkv_weight, block.ln1), proj_t=t(a.proj.weight),
                   proj_b=a.proj.bias, ln2=_Norm.of(block.ln2), fc_t=t(f.fc.weight, block.ln2), fc_b=f.fc.bias,
                   fc2_t=t(f.proj.weight), fc2_b=f.proj.bias, mlp=f.kind, gelu=f.act.approximate)


class DecodeStep:
    """Logits for one new token per sequence, reading and extending a `KVCache`.

    The matrices take the cache's dtype: the autocast dtype when generating under autocast (so they are cast
    once here instead of at every step), else the parameters' dtype. The QKV matrices are the ones the cache
    already concatenated for the prefill (or concatenated here, for a model on the `heads` path).
    """

    def __init__(self, model, cache: KVCache):
        dtype = cache.dtype
        self.token_embedding = model.token_embedding.weight
        pe = model.position_embedding
        self.position_embedding = None if pe is None else pe.weight
        qkv = [w if w is not None else b.attn.qkv_weight() for b, w in zip(model.blocks, cache.qkv_weights,
                                                                               strict=True)]
        self.blocks = [_BlockWeights.of(b, w, dtype) for b, w in zip(model.blocks, qkv, strict=True)]
        self.ln_f = _Norm.of(model.ln_f)
        self.lm_head_t = self.ln_f.fold(model.ln_f, model.lm_head.weight.detach().t()).to(dtype).contiguous()
        attn = model.blocks[0].attn
        self.num_heads, self.head_dim, self.qk_norm = attn.num_heads, attn.head_dim, attn.qk_norm
        device = self.token_embedding.device
        self.rotations = _Rotations(self.head_dim, dtype, device) if attn.rope is not None else None

    def __call__(self, ids: Tensor, cache: KVCache) -> Tensor:
        """ids: (B, 1), the tokens at position `cache.position` -> logits (B, 1, V), as
        `AttentionLanguageModel.forward(..., last_only=True)` returns them. Advances the cache by one."""
        if ids.device.type != "cpu":
            logits = self._step(ids, cache)
        else:
            # A few rows give intra-op threads nothing worth splitting: on the CPU every small op would pay
            # a thread fork/join that costs more than its arithmetic. The thread count is restored before
            # returning.
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                logits = self._step(ids, cache)
            finally:
                torch.set_num_threads(threads)
        cache.advance(1)
        return logits

    def _qk(self, qk: Tensor, p: int) -> Tensor:
        """Queries and keys (B, 2, H, D) of position p as attention compares them (`shape_qk`'s result)."""
        if self.qk_norm:
            qk = rms(qk)
        return qk if self.rotations is None else qk @ self.rotations(p)

    def _step(self, ids: Tensor, cache: KVCache) -> Tensor:
        B, H, D = ids.shape[0], self.num_heads, self.head_dim
        p = cache.position
        slot, n = p % cache.context_length, min(p + 1, cache.context_length)  # write here; attend to slots < n
        x = self.token_embedding.index_select(0, ids.view(B))  # (B, E)
        if self.position_embedding is not None:
            x = x + self.position_embedding[p]
        plain = self.rotations is None and not self.qk_norm
        # On the CPU below fp32, attend() picks the kernel as the module path does; fp32 calls SDPA directly.
        sdpa = attend if x.device.type == "cpu" and cache.dtype != torch.float32 else F.scaled_dot_product_attention
        for w, kv in zip(self.blocks, cache.buffers, strict=True):
            qkv = (w.ln1(x) @ w.qkv_t).view(B, 3, H, D)
            if plain:
                kv[:, :, :, slot] = qkv[:, 1:]  # keys and values of this position, (B, 2, H, D), one copy
                q = qkv[:, 0]
            else:
                qk = self._qk(qkv[:, :2], p)
                kv[:, 0, :, slot] = qk[:, 1]
                kv[:, 1, :, slot] = qkv[:, 2]
                q = qk[:, 0]
            y = sdpa(q.unsqueeze(2), kv[:, 0, :, :n], kv[:, 1, :, :n])  # (B, H, 1, D): no mask, all slots < n
            x = x + torch.addmm(w.proj_b, y.reshape(B, H * D), w.proj_t)
            h = torch.addmm(w.fc_b, w.ln2(x), w.fc_t)
            h = F.gelu(h, approximate=w.gelu) if w.mlp == "gelu" else mlp_activation(w.mlp, h)
            x = x + torch.addmm(w.fc2_b, h, w.fc2_t)  # (B, E)
        return (self.ln_f(x) @ self.lm_head_t).unsqueeze(1)  # (B, 1, V)
