"""The two layouts of a block's query, key and value weights, and the conversions between them.

- `heads` (the lecture's): each `Head` owns three (head_dim, E) matrices, `attn.heads.{h}.query|key|value.weight`.
- `fused` (the default): one parameter `attn.qkv` (3, num_heads, head_dim, E), which viewed as (3 * head_size, E)
  is the matrix the fused path multiplies by (model/qkv_projection.py splits the product).

Design choices:
- A state dict of either layout loads into a model of either (`convert_in_place`, `match_layout`), and the
  optimizer's moments follow (training/optim/layout.py uses `other_layout_names`).
- Checkpoints and exports of the per-head names load unchanged; the exported modeling code keeps them.
"""

from __future__ import annotations

import re

import torch
from torch import Tensor

PARTS = ("query", "key", "value")
QKV = "qkv"  # the fused parameter's name inside a MultiHeadAttention
_HEAD_KEY = re.compile(r"^(?P<prefix>(?:.*\.)?)heads\.(?P<head>\d+)\.(?P<part>query|key|value)\.weight$")


def head_key(prefix: str, head: int, part: str) -> str:
    return f"{prefix}heads.{head}.{part}.weight"


def split_head_key(key: str) -> tuple[str, int, int] | None:
    """(prefix, head, index of the part in PARTS) of a per-head weight's name; None for any other name."""
    m = _HEAD_KEY.match(key)
    return None if m is None else (m["prefix"], int(m["head"]), PARTS.index(m["part"]))


def qkv_prefix(key: str) -> str | None:
    """The attention module's prefix of a fused `qkv` name ("blocks.0.attn." of "blocks.0.attn.qkv"), else None."""
    return key[: -len(QKV)] if key == QKV or key.endswith("." + QKV) else None


def num_heads_at(state: dict[str, Tensor], prefix: str) -> int:
    n = 0
    while head_key(prefix, n, "query") in state:
        n += 1
    return n


def fuse(state: dict[str, Tensor], prefix: str) -> Tensor:
    """The (3, H, head_dim, E) tensor of the heads stored under `prefix` (queries, then keys, then values)."""
    H = num_heads_at(state, prefix)
    return torch.stack([torch.stack([state[head_key(prefix, h, part)] for h in range(H)]) for part in PARTS])


def convert_in_place(state: dict[str, Tensor], prefix: str, fused: bool) -> None:
    """Rewrite the weights of the attention module at `prefix` in `state` to its layout: `fused` (one `qkv`) or
    the lecture's heads. Entries of other modules, and weights already in the layout, are left as they are."""

    def ours(key: str) -> bool:
        head = split_head_key(key)
        return key == prefix + QKV or (head is not None and head[0] == prefix)

    mine = [k for k in state if ours(k)]
    state.update(match_layout({k: state.pop(k) for k in mine}, "fused" if fused else "heads"))


def to_fused(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A copy of `state` with every attention module's weights fused; the other entries keep their order."""
    out: dict[str, Tensor] = {}
    for key, value in state.items():
        m = _HEAD_KEY.match(key)
        if m is None or head_key(m["prefix"], 0, "query") not in state:  # not an attention module held head by head
            out[key] = value
        elif m["head"] == "0" and m["part"] == "query":  # the fused tensor stands where the first head stood
            out[m["prefix"] + QKV] = fuse(state, m["prefix"])
    return out


def to_heads(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A copy of `state` with every fused `qkv` written head by head, in the order `Head` modules register them."""
    out: dict[str, Tensor] = {}
    for key, value in state.items():
        if (prefix := qkv_prefix(key)) is not None:
            for h in range(value.shape[1]):
                for i, part in enumerate(PARTS):
                    out[head_key(prefix, h, part)] = value[i, h].clone()
        else:
            out[key] = value
    return out


def match_layout(state: dict[str, Tensor], attention: str) -> dict[str, Tensor]:
    """`state` in the layout a model with `model.attention=attention` holds."""
    return to_heads(state) if attention == "heads" else to_fused(state)


def other_layout_names(names: list[str], num_heads: int) -> list[str]:
    """Parameter names in the order a model of the other layout lists them: each `...attn.qkv` becomes its heads'
    names (head by head: query, key, value) and each run of heads' names becomes one `...attn.qkv`."""
    out: list[str] = []
    for name in names:
        head = split_head_key(name)
        if (prefix := qkv_prefix(name)) is not None:
            out += [head_key(prefix, h, part) for h in range(num_heads) for part in PARTS]
        elif head is None:
            out.append(name)
        elif head[1:] == (0, 0):  # the first head's query: the fused tensor stands where it stood
            out.append(head[0] + QKV)
    return out


def head_by_head(qkv: Tensor) -> list[Tensor]:
    """The (head_dim, E) matrices of a fused `qkv` in the order the lecture's `Head` modules are built (head 0's
    query, key, value, then head 1's...): drawing initial weights in this order gives either layout the same
    weights for the same seed."""
    return [qkv[i, h] for h in range(qkv.shape[1]) for i in range(len(PARTS))]
