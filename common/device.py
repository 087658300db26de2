"""Choosing the device and the numeric precision of a run."""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import torch

from common.config_checks import DEVICES
from common.errors import UserError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device(name: str, local_rank: int = 0) -> torch.device:
    """`auto` takes CUDA, then MPS, then the CPU."""
    base = str(name).split(":")[0]
    if base not in DEVICES:
        raise UserError(f"unknown device={name}; use one of: {', '.join(DEVICES)}")
    mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if base == "auto":
        base = "cuda" if torch.cuda.is_available() else "mps" if mps else "cpu"
    if base == "cuda":
        if not torch.cuda.is_available():
            raise UserError("device=cuda was asked for but no CUDA GPU is available; use device=auto or device=cpu")
        return torch.device(name if ":" in str(name) else f"cuda:{local_rank}")
    if base == "mps" and not mps:
        raise UserError("device=mps was asked for but MPS is not available; use device=auto or device=cpu")
    return torch.device(base)


@functools.cache
def cpu_has_native_bf16() -> bool:
    """True where the CPU has bf16 instructions (AVX512-BF16 or AMX); elsewhere bf16 is emulated, slower."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(f in flags.split() for f in ("avx512_bf16", "amx_bf16"))


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """`auto`: bf16 on CUDA where supported, else fp16 (with a GradScaler); on the CPU bf16 where it has
    native bf16 instructions, else fp32; fp32 on MPS.

    bf16 autocast on the CPU became the default only after it matched fp32's validation bpc at equal steps
    (docs/en/speed.md has the numbers).
    """
    if name == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        if device.type == "cpu" and cpu_has_native_bf16():
            return torch.bfloat16
        return torch.float32
    if name not in DTYPES:
        raise UserError(f"unknown train.dtype={name}; use one of: auto, {', '.join(DTYPES)}")
    if device.type == "cpu" and name == "float16":
        raise UserError("train.dtype=float16 is not supported on the CPU; use bfloat16 or float32")
    return DTYPES[name]


def autocast(device: torch.device, dtype: torch.dtype) -> contextlib.AbstractContextManager:
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def enable_fast_matmul(device: torch.device) -> None:
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
