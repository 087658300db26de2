"""An exported folder checked before it is trusted: its record's fields, then its weights' header.

Design choices:
- Every field of `kochar.json` is checked as a checkpoint's are: a bad one is one line naming it.
- The safetensors header is read alone, before any tensor or model, and must hold exactly what the record's settings
  give (the `meta` model, mapped by the layout), each entry fitting the file; export writes floats as float32 only.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import torch

from common.config_checks import is_positive, is_whole
from common.errors import UserError
from hf_format import FORMAT, LAYOUTS, VERSION
from inference.config import WEIGHTS
from model.config import ModelConfig
from tokenizer import tokenizer_from_dict

MAX_HEADER_BYTES = 100 << 20  # safetensors' own bound
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
TORCH_DTYPES = {torch.float32: "F32", torch.int64: "I64", torch.int32: "I32", torch.bool: "BOOL", torch.uint8: "U8"}
_FIRST_INDEX = re.compile(r"\.(\d+)\.")


def checked_record(rec: object, path: Path) -> ModelConfig:
    """The record's model settings, once every field has the type and range it must have."""
    again = "; export the run again"
    if not isinstance(rec, dict) or rec.get("format") != FORMAT:
        raise UserError(f"{path} is not a kochar-gpt export record{again}")
    version = rec.get("version")
    if not is_whole(version, 1):
        raise UserError(f"{path} has no valid format version ({version!r}){again}")
    if version > VERSION:
        raise UserError(f"{path} has format version {version}; this kochar-gpt reads version {VERSION} (update it)")
    if rec.get("layout") not in LAYOUTS:
        raise UserError(f"{path}: layout {rec.get('layout')!r} is not one of {', '.join(LAYOUTS)}{again}")
    checks = {
        "model_config": (dict, True),
        "tokenizer": (dict, True),
        "trained_as": (dict, False),
        "config": (dict, False),
        "files": (list, False),
    }
    for key, (kind, required) in checks.items():
        if (required or key in rec) and not isinstance(rec.get(key), kind):
            found = type(rec.get(key)).__name__ if key in rec else "missing"
            raise UserError(
                f"{path}: {key} must be a JSON {'object' if kind is dict else 'list'}, found {found}{again}"
            )
    if not isinstance(rec["tokenizer"].get("kind", "char"), str):
        raise UserError(f"{path}: tokenizer.kind must be text{again}")
    try:
        tokenizer_from_dict(rec["tokenizer"])  # every field typed: the vocabulary built once, then dropped
    except UserError as e:
        raise UserError(f"{path}: {e}{again}") from None
    if rec.get("source") is not None and not isinstance(rec["source"], dict):  # null: exported before it was recorded
        raise UserError(f"{path}: source must be a JSON object or null, found {type(rec['source']).__name__}{again}")
    if rec.get("weights") not in (None, *WEIGHTS, "unknown"):  # unknown: re-exported from an unrecorded folder
        raise UserError(
            f"{path}: weights must be one of {', '.join(WEIGHTS)}, unknown, found {str(rec['weights'])[:40]!r}{again}"
        )
    scalars = (
        ("average_updates", None, lambda v: v is None or is_whole(v), "a whole number >= 0 or null"),
        ("tokens_per_char", 1.0, is_positive, "a positive number"),
        ("step", 0, is_whole, "a whole number >= 0"),
    )
    for key, default, fits, need in scalars:
        if not fits(rec.get(key, default)):
            raise UserError(f"{path}: {key} must be {need}, found {rec.get(key, default)!r}{again}")
    for key in ("trained_as", "model_config"):
        if key in rec:
            try:
                config = ModelConfig.from_dict(dict(rec[key]))
            except (TypeError, ValueError) as e:
                raise UserError(f"{path} has unusable model settings in {key} ({e}){again}") from None
    if config.vocab_size is None:
        raise UserError(f"{path}: model_config.vocab_size is missing{again}")
    return config


def read_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """{name: (dtype, shape)} from a safetensors file's header, every entry checked against the file's size."""
    bad = f"{path} is damaged or not a safetensors file"
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            length = int.from_bytes(f.read(8), "little")
            if size < 8 or length > min(size - 8, MAX_HEADER_BYTES):
                raise UserError(f"{bad} (its header length {length:,} does not fit its {size:,} bytes); export again")
            header = json.loads(f.read(length))
    except OSError as e:
        raise UserError(f"{path} cannot be read ({e.strerror or e}); export the run again") from None
    except ValueError:
        raise UserError(f"{bad} (its header is not JSON); export the run again") from None
    if not isinstance(header, dict):
        raise UserError(f"{bad} (its header is not a JSON object); export the run again")
    header.pop("__metadata__", None)
    data, spans, found = size - 8 - length, [], {}
    for name, entry in header.items():
        entry = entry if isinstance(entry, dict) else {}  # any other JSON value: every field missing
        dtype, shape, offsets = (entry.get(k) for k in ("dtype", "shape", "data_offsets"))
        if (
            dtype not in DTYPE_BYTES
            or not isinstance(shape, list)
            or not isinstance(offsets, list)
            or not all(map(is_whole, shape + offsets))
            or len(offsets) != 2
            or not offsets[0] <= offsets[1] <= data
        ):
            raise UserError(f"{bad} (the entry of {name} is malformed or points outside the file); export again")
        if offsets[1] - offsets[0] != math.prod(shape) * DTYPE_BYTES[dtype]:
            raise UserError(
                f"{bad}: {name} is labelled {dtype} {shape}, which is not the "
                f"{offsets[1] - offsets[0]:,} bytes it spans; export the run again"
            )
        spans.append(offsets)
        found[name] = (dtype, tuple(shape))
    spans.sort()
    if any(a[1] > b[0] for a, b in zip(spans, spans[1:], strict=False)):
        raise UserError(f"{bad} (two tensors share bytes); export the run again")
    return found


def expected_tensors(config: ModelConfig, layout: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """{name: (dtype, shape)} an export of `config` in `layout` holds: the layout's mapping of the `meta` model."""
    from inference.weight_checks import meta_model, shapes_only

    fused = replace(config, attention="fused")  # the same export from either layout, with no stacking on `meta`
    with shapes_only():
        tensors = LAYOUTS[layout].to_hf(meta_model(fused).state_dict(), config)
    return {k: (TORCH_DTYPES.get(v.dtype, str(v.dtype)), tuple(v.shape)) for k, v in tensors.items()}


def check_tensors(path: Path, config: ModelConfig, layout: str) -> None:
    """The header of `path` must hold exactly the tensors `config` needs in `layout`; else one UserError."""
    found = read_header(path)
    blocks = {m.group(1) for m in map(_FIRST_INDEX.search, found) if m}
    if len(blocks) != config.num_blocks:
        raise UserError(
            f"{path.parent}: kochar.json says the model has {config.num_blocks} blocks, but "
            f"{path.name} holds the weights of {len(blocks)}; export the run again"
        )
    try:
        expected = expected_tensors(config, layout)
    except (TypeError, ValueError, RuntimeError, KeyError) as e:
        raise UserError(f"{path.parent}: kochar.json's model settings cannot be built ({e}); export again") from None
    for name, (dtype, shape) in expected.items():
        if name not in found:
            raise UserError(f"{path} lacks the tensor {name}, which kochar.json's settings need; export again")
        if found[name] != (dtype, shape):
            raise UserError(
                f"{path}: {name} is {found[name][0]} {list(found[name][1])} where kochar.json's "
                f"settings need {dtype} {list(shape)}; export the run again"
            )
    extra = sorted(set(found) - set(expected))
    if extra:
        raise UserError(
            f"{path} holds tensors kochar.json's settings do not use ({', '.join(extra[:3])}); export the run again"
        )
