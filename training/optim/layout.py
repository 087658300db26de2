"""A saved optimizer state put in the attention layout of the model it is loaded into.

The fused `qkv` tensor and the heads path's per-head matrices are the same numbers held differently
(model/qkv_layout.py); an optimizer state saved in one layout is regrouped into the other, every moment kept.

Design choices:
- Parameters are matched by name: the other layout lists the same names with each `qkv` in place of its heads
  (`other_layout_names`), which gives each saved index its name.
- Anything that does not fit that picture is returned as it is, for `load_state_dict` to refuse in one line.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from model.qkv_layout import PARTS, QKV, head_key, num_heads_at, other_layout_names, qkv_prefix, split_head_key


def match_optimizer_layout(saved: dict, optimizer: torch.optim.Optimizer, model: nn.Module) -> dict:
    """`saved` (an optimizer's state_dict) with its per-parameter state in the layout of `model`, whose
    parameters `optimizer` holds; unchanged where the layouts already agree or the state is not one to regroup."""
    names = {id(p): n for n, p in model.named_parameters()}
    now = [[names[id(p)] for p in g["params"]] for g in optimizer.param_groups]
    groups = saved.get("param_groups") if isinstance(saved, dict) else None
    if not isinstance(groups, list) or len(groups) != len(now) or not isinstance(saved.get("state"), dict):
        return saved
    sizes = [len(g.get("params", ())) if isinstance(g, dict) else -1 for g in groups]
    before = [other_layout_names(g, model.config.num_heads) for g in now]
    if sizes == [len(g) for g in now] or sizes != [len(g) for g in before]:
        return saved
    by_name = {
        name: saved["state"][i]
        for g, s in zip(before, groups, strict=True)
        for name, i in zip(g, s["params"], strict=True)
        if i in saved["state"]
    }
    state, out_groups, index = {}, [], 0
    for g, s in zip(now, groups, strict=True):
        ids = list(range(index, index + len(g)))
        index += len(g)
        for i, name in zip(ids, g, strict=True):
            entry = _regrouped(by_name, name)
            if entry is not None:
                state[i] = entry
        out_groups.append({**s, "params": ids})
    return {"state": state, "param_groups": out_groups}


def _regrouped(by_name: dict[str, dict], name: str) -> dict | None:
    """The state of parameter `name` (in the new layout) from the states of the old layout's parameters."""
    if name in by_name:
        return by_name[name]
    if (prefix := qkv_prefix(name)) is not None:  # the heads' states, stacked as the fused tensor
        num_heads = num_heads_at(by_name, prefix)  # heads whose query's state was saved
        heads = [[by_name.get(head_key(prefix, h, part)) for part in PARTS] for h in range(num_heads)]
        if not heads or any(s is None for parts in heads for s in parts):
            return None
        first = heads[0][0]
        return {
            k: torch.stack([torch.stack([heads[h][i][k] for h in range(len(heads))]) for i in range(len(PARTS))])
            if _per_element(v)
            else _copy(v)
            for k, v in first.items()
        }
    head = split_head_key(name)
    fused = None if head is None else by_name.get(head[0] + QKV)
    if fused is None:
        return None
    _, h, i = head
    return {k: v[i, h].clone() if _per_element(v) and v.dim() == 4 else _copy(v) for k, v in fused.items()}


def _per_element(v: object) -> bool:
    """A state entry with one value per weight (a moment), not one per tensor (Adam's step count)."""
    return isinstance(v, Tensor) and v.dim() >= 2


def _copy(v: object) -> object:
    return v.clone() if isinstance(v, Tensor) else v  # each parameter its own step counter, never a shared one
