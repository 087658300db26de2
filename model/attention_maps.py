"""Looking inside a trained model: the attention weights of every block and head.

Read-only helpers for visualisation; they reuse the model's own modules and never change its state.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.attention import shape_qk


@torch.no_grad()
def attention_maps(model: nn.Module, idx: Tensor) -> Tensor:
    """Softmax attention weights for one sequence: idx (T,) or (1, T) ids -> (num_blocks, num_heads, T, T).

    Row t of a map is how much position t attends to each earlier position (rows sum to 1). The weights
    are recomputed from each block's `ln1` and each head's query/key projections (with the model's query/key
    norm and rotary positions, through the same `shape_qk` attention uses), because the fused path never
    materialises them; dropout is off, so they are the weights the model uses at inference. Each block's input is
    taken from one pass of the model itself (a hook), so whatever joins the residual stream between blocks (the
    U-Net skips, model.unet_skips) is in it.
    """
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
            h = block.ln1(x)
            per_head = []
            for head in block.attn.heads:
                q, k = shape_qk(head.query(h), head.key(h), block.attn.rope, positions, head.qk_norm)  # (1, T, D)
                scores = (q @ k.transpose(-2, -1)).float() * head.scale  # (1, T, T)
                per_head.append(F.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)[0])
            maps.append(torch.stack(per_head))  # (H, T, T)
        return torch.stack(maps)  # (L, H, T, T)
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
