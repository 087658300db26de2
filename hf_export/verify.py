"""The check `export.py` makes before a folder gets its name: `transformers` reads it and gives our logits.

Design choices:
- Loaded as a user would, beside the run's model on one fixed window: a mapping mistake moves logits by whole units,
  float32 kernels by far less than `TOLERANCE`. Weights whose own logits are not finite are refused: not export's fault.
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


@torch.no_grad()
def check_folder(folder: Path, model: AttentionLanguageModel, source: object = "the run") -> float:
    """The largest logit difference between `transformers` on `folder` and `model`; UserError above TOLERANCE."""
    c = model.config
    ids = torch.randint(0, c.vocab_size, (1, min(WINDOW, c.context_length)), generator=torch.Generator().manual_seed(0))
    ours = model.eval()(ids)[0]
    if not bool(torch.isfinite(ours).all()):
        raise UserError(
            f"the weights of {source} compute logits that are not finite numbers (NaN or infinity): "
            "they cannot be exported; nothing was written; "
            f"{another_checkpoint(source if isinstance(source, Path) else None)}"
        )
    transformers = require("transformers")
    transformers.utils.logging.set_verbosity_error()  # export prints its own one line: no bars, no warnings
    transformers.utils.logging.disable_progress_bar()
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(folder), trust_remote_code=True).eval()
    diff = float((ours - theirs(ids).logits.float()).abs().max())
    if not diff <= TOLERANCE:  # NaN refuses too
        raise UserError(
            f"the exported folder does not compute what the run computes (logits differ by {diff:.3g} "
            f"through {type(theirs).__name__}); nothing was written: please report it"
        )
    return diff
