"""The precision a run computes in, decided once a resume has restored its checkpoint's settings.

Design choices:
- `train.dtype=auto` means different things on different machines (bf16 on a CPU with bf16 instructions, float32
  on one without). The job records the precision resolved, not `auto`, so the checkpoint says what the weights were
  trained in, and a resume (training/settings/resume.py restores every setting it does not type) keeps it wherever it
  resumes. A typed `train.dtype` that differs is applied, and named in the resume's line like any changed setting.
- It is decided after the resume's settings are applied and before any data is read: a precision this device
  cannot run is refused before any work, naming the key.
"""

from __future__ import annotations

import torch

from common.device import DTYPES, run_precision
from training.settings.config import TrainJob

NAMES = {dtype: name for name, dtype in DTYPES.items()}


def run_dtype(job: TrainJob, device: torch.device) -> tuple[torch.dtype, str | None]:
    """The run's dtype on `device`, recorded in `job` as resolved, and the line that says it where worth it
    (common/device.py `precision_line`), which setup prints once every check has passed."""
    dtype, line = run_precision(job.train.dtype, job.train.compile == "true", device)
    job.train.dtype = NAMES[dtype]
    return dtype, line
