"""Looking inside a trained model: the attention weights of every block and head.

Read-only helpers for visualisation; they reuse the model's own modules and never change its state.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.attention import shape_qk


@torch.no_grad()
def attention_maps(model: nn.Module, idx: Tensor) -> Tensor:
    """Softmax attention weights for one sequence: idx (T,) or (1, T) ids -> (num_blocks, num_heads, T, T), row t
    how much position t attends to each earlier one. Recomputed from each block's input (taken from one pass of the
    model, skips included) through the same `shape_qk` attention uses, since the fused path never materialises them."""
    if idx.dim() == 1:
        idx = idx[None]
    if idx.dim() != 2 or idx.shape[0] != 1 or not 1 <= idx.shape[1] <= model.context_length:
        raise ValueError(f"idx must be one sequence of 1..{model.context_length} ids, got shape {tuple(idx.shape)}")
    T = idx.shape[1]
    was_training = model.training
    model.eval()
    inputs: list[Tensor] = []  # what each block reads, caught on its way in: the model's own loop decides it
    hooks = [b.register_forward_pre_hook(lambda _, args: inputs.append(args[0])) for b in model.blocks]
    try:
        model.hidden(idx)
        positions = torch.arange(T, device=idx.device)
        causal = torch.ones(T, T, dtype=torch.bool, device=idx.device).tril()
        maps = []
        for block, x in zip(model.blocks, inputs, strict=True):
            a = block.attn
            qk = F.linear(block.ln1(x)[0], a.qkv_weight()[: 2 * a.head_size])  # (T, 2 * head_size)
            q, k = qk.view(T, 2, a.num_heads, a.head_dim).permute(1, 2, 0, 3)  # (H, T, D) each
            q, k = shape_qk(q, k, a.rope, positions, a.qk_norm)
            scores = (q @ k.transpose(-2, -1)).float() / math.sqrt(a.head_dim)  # (H, T, T)
            maps.append(F.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1))
        return torch.stack(maps)  # (L, H, T, T)
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
