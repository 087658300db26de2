"""The check `export.py` makes before a folder gets its name: `transformers` reads it and gives our logits.

Design choices:
- The folder is loaded exactly as a user would load it (`AutoModelForCausalLM.from_pretrained`, with
  `trust_remote_code=True` where it ships code) and run on one window of ids drawn from a fixed generator;
  the run's own model, built from the checkpoint as it was trained (before any folding), runs the same ids.
  A mapping mistake changes logits by whole units, while float32 kernels differ by far less than `TOLERANCE`,
  so a difference above it means the folder computes something else: export refuses to name it, and asks for a
  report. Weights whose own logits are not finite are refused naming the weights: the exporter is not at fault
  (the readers refuse them before, inference/weight_checks.py).
- The tests hold the stricter 1e-4 on text for every layout; this check is what protects a run whose
  combination of switches no test has built.
"""

from __future__ import annotations

from pathlib import Path

import torch

from common.errors import UserError
from hf_format.deps import require
from inference.checkpoint import another_checkpoint
from model import AttentionLanguageModel

TOLERANCE = 1e-3
WINDOW = 64


def quiet_transformers():
    """transformers, with its loading progress bars and warnings off (export prints its own one line)."""
    transformers = require("transformers")
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


@torch.no_grad()
def check_folder(folder: Path, model: AttentionLanguageModel, source: object = "the run") -> float:
    """The largest logit difference between `transformers` on `folder` and `model` (float32, on the CPU);
    UserError above TOLERANCE. Logits of `model` that are not finite are the weights' fault, and the error names
    them (`source`), not the exporter."""
    c = model.config
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, c.vocab_size, (1, min(WINDOW, c.context_length)), generator=g)
    ours = model.eval()(ids)[0]
    if not bool(torch.isfinite(ours).all()):
        raise UserError(f"the weights of {source} compute logits that are not finite numbers (NaN or infinity): "
                        "they cannot be exported; nothing was written; "
                        f"{another_checkpoint(source if isinstance(source, Path) else None)}")
    transformers = quiet_transformers()
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(folder), trust_remote_code=True).eval()
    diff = float((ours - theirs(ids).logits.float()).abs().max())
    if not diff <= TOLERANCE:  # NaN refuses too
        raise UserError(f"the exported folder does not compute what the run computes (logits differ by {diff:.3g} "
                        f"through {type(theirs).__name__}); nothing was written: please report it")
    return diff
