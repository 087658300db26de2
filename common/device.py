"""Choosing the device and the numeric precision of a run."""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import torch

from common.config_checks import DEVICES, environment, shown_value
from common.errors import UserError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
NATIVE_BF16 = (8, 0)  # the compute capability from which NVIDIA GPUs compute bfloat16 natively (Ampere)
# Overrides the CPU's bf16 detection, as ATEN_CPU_CAPABILITY PyTorch's (1: bf16, 0: float32; `make test` runs both).
CPU_BF16_ENV = "KOCHAR_CPU_BF16"


def pick_device(name: str, local_rank: int = 0) -> torch.device:
    """`auto` takes CUDA, then MPS, then the CPU."""
    base = str(name).split(":")[0]
    if base not in DEVICES:
        raise UserError(f"unknown device={shown_value(name)}; use one of: {', '.join(DEVICES)}")
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


def cpu_has_native_bf16() -> bool:
    """True where the CPU has bf16 instructions (AVX512-BF16 or AMX), or KOCHAR_CPU_BF16 says so."""
    forced = cpu_bf16_forced()
    return _cpu_flags_have_bf16() if forced is None else forced


def cpu_bf16_forced() -> bool | None:
    """KOCHAR_CPU_BF16's answer (1: yes, 0: no), or None where it is unset or empty; any other value is refused."""
    value = environment(
        CPU_BF16_ENV,
        {"1": "take the CPU's bfloat16 path", "0": "its float32 path", "": "detect the CPU's instructions"},
    )
    return None if value == "" else value == "1"


@functools.cache
def _cpu_flags_have_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(f in flags.split() for f in ("avx512_bf16", "amx_bf16"))


def resolve_dtype(name: str, device: torch.device, key: str = "train.dtype") -> torch.dtype:
    return choose_precision(name, device, key)[0]


def choose_precision(name: str, device: torch.device, key: str = "train.dtype") -> tuple[torch.dtype, str]:
    """(dtype, why) for `key=name` on `device`; `key` as the tool spells it, so a refusal names what was typed.
    `auto` takes what the device computes natively (docs/en/training.md, "Precision and compile")."""
    if name not in ("auto", *DTYPES):
        raise UserError(f"unknown {key}={shown_value(name)}; use one of: auto, {', '.join(DTYPES)}")
    if device.type == "cpu" and name == "float16":
        raise UserError(f"{key}=float16 is not supported on the CPU; use {key}=bfloat16 or {key}=float32")
    if name != "auto":
        emulated = name == "bfloat16" and device.type == "cuda" and not has_native_bf16(device)
        return DTYPES[name], f"{key}={name}" + (
            f"; this GPU only emulates bfloat16, slowly: {key}=auto chooses float16" if emulated else ""
        )
    if device.type == "cuda":
        return _cuda_auto(device)
    if device.type == "cpu":
        return _cpu_auto()
    return torch.float32, f"train.dtype=auto; float32 on {device.type}"


# Reasons start "train.dtype=...;", never "auto:" (training/settings/auto.py's lines), so readers tell them apart.
def _cpu_auto() -> tuple[torch.dtype, str]:
    forced = cpu_bf16_forced()
    if forced is not None:
        return (
            (torch.bfloat16, f"train.dtype=auto; {CPU_BF16_ENV}=1 takes the CPU's bfloat16 path")
            if forced
            else (torch.float32, f"train.dtype=auto; {CPU_BF16_ENV}=0 keeps the CPU in float32")
        )
    if _cpu_flags_have_bf16():
        return torch.bfloat16, "train.dtype=auto; this CPU has bfloat16 instructions (AVX512-BF16 or AMX)"
    return torch.float32, "train.dtype=auto; this CPU has no bfloat16 instructions (it would emulate them, slower)"


def _cuda_auto(device: torch.device) -> tuple[torch.dtype, str]:
    major, minor = torch.cuda.get_device_capability(device)
    card = f"{torch.cuda.get_device_name(device)}, compute capability {major}.{minor},"
    if (major, minor) >= NATIVE_BF16:
        return torch.bfloat16, f"train.dtype=auto; the {card} computes bfloat16 natively"
    if major >= 7:
        return torch.float16, (
            f"train.dtype=auto; the {card} has no native bfloat16 (only a slow emulation); float16 "
            "runs on its tensor cores, with loss scaling"
        )
    return torch.float32, f"train.dtype=auto; the {card} has neither native bfloat16 nor float16 tensor cores"


def has_native_bf16(device: torch.device) -> bool:
    """Whether `device` computes bfloat16 in hardware rather than emulating it."""
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device) >= NATIVE_BF16
    return device.type == "cpu" and cpu_has_native_bf16()


def precision_line(dtype: torch.dtype, why: str, device: torch.device) -> str | None:
    """The run's first line about its precision, where it is worth a line: every run on a GPU, and a CPU run that
    autocasts (a plain float32 run on the CPU says nothing)."""
    if device.type == "cpu" and dtype == torch.float32:
        return None
    name = {
        torch.float32: "float32",
        torch.bfloat16: "bfloat16 autocast",
        torch.float16: "float16 autocast with loss scaling",
    }[dtype]
    return f"precision: {name} on {device} ({why})"


def run_precision(name: str, compile_: bool, device: torch.device) -> tuple[torch.dtype, str | None]:
    """A training run's dtype and the line that says it (`precision_line`), once the compile check has passed."""
    dtype, why = choose_precision(name, device)
    check_compiled_precision(compile_, dtype, device)
    return dtype, precision_line(dtype, why, device)


def check_compiled_precision(compile_: bool, dtype: torch.dtype, device: torch.device) -> None:
    """torch.compile cannot build bfloat16 kernels for a GPU without native bfloat16 (sm_75: "Feature '.bf16'
    requires .target sm_80"), so that combination is refused before any work, in one line."""
    if compile_ and dtype == torch.bfloat16 and device.type == "cuda" and not has_native_bf16(device):
        major, minor = torch.cuda.get_device_capability(device)
        raise UserError(
            f"train.compile=true with train.dtype=bfloat16 needs a GPU with native bfloat16 (compute "
            f"capability 8.0 or newer); {torch.cuda.get_device_name(device)} has {major}.{minor}: use "
            "train.dtype=auto (float16 there) or train.dtype=float32"
        )


def autocast(device: torch.device, dtype: torch.dtype) -> contextlib.AbstractContextManager:
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def enable_fast_matmul(device: torch.device) -> None:
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
