"""A weight file checked for what it computes: its structure before any conversion, then its logits.

Design choices:
- One check for every reader: `check_state` runs before the layout conversion, so a bad file is one line naming
  the key, never a KeyError inside it; then a few tokens' logits, since finite weights can still overflow.
- Expected names and shapes come from the model built on `meta` (`probe_model` assigns weights to that build):
  `shapes_only` keeps it off torch's Python references, whose first call imports torch._dynamo.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import lru_cache
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from common.errors import UserError
from model.config import ModelConfig
from model.input_output import upgrade_state_names
from model.qkv_layout import PARTS, QKV, head_key, match_layout, qkv_prefix, split_head_key

_FACTORIES = frozenset(
    {torch.ones, torch.zeros, torch.full, torch.empty, torch.arange, torch.linspace, torch.eye, torch.tensor}
)
# in-place methods that change a tensor's shape, storage or flags, not only its values
_RESHAPING = frozenset(
    "resize_ resize_as_ set_ as_strided_ squeeze_ unsqueeze_ t_ transpose_ swapdims_ swapaxes_".split()
)
_RESHAPING |= {"requires_grad_", "share_memory_"}


def _in_place(name: str) -> bool:
    """An in-place operation that keeps its tensor's shape and dtype (a fill, arithmetic, a copy into a slice)."""
    return name == "__setitem__" or (name.endswith("_") and not name.startswith("_") and name not in _RESHAPING)


class _ShapesOnly(TorchFunctionMode):
    """Under `torch.device("meta")`: an in-place operation on a `meta` tensor is skipped (no values; shape and dtype
    stay), and a table a module derives (a mask, positions: never the default float dtype) is made on the CPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _in_place(getattr(func, "__name__", "")):
            tensor = args[0] if args else kwargs.get("tensor")  # nn.init passes its tensor by keyword
            if isinstance(tensor, Tensor) and tensor.is_meta:
                return None if func.__name__ == "__setitem__" else tensor
        if func not in _FACTORIES or "device" in kwargs:
            return func(*args, **kwargs)
        default = torch.get_default_dtype()
        if (kwargs.get("dtype") or default) != default:  # a table's dtype, said: made on the CPU at once
            return func(*args, **kwargs, device="cpu")
        result = func(*args, **kwargs)  # on `meta`, unless its dtype (inferred) shows it is a table
        return func(*args, **kwargs, device="cpu") if result.dtype != default else result


@contextmanager
def shapes_only() -> Iterator[None]:
    with torch.device("meta"), _ShapesOnly():
        yield


def meta_model(config: ModelConfig) -> nn.Module:
    """The model `config` builds, on the `meta` device: every parameter's name, dtype and shape, no memory."""
    from model import AttentionLanguageModel  # imported here: reading a file's header needs no model code

    with shapes_only():
        return AttentionLanguageModel(config)


@lru_cache(maxsize=16)
def _expected(settings: tuple) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
    return {k: (v.dtype, tuple(v.shape)) for k, v in meta_model(ModelConfig(**dict(settings))).state_dict().items()}


def expected_state(config: ModelConfig) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
    """{name: (dtype, shape)} of the state dict `config` builds (a tied matrix under both its names)."""
    return _expected(tuple(sorted(config.to_dict().items())))


def _refusal(path: object, what: str) -> UserError:
    return UserError(
        f"checkpoint {path} is inconsistent: {what}; it cannot be sampled or resumed (use another checkpoint)"
    )


def check_state(config: ModelConfig, state: dict[str, Any], path: object) -> None:
    """`state` (names upgraded, layout not yet converted) holds exactly the weights `config` needs, as float
    tensors of the right shapes, each attention module's in one layout; else one UserError naming `path`."""
    try:  # in the fused layout: a module's per-head weights are then checked against its (3, H, D, E) stack
        expected = expected_state(replace(config, attention="fused"))
    except (TypeError, ValueError) as e:
        raise UserError(f"checkpoint {path} has unusable model settings ({e})") from None
    for key, value in state.items():
        if not isinstance(value, Tensor):
            raise _refusal(path, f"{key} is a {type(value).__name__}, not a tensor")
        if not value.is_floating_point():
            raise _refusal(
                path, f"{key} holds {str(value.dtype).removeprefix('torch.')} numbers where weights are floating-point"
            )
    by_head = _head_keys(config, state, expected, path)
    for key in state:
        if key not in expected and split_head_key(key) is None:
            raise _refusal(path, f"it holds {key}, which its model settings do not use")
    for key, (_, shape) in expected.items():
        prefix = qkv_prefix(key)
        if prefix in by_head:
            for head in sorted(by_head[prefix]):
                _check_shape(state, head, shape[2:], path)  # each head's matrix of the (3, H, D, E) stack
        else:
            _check_shape(state, key, shape, path)


def _head_keys(config: ModelConfig, state: dict[str, Any], expected: dict, path: object) -> dict[str, set[str]]:
    """{attention prefix: its per-head keys}: all of a module's heads or none, never beside its `qkv`."""
    found: dict[str, set[str]] = {}
    for key in state:
        if (head := split_head_key(key)) is not None:
            found.setdefault(head[0], set()).add(key)
    for prefix, keys in found.items():
        if prefix + QKV in state:
            raise _refusal(
                path,
                f"it holds both the stacked {prefix}{QKV} and the per-head {min(keys)} (one "
                "layout or the other, never both)",
            )
        if prefix + QKV not in expected:
            raise _refusal(path, f"it holds {min(keys)}, which its model settings do not use")
        need = {head_key(prefix, h, part) for h in range(config.num_heads) for part in PARTS}
        if keys - need:
            raise _refusal(
                path,
                f"it holds {min(keys - need)}, which its model settings do not use "
                f"(model.num_heads={config.num_heads})",
            )
        if need - keys:
            raise _refusal(path, f"its weights lack {min(need - keys)}, which its model settings need")
    return found


def checked_weights(config: ModelConfig, weights: dict, path: object) -> dict[str, Tensor]:
    """A checkpoint's weights, older names upgraded and `check_state` passed, in the layout `config` builds."""
    weights = upgrade_state_names(weights)
    check_state(config, weights, path)
    return match_layout(weights, config.attention)


def _check_shape(state: dict[str, Any], key: str, shape: tuple[int, ...], path: object) -> None:
    found = state.get(key)
    if found is None:
        raise _refusal(path, f"its weights lack {key}, which its model settings need")
    if tuple(found.shape) != shape:
        raise _refusal(path, f"{key} is {list(found.shape)} but its model settings need {list(shape)}")
