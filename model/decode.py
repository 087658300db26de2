"""The one-token step of cached generation, on weights gathered once per generation.

Through the module tree a one-token step pays an `nn.Module` call per layer, on the CPU more than its matrix-vector
products. `DecodeStep` computes `Block.forward`'s fused path for one position on the modules' own parameters, laid
out as `x @ W_t`; tests check its logits against the uncached forward at every step.

Design choices:
- Every architecture switch is computed here too (tests/model/test_restated_forward.py), each in as few ops as it
  allows: an RMSNorm's sqrt(n) and gain folded into the next matrix; queries and keys normalised and rotated
  together, the rotation one (D, D) product per position (`Rotations`). Logits agree to float32 rounding.
- Position p goes to slot p % context_length and the query attends to every filled slot: one step for learned
  positions and the rotary ring. All asked of a position goes through `SlotPosition`, so model/static_decode.py
  runs this very code with the position in a device tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.attention_kernels import attend
from model.block import Block, mlp_activation
from model.kv_cache import KVCache
from model.rope import ROPE_BASE, apply_rope

ROTATION_CHUNK = 64  # rotation matrices are built for this many positions at a time


class _Norm:
    """A LayerNorm applied with its own weight and bias, or an RMSNorm computed as `unit_rms` (x / sqrt(n)
    times its torch.rms_norm value), whose sqrt(n) and gain the next matrix carries (`fold`)."""

    def __init__(self, norm: nn.Module, dtype: torch.dtype):
        self.rms, self.size = isinstance(norm, nn.RMSNorm), norm.normalized_shape[-1]
        # plain attributes: reading them through the nn.Module at every step costs more than the norm
        self.shape, self.weight, self.eps = norm.normalized_shape, norm.weight, norm.eps
        self.bias = getattr(norm, "bias", None)
        self.floor = _floor(self.size, norm.eps, dtype, norm.weight.device) if self.rms else None

    def fold(self, w_t: Tensor) -> Tensor:
        """w_t (E, out), the matrix applied to this norm's output -> the matrix to apply to `self(x)`."""
        if not self.rms:
            return w_t
        return (self.weight.detach() * math.sqrt(self.size))[:, None] * w_t

    def __call__(self, x: Tensor) -> Tensor:
        if self.rms:
            return unit_rms(x, self.floor)
        return torch.layer_norm(x, self.shape, self.weight, self.bias, self.eps)  # F.layer_norm adds a wrapper


def _floor(size: int, eps: float | None, dtype: torch.dtype, device: torch.device) -> Tensor:
    """sqrt(size * eps) for `unit_rms` (eps None = the dtype's machine epsilon, as torch.rms_norm takes it)."""
    eps = torch.finfo(dtype).eps if eps is None else eps
    return torch.tensor(math.sqrt(size * eps), dtype=dtype, device=device)


def unit_rms(x: Tensor, floor: Tensor) -> Tensor:
    """x / sqrt(sum(x^2) + floor^2) over the last dimension (n values): with floor = sqrt(n * eps) this is
    torch.rms_norm(x, eps) / sqrt(n), in three ops instead of its composite's six."""
    return x / torch.hypot(torch.linalg.vector_norm(x, dim=-1, keepdim=True), floor)


class Rotations:
    """`rotations(p)`: the (D, D) R with x @ R == apply_rope(x, ..., p) * `scale` (the sqrt(head_dim) `unit_rms`
    leaves out) at a host int p (built ROTATION_CHUNK positions at a time: constant memory however far the ring
    slides) or a (1,) device tensor p. The identity's rows rotated by `apply_rope`: the modules' rotation by
    construction."""

    def __init__(self, head_dim: int, dtype: torch.dtype, device: torch.device, scale: float = 1.0):
        self.dtype, self.device, self.scale = dtype, device, scale
        self.inv_freq = (ROPE_BASE ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)).to(device)
        self.rows = torch.eye(head_dim, device=device)[:, None]  # (D, 1, D): basis vector j
        self.index = torch.arange(ROTATION_CHUNK, device=device)
        self.first, self.table = 0, None

    def __call__(self, p: int | Tensor) -> Tensor:
        if isinstance(p, Tensor):
            return self._matrices(p)[0]
        if self.table is None or not 0 <= p - self.first < ROTATION_CHUNK:
            self.first = p - p % ROTATION_CHUNK
            positions = torch.arange(self.first, self.first + ROTATION_CHUNK, device=self.device)
            self.table = self._matrices(positions).contiguous()
        return self.table[p - self.first]

    def _matrices(self, positions: Tensor) -> Tensor:
        """(n,) positions -> (n, D, D), the rotation at each."""
        n, D = positions.shape[0], self.rows.shape[0]
        angles = positions.double()[:, None] * self.inv_freq  # (n, D/2), as rope_tables computes them
        rotated = apply_rope(self.rows.expand(D, n, D), angles.cos().float(), angles.sin().float(), self.index[:n])
        return (rotated.transpose(0, 1) * self.scale).to(self.dtype)  # (n, D, D): row j rotated at each position


class OneThread:
    """`with OneThread(on):` one intra-op thread inside where `on`, the caller's count back after: the rule of
    generation's loop on the CPU (model/streaming.py says why)."""

    def __init__(self, on: bool):
        self.on, self.threads = on, 1

    def __enter__(self) -> None:
        if self.on:
            self.threads = torch.get_num_threads()
            torch.set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        if self.on:
            torch.set_num_threads(self.threads)


@dataclass
class _BlockWeights:
    ln1: _Norm
    in_t: Tensor  # (E, 3 * head_size [+ H] [+ H]): queries, keys, values of every head, then the gates' inputs
    proj_t: Tensor  # (head_size, E)
    proj_b: Tensor
    ln2: _Norm
    fc_t: Tensor  # (E, hidden), or (E, 2 * hidden) for swiglu
    fc_b: Tensor
    fc2_t: Tensor  # (hidden, E)
    fc2_b: Tensor
    mlp: str
    gelu: str
    gated: bool  # model.attention_gate: the gates' inputs follow the values in in_t
    values_t: Tensor | None  # model.value_embedding: (E, head_size), the embedding's projection; its gate is last

    @classmethod
    def of(cls, block: Block, qkv_weight: Tensor, matrix_dtype: torch.dtype, x_dtype: torch.dtype) -> _BlockWeights:
        def t(w: Tensor, norm: _Norm | None = None) -> Tensor:
            w_t = w.detach().t()
            return (w_t if norm is None else norm.fold(w_t)).to(matrix_dtype).contiguous()

        a, f = block.attn, block.ffwd
        ln1, ln2 = _Norm(block.ln1, x_dtype), _Norm(block.ln2, x_dtype)
        # a gate reads the first channels of the block's normed input: as a full-width matrix it shares the QKV
        # product (and the RMSNorm folding)
        gates = [g for g in (a.gate, a.value_gate) if g is not None]
        inputs = [qkv_weight] + [_full_width(g.weight, qkv_weight.shape[1]) for g in gates]
        values = None if a.value_embed is None else t(a.value_embed.weight)
        return cls(
            ln1=ln1,
            in_t=t(torch.cat(inputs), ln1),
            proj_t=t(a.proj.weight),
            proj_b=a.proj.bias,
            ln2=ln2,
            fc_t=t(f.fc.weight, ln2),
            fc_b=f.fc.bias,
            fc2_t=t(f.proj.weight),
            fc2_b=f.proj.bias,
            mlp=f.kind,
            gelu=f.act.approximate,
            gated=a.gate is not None,
            values_t=values,
        )


def _full_width(weight: Tensor, width: int) -> Tensor:
    """A (H, C) gate read from the first C channels as the (H, width) matrix that reads them from all."""
    return F.pad(weight.detach(), (0, width - weight.shape[1]))


class DecodeStep:
    """Logits for one new token per sequence, reading and extending a `KVCache`. The matrices take the cache's dtype
    (under autocast, cast once here instead of at every step); a `heads` model's matrices are stacked once here."""

    def __init__(self, model, cache: KVCache):
        dtype = cache.dtype
        emb, head = model.token_embedding, model.lm_head
        self.token_embedding = emb.weight
        # a table is read by index; a composed embedding (the jamo one) and a staged head run as themselves
        self.embed_ids = None if type(emb) is nn.Embedding else emb
        pe = model.position_embedding
        self.position_embedding = None if pe is None else pe.weight
        x_dtype = self.token_embedding.dtype  # the residual stream's, which the norms see
        self.blocks = [_BlockWeights.of(b, b.attn.qkv_weight(), dtype, x_dtype) for b in model.blocks]
        self.ln_f = _Norm(model.ln_f, x_dtype)
        linear = isinstance(head, nn.Linear)
        self.head, self.final_norm = (None, None) if linear else (head, model.ln_f)  # the whole norm, then the head
        self.lm_head_t = self.ln_f.fold(head.weight.detach().t()).to(dtype).contiguous() if linear else None
        self.softcap = getattr(head, "softcap", 0.0)
        self.skip_weights = None if model.skip_weights is None else model.skip_weights.detach()
        attn = model.blocks[0].attn
        self.num_heads, self.head_dim, self.qk_norm = attn.num_heads, attn.head_dim, attn.qk_norm
        device = self.token_embedding.device
        # queries and keys come out of the matrices in the cache's dtype: their norm takes its epsilon
        self.qk_floor = _floor(self.head_dim, None, dtype, device) if self.qk_norm else None
        self.qk_scale = math.sqrt(self.head_dim) if self.qk_norm else 1.0
        self.rotations = Rotations(self.head_dim, dtype, device, self.qk_scale) if attn.rope is not None else None

    def __call__(self, ids: Tensor, cache: KVCache) -> Tensor:
        """ids: (B, 1), the tokens at position `cache.position` -> logits (B, 1, V), as
        `AttentionLanguageModel.forward(..., last_only=True)` returns them. Advances the cache by one. On the CPU,
        call it inside `OneThread` (model/streaming.py's loop does)."""
        logits = self.forward_at(ids, SlotPosition(cache.position, cache.context_length), cache.buffers, cache.dtype)
        cache.advance(1)
        return logits

    def _qk(self, qk: Tensor, at: SlotPosition) -> Tensor:
        """Queries and keys (B, 2, H, D) of position `at` as attention compares them (`shape_qk`'s result)."""
        if self.qk_norm:
            qk = unit_rms(qk, self.qk_floor)
            if self.rotations is None:
                return qk * self.qk_scale
        return qk if self.rotations is None else qk @ at.rotation(self.rotations)  # the rotations carry qk_scale

    def forward_at(self, ids: Tensor, at: SlotPosition, buffers: list[Tensor], dtype: torch.dtype) -> Tensor:
        """`__call__`'s logits (B, 1, V) for ids (B, 1) at position `at`, written into the cache `buffers` (of
        `dtype`), which nothing here advances. `at` is a `SlotPosition`, or model/static_decode.py's position held
        in a device tensor: all this code asks of a position goes through it."""
        B, H, D = ids.shape[0], self.num_heads, self.head_dim
        x = (
            self.token_embedding.index_select(0, ids.view(B)) if self.embed_ids is None else self.embed_ids(ids.view(B))
        )  # (B, E)
        if self.position_embedding is not None:
            x = x + at.row(self.position_embedding)
        plain = self.rotations is None and not self.qk_norm
        # On the CPU below fp32, attend() picks the kernel as the module path does; fp32 calls SDPA directly.
        sdpa = attend if x.device.type == "cpu" and dtype != torch.float32 else F.scaled_dot_product_attention
        x0, half, skips = x, len(self.blocks) // 2, []
        for i, (w, kv) in enumerate(zip(self.blocks, buffers, strict=True)):
            if self.skip_weights is not None and i >= half and skips:
                x = x + self.skip_weights[i - half] * skips.pop()
            a = w.ln1(x) @ w.in_t  # (B, 3HD [+ H] [+ H])
            qkv = (a if w.values_t is None and not w.gated else a[:, : 3 * H * D]).view(B, 3, H, D)
            if w.values_t is not None:  # the embedding's projection joins the values (a view of `a`, in place)
                qkv[:, 2] += (x0 @ w.values_t).view(B, H, D) * 2 * torch.sigmoid(a[:, -H:]).unsqueeze(-1)
            if plain:
                at.write(kv, qkv[:, 1:])  # keys and values of this position, (B, 2, H, D), one copy
                q = qkv[:, 0]
            else:
                qk = self._qk(qkv[:, :2], at)
                at.write(kv, torch.stack((qk[:, 1], qkv[:, 2]), dim=1))
                q = qk[:, 0]
            y = at.attend(sdpa, q, kv)  # (B, H, 1, D)
            if w.gated:
                y = y * torch.sigmoid(a[:, 3 * H * D : 3 * H * D + H]).view(B, H, 1, 1)
            x = x + torch.addmm(w.proj_b, y.reshape(B, H * D), w.proj_t)
            h = torch.addmm(w.fc_b, w.ln2(x), w.fc_t)
            h = F.gelu(h, approximate=w.gelu) if w.mlp == "gelu" else mlp_activation(w.mlp, h)
            x = x + torch.addmm(w.fc2_b, h, w.fc2_t)  # (B, E)
            if self.skip_weights is not None and i < half:
                skips.append(x)
        if self.head is not None:
            return self.head(self.final_norm(x)).unsqueeze(1)  # (B, 1, V): the staged head's log-probabilities
        logits = self.ln_f(x) @ self.lm_head_t
        return (logits if not self.softcap else self.softcap * torch.tanh(logits / self.softcap)).unsqueeze(1)


class SlotPosition:
    """Position p of the window (`KVCache.position`), as `DecodeStep` reads it: plain integers. It is written to
    slot p % context_length and the query attends to the slots filled so far, min(p + 1, context_length)."""

    def __init__(self, p: int, context_length: int):
        self.p, self.slot, self.filled = p, p % context_length, min(p + 1, context_length)

    def row(self, table: Tensor) -> Tensor:
        """Row p of a learned position table, (E,)."""
        return table[self.p]

    def rotation(self, rotations: Rotations) -> Tensor:
        return rotations(self.p)

    def write(self, kv: Tensor, new: Tensor) -> None:
        """new (B, 2, H, D), this position's keys and values, into a block's cache buffer (B, 2, H, C, D)."""
        kv[:, :, :, self.slot] = new

    def attend(self, sdpa, q: Tensor, kv: Tensor) -> Tensor:
        """q (B, H, D) against every filled slot -> (B, H, 1, D): no mask needed."""
        return sdpa(q.unsqueeze(2), kv[:, 0, :, : self.filled], kv[:, 1, :, : self.filled])
