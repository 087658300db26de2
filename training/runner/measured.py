"""What compiling cost and gave on this machine before, kept in the user's cache folder for `train.compile=auto`.

Design choices:
- A record is keyed by what decides a compile's cost and gain: the device (the CPU's model and core count, or the
  GPU's name), torch's version, the precision, the way, the model's settings and the batch.
- It holds the warm-up's seconds, whether inductor's cache held the compile already (a warm cache costs a share of
  a cold one: `WARM_SHARE`, measured), and the milliseconds of an eager and of a compiled step measured in the run.
- A hint, never a requirement: a missing, unreadable or foreign file reads as empty; writing it is best-effort
  (atomic, and a failure leaves the run as it is).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from dataclasses import asdict
from pathlib import Path

import torch

from common.atomic_files import atomic_write, user_cache_dir
from training.runner.plan import Costs, Way, prior_costs

WARM_SHARE = 0.3  # a warm inductor cache's warm-up against a cold one's (docs/en/training.md)
KEPT = 200  # records kept, the newest


def records_path() -> Path:
    return user_cache_dir("compile_records.json")


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")
    except OSError:
        cpu = ""
    return f"{cpu or platform.processor() or device.type} x{os.cpu_count()}"


def record_key(device: torch.device, dtype: torch.dtype, way: Way, model_config, batch: int) -> str:
    settings = json.dumps(asdict(model_config), sort_keys=True, default=str)
    model = hashlib.sha256(settings.encode()).hexdigest()[:16]
    return f"{device_name(device)}|torch {torch.__version__}|{dtype}|{way.name}|{model}|batch {batch}"


def read_all() -> dict:
    try:
        records = json.loads(records_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return records if isinstance(records, dict) else {}


def read(key: str) -> dict | None:
    record = read_all().get(key)
    return record if isinstance(record, dict) else None


def write(key: str, **values: float | bool | str) -> None:
    """Merge `values` into the record of `key`, keeping the newest `KEPT` records."""
    records = read_all()
    record = {**(records.pop(key, None) or {}), **values}
    records[key] = record
    try:
        atomic_write(records_path(), json.dumps(dict(list(records.items())[-KEPT:]), indent=1))
    except OSError:
        pass


def costs(key: str, device: torch.device, cache_folder: str | None) -> Costs:
    """Inductor's expected speedup and warm-up for the run of `key`: this machine's, where a run measured them (the
    warm-up a share of a cold one while inductor's cache folder is still there), else the priors."""
    prior, record = prior_costs(device), read(key)
    if not record:
        return prior
    speedup = record.get("speedup")
    speedup = float(speedup) if isinstance(speedup, int | float) and speedup > 0 else prior.speedup
    warmup = record.get("warmup_s")
    if not isinstance(warmup, int | float):
        return Costs(speedup, prior.warmup, "speedup measured here before")
    cold = float(warmup) / (WARM_SHARE if record.get("warm") else 1.0)
    cached = cache_folder is not None and record.get("cache") == cache_folder
    return Costs(speedup, cold * WARM_SHARE if cached else cold, "measured here before")
