"""Every setting of a run, typed and resolved before the first step; `settle` is the entry the set-up calls (the
modules: docs/en/layout.md).

PyTorch's own cache folders are settings too: inductor's is made as soon as PyTorch's compiler is imported (building
an optimizer imports it), whatever `train.compile` says, so a folder that cannot be made or written is refused here,
in one line naming the variable and the folder, before any work.
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile

import torch

from common.errors import UserError, os_error_cause
from training.settings.idle import refuse_idle_at_start
from training.settings.precision import run_dtype
from training.settings.resume import apply_checkpoint_settings


def settle(job, resumed, device: torch.device) -> tuple[list[str], torch.dtype, str | None]:
    """Make `job` final before any data is read: a resumed run's settings from its checkpoint where not typed, the
    precision resolved, and idle settings refused. Returns (the overrides that changed a resumed run's settings, the
    run's dtype, the precision line printed once every check has passed)."""
    refuse_unusable_caches(device)
    changed = apply_checkpoint_settings(job, resumed) if resumed else []
    dtype, precision = run_dtype(job, device)  # a resume keeps its checkpoint's
    refuse_idle_at_start(job, resumed)  # once the settings are final
    return changed, dtype, precision


def inductor_cache_folder() -> str:
    """Where inductor keeps its kernels: TORCHINDUCTOR_CACHE_DIR, else its default (found without importing inductor,
    whose import makes the folder and sets the variable)."""
    return os.path.abspath(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or _inductor_default())


def _inductor_default() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def refuse_unusable_caches(device: torch.device) -> None:
    """One UserError for a PyTorch cache folder this run would use that cannot be made or written: inductor's always
    (its variable, or its default when unset), Triton's and the CUDA kernels' on CUDA where their variables are set."""
    caches = [("TORCHINDUCTOR_CACHE_DIR", _inductor_default())]
    if device.type == "cuda":
        caches += [("TRITON_CACHE_DIR", None), ("PYTORCH_KERNEL_CACHE_PATH", None)]
    for variable, default in caches:
        typed = os.environ.get(variable)
        folder = typed if typed is not None else default
        if folder is None:
            continue
        try:
            os.makedirs(os.path.abspath(folder), exist_ok=True)
            if not os.access(folder or ".", os.W_OK | os.X_OK):
                raise PermissionError(13, "permission denied")
        except OSError as e:
            cause = "it is a file, not a folder" if os.path.isfile(folder) else os_error_cause(e)
            named = f"{variable}={folder!r}" if typed is not None else f"{variable}'s default folder {folder!r}"
            fix = "another folder you can write, or unset it" if typed is not None else "a folder you can write"
            raise UserError(f"PyTorch's cache {named} cannot be used ({cause}); set {variable} to {fix}") from None
