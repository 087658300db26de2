"""The fused path's QKV product, `x @ qkv.flatten(0, 2).T`, split into each head's queries, keys and values, with a
backward that puts nothing back together: `project_qkv`.

Why: every split PyTorch offers joins the three gradients in the backward (a stack or a cat, plus a strided copy for
the heads' permuted views), while attention's backward hands them back in separate buffers. `QKVProjection.backward`
reads each, a transposed view of a (B, T, H, D) buffer, as (B*T, head_size) rows without a copy (any other layout is
copied), and writes the weight's gradient as three matmuls into one buffer's thirds, the input's as one matmul and
two accumulating ones: the same FLOPs (two where the gradients are one buffer's thirds already), nothing joined
(tests/training/test_step_cost.py).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable


def project_qkv(x: Tensor, weight: Tensor, num_heads: int) -> tuple[Tensor, Tensor, Tensor]:
    """x: (B, T, E), weight: (3 * H * D, E) (all queries, then keys, then values) -> queries, keys, values,
    each (B, H, T, D), views of one product."""
    device = x.device.type
    if torch.is_autocast_enabled(device):  # the casts autocast would make inside F.linear, made where it sees them
        dtype = torch.get_autocast_dtype(device)
        x, weight = x.to(dtype), weight.to(dtype)
    return QKVProjection.apply(x, weight, num_heads)


class QKVProjection(torch.autograd.Function):
    """x @ qkv.T split into heads; the backward writes the weight's gradient in place, joining nothing."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, num_heads: int) -> tuple[Tensor, Tensor, Tensor]:
        B, T, E = x.shape
        H, D = num_heads, weight.shape[0] // (3 * num_heads)
        rows = x.reshape(B * T, E)
        ctx.save_for_backward(rows, weight)
        ctx.shape = (B, T, H, D)
        q, k, v = torch.mm(rows, weight.t()).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)
        return q, k, v

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads: Tensor | None) -> tuple[Tensor | None, Tensor | None, None]:
        rows, weight = ctx.saved_tensors
        B, T, H, D = ctx.shape
        g = [grad_rows(grad, B, T, H * D, rows) for grad in grads]  # each (B*T, H*D)
        packed = None if torch.compiler.is_compiling() else joined(g)
        need_x, need_w, _ = ctx.needs_input_grad
        if packed is not None:
            gx = packed.mm(weight) if need_x else None
            gw = packed.t().mm(rows) if need_w else None
        else:
            gx, gw = split_grads(g, rows, weight, need_x, need_w)
        return None if gx is None else gx.view(B, T, -1), gw, None


def grad_rows(grad: Tensor | None, B: int, T: int, C: int, like: Tensor) -> Tensor:
    """A (B, H, T, D) gradient as (B*T, H*D) rows: a view where its memory is laid out (B, T, H, D), else a copy."""
    if grad is None:  # an output nobody used
        return like.new_zeros(B * T, C)
    (sb, sh, st, sd), (H, D) = grad.stride(), grad.shape[1::2]
    row = st if T > 1 else sb  # a dimension of size 1 may have any stride: only the others must fit
    if sd == 1 and (H == 1 or sh == D) and (B == 1 or T == 1 or sb == T * st) and row >= C:
        return grad.as_strided((B * T, C), (row, 1))
    return grad.transpose(1, 2).reshape(B * T, C)


def joined(g: list[Tensor]) -> Tensor | None:
    """The (B*T, 3*C) rows the three gradients are thirds of, when they are one buffer's; else None."""
    q, k, v = g
    C = q.shape[1]
    stride = q.stride()
    if stride != (3 * C, 1) or k.stride() != stride or v.stride() != stride:
        return None
    base = q.untyped_storage().data_ptr()
    if k.untyped_storage().data_ptr() != base or v.untyped_storage().data_ptr() != base:
        return None
    at = q.storage_offset()
    if k.storage_offset() != at + C or v.storage_offset() != at + 2 * C:
        return None
    return q.as_strided((q.shape[0], 3 * C), stride)


def split_grads(
    g: list[Tensor], rows: Tensor, weight: Tensor, need_x: bool, need_w: bool
) -> tuple[Tensor | None, Tensor | None]:
    """The input's and the weight's gradients from three separate (B*T, C) gradients: each third of the weight's
    gradient written in place, the input's accumulated, so nothing is joined."""
    gx = gw = None
    parts = weight.split(g[0].shape[1])  # query, key and value matrices, (C, E) each
    if need_x:
        gx = g[0].mm(parts[0])
        gx.addmm_(g[1], parts[1]).addmm_(g[2], parts[2])
    if need_w:
        gw = torch.empty_like(weight)
        for grad, out in zip(g, gw.split(g[0].shape[1]), strict=True):
            torch.mm(grad.t(), rows, out=out)
    return gx, gw
