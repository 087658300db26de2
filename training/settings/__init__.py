"""Every setting of a run, typed and resolved before the first step; `settle` is the entry the set-up calls.

- `config`: the typed schema Hydra composes `configs/train.yaml` into (a wrong type or unknown key refused there).
- `resume`: what a resumed run takes from its checkpoint and what from this command line.
- `precision`: `train.dtype` resolved for this device, recorded resolved so a resume keeps it.
- `idle`: a setting the rest of the configuration leaves with nothing to do, refused naming its key.
- `auto`: what `null` (auto) resolves to once the run's length is known: dropout and its weight decays.
"""

from __future__ import annotations

import torch

from training.settings.idle import refuse_idle_at_start
from training.settings.precision import run_dtype
from training.settings.resume import apply_checkpoint_settings


def settle(job, resumed, device: torch.device) -> tuple[list[str], torch.dtype, str | None]:
    """Make `job` final before any data is read: a resumed run's settings from its checkpoint where not typed, the
    precision resolved, and idle settings refused. Returns (the overrides that changed a resumed run's settings, the
    run's dtype, the precision line printed once every check has passed)."""
    changed = apply_checkpoint_settings(job, resumed) if resumed else []
    dtype, precision = run_dtype(job, device)  # a resume keeps its checkpoint's
    refuse_idle_at_start(job, resumed)  # once the settings are final
    return changed, dtype, precision
